//! The plans, their list prices and what each allows, as pure functions.

use crate::status::pass_through_enum;

pass_through_enum! {
    /// An organization's plan (decisions §9). An unknown stored value passes through and
    /// is treated as the least privileged plan by every gate.
    Plan {
        /// Up to 5 hosts, email notifications.
        Free => "free",
        /// Chat, ntfy and PagerDuty channels; no host cap.
        Team => "team",
        /// Adds webhook channels.
        Business => "business",
        /// Adds single sign-on and SCIM.
        Enterprise => "enterprise",
    }
}

/// Hosts (not decommissioned) an organization on the free plan may have.
pub const FREE_HOST_CAP: u64 = 5;

impl Plan {
    /// Order of privilege; an unknown plan ranks with free.
    fn rank(&self) -> u8 {
        match self {
            Plan::Free | Plan::Other(_) => 0,
            Plan::Team => 1,
            Plan::Business => 2,
            Plan::Enterprise => 3,
        }
    }

    /// Whether this plan has everything `other` has.
    pub fn at_least(&self, other: &Plan) -> bool {
        self.rank() >= other.rank()
    }

    /// The list price in pence per host-day (decisions §9); none for a plan this build does
    /// not know.
    pub fn list_price_pence(&self) -> Option<i64> {
        match self {
            Plan::Free => Some(0),
            Plan::Team => Some(10),
            Plan::Business => Some(20),
            Plan::Enterprise => Some(35),
            Plan::Other(_) => None,
        }
    }

    /// Whether the plan can be bought through checkout (every plan but free).
    pub fn purchasable(&self) -> bool {
        matches!(self, Plan::Team | Plan::Business | Plan::Enterprise)
    }
}

/// A refusal because of the plan: 403 `plan-required`, with words a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct PlanRequired {
    pub detail: String,
}

fn needs(feature: &str, minimum: &Plan, plan: &Plan) -> PlanRequired {
    PlanRequired {
        detail: format!(
            "{feature} needs the {minimum} plan or above; this organization is on {plan}."
        ),
    }
}

/// The least plan that has notification channels of `kind` (interface.md: slack, teams, ntfy
/// and pagerduty need team; webhook needs business; email is on every plan); none for a kind
/// that does not exist.
pub fn minimum_plan_for_channel(kind: &str) -> Option<Plan> {
    match kind {
        "email" => Some(Plan::Free),
        "slack" | "teams" | "ntfy" | "pagerduty" => Some(Plan::Team),
        "webhook" => Some(Plan::Business),
        _ => None,
    }
}

/// Whether `plan` has notification channels of `kind` (an unknown kind: no).
pub fn allows_channel(plan: &Plan, kind: &str) -> bool {
    minimum_plan_for_channel(kind).is_some_and(|minimum| plan.at_least(&minimum))
}

pub fn check_channel(plan: &Plan, kind: &str) -> Result<(), PlanRequired> {
    match minimum_plan_for_channel(kind) {
        Some(minimum) if !plan.at_least(&minimum) => Err(needs(
            &format!("A {kind} notification channel"),
            &minimum,
            plan,
        )),
        _ => Ok(()),
    }
}

/// Single sign-on needs enterprise.
pub fn allows_sso(plan: &Plan) -> bool {
    plan.at_least(&Plan::Enterprise)
}

pub fn check_sso(plan: &Plan) -> Result<(), PlanRequired> {
    if allows_sso(plan) {
        Ok(())
    } else {
        Err(needs("Single sign-on", &Plan::Enterprise, plan))
    }
}

/// SCIM provisioning needs enterprise.
pub fn allows_scim(plan: &Plan) -> bool {
    plan.at_least(&Plan::Enterprise)
}

pub fn check_scim(plan: &Plan) -> Result<(), PlanRequired> {
    if allows_scim(plan) {
        Ok(())
    } else {
        Err(needs("SCIM provisioning", &Plan::Enterprise, plan))
    }
}

/// How many hosts that are not decommissioned the plan allows; none is no cap.
pub fn host_cap(plan: &Plan) -> Option<u64> {
    if plan.at_least(&Plan::Team) {
        None
    } else {
        Some(FREE_HOST_CAP)
    }
}

/// Whether one more host may enrol when `counted` hosts (not decommissioned, the enrolling
/// machine not among them) already belong to the organization.
pub fn check_enrolment(plan: &Plan, counted: u64) -> Result<(), PlanRequired> {
    match host_cap(plan) {
        Some(cap) if counted >= cap => Err(PlanRequired {
            detail: format!(
                "The {plan} plan allows {cap} hosts that are not decommissioned; decommission \
                 one or move to the team plan or above."
            ),
        }),
        _ => Ok(()),
    }
}

/// Whether a subscription with this processor status is live: paid for, or being paid for
/// (a trial, or an invoice that failed and is being retried). Only live subscriptions are
/// reported to the processor and estimated.
pub fn is_live(status: Option<&str>) -> bool {
    matches!(status, Some("active" | "trialing" | "past_due"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_and_unknown_values_pass_through_as_least_privileged() {
        for plan in Plan::KNOWN {
            assert_eq!(&Plan::from(plan.as_str()), plan);
        }
        let odd = Plan::from("platinum");
        assert_eq!(odd.as_str(), "platinum");
        assert!(!odd.at_least(&Plan::Team));
        assert_eq!(host_cap(&odd), Some(FREE_HOST_CAP));
        assert!(!allows_channel(&odd, "slack"));
        assert!(allows_channel(&odd, "email"));
        assert!(!allows_sso(&odd));
        assert_eq!(odd.list_price_pence(), None);
    }

    #[test]
    fn list_prices_are_decisions_section_9() {
        let prices: Vec<_> = Plan::KNOWN.iter().map(Plan::list_price_pence).collect();
        assert_eq!(prices, [Some(0), Some(10), Some(20), Some(35)]);
    }

    #[test]
    fn channel_kinds_by_plan() {
        // (kind, free, team, business, enterprise)
        let table = [
            ("email", [true, true, true, true]),
            ("slack", [false, true, true, true]),
            ("teams", [false, true, true, true]),
            ("ntfy", [false, true, true, true]),
            ("pagerduty", [false, true, true, true]),
            ("webhook", [false, false, true, true]),
            ("carrier-pigeon", [false, false, false, false]),
        ];
        for (kind, allowed) in table {
            for (plan, expected) in Plan::KNOWN.iter().zip(allowed) {
                assert_eq!(allows_channel(plan, kind), expected, "{kind} on {plan}");
                if minimum_plan_for_channel(kind).is_some() {
                    assert_eq!(
                        check_channel(plan, kind).is_ok(),
                        expected,
                        "{kind} on {plan}"
                    );
                }
            }
        }
        let refusal = check_channel(&Plan::Team, "webhook").expect_err("refused");
        assert!(refusal.detail.contains("business"), "{}", refusal.detail);
    }

    #[test]
    fn sso_and_scim_need_enterprise() {
        for plan in Plan::KNOWN {
            let enterprise = *plan == Plan::Enterprise;
            assert_eq!(allows_sso(plan), enterprise);
            assert_eq!(allows_scim(plan), enterprise);
            assert_eq!(check_sso(plan).is_ok(), enterprise);
            assert_eq!(check_scim(plan).is_ok(), enterprise);
        }
    }

    #[test]
    fn the_free_plan_admits_five_hosts_and_paid_plans_any_number() {
        assert!(check_enrolment(&Plan::Free, 4).is_ok());
        assert!(check_enrolment(&Plan::Free, 5).is_err());
        assert!(check_enrolment(&Plan::Free, 50).is_err());
        for plan in [Plan::Team, Plan::Business, Plan::Enterprise] {
            assert!(check_enrolment(&plan, 100_000).is_ok());
        }
    }

    #[test]
    fn live_statuses() {
        for live in ["active", "trialing", "past_due"] {
            assert!(is_live(Some(live)), "{live}");
        }
        for not in [
            "canceled",
            "incomplete",
            "incomplete_expired",
            "unpaid",
            "paused",
        ] {
            assert!(!is_live(Some(not)), "{not}");
        }
        assert!(!is_live(None));
    }
}

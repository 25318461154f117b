//! The owner's view of billing: the plan and subscription (`GET /billing`) and usage by
//! host-day for one UTC month (`GET /billing/usage`).

use chrono::{DateTime, Duration, NaiveDate, Utc};
use domain::billing::{self, usage::Month};
use entities::{host_days, usage_days};
use poem_openapi::{Object, OpenApi, param::Query, payload::Json};
use sea_orm::{ColumnTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, OrgInputErrors, OrgReadErrors},
    http::rights::Billing as OwnerOnly,
    http::tags::Tag,
};
use entities::scope::OrgScope;

/// The organization's plan and subscription.
#[derive(Object)]
pub struct Billing {
    /// free, team, business or enterprise (a value this build does not know is passed through).
    pub plan: String,
    /// The subscription's status at the payment processor when one exists: active, trialing,
    /// past_due, canceled, incomplete, and further values from the processor.
    #[oai(nullable)]
    pub status: Option<String>,
    /// The first day usage is billed (the subscription's start day).
    #[oai(nullable)]
    pub billable_from: Option<NaiveDate>,
    #[oai(nullable)]
    pub current_period_end: Option<DateTime<Utc>>,
    /// False when the deployment cannot take payments (no `PAYMENTS_WEBHOOK_SECRET` or no
    /// `PAYMENTS_API_URL`).
    pub checkout_available: bool,
}

/// One UTC day of usage.
#[derive(Object)]
pub struct UsageDay {
    pub day: NaiveDate,
    /// Hosts that checked in that UTC day: the billable count.
    pub active_hosts: i32,
    /// Sent to the payment processor (and accepted by it).
    pub reported: bool,
}

/// Usage by host-day for one UTC month.
#[derive(Object)]
pub struct BillingUsage {
    /// The month's first day.
    pub from: NaiveDate,
    /// The month's last day.
    pub to: NaiveDate,
    /// Oldest first; a day with no check-ins has no row. Today is not among them until it
    /// is over (see `today_so_far`).
    pub days: Vec<UsageDay>,
    /// The sum of `active_hosts` over `days`.
    pub host_days: i64,
    /// Hosts that checked in today (UTC), not yet in `days`; only for the current month.
    #[oai(nullable)]
    pub today_so_far: Option<i64>,
    /// `host_days` at the plan's list price in pence (team 10, business 20, enterprise 35 per
    /// host-day), for an organization with a live subscription (active, trialing or past_due).
    /// An estimate only.
    #[oai(nullable)]
    pub estimate_pence: Option<i64>,
}

/// Whether this deployment can take payments: it hears the processor and can ask it for a
/// checkout.
pub fn checkout_available(state: &AppState) -> bool {
    state.config.payments_webhook_secret.is_some() && state.config.payments_api_url.is_some()
}

pub struct BillingApi;

#[OpenApi(tag = "Tag::Billing")]
impl BillingApi {
    /// The organization's plan and subscription. Owner only, in person (API tokens are
    /// refused).
    #[oai(
        path = "/v1/orgs/:org/billing",
        method = "get",
        operation_id = "getBilling"
    )]
    async fn get(
        &self,
        state: poem::web::Data<&AppState>,
        org: org::Path<OwnerOnly>,
    ) -> Result<Json<Billing>, OrgReadErrors> {
        let row = billing::subscription_of(&state.db.orm, org.org.id.into()).await?;
        let plan = billing::effective(row.as_ref(), &billing::default_plan(&state.config));
        let (status, billable_from, current_period_end) = match row {
            Some(row) => (row.status, row.billable_from, row.current_period_end),
            None => (None, None, None),
        };
        Ok(Json(Billing {
            plan: plan.to_string(),
            status,
            billable_from,
            current_period_end,
            checkout_available: checkout_available(&state),
        }))
    }

    /// Usage by host-day for one UTC month: each day's active hosts (hosts that checked in
    /// that UTC day) oldest first, whether it was reported to the processor, their sum, today
    /// so far (current month only) and an estimate at the plan's list price (with a live
    /// subscription only). Owner only, in person (API tokens are refused).
    #[oai(
        path = "/v1/orgs/:org/billing/usage",
        method = "get",
        operation_id = "getBillingUsage"
    )]
    async fn usage(
        &self,
        state: poem::web::Data<&AppState>,
        org: org::Path<OwnerOnly>,
        /// `YYYY-MM` (UTC); the current month when absent.
        #[oai(validator(pattern = "^[0-9]{4}-(0[1-9]|1[0-2])$"))]
        month: Query<Option<String>>,
    ) -> Result<Json<BillingUsage>, OrgInputErrors> {
        let today = state.clock.now().date_naive();
        let month = match month.0.as_deref() {
            Some(text) => Month::parse(text)
                .ok_or_else(|| ApiError::invalid("month must be YYYY-MM, e.g. 2026-03"))?,
            None => Month::of(today),
        };
        let scope = org.scope();
        let db = &state.db.orm;
        let (days, today_so_far) = usage_days(db, scope, month, today).await?;
        let host_days: i64 = days.iter().map(|d| i64::from(d.active_hosts)).sum();
        let row = billing::subscription_of(db, org.org.id.into()).await?;
        let plan = billing::effective(row.as_ref(), &billing::default_plan(&state.config));
        let status = row.and_then(|r| r.status);
        Ok(Json(BillingUsage {
            from: month.first,
            to: month.last(),
            host_days,
            today_so_far,
            estimate_pence: billing::usage::estimate_pence(host_days, &plan, status.as_deref()),
            days,
        }))
    }
}

/// The month's days before today and, for the current month, today so far: the rolled-up
/// days, then in one query the host-days of today and of any past day the daily rollup has not
/// reached yet (normally none; yesterday in the minutes after midnight), so the answer never
/// lags the rollup.
async fn usage_days(
    db: &sea_orm::DatabaseConnection,
    scope: OrgScope,
    month: Month,
    today: NaiveDate,
) -> Result<(Vec<UsageDay>, Option<i64>), ApiError> {
    let before_today = month.last().min(today - Duration::days(1));
    let mut days: Vec<UsageDay> = if before_today < month.first {
        Vec::new()
    } else {
        scope
            .rows::<usage_days::Entity>()
            .filter(usage_days::Column::Day.between(month.first, before_today))
            .order_by_asc(usage_days::Column::Day)
            .all(db)
            .await?
            .into_iter()
            .map(|row| UsageDay {
                day: row.day,
                active_hosts: row.active_hosts,
                reported: row.reported,
            })
            .collect()
    };
    let counted_from = days
        .last()
        .and_then(|d| d.day.succ_opt())
        .unwrap_or(month.first);
    let counted_to = month.last().min(today);
    let mut today_so_far = month.contains(today).then_some(0);
    if counted_from <= counted_to {
        let counted: Vec<(NaiveDate, i64)> = scope
            .rows::<host_days::Entity>()
            .select_only()
            .column(host_days::Column::Day)
            .column_as(host_days::Column::HostId.count(), "hosts")
            .filter(host_days::Column::Day.between(counted_from, counted_to))
            .group_by(host_days::Column::Day)
            .order_by_asc(host_days::Column::Day)
            .into_tuple()
            .all(db)
            .await?;
        for (day, hosts) in counted {
            if day == today {
                today_so_far = Some(hosts);
            } else {
                days.push(UsageDay {
                    day,
                    active_hosts: i32::try_from(hosts).unwrap_or(i32::MAX),
                    reported: false,
                });
            }
        }
    }
    Ok((days, today_so_far))
}

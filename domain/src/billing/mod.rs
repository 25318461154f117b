//! Plans and billing (decisions §9, §17): the plans and their list prices, the feature gates
//! as pure functions, the one plan lookup every gate uses, and the payment processor's events.
//!
//! Every gate asks [`plan_of`] on the request it guards, so a plan change (a processor event,
//! `api plan set`) takes effect on the next request; nothing caches a plan.

pub mod events;
pub mod jobs;
mod lookup;
mod plan;
pub mod usage;

pub use lookup::{
    PLAN_NAMES, PlansOf, default_plan, effective, plan_of, plans_of, set_plan, subscription_of,
};
pub use plan::{
    FREE_HOST_CAP, Plan, PlanRequired, allows_channel, allows_scim, allows_sso, check_channel,
    check_enrolment, check_scim, check_sso, host_cap, is_live, minimum_plan_for_channel,
};

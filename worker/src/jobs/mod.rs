//! One module per job: the payload (from `platform::jobs`, where its queue name is fixed) and
//! its handler, dependencies injected, abort versus retry explicit. Each handler is a plain
//! async function a test can call with `apalis::prelude::Data(deps)`.

pub mod agent_manifest;
pub mod billing_report;
pub mod changelog_fetch;
pub mod deliver;
pub mod digest;
pub mod evaluate_group;
pub mod evaluate_host;
pub mod evaluate_policy;
pub mod fleet_upkeep;
pub mod housekeeping;
pub mod kev_refresh;
pub mod notify_dispatch;
pub mod proposal_timers;
pub mod rollup_usage;
pub mod send_email;
pub mod send_link;

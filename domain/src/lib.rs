//! The service's rules, shared by the api, the worker and the scheduler: the states of
//! proposals, hosts and host jobs; the proposal lifecycle (decide, go ahead, settle, close,
//! supersede) and preflight; policy evaluation (scope, grouping, supersede and merge); plans,
//! their feature gates and the payment processor's events (billing); single sign-on's role
//! mapping and domain claims (sso).
//!
//! Dependency direction: `entities` ← `domain` ← `api` / `worker` / `scheduler`. Nothing here
//! knows HTTP or the job runner: callers pass the transaction, the instant and who acts, and
//! map refusals to their own answers.

pub mod accounts;
pub mod billing;
pub mod email_limits;
pub mod fleet;
pub mod intel;
pub mod invitations;
pub mod notifications;
pub mod policy;
pub mod proposals;
pub mod retention;
pub mod roles;
pub mod severity;
pub mod sso;
pub mod status;
pub mod window;

/// Every queue's name, for what reports on all of them (the metrics' queue depths).
pub const QUEUE_NAMES: [&str; 16] = {
    use platform::jobs::{Housekeeping, Job};
    [
        notifications::jobs::SendEmail::QUEUE,
        notifications::jobs::SendLink::QUEUE,
        Housekeeping::QUEUE,
        fleet::jobs::EvaluateHost::QUEUE,
        fleet::jobs::EvaluateGroup::QUEUE,
        policy::jobs::EvaluatePolicy::QUEUE,
        proposals::jobs::ProposalTimers::QUEUE,
        fleet::jobs::FleetUpkeep::QUEUE,
        billing::jobs::RollupUsage::QUEUE,
        billing::jobs::BillingReport::QUEUE,
        notifications::jobs::NotifyDispatch::QUEUE,
        notifications::jobs::DeliverNotification::QUEUE,
        notifications::jobs::SendDigest::QUEUE,
        intel::jobs::FetchChangelog::QUEUE,
        intel::jobs::RefreshKev::QUEUE,
        intel::jobs::ReadAgentManifest::QUEUE,
    ]
};

pub use status::{
    Apply, ChangelogStatus, Coverage, Decision, DeliveryStatus, Ecosystem, HostEventKind,
    HostJobStatus, HostStatus, JobKind, ProposalKind, ProposalStatus, Reboot, RolloutState,
};

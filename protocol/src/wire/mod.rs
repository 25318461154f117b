//! The JSON of the agent protocol (decisions §6). Every field is optional unless named; unknown
//! fields are ignored, so that an older service accepts a newer agent and the other way round.
//! Types are strict: a number where a string belongs is refused, not coerced.
//!
//! Requests (enrolment, check-in, renewal, job result) and answers alike derive both serde
//! directions: the agent writes what the service reads and reads what it answers. With the
//! `openapi` feature each type is also a poem-openapi object, whose JSON is the same as serde's
//! (a test below holds the two to it).

mod facts;
mod inventory;
mod jobs;
mod messages;

pub use facts::{AgentInstall, Cloud, Facts, Frozen, Snapshots};
pub use inventory::{
    Advisory, Impact, ImpactInstall, MAX_IMPACT_ENTRIES, Package, Release, ReleaseUpgrade, Update,
};
pub use jobs::{Job, JobChange, JobResult, JobStatus, JobWindow, MAX_LOG_BYTES};
pub use messages::{CheckIn, CheckInAnswer, EnrollRequest, Enrolled, RenewRequest, Renewed};

/// The agent's permissions (decisions §19: the ceiling of §6 `agent_permissions`).
pub mod permissions {
    /// Report the installed packages and the available updates.
    pub const READ_INVENTORY: &str = "read_inventory";
    /// Apply the jobs of approved proposals.
    pub const APPLY_UPDATES: &str = "apply_updates";
    /// Reboot when a job allows it.
    pub const REBOOT: &str = "reboot";
    /// Every permission, in the order they widen.
    pub const ALL: [&str; 3] = [READ_INVENTORY, APPLY_UPDATES, REBOOT];
}

/// The paths of the agent operations, relative to the service's base URL.
pub mod paths {
    /// `POST`: [`super::EnrollRequest`] → [`super::Enrolled`].
    pub const ENROLL: &str = "/v1/agent/enroll";
    /// `POST`, signed: [`super::CheckIn`] → [`super::CheckInAnswer`].
    pub const CHECK_IN: &str = "/v1/agent/check-in";
    /// `POST`, signed: [`super::RenewRequest`] → [`super::Renewed`].
    pub const CERTIFICATE: &str = "/v1/agent/certificate";

    /// `POST`, signed: [`super::JobResult`] → 204.
    pub fn job_result(job_id: &str) -> String {
        format!("/v1/agent/jobs/{job_id}/result")
    }
}

#[cfg(all(test, feature = "openapi"))]
mod openapi_agrees_with_serde;

//! Host jobs: the work a check-in answer hands the agent, and the result it reports.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The longest log the service keeps per job (the last part of a longer one); the agent sends
/// no more than this of the package manager's output.
pub const MAX_LOG_BYTES: usize = 64 * 1024;

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct JobChange {
    pub package: String,
    pub ecosystem: String,
    pub from_version: String,
    pub to_version: String,
}

// A maintenance window's rule as answers show it (a job's, a policy's): RFC 5545 RRULE text, a
// duration and an IANA time zone. (No doc comment: the OpenAPI schema has no description.)
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct JobWindow {
    pub rrule: String,
    pub duration_minutes: u32,
    pub time_zone: String,
}

/// Work for the agent.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Job {
    /// `job_` id; report the result to `/v1/agent/jobs/{id}/result`.
    #[cfg_attr(
        feature = "openapi",
        oai(validator(pattern = "^job_[0-7][0-9a-hjkmnp-tv-z]{25}$"))
    )]
    pub id: String,
    /// `apply_updates`, `dist_upgrade`, or `reboot`: the reboot the organization's reboot
    /// budget held back from an earlier job of the proposal, now that a slot is free (no
    /// `changes`; reboot if the host needs it, as `reboot` allows and the agent's own
    /// configuration permits).
    pub kind: String,
    /// The proposal (`prp_`) this job carries out.
    pub proposal_id: String,
    pub proposal_number: i64,
    /// never, immediate or in_window. The agent reboots only if its own configuration
    /// permits.
    pub reboot: String,
    /// The packages to move, each from its installed version to the offered one.
    pub changes: Vec<JobChange>,
    /// For `dist_upgrade`: `{distro, from: {codename, version}, to: {codename, version}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", oai(skip_serializing_if_is_none))]
    pub release_upgrade: Option<serde_json::Value>,
    /// The maintenance window, when reboots are allowed only inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", oai(skip_serializing_if_is_none))]
    pub window: Option<JobWindow>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "openapi",
    derive(poem_openapi::Enum),
    oai(rename_all = "snake_case")
)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Succeeded,
    Failed,
}

/// What the agent reports when a job has run.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct JobResult {
    pub status: JobStatus,
    /// What the agent printed; the last 64 KiB are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// Whether the agent rebooted the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebooted: Option<bool>,
    pub finished_at: DateTime<Utc>,
}

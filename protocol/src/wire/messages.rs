//! The bodies of the agent operations: enrolment, check-in, certificate renewal.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Facts, Job, Package, ReleaseUpgrade, Update};

/// Enrolment: an enrollment token, a CSR and the host's facts.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct EnrollRequest {
    /// The `enr_` value.
    pub token: String,
    /// PEM PKCS#10 request for an Ed25519 or ECDSA P-256 key.
    pub csr: String,
    pub facts: Facts,
    /// Labels the host asks for (`fleet-agent enroll --label k=v`), put on a host enrolling
    /// for the first time beside the token's (the token's own win): at most 64, keys 1–63
    /// letters, digits, `-`, `_`, `.`, `/`, values at most 255 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

// The enrolment's answer. (No doc comment: the OpenAPI schema has no description.)
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Enrolled {
    /// The host's id (`hst_`); the same host when the same `machine_id` enrols again while
    /// pending or decommissioned.
    #[cfg_attr(
        feature = "openapi",
        oai(validator(pattern = "^hst_[0-7][0-9a-hjkmnp-tv-z]{25}$"))
    )]
    pub host_id: String,
    /// The certificate's serial in lowercase hex: the `keyid` of every signature.
    pub key_id: String,
    /// PEM certificate binding the agent's key to the host (90 days).
    pub certificate: String,
    /// PEM certificate of the deployment's agent CA.
    pub ca_certificate: String,
    pub expires_at: DateTime<Utc>,
    pub check_in_interval_s: i32,
}

/// A check-in. `packages` and `updates` are sent only when they changed: the answer's
/// `send_inventory` asks for them when the stored `inventory_digest` differs.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct CheckIn {
    pub facts: Facts,
    /// Digest of the inventory the agent has; always sent.
    pub inventory_digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<Vec<Package>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updates: Option<Vec<Update>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_upgrade: Option<ReleaseUpgrade>,
    /// Null: the host cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_required: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services_need_restart: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_packages: Option<Vec<String>>,
}

// The check-in's answer. (No doc comment: the OpenAPI schema has no description.)
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct CheckInAnswer {
    pub next_check_in_s: i32,
    /// Work for the agent.
    pub jobs: Vec<Job>,
    /// True when the service's inventory differs from `inventory_digest`: send `packages` and
    /// `updates` on the next check-in.
    pub send_inventory: bool,
}

// The renewal request. (No doc comment: the OpenAPI schema has no description.)
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct RenewRequest {
    /// PEM PKCS#10 request for the new key.
    pub csr: String,
}

// The renewal's answer. (No doc comment: the OpenAPI schema has no description.)
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Renewed {
    pub key_id: String,
    pub certificate: String,
    pub ca_certificate: String,
    pub expires_at: DateTime<Utc>,
}

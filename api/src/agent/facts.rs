//! What agents send (decisions §6). Every field is optional unless named; unknown fields are
//! ignored so that older servers accept newer agents. Types are strict: a number where a string
//! belongs is refused, not coerced.

use entities::json;
use poem_openapi::Object;
use serde::{Deserialize, Serialize};

/// How the agent was installed.
#[derive(Object, Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct AgentInstall {
    /// apt, dnf, binary or other.
    pub method: String,
    /// Package channel such as stable; absent for binary installs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
}

#[derive(Object, Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct Cloud {
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub instance_id: Option<String>,
}

/// Package sources pinned in time.
#[derive(Object, Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct Frozen {
    /// releasever, snapshot or other.
    pub kind: String,
    /// What the host is pinned to.
    pub pinned: String,
    /// Newest release offered, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<String>,
    /// False also when nobody can tell.
    #[serde(default)]
    pub behind: bool,
}

#[derive(Object, Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct Snapshots {
    /// Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    pub reason: String,
}

/// The host facts the agent knows.
#[derive(Object, Deserialize, Clone, Debug, PartialEq)]
pub struct Facts {
    #[oai(validator(max_length = 255))]
    pub hostname: String,
    /// The host's identity within the organization.
    #[oai(validator(max_length = 255))]
    pub machine_id: String,
    /// Lowercase id as in os-release, e.g. `ubuntu`.
    #[serde(default)]
    pub distro: Option<String>,
    #[serde(default)]
    pub distro_version: Option<String>,
    #[serde(default)]
    pub distro_codename: Option<String>,
    /// debian, rhel, suse, arch or alpine.
    #[serde(default)]
    pub os_family: Option<String>,
    #[serde(default)]
    pub arch: Option<String>,
    #[serde(default)]
    pub kernel_version: Option<String>,
    #[serde(default)]
    pub virtualization: Option<String>,
    #[serde(default)]
    pub agent_version: Option<String>,
    #[serde(default)]
    pub agent_mode: Option<String>,
    /// A ceiling from the host's own configuration, e.g. `["read_inventory","apply_updates","reboot"]`.
    #[serde(default)]
    pub agent_permissions: Option<Vec<String>>,
    /// Absent for an agent too old to say.
    #[serde(default)]
    pub agent_install: Option<AgentInstall>,
    #[serde(default)]
    pub cloud: Option<Cloud>,
    #[serde(default)]
    pub frozen: Option<Frozen>,
    /// Absent (null) for an agent too old to say.
    #[serde(default)]
    pub snapshots: Option<Snapshots>,
}

/// An installed package.
#[derive(Object, Deserialize, Clone, Debug, PartialEq)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub arch: String,
    #[serde(default)]
    pub source_name: Option<String>,
    #[serde(default)]
    pub source_version: Option<String>,
}

// An advisory an update fixes, as the agent reports it (stored as `entities::json::Advisory`).
#[derive(Object, Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct Advisory {
    pub external_id: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default)]
    pub cves: Vec<String>,
}

impl From<Advisory> for json::Advisory {
    fn from(a: Advisory) -> json::Advisory {
        json::Advisory {
            external_id: a.external_id,
            source: a.source,
            severity: a.severity,
            title: a.title,
            url: a.url,
            cves: a.cves,
        }
    }
}

/// An available update.
#[derive(Object, Deserialize, Clone, Debug, PartialEq)]
pub struct Update {
    pub name: String,
    pub arch: String,
    pub from_version: String,
    pub to_version: String,
    /// deb, rpm, apk or pacman.
    pub ecosystem: String,
    #[serde(default)]
    pub source_name: Option<String>,
    #[serde(default)]
    pub security: bool,
    #[serde(default)]
    pub requires_reboot: bool,
    #[serde(default)]
    pub advisories: Vec<Advisory>,
}

#[derive(Object, Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct Release {
    #[serde(default)]
    pub codename: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
}

#[derive(Object, Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct ReleaseUpgrade {
    pub to: Release,
}

impl From<ReleaseUpgrade> for json::OfferedUpgrade {
    fn from(offer: ReleaseUpgrade) -> json::OfferedUpgrade {
        json::OfferedUpgrade {
            to: json::Release {
                codename: offer.to.codename,
                version: offer.to.version,
            },
        }
    }
}

/// Enrolment: an enrollment token, a CSR and the host's facts.
#[derive(Object, Deserialize, Clone, Debug)]
pub struct EnrollRequest {
    /// The `enr_` value.
    pub token: String,
    /// PEM PKCS#10 request for an Ed25519 or ECDSA P-256 key.
    pub csr: String,
    pub facts: Facts,
}

/// A check-in. `packages` and `updates` are sent only when they changed: the answer's
/// `send_inventory` asks for them when the stored `inventory_digest` differs.
#[derive(Object, Deserialize, Clone, Debug)]
pub struct CheckIn {
    pub facts: Facts,
    /// Digest of the inventory the agent has; always sent.
    pub inventory_digest: String,
    #[serde(default)]
    pub packages: Option<Vec<Package>>,
    #[serde(default)]
    pub updates: Option<Vec<Update>>,
    #[serde(default)]
    pub release_upgrade: Option<ReleaseUpgrade>,
    /// Null: the host cannot say.
    #[serde(default)]
    pub reboot_required: Option<bool>,
    #[serde(default)]
    pub services_need_restart: Option<Vec<String>>,
    #[serde(default)]
    pub held_packages: Option<Vec<String>>,
}

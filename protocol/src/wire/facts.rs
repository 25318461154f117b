//! What an agent says about its host (decisions §6 `facts`).

use serde::{Deserialize, Serialize};

/// How the agent was installed.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct AgentInstall {
    /// apt, dnf, binary or other.
    pub method: String,
    /// Package channel such as stable; absent for binary installs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Cloud {
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub instance_id: Option<String>,
}

/// Package sources pinned in time.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
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

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Snapshots {
    /// Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    pub reason: String,
}

/// The host facts the agent knows.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Facts {
    /// 1 to 255 characters.
    #[cfg_attr(feature = "openapi", oai(validator(min_length = 1, max_length = 255)))]
    pub hostname: String,
    /// The host's identity within the organization (`/etc/machine-id`), 1 to 255 characters.
    #[cfg_attr(feature = "openapi", oai(validator(min_length = 1, max_length = 255)))]
    pub machine_id: String,
    /// Lowercase id as in os-release, e.g. `ubuntu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distro: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distro_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distro_codename: Option<String>,
    /// debian, rhel, suse, arch or alpine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_family: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtualization: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
    /// A ceiling from the host's own configuration, e.g. `["read_inventory","apply_updates","reboot"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_permissions: Option<Vec<String>>,
    /// Absent for an agent too old to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_install: Option<AgentInstall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud: Option<Cloud>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<Frozen>,
    /// Absent (null) for an agent too old to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<Snapshots>,
}

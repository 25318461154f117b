//! What an agent reports of its packages (decisions §6 `packages`, `updates`, §21 `impact`).

use serde::{Deserialize, Serialize};

/// Most entries of each list of an [`Impact`] (`restarts`, `installs`, `removes`); an agent
/// whose simulation finds more leaves `impact` out (unknown) rather than cut it.
pub const MAX_IMPACT_ENTRIES: usize = 1_000;

/// An installed package.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Package {
    pub name: String,
    pub version: String,
    pub arch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_version: Option<String>,
}

// An advisory an update fixes, as the agent reports it (no doc comment: the OpenAPI schema
// has no description).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
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

/// A package the update would bring in.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct ImpactInstall {
    pub name: String,
    pub version: String,
}

/// What applying an update would do to the host, worked out by the agent before anything is
/// approved (decisions §21): the package manager's own simulation of the upgrade, the reboot
/// it needs and the systemd units that would restart.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Impact {
    /// The host needs a reboot afterwards (kernel, boot loader, libc, systemd, dbus, microcode
    /// or firmware packages, or the distribution's own reboot hint).
    #[serde(default)]
    pub reboot: bool,
    /// systemd units whose running processes use files the package ships, e.g.
    /// `nginx.service`: at most 1,000, each 1–255 characters without control characters.
    #[serde(default)]
    pub restarts: Vec<String>,
    /// Packages the upgrade would newly install (at most 1,000).
    #[serde(default)]
    pub installs: Vec<ImpactInstall>,
    /// Packages the upgrade would remove (at most 1,000).
    #[serde(default)]
    pub removes: Vec<String>,
}

/// An available update.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Update {
    pub name: String,
    pub arch: String,
    pub from_version: String,
    pub to_version: String,
    /// deb, rpm, apk or pacman.
    pub ecosystem: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_name: Option<String>,
    #[serde(default)]
    pub security: bool,
    #[serde(default)]
    pub requires_reboot: bool,
    #[serde(default)]
    pub advisories: Vec<Advisory>,
    /// What applying this update would do (decisions §21), computed before approval. Absent
    /// when the agent cannot say: the service keeps that as unknown, never as "no impact".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impact: Option<Impact>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct Release {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
pub struct ReleaseUpgrade {
    pub to: Release,
}

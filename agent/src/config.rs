//! `/etc/fleet-agent/agent.toml` (decisions §19): the server, the permissions ceiling, the
//! reboot command, and whether package lists are refreshed before an inventory.
//!
//! ```toml
//! server = "https://fleet.example.com"        # else the one enrolment used
//! permissions = ["read_inventory", "apply_updates", "reboot"]   # default ["read_inventory"]
//! reboot_command = "systemctl reboot"          # default
//! refresh_lists = true                         # apt-get update / dnf makecache, at most every 6 h
//! channel = "stable"                           # reported in agent_install
//! request_timeout_s = 120                      # a call to the service may take this long
//! ```
//!
//! An unknown key or permission is an error naming it: a typo never silently narrows or widens
//! what the agent may do.

use std::{fmt, path::Path, path::PathBuf};

use anyhow::Context;
use serde::Deserialize;

/// What the agent may do on this host, whatever the service asks (the ceiling of §6
/// `agent_permissions`).
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Report installed packages and available updates.
    ReadInventory,
    /// Apply the jobs of approved proposals.
    ApplyUpdates,
    /// Reboot when a job allows it and the host needs it.
    Reboot,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::ReadInventory => protocol::wire::permissions::READ_INVENTORY,
            Permission::ApplyUpdates => protocol::wire::permissions::APPLY_UPDATES,
            Permission::Reboot => protocol::wire::permissions::REBOOT,
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The service's address; absent: the one `enroll --server` recorded.
    #[serde(default)]
    pub server: Option<String>,
    #[serde(default = "default_permissions")]
    pub permissions: Vec<Permission>,
    /// Run (split on whitespace, no shell) to reboot.
    #[serde(default = "default_reboot_command")]
    pub reboot_command: String,
    /// `apt-get update` / `dnf makecache` before an inventory, at most every 6 hours.
    #[serde(default = "default_true")]
    pub refresh_lists: bool,
    /// The package channel reported in `agent_install` (`stable` unless said).
    #[serde(default)]
    pub channel: Option<String>,
    /// The root of the system to look after (`--root` wins); `/` unless said.
    #[serde(default)]
    pub root: Option<PathBuf>,
    /// How long one call to the service may take (connecting, sending, its answer): a server
    /// that hangs costs this, not the agent.
    #[serde(default = "default_timeout")]
    pub request_timeout_s: u64,
}

fn default_timeout() -> u64 {
    120
}

fn default_permissions() -> Vec<Permission> {
    vec![Permission::ReadInventory]
}

fn default_reboot_command() -> String {
    "systemctl reboot".to_owned()
}

fn default_true() -> bool {
    true
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: None,
            permissions: default_permissions(),
            reboot_command: default_reboot_command(),
            refresh_lists: true,
            channel: None,
            root: None,
            request_timeout_s: default_timeout(),
        }
    }
}

impl Config {
    /// Reads `path`, which must exist.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the configuration {}", path.display()))?;
        Config::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Reads `path`, or the defaults when there is no file there.
    pub fn load_or_default(path: &Path) -> anyhow::Result<Config> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text).with_context(|| format!("in {}", path.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(err) => Err(err).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let config: Config = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        if config.reboot_command.split_whitespace().next().is_none() {
            anyhow::bail!("reboot_command is empty");
        }
        if !(1..=3600).contains(&config.request_timeout_s) {
            anyhow::bail!("request_timeout_s must be 1 to 3600 seconds");
        }
        Ok(config)
    }

    pub fn allows(&self, permission: Permission) -> bool {
        self.permissions.contains(&permission)
    }

    /// The permissions as reported (`agent_permissions`), sorted and without repeats.
    pub fn permission_names(&self) -> Vec<String> {
        let mut list = self.permissions.clone();
        list.sort();
        list.dedup();
        list.into_iter().map(|p| p.as_str().to_owned()).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_read_inventory_only_and_refresh_lists() {
        let config = Config::parse("").unwrap();
        assert_eq!(config, Config::default());
        assert!(config.allows(Permission::ReadInventory));
        assert!(!config.allows(Permission::ApplyUpdates));
        assert!(!config.allows(Permission::Reboot));
        assert_eq!(config.reboot_command, "systemctl reboot");
        assert!(config.refresh_lists);
    }

    #[test]
    fn a_widened_configuration_is_read_whole() {
        let config = Config::parse(
            r#"server = "https://fleet.example.com"
permissions = ["reboot", "read_inventory", "apply_updates", "reboot"]
reboot_command = "/sbin/shutdown -r +1"
refresh_lists = false
channel = "beta"
"#,
        )
        .unwrap();
        assert_eq!(config.server.as_deref(), Some("https://fleet.example.com"));
        assert_eq!(
            config.permission_names(),
            ["read_inventory", "apply_updates", "reboot"]
        );
        assert!(!config.refresh_lists);
        assert_eq!(config.channel.as_deref(), Some("beta"));
    }

    #[test]
    fn typos_are_errors_naming_them() {
        let err = Config::parse(r#"permissions = ["apply_update"]"#).unwrap_err();
        assert!(format!("{err}").contains("apply_update"), "{err}");
        let err = Config::parse("permision = []").unwrap_err();
        assert!(format!("{err}").contains("permision"), "{err}");
        assert!(Config::parse(r#"reboot_command = "  ""#).is_err());
    }
}

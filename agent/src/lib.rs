//! fleet-agent, the reference agent (decisions §19): it enrols a Debian/Ubuntu (dpkg/apt) or
//! RHEL-family (rpm/dnf) host with the service, reports its packages and available updates
//! (with what each update would do, §21), applies the jobs of approved proposals with the
//! host's own package manager, and reports the results, all over the signed protocol of §6
//! ([`protocol`]). It links no service code.
//!
//! Everything it does to the host goes through [`system::System`], rooted at `/` in production
//! and at a throwaway directory in tests (`--root`), so the same code is tested against real
//! package managers without touching the machine's own package database.

pub mod cli;
pub mod client;
pub mod config;
pub mod enroll;
pub mod facts;
pub mod impact;
pub mod inventory;
pub mod jobs;
pub mod output;
pub mod procs;
pub mod run;
pub mod state;
pub mod status;
pub mod system;
pub mod usage;
pub mod window;

/// This agent's version, as it reports it (`agent_version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The time now: the agent's one reading of the real clock (the service's code takes an
/// injected clock; the agent signs with, and decides by, the host's own).
#[allow(clippy::disallowed_methods)]
pub fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

//! Hosts and what gathers them: enrollment tokens, hosts and their events, groups; the agent
//! release channels hosts are compared with.

pub mod agent_releases;
pub mod enrollment_tokens;
pub mod groups;
pub mod hosts;
pub mod inventory;

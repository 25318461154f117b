//! Hosts and what gathers them: enrollment tokens, hosts and their events, groups.

pub mod enrollment_tokens;
pub mod groups;
pub mod hosts;

//! Deciding what goes out: policies, proposals (decisions, scheduling, results) and their
//! discussion. The rules themselves live in the `domain` crate; these are the handlers.

pub mod api;
pub mod comments;
pub mod impact;
pub mod mentions;
pub mod policies;
pub mod preview;
pub mod rollouts;

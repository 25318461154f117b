//! One module per job type: the handler, its dependencies injected, abort versus retry explicit.

pub mod evaluate;
pub mod housekeeping;
pub mod policy;
pub mod send_email;
pub mod send_link;
pub mod upkeep;

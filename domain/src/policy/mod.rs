//! Policy evaluation: turn the available updates of a policy's hosts into proposals.
//!
//! The rules are in files a test reads without a database: [`scope`] (which hosts a policy
//! covers; an unreadable scope covers none), [`grouping`] (reported updates into changes),
//! [`plan`] (close, open, supersede, merge or follow; what a follow writes), [`summary`]
//! (titles and counts) and [`impact`] (what the changes would do to each host, summed up). [`needs`] reads what hosts need (through [`reported`], which remembers
//! each host's updates until they change), [`evaluate`] locks and decides,
//! [`store`] writes, [`dirty`] coalesces
//! the evaluations that host and group changes ask for.

pub mod change_key;
pub mod dirty;
pub mod evaluate;
pub mod grouping;
pub mod impact;
pub mod jobs;
pub mod needs;
pub mod plan;
pub mod reported;
pub mod rules;
pub mod scope;
pub mod store;
pub mod summary;

pub use dirty::{mark_dirty, mark_policies_dirty};
pub use evaluate::{Evaluated, evaluate_policy};
pub use reported::Reports;

//! The rollout of a proposal that went ahead (decisions §20): its state, how many of its waves
//! have begun, why it halted, and when the scheduler must look at it again.

use sea_orm::entity::prelude::*;

use crate::json::{JsonText, PlannedWave};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "proposal_rollouts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub proposal_id: Uuid,
    pub org_id: Uuid,
    /// waiting, running, soaking, halted or done.
    pub state: String,
    /// Waves whose jobs exist: the wave in progress is `begun - 1` (none before the first).
    pub begun: i32,
    /// The waves as the proposal's hosts were cut into them, the last one `rest`.
    pub waves: JsonText<Vec<PlannedWave>>,
    pub halted_reason: Option<String>,
    pub halted_at: Option<DateTimeUtc>,
    /// When a soak ends or the window opens: the scheduler looks again then.
    pub due_at: Option<DateTimeUtc>,
    /// Failed results a resume set aside: the failure budget counts those after it.
    pub failures_forgiven: i64,
    /// The wave (0-based) the last resume resumed, and how many of its failed results it set
    /// aside: its success percentage counts only the others.
    pub forgiven_wave: Option<i32>,
    pub forgiven_in_wave: i64,
    pub updated_at: DateTimeUtc,
}

crate::no_relations!();

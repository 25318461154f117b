//! Rollouts (decisions §20): the `rollout` a policy writes, the rollout a proposal's detail
//! shows, and halting and resuming one by hand. The rule is `domain::proposals::rollout`.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use domain::proposals::rollout::{self, RolloutError, Tally, rule};
use entities::{
    json::{Amount, PlannedWave, RolloutSpec, WaveSpec},
    proposal_rollouts,
};
use platform::ids::ProposalId;
use poem_openapi::{
    Object, OpenApi,
    param::Path,
    payload::Json,
    registry::{MetaSchema, MetaSchemaRef},
    types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type},
};
use serde_json::Value;

use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, OrgConflictErrors, StateRefusal},
    http::rights::Rollouts,
    http::tags::Tag,
    http::text::{Reason, Text},
    identity::audit::Entry,
};

/// A count of hosts (`2`) or a percentage of the proposal's hosts (`"25%"`, rounded up).
/// What cannot be one is kept as written, for the handler to refuse naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AmountValue {
    Amount(Amount),
    Invalid(String),
}

impl From<Amount> for AmountValue {
    fn from(amount: Amount) -> Self {
        AmountValue::Amount(amount)
    }
}

impl Type for AmountValue {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "RolloutAmount".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema {
            description: Some(
                "A count of hosts (an integer, at least 1) or a percentage of the proposal's \
                 hosts as a string such as \"25%\" (1–100, rounded up to whole hosts).",
            ),
            one_of: vec![
                MetaSchemaRef::Inline(Box::new(MetaSchema {
                    minimum: Some(1.0),
                    maximum: Some(f64::from(rule::MAX_COUNT)),
                    ..MetaSchema::new_with_format("integer", "int32")
                })),
                MetaSchemaRef::Inline(Box::new(MetaSchema {
                    pattern: Some("^(100|[1-9][0-9]?)%$".to_owned()),
                    ..MetaSchema::new("string")
                })),
            ],
            ..MetaSchema::ANY
        }))
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(std::iter::once(self))
    }
}

impl ParseFromJSON for AmountValue {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value.unwrap_or_default() {
            Value::Number(n) => Ok(match n.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => AmountValue::Amount(Amount::Count(n)),
                None => AmountValue::Invalid(n.to_string()),
            }),
            Value::String(text) => Ok(match Amount::parse_percent(text.trim()) {
                Some(amount) => AmountValue::Amount(amount),
                None => AmountValue::Invalid(text),
            }),
            other => Err(ParseError::expected_type(other)),
        }
    }
}

impl ToJSON for AmountValue {
    fn to_json(&self) -> Option<Value> {
        match self {
            AmountValue::Amount(amount) => serde_json::to_value(amount).ok(),
            AmountValue::Invalid(text) => Some(Value::String(text.clone())),
        }
    }
}

impl AmountValue {
    fn amount(&self, field: &str) -> Result<Amount, ApiError> {
        match self {
            AmountValue::Amount(amount) => Ok(*amount),
            AmountValue::Invalid(text) => Err(ApiError::invalid(format!(
                "rollout.{field}: {text:?} is neither a count of hosts nor a percentage such \
                 as \"25%\""
            ))),
        }
    }
}

/// One wave as a policy writes it.
#[derive(Object, Clone)]
#[oai(rename = "RolloutWave", deny_unknown_fields)]
pub struct WaveBody {
    /// 1–63 characters, unique in the rollout; not `rest` (the wave of the hosts left after
    /// the last one).
    #[oai(validator(max_length = 63))]
    pub name: Text,
    /// How many hosts: a count, or a percentage of the proposal's hosts rounded up (each
    /// wave's own share, not cumulative). A wave takes at most what the waves before it left.
    pub size: AmountValue,
    /// A label selector (as groups and policies write them): matching hosts go into this wave
    /// first (canaries), up to its size; canaries beyond it come later like any host.
    pub selector: Option<Text>,
}

/// How approved changes go out (decisions §20): in `waves`, each promoted when it is done (every
/// host has a result or left the proposal), at least `success_percent` of its results
/// succeeded, `soak_minutes` have passed since its last result, and (for `apply:
/// asap_in_window`) the window is open. Failed results across the proposal reaching
/// `halt_after_failures` halt it. Within a wave hosts come in a stable order (a hash of the
/// policy's id and the host's), canaries first; the hosts left after the last wave form the
/// wave `rest`. A proposal keeps the rollout its policy had when it opened.
#[derive(Object, Clone)]
#[oai(deny_unknown_fields)]
pub struct RolloutBody {
    /// The waves, in order (at most 20); the policy must cover at least as many hosts as
    /// there are waves when it is saved.
    #[oai(validator(max_items = 20))]
    pub waves: Vec<WaveBody>,
    /// Minutes a done wave waits after its last result before the next begins: 0 (the
    /// default) to 10,080.
    #[oai(validator(maximum(value = "10080")))]
    pub soak_minutes: Option<u32>,
    /// The least share of a done wave's results that must have succeeded for the next to
    /// begin, 0–100 (default 100); below it the rollout halts.
    #[oai(validator(maximum(value = "100")))]
    pub success_percent: Option<u32>,
    /// Failed results across the proposal that halt it: a count or a percentage of its hosts
    /// (default 1). A resume counts afresh.
    pub halt_after_failures: Option<AmountValue>,
    /// At most this many of the current wave's jobs out at once (handed out, no result yet);
    /// default none.
    #[oai(validator(minimum(value = "1"), maximum(value = "1000000")))]
    pub max_in_flight: Option<u32>,
}

impl RolloutBody {
    /// The rollout as stored, checked (400 naming the field).
    pub fn spec(&self) -> Result<RolloutSpec, ApiError> {
        let mut waves = Vec::with_capacity(self.waves.len());
        for (i, wave) in self.waves.iter().enumerate() {
            waves.push(WaveSpec {
                name: wave.name.trim().to_owned(),
                size: wave.size.amount(&format!("waves[{i}].size"))?,
                selector: wave
                    .selector
                    .as_deref()
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            });
        }
        let spec = RolloutSpec {
            waves,
            soak_minutes: self.soak_minutes.unwrap_or(0),
            success_percent: self.success_percent.unwrap_or(100),
            halt_after_failures: match &self.halt_after_failures {
                Some(value) => value.amount("halt_after_failures")?,
                None => Amount::Count(1),
            },
            max_in_flight: self.max_in_flight,
        };
        rule::validate(&spec).map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok(spec)
    }
}

/// A policy's wave as stored.
#[derive(Object)]
#[oai(rename = "RolloutWaveView")]
pub struct WaveView {
    pub name: String,
    pub size: AmountValue,
    #[oai(nullable)]
    pub selector: Option<String>,
}

/// A policy's rollout, its defaults filled in.
#[derive(Object)]
pub struct RolloutView {
    pub waves: Vec<WaveView>,
    pub soak_minutes: u32,
    pub success_percent: u32,
    pub halt_after_failures: AmountValue,
    /// Null: no cap.
    #[oai(nullable)]
    pub max_in_flight: Option<u32>,
}

impl From<RolloutSpec> for RolloutView {
    fn from(spec: RolloutSpec) -> Self {
        RolloutView {
            waves: spec
                .waves
                .into_iter()
                .map(|w| WaveView {
                    name: w.name,
                    size: w.size.into(),
                    selector: w.selector,
                })
                .collect(),
            soak_minutes: spec.soak_minutes,
            success_percent: spec.success_percent,
            halt_after_failures: spec.halt_after_failures.into(),
            max_in_flight: spec.max_in_flight,
        }
    }
}

/// A wave of a proposal going ahead, and where its hosts stand.
#[derive(Object)]
#[oai(rename = "ProposalRolloutWave")]
pub struct WaveProgress {
    /// As the policy named it; the last is `rest` when hosts were left after the others.
    pub name: String,
    /// Hosts in the wave.
    pub hosts: u64,
    /// Without a job handed out yet.
    pub pending: u64,
    /// With a job handed out and no result yet (or a reboot to come after their changes).
    pub running: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Left the proposal before their job ran (decommissioned, or no longer needing the
    /// change); counted neither way.
    pub left: u64,
}

/// The rollout of a proposal that has gone ahead (decisions §20).
#[derive(Object)]
pub struct ProposalRollout {
    /// `waiting` (for the window: the proposal is scheduled, or its next wave waits for the
    /// window to open), `running` (the current wave's hosts are getting their jobs),
    /// `soaking` (the current wave is done; its soak time runs), `halted` (no new jobs until
    /// resumed) or `done` (every wave is done). Values this build does not know pass through.
    pub state: String,
    /// The current wave (0-based, into `waves`).
    pub wave: u32,
    /// Why it halted; present only while `halted`.
    #[oai(skip_serializing_if_is_none)]
    pub halted_reason: Option<String>,
    /// When it halted; present only while `halted`.
    #[oai(skip_serializing_if_is_none)]
    pub halted_at: Option<DateTime<Utc>>,
    /// When the soak ends (`soaking`) or the window opens (`waiting` with a wave done); absent
    /// otherwise.
    #[oai(skip_serializing_if_is_none)]
    pub waiting_until: Option<DateTime<Utc>>,
    pub waves: Vec<WaveProgress>,
}

/// The rollout block of a detail, from its row and its waves' tallies.
pub fn view(row: &proposal_rollouts::Model, waves: Vec<(PlannedWave, Tally)>) -> ProposalRollout {
    let halted = domain::RolloutState::from(row.state.as_str()) == domain::RolloutState::Halted;
    ProposalRollout {
        state: row.state.clone(),
        wave: u32::try_from(rollout::current_wave(row)).unwrap_or(0),
        halted_reason: row.halted_reason.clone().filter(|_| halted),
        halted_at: row.halted_at.filter(|_| halted),
        waiting_until: row.due_at,
        waves: waves
            .into_iter()
            .map(|(planned, tally)| WaveProgress {
                name: planned.name,
                hosts: tally.hosts,
                pending: tally.pending,
                running: tally.running,
                succeeded: tally.succeeded,
                failed: tally.failed,
                left: tally.left,
            })
            .collect(),
    }
}

/// Why the proposal's rollout is halted by hand.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct HaltBody {
    /// Why (1–2,000 characters); shown on the proposal and in the `proposal.halted`
    /// notification.
    pub reason: Reason,
}

fn refused(err: RolloutError) -> ApiError {
    match err {
        RolloutError::Db(err) => err.into(),
        RolloutError::Refused(refusal) => {
            ApiError::state(StateRefusal::InvalidState, refusal.to_string())
        }
    }
}

pub struct RolloutsApi;

#[OpenApi(tag = "Tag::Proposals")]
impl RolloutsApi {
    /// Halt a proposal's rollout by hand: no new jobs are handed out (jobs already handed out
    /// finish and are recorded) until it is resumed. Announced as `proposal.halted` to every
    /// channel that wants it (PagerDuty: a `trigger`) and audited. Operator and above. A
    /// proposal that has not gone ahead (not approved, scheduled or applying), or whose
    /// rollout is halted or done already, is 409 `invalid-state`; answers the rollout as it
    /// now is.
    #[oai(
        path = "/v1/orgs/:org/proposals/:proposal_id/halt",
        method = "post",
        operation_id = "haltProposal"
    )]
    async fn halt(
        &self,
        org: org::Path<Rollouts>,
        state: poem::web::Data<&AppState>,
        /// The proposal's id (`prp_`).
        proposal_id: Path<ProposalId>,
        body: Json<HaltBody>,
    ) -> Result<Json<ProposalRollout>, OrgConflictErrors> {
        let reason = body.reason.trim().to_owned();
        if reason.is_empty() || reason.chars().count() > 2_000 {
            return Err(ApiError::invalid("reason must be 1–2,000 characters").into());
        }
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let proposal = org.scope().get(&txn, *proposal_id).await?;
        let row = rollout::halt(&txn, &proposal, &reason, org.caller.account_id(), now)
            .await
            .map_err(refused)?;
        Entry::new("proposal.rollout_halted")
            .org(org.org_id())
            .by(&org.caller)
            .target(ProposalId::from(proposal.id))
            .details(serde_json::json!({ "reason": reason, "wave": rollout::current_wave(&row) }))
            .write(&txn, now)
            .await?;
        let shown = answer(&txn, &row).await?;
        txn.commit().await?;
        domain::notifications::jobs::dispatch_soon(&state.queue).await;
        Ok(Json(shown))
    }

    /// Resume a halted rollout from the wave it halted in; the failures so far are set aside
    /// (`halt_after_failures` counts afresh). A wave already done soaks and promotes as usual.
    /// Audited; operator and above. A rollout that is not halted is 409 `invalid-state`;
    /// answers the rollout as it now is.
    #[oai(
        path = "/v1/orgs/:org/proposals/:proposal_id/resume",
        method = "post",
        operation_id = "resumeProposal"
    )]
    async fn resume(
        &self,
        org: org::Path<Rollouts>,
        state: poem::web::Data<&AppState>,
        /// The proposal's id (`prp_`).
        proposal_id: Path<ProposalId>,
    ) -> Result<Json<ProposalRollout>, OrgConflictErrors> {
        let now = state.clock.now();
        let txn = state.db.begin_write().await?;
        let proposal = org.scope().get(&txn, *proposal_id).await?;
        let row = rollout::resume(&txn, &proposal, org.caller.account_id(), now)
            .await
            .map_err(refused)?;
        Entry::new("proposal.rollout_resumed")
            .org(org.org_id())
            .by(&org.caller)
            .target(ProposalId::from(proposal.id))
            .details(serde_json::json!({ "wave": rollout::current_wave(&row) }))
            .write(&txn, now)
            .await?;
        let shown = answer(&txn, &row).await?;
        txn.commit().await?;
        domain::notifications::jobs::dispatch_soon(&state.queue).await;
        Ok(Json(shown))
    }
}

async fn answer<C: sea_orm::ConnectionTrait>(
    db: &C,
    row: &proposal_rollouts::Model,
) -> Result<ProposalRollout, ApiError> {
    let waves = row.waves.read()?;
    let tallies = rollout::store::tallies(db, row.proposal_id, None, &waves).await?;
    Ok(view(row, waves.into_iter().zip(tallies).collect()))
}

//! The rule of a rollout, as pure functions over plain data (decisions §20): what a policy may
//! write, how a proposal's hosts are cut into waves, and what happens next given where its
//! current wave stands. The store part ([`super::store`]) reads the data and does what
//! [`decide`] says; nothing here touches the database or reads a clock.

use std::collections::BTreeSet;

use crate::fleet::selector::Selector;
use chrono::{DateTime, Duration, Utc};
use entities::json::{Amount, Labels, RolloutSpec, WaveSpec};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The wave of the hosts left after the last one a policy names.
pub const REST: &str = "rest";
/// Most waves a rollout may name (besides `rest`).
pub const MAX_WAVES: usize = 20;
/// Longest soak: a week.
pub const MAX_SOAK_MINUTES: u32 = 10_080;
/// Largest count a size, a failure budget or an in-flight cap may name.
pub const MAX_COUNT: u32 = 1_000_000;
/// Longest wave name.
pub const MAX_NAME: usize = 63;

/// A rollout with its defaults filled in; without one a proposal goes out as one wave of
/// every host that never halts by itself (what proposals always did).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    pub waves: Vec<WaveSpec>,
    pub soak_minutes: u32,
    pub success_percent: u32,
    /// `None`: failures never halt the rollout by themselves.
    pub halt_after_failures: Option<Amount>,
    pub max_in_flight: Option<u32>,
}

impl Rules {
    /// The rules of a stored rollout; `None` is one wave of every host.
    pub fn of(spec: Option<&RolloutSpec>) -> Rules {
        match spec {
            None => Rules {
                waves: Vec::new(),
                soak_minutes: 0,
                success_percent: 0,
                halt_after_failures: None,
                max_in_flight: None,
            },
            Some(spec) => Rules {
                waves: spec.waves.clone(),
                soak_minutes: spec.soak_minutes,
                success_percent: spec.success_percent.min(100),
                halt_after_failures: Some(spec.halt_after_failures),
                max_in_flight: spec.max_in_flight,
            },
        }
    }

    /// Failed results that halt a rollout of `hosts` hosts; a percentage rounds up and is at
    /// least one.
    pub fn halt_threshold(&self, hosts: u64) -> Option<u64> {
        self.halt_after_failures.map(|a| resolve(a, hosts).max(1))
    }
}

/// `amount` of `total`: a count as it is, a percentage rounded up (so that "1%" of a small
/// proposal is still one host).
pub fn resolve(amount: Amount, total: u64) -> u64 {
    match amount {
        Amount::Count(n) => u64::from(n),
        Amount::Percent(p) => (u64::from(p) * total).div_ceil(100),
    }
}

/// Why a rollout as written is refused; `Display` names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rollout.{field}: {problem}")]
pub struct Invalid {
    pub field: String,
    pub problem: String,
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

fn check_amount(field: &str, amount: Amount) -> Result<(), Invalid> {
    match amount {
        Amount::Count(0) => Err(invalid(field, "must be at least 1")),
        Amount::Count(n) if n > MAX_COUNT => {
            Err(invalid(field, format!("must be at most {MAX_COUNT}")))
        }
        Amount::Percent(0) => Err(invalid(field, "must be at least 1%")),
        Amount::Percent(p) if p > 100 => Err(invalid(field, "must be at most 100%")),
        _ => Ok(()),
    }
}

/// Checks a rollout as a policy writes it: 0 to 20 waves with distinct names (1–63
/// characters, none of them `rest`), sizes of at least 1 host or 1–100 %, selectors in the
/// label-selector grammar, a soak of at most a week, `success_percent` 0–100, a failure budget
/// of at least 1 (or 1–100 %), an in-flight cap of at least 1.
pub fn validate(spec: &RolloutSpec) -> Result<(), Invalid> {
    if spec.waves.len() > MAX_WAVES {
        return Err(invalid(
            "waves",
            format!("at most {MAX_WAVES} waves (the hosts left after them form the wave `rest`)"),
        ));
    }
    let mut names = BTreeSet::new();
    for (i, wave) in spec.waves.iter().enumerate() {
        let name = wave.name.trim();
        let count = name.chars().count();
        if count == 0 || count > MAX_NAME || name.chars().any(char::is_control) {
            return Err(invalid(
                format!("waves[{i}].name"),
                format!("must be 1–{MAX_NAME} characters, none a control character"),
            ));
        }
        if name == REST {
            return Err(invalid(
                format!("waves[{i}].name"),
                "`rest` is the wave of the hosts left after the last one; name yours otherwise",
            ));
        }
        if !names.insert(name) {
            return Err(invalid(
                format!("waves[{i}].name"),
                format!("{name:?} names two waves"),
            ));
        }
        check_amount(&format!("waves[{i}].size"), wave.size)?;
        if let Some(selector) = &wave.selector {
            Selector::parse(selector.trim())
                .map_err(|e| invalid(format!("waves[{i}].selector"), e.to_string()))?;
        }
    }
    if spec.soak_minutes > MAX_SOAK_MINUTES {
        return Err(invalid(
            "soak_minutes",
            format!("must be at most {MAX_SOAK_MINUTES} (a week)"),
        ));
    }
    if spec.success_percent > 100 {
        return Err(invalid("success_percent", "must be between 0 and 100"));
    }
    check_amount("halt_after_failures", spec.halt_after_failures)?;
    if let Some(cap) = spec.max_in_flight
        && !(1..=MAX_COUNT).contains(&cap)
    {
        return Err(invalid(
            "max_in_flight",
            format!("must be between 1 and {MAX_COUNT}"),
        ));
    }
    Ok(())
}

/// Checks a rollout against the hosts its policy covers now: each wave it names needs a host.
pub fn fits(spec: &RolloutSpec, hosts: u64) -> Result<(), Invalid> {
    let waves = spec.waves.len() as u64;
    if waves > hosts {
        return Err(invalid(
            "waves",
            format!(
                "{waves} waves, but the policy covers {hosts} host{} now: each wave needs at \
                 least one",
                if hosts == 1 { "" } else { "s" }
            ),
        ));
    }
    Ok(())
}

/// Where a host comes in the stable order of a policy's waves: the first 8 bytes of
/// SHA-256(policy id ‖ host id). The same hosts go first every time.
pub fn order_key(seed: Uuid, host: Uuid) -> u64 {
    let digest = Sha256::new()
        .chain_update(seed.as_bytes())
        .chain_update(host.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// A wave as a proposal's hosts were cut into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub name: String,
    pub hosts: Vec<Uuid>,
}

/// A host to place, with its labels (`None`: they cannot be read, so no selector matches it).
#[derive(Clone, Debug)]
pub struct Candidate {
    pub id: Uuid,
    pub labels: Option<Labels>,
}

/// Cuts `hosts` into the waves of `waves`, in the stable order of `seed` (the policy's id):
/// each wave's size is its count, or its percentage of all the hosts rounded up, at most what
/// is left. First each wave takes the hosts its selector matches (canaries), in order, up to
/// its size (canaries beyond it fall to later waves like any host); then each fills what is
/// left of its size in order. The hosts left after the last form `rest`, listed last when it
/// has any (or when no wave is named). A selector that does not parse matches no host.
pub fn assign(waves: &[WaveSpec], seed: Uuid, hosts: &[Candidate]) -> Vec<Cut> {
    let mut ordered: Vec<&Candidate> = hosts.iter().collect();
    ordered.sort_by_key(|c| (order_key(seed, c.id), c.id));
    let total = ordered.len() as u64;
    let mut remaining = total;
    let sizes: Vec<usize> = waves
        .iter()
        .map(|w| {
            let size = resolve(w.size, total).min(remaining);
            remaining -= size;
            usize::try_from(size).unwrap_or(usize::MAX)
        })
        .collect();
    let mut placed = vec![false; ordered.len()];
    let mut cuts: Vec<Cut> = waves
        .iter()
        .map(|w| Cut {
            name: w.name.trim().to_owned(),
            hosts: Vec::new(),
        })
        .collect();
    for (w, wave) in waves.iter().enumerate() {
        let Some(text) = wave.selector.as_deref() else {
            continue;
        };
        let Ok(selector) = Selector::parse(text.trim()) else {
            continue;
        };
        for (i, candidate) in ordered.iter().enumerate() {
            if cuts[w].hosts.len() >= sizes[w] {
                break;
            }
            let matches = candidate
                .labels
                .as_ref()
                .is_some_and(|labels| selector.matches(labels));
            if !placed[i] && matches {
                placed[i] = true;
                cuts[w].hosts.push(candidate.id);
            }
        }
    }
    let mut next = 0;
    for (w, size) in sizes.iter().enumerate() {
        while cuts[w].hosts.len() < *size && next < ordered.len() {
            if !placed[next] {
                placed[next] = true;
                cuts[w].hosts.push(ordered[next].id);
            }
            next += 1;
        }
    }
    let rest: Vec<Uuid> = ordered
        .iter()
        .zip(&placed)
        .filter(|(_, placed)| !**placed)
        .map(|(c, _)| c.id)
        .collect();
    if !rest.is_empty() || waves.is_empty() {
        cuts.push(Cut {
            name: REST.to_owned(),
            hosts: rest,
        });
    }
    cuts
}

/// How many hosts each wave would get from `hosts` (a preview): [`assign`]'s sizes, which do
/// not depend on the order.
pub fn preview(waves: &[WaveSpec], hosts: &[Candidate]) -> Vec<(String, u64)> {
    assign(waves, Uuid::nil(), hosts)
        .into_iter()
        .map(|cut| (cut.name, cut.hosts.len() as u64))
        .collect()
}

/// Where the current wave stands, and the proposal's failures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The current wave (0-based) and its name.
    pub wave: usize,
    pub name: String,
    /// How many waves the proposal has (`rest` included).
    pub waves: usize,
    /// Hosts of the current wave without a result yet (not handed out, or running). Hosts that
    /// left the proposal are not counted anywhere.
    pub unfinished: u64,
    /// Results of the current wave; read whole only once `unfinished` is 0.
    pub succeeded: u64,
    pub failed: u64,
    /// When the current wave's last result came.
    pub last_result_at: Option<DateTime<Utc>>,
    /// Failed results across the proposal since it was last resumed.
    pub failures: u64,
    /// The proposal's hosts, for a failure budget in percent.
    pub hosts: u64,
}

/// The maintenance window of a window-bound policy (`asap_in_window`), as it is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The policy is not window-bound.
    Unbound,
    Open,
    /// Shut; opens next then (`None`: never again, which cannot hold a change back for ever).
    Shut(Option<DateTime<Utc>>),
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The current wave goes on.
    Continue,
    /// No new jobs; why.
    Halt(String),
    /// The current wave is done and soaks until then.
    Soak(DateTime<Utc>),
    /// The current wave is done and soaked; the next waits for the window to open then.
    Wait(DateTime<Utc>),
    /// The next wave begins.
    Promote(usize),
    /// Every wave is done.
    Done,
}

/// The rule: the last wave done is the end; failures at the budget halt; a done wave with
/// fewer than `success_percent` of its results succeeded halts; otherwise a done wave soaks
/// `soak_minutes` after its last result, then (inside the window, for a window-bound policy)
/// the next wave begins. A wave without results (every host left) needs no soak.
pub fn decide(rules: &Rules, p: &Progress, window: Window, now: DateTime<Utc>) -> Step {
    let done = p.unfinished == 0;
    if done && p.wave + 1 >= p.waves {
        return Step::Done;
    }
    if let Some(threshold) = rules.halt_threshold(p.hosts)
        && p.failures >= threshold
    {
        return Step::Halt(format!(
            "{} failed result{} reached halt_after_failures ({})",
            p.failures,
            if p.failures == 1 { "" } else { "s" },
            rules
                .halt_after_failures
                .map(|a| a.to_string())
                .unwrap_or_default()
        ));
    }
    if !done {
        return Step::Continue;
    }
    let results = p.succeeded + p.failed;
    if results > 0 && p.succeeded * 100 < u64::from(rules.success_percent) * results {
        return Step::Halt(format!(
            "wave {:?}: {} of {} results succeeded ({}%), below success_percent {}",
            p.name,
            p.succeeded,
            results,
            p.succeeded * 100 / results,
            rules.success_percent
        ));
    }
    if let Some(last) = p.last_result_at {
        let until = last + Duration::minutes(i64::from(rules.soak_minutes));
        if now < until {
            return Step::Soak(until);
        }
    }
    match window {
        Window::Shut(Some(opens)) => Step::Wait(opens),
        Window::Unbound | Window::Open | Window::Shut(None) => Step::Promote(p.wave + 1),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::TimeZone;

    use super::*;

    fn wave(name: &str, size: Amount, selector: Option<&str>) -> WaveSpec {
        WaveSpec {
            name: name.into(),
            size,
            selector: selector.map(Into::into),
        }
    }

    fn hosts(n: u128) -> Vec<Candidate> {
        (1..=n)
            .map(|i| Candidate {
                id: Uuid::from_u128(i),
                labels: Some(BTreeMap::new()),
            })
            .collect()
    }

    fn labelled(n: u128, canary: impl Fn(u128) -> bool) -> Vec<Candidate> {
        (1..=n)
            .map(|i| {
                let mut labels = BTreeMap::new();
                if canary(i) {
                    labels.insert("canary".to_owned(), "true".to_owned());
                }
                Candidate {
                    id: Uuid::from_u128(i),
                    labels: Some(labels),
                }
            })
            .collect()
    }

    fn sizes(cuts: &[Cut]) -> Vec<(&str, usize)> {
        cuts.iter()
            .map(|c| (c.name.as_str(), c.hosts.len()))
            .collect()
    }

    const SEED: Uuid = Uuid::from_u128(0xfeed);

    #[test]
    fn one_host_goes_into_the_first_wave_and_rest_is_left_out() {
        let cuts = assign(&[wave("canary", Amount::Count(1), None)], SEED, &hosts(1));
        assert_eq!(sizes(&cuts), [("canary", 1)]);
        let cuts = assign(
            &[wave("canary", Amount::Percent(10), None)],
            SEED,
            &hosts(1),
        );
        assert_eq!(sizes(&cuts), [("canary", 1)], "10% of one host rounds up");
    }

    #[test]
    fn fifty_percent_of_three_hosts_is_two() {
        let cuts = assign(&[wave("half", Amount::Percent(50), None)], SEED, &hosts(3));
        assert_eq!(sizes(&cuts), [("half", 2), ("rest", 1)]);
        assert_eq!(resolve(Amount::Percent(50), 3), 2);
        assert_eq!(resolve(Amount::Percent(100), 3), 3);
        assert_eq!(resolve(Amount::Percent(1), 0), 0);
    }

    #[test]
    fn twenty_hosts_in_two_then_half_leave_eight_for_rest() {
        let cuts = assign(
            &[
                wave("canary", Amount::Count(2), None),
                wave("half", Amount::Percent(50), None),
            ],
            SEED,
            &hosts(20),
        );
        assert_eq!(sizes(&cuts), [("canary", 2), ("half", 10), ("rest", 8)]);
        let all: BTreeSet<Uuid> = cuts.iter().flat_map(|c| c.hosts.clone()).collect();
        assert_eq!(all.len(), 20, "every host once");
    }

    #[test]
    fn sizes_past_the_hosts_take_what_is_left() {
        let cuts = assign(
            &[
                wave("a", Amount::Count(2), None),
                wave("b", Amount::Count(2), None),
                wave("c", Amount::Percent(100), None),
            ],
            SEED,
            &hosts(3),
        );
        assert_eq!(sizes(&cuts), [("a", 2), ("b", 1), ("c", 0)]);
    }

    #[test]
    fn no_waves_is_one_wave_of_every_host_named_rest() {
        assert_eq!(sizes(&assign(&[], SEED, &hosts(5))), [("rest", 5)]);
    }

    #[test]
    fn the_order_is_stable_across_calls_and_input_orders_but_not_policies() {
        let waves = [wave("first", Amount::Count(3), None)];
        let mut shuffled = hosts(50);
        let a = assign(&waves, SEED, &shuffled);
        shuffled.reverse();
        let b = assign(&waves, SEED, &shuffled);
        assert_eq!(a, b);
        let other = assign(&waves, Uuid::from_u128(0xbeef), &shuffled);
        assert_ne!(a[0].hosts, other[0].hosts, "another policy, another order");
    }

    #[test]
    fn canaries_go_first_and_a_wave_never_exceeds_its_size() {
        // Hosts 10, 20, 30, 40 are canaries; the first wave holds two of them.
        let candidates = labelled(40, |i| i % 10 == 0);
        let cuts = assign(
            &[
                wave("canary", Amount::Count(2), Some("canary=true")),
                wave("next", Amount::Count(5), None),
            ],
            SEED,
            &candidates,
        );
        assert_eq!(sizes(&cuts), [("canary", 2), ("next", 5), ("rest", 33)]);
        let canaries: BTreeSet<Uuid> = [10, 20, 30, 40].map(Uuid::from_u128).into();
        assert!(cuts[0].hosts.iter().all(|h| canaries.contains(h)));
        // The two canaries beyond its size come in the stable order like any host: the first
        // wave took the first two canaries in that order.
        let mut in_order: Vec<Uuid> = canaries.iter().copied().collect();
        in_order.sort_by_key(|h| (order_key(SEED, *h), *h));
        assert_eq!(cuts[0].hosts, in_order[..2]);
    }

    #[test]
    fn a_later_waves_canaries_are_not_taken_by_an_earlier_waves_fill() {
        let candidates = labelled(10, |i| i == 7);
        let cuts = assign(
            &[
                wave("first", Amount::Count(9), None),
                wave("canary", Amount::Count(1), Some("canary")),
            ],
            SEED,
            &candidates,
        );
        assert_eq!(cuts[1].hosts, [Uuid::from_u128(7)]);
        assert!(!cuts[0].hosts.contains(&Uuid::from_u128(7)));
    }

    #[test]
    fn unreadable_labels_match_no_selector() {
        let mut candidates = hosts(3);
        candidates[0].labels = None;
        let cuts = assign(
            &[wave("canary", Amount::Count(1), Some("canary!=x"))],
            SEED,
            &candidates,
        );
        assert_ne!(cuts[0].hosts, [Uuid::from_u128(1)]);
    }

    #[test]
    fn bad_rollouts_are_refused_naming_the_field() {
        let spec = |waves: Vec<WaveSpec>| RolloutSpec {
            waves,
            soak_minutes: 0,
            success_percent: 100,
            halt_after_failures: Amount::Count(1),
            max_in_flight: None,
        };
        let field = |s: &RolloutSpec| validate(s).err().map(|e| e.field);
        assert_eq!(
            field(&spec(vec![wave("a", Amount::Count(0), None)])).as_deref(),
            Some("waves[0].size")
        );
        assert_eq!(
            field(&spec(vec![wave("a", Amount::Percent(0), None)])).as_deref(),
            Some("waves[0].size")
        );
        assert_eq!(
            field(&spec(vec![wave("a", Amount::Percent(101), None)])).as_deref(),
            Some("waves[0].size")
        );
        assert_eq!(
            field(&spec(vec![wave(
                "a",
                Amount::Count(1),
                Some("env in prod")
            )]))
            .as_deref(),
            Some("waves[0].selector")
        );
        assert_eq!(
            field(&spec(vec![
                wave("a", Amount::Count(1), None),
                wave("a", Amount::Count(1), None)
            ]))
            .as_deref(),
            Some("waves[1].name")
        );
        assert_eq!(
            field(&spec(vec![wave("rest", Amount::Count(1), None)])).as_deref(),
            Some("waves[0].name")
        );
        let mut s = spec(vec![wave("a", Amount::Percent(100), Some("env=prod"))]);
        assert_eq!(validate(&s), Ok(()));
        s.success_percent = 101;
        assert_eq!(field(&s).as_deref(), Some("success_percent"));
        s.success_percent = 90;
        s.max_in_flight = Some(0);
        assert_eq!(field(&s).as_deref(), Some("max_in_flight"));
        s.max_in_flight = Some(3);
        s.halt_after_failures = Amount::Percent(0);
        assert_eq!(field(&s).as_deref(), Some("halt_after_failures"));
        s.halt_after_failures = Amount::Percent(10);
        s.soak_minutes = MAX_SOAK_MINUTES + 1;
        assert_eq!(field(&s).as_deref(), Some("soak_minutes"));
        let three = spec(vec![
            wave("a", Amount::Count(1), None),
            wave("b", Amount::Count(1), None),
            wave("c", Amount::Count(1), None),
        ]);
        assert_eq!(fits(&three, 3), Ok(()));
        assert_eq!(
            fits(&three, 2).err().map(|e| e.to_string()).as_deref(),
            Some(
                "rollout.waves: 3 waves, but the policy covers 2 hosts now: each wave needs at \
                 least one"
            )
        );
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 2, 9, 0, 0)
            .single()
            .unwrap_or_default()
    }

    fn rules(soak: u32, success: u32, halt: Amount) -> Rules {
        Rules::of(Some(&RolloutSpec {
            waves: vec![
                wave("canary", Amount::Count(2), None),
                wave("half", Amount::Percent(50), None),
            ],
            soak_minutes: soak,
            success_percent: success,
            halt_after_failures: halt,
            max_in_flight: None,
        }))
    }

    fn progress(wave: usize, unfinished: u64, succeeded: u64, failed: u64) -> Progress {
        Progress {
            wave,
            name: "canary".into(),
            waves: 3,
            unfinished,
            succeeded,
            failed,
            last_result_at: Some(now()),
            failures: failed,
            hosts: 20,
        }
    }

    #[test]
    fn a_wave_with_hosts_still_running_goes_on() {
        let r = rules(0, 100, Amount::Count(5));
        assert_eq!(
            decide(&r, &progress(0, 1, 1, 0), Window::Unbound, now()),
            Step::Continue
        );
    }

    #[test]
    fn every_result_in_promotes_to_the_next_wave_exactly() {
        let r = rules(0, 100, Amount::Count(1));
        assert_eq!(
            decide(&r, &progress(0, 0, 2, 0), Window::Unbound, now()),
            Step::Promote(1)
        );
        assert_eq!(
            decide(&r, &progress(1, 0, 10, 0), Window::Unbound, now()),
            Step::Promote(2)
        );
        assert_eq!(
            decide(&r, &progress(2, 0, 8, 0), Window::Unbound, now()),
            Step::Done
        );
    }

    #[test]
    fn hosts_that_left_mid_wave_count_neither_way() {
        // Two of ten hosts left; eight results in, all succeeded: the wave is done at 100%.
        let r = rules(0, 100, Amount::Count(1));
        assert_eq!(
            decide(&r, &progress(1, 0, 8, 0), Window::Unbound, now()),
            Step::Promote(2)
        );
        // Every host of the wave left: no results, nothing to soak, on to the next.
        let mut empty = progress(0, 0, 0, 0);
        empty.last_result_at = None;
        let soaking = rules(60, 100, Amount::Count(1));
        assert_eq!(
            decide(&soaking, &empty, Window::Unbound, now()),
            Step::Promote(1)
        );
    }

    #[test]
    fn the_failure_budget_halts_even_mid_wave_and_before_a_promotion() {
        let r = rules(0, 0, Amount::Count(1));
        assert!(matches!(
            decide(&r, &progress(1, 5, 4, 1), Window::Unbound, now()),
            Step::Halt(reason) if reason == "1 failed result reached halt_after_failures (1)"
        ));
        assert!(matches!(
            decide(&r, &progress(0, 0, 1, 1), Window::Unbound, now()),
            Step::Halt(_)
        ));
        // 10% of 20 hosts is 2: one failure is within it.
        let r = rules(0, 0, Amount::Percent(10));
        assert_eq!(
            decide(&r, &progress(0, 0, 1, 1), Window::Unbound, now()),
            Step::Promote(1)
        );
        // The last wave done is the end, whatever its failures: nothing is left to hold back.
        let r = rules(0, 100, Amount::Count(1));
        assert_eq!(
            decide(&r, &progress(2, 0, 7, 1), Window::Unbound, now()),
            Step::Done
        );
    }

    #[test]
    fn a_done_wave_below_its_success_percent_halts() {
        let r = rules(0, 90, Amount::Count(100));
        let step = decide(&r, &progress(1, 0, 8, 2), Window::Unbound, now());
        assert_eq!(
            step,
            Step::Halt(
                "wave \"canary\": 8 of 10 results succeeded (80%), below success_percent 90".into()
            )
        );
        assert_eq!(
            decide(&r, &progress(1, 0, 9, 1), Window::Unbound, now()),
            Step::Promote(2)
        );
    }

    #[test]
    fn a_done_wave_soaks_from_its_last_result_then_waits_for_the_window() {
        let r = rules(30, 100, Amount::Count(1));
        let p = progress(0, 0, 2, 0);
        assert_eq!(
            decide(&r, &p, Window::Unbound, now()),
            Step::Soak(now() + Duration::minutes(30))
        );
        let later = now() + Duration::minutes(30);
        assert_eq!(decide(&r, &p, Window::Unbound, later), Step::Promote(1));
        let opens = later + Duration::hours(5);
        assert_eq!(
            decide(&r, &p, Window::Shut(Some(opens)), later),
            Step::Wait(opens)
        );
        assert_eq!(decide(&r, &p, Window::Open, later), Step::Promote(1));
        assert_eq!(decide(&r, &p, Window::Shut(None), later), Step::Promote(1));
    }

    #[test]
    fn without_a_rollout_failures_never_halt() {
        let r = Rules::of(None);
        let mut p = progress(0, 3, 0, 7);
        p.waves = 1;
        assert_eq!(decide(&r, &p, Window::Unbound, now()), Step::Continue);
        p.unfinished = 0;
        assert_eq!(decide(&r, &p, Window::Unbound, now()), Step::Done);
    }
}

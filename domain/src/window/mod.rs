//! Maintenance windows as policies and proposals store them, read so that corruption is an
//! error and never "no window": a window that cannot be read holds a change back instead of
//! letting it out at any hour.
//!
//! A policy stores its rule ([`WindowSpec`]); a proposal stores a copy with the instant the
//! rule counts from ([`ProposalWindow`], the policy's creation).

use chrono::{DateTime, Utc};
pub use entities::json::WindowSpec;
use entities::json::{JsonText, ProposalWindow, Unreadable, Unwritable};
pub use rule::{
    MAX_COUNT, MAX_DURATION_MINUTES, MAX_OPENINGS_PER_DAY, MAX_RRULE_LEN, SEARCH_HORIZON_DAYS,
    Window, WindowError,
};

mod rule;

/// A stored window that is not valid JSON of the expected shape, or whose rule, time zone or
/// duration no longer parses; the error that said so is kept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnreadableWindow {
    #[error("the stored maintenance window cannot be read: {0}")]
    Json(#[from] Unreadable),
    #[error("the stored maintenance window cannot be read: {0}")]
    Rule(#[from] WindowError),
    #[error("the stored maintenance window cannot be written back: {0}")]
    Unwritable(#[from] Unwritable),
    /// A proposal applied as soon as its window opens stores none.
    #[error(
        "the stored maintenance window cannot be read: apply is asap_in_window but the proposal has no window"
    )]
    Missing,
}

/// The parsed window. A window read through [`of_proposal`] or [`of_policy`] always parses.
pub fn parse(stored: &ProposalWindow) -> Result<Window, UnreadableWindow> {
    Window::parse(&stored.rule, stored.created).map_err(UnreadableWindow::from)
}

/// A proposal's `window` column: `None` when it has none, an error when it has one that
/// cannot be read.
pub fn of_proposal(
    column: Option<&JsonText<ProposalWindow>>,
) -> Result<Option<ProposalWindow>, UnreadableWindow> {
    let Some(column) = column else {
        return Ok(None);
    };
    let stored = column.read().map_err(UnreadableWindow::from)?;
    parse(&stored)?;
    Ok(Some(stored))
}

/// A policy's `window` column, counting from the policy's creation: `None` when it has none,
/// an error when it has one that cannot be read.
pub fn of_policy(
    column: Option<&JsonText<WindowSpec>>,
    created: DateTime<Utc>,
) -> Result<Option<ProposalWindow>, UnreadableWindow> {
    let Some(column) = column else {
        return Ok(None);
    };
    let rule = column.read().map_err(UnreadableWindow::from)?;
    let stored = ProposalWindow { rule, created };
    parse(&stored)?;
    Ok(Some(stored))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn created() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 2, 9, 0, 0)
            .single()
            .unwrap_or_default()
    }

    const SATURDAYS: &str = r#"{"rrule":"FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0","duration_minutes":120,"time_zone":"Europe/Berlin"}"#;

    fn policy(text: &str) -> Result<Option<ProposalWindow>, UnreadableWindow> {
        of_policy(Some(&JsonText::from_stored(text)), created())
    }

    #[test]
    fn no_stored_window_is_no_window() {
        assert_eq!(of_proposal(None), Ok(None));
        assert_eq!(of_policy(None, created()), Ok(None));
    }

    #[test]
    fn a_policy_window_reads_with_the_policy_creation() {
        let stored = policy(SATURDAYS);
        assert!(
            matches!(&stored, Ok(Some(w)) if w.created == created() && w.rule.duration_minutes == 120)
        );
        // And as a proposal stores it, it reads back the same.
        let copied = stored.ok().flatten().and_then(|w| JsonText::new(&w).ok());
        assert!(matches!(of_proposal(copied.as_ref()), Ok(Some(_))));
    }

    #[test]
    fn corrupt_json_or_a_rule_that_no_longer_parses_is_an_error_not_no_window() {
        assert!(policy("{not json").is_err());
        assert!(policy(r#"{"rrule":"FREQ=WEEKLY"}"#).is_err());
        let bad_zone = SATURDAYS.replace("Europe/Berlin", "Mars/Olympus");
        assert!(policy(&bad_zone).is_err());
        assert!(of_proposal(Some(&JsonText::from_stored("[]"))).is_err());
    }
}

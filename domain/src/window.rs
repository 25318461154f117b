//! Maintenance windows as policies and proposals store them, read so that corruption is an
//! error and never "no window": a window that cannot be read holds a change back instead of
//! letting it out at any hour.

use chrono::{DateTime, Utc};
use platform::window::{Window, WindowSpec};
use serde::{Deserialize, Serialize};

/// A maintenance window as stored on a proposal (copied from its policy): the spec and the
/// instant it counts from when its RRULE has no DTSTART (the policy's creation).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredWindow {
    pub rrule: String,
    pub duration_minutes: u32,
    pub time_zone: String,
    pub created: DateTime<Utc>,
}

/// A stored window that is not valid JSON of the expected shape, or whose rule, time zone or
/// duration no longer parses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the stored maintenance window cannot be read: {0}")]
pub struct UnreadableWindow(pub String);

/// A window as a policy stores it: the spec alone (the policy's creation is its own column).
#[derive(Deserialize)]
struct PolicyWindow {
    rrule: String,
    duration_minutes: u32,
    time_zone: String,
}

impl StoredWindow {
    pub fn spec(&self) -> WindowSpec {
        WindowSpec {
            rrule: self.rrule.clone(),
            duration_minutes: self.duration_minutes,
            time_zone: self.time_zone.clone(),
        }
    }

    /// The parsed window. A window read through [`StoredWindow::read`] or
    /// [`StoredWindow::of_policy`] always parses.
    pub fn window(&self) -> Result<Window, UnreadableWindow> {
        Window::parse(&self.spec(), self.created).map_err(|e| UnreadableWindow(e.to_string()))
    }

    /// A proposal's `window` column: `None` when it has none, an error when it has one that
    /// cannot be read.
    pub fn read(text: Option<&str>) -> Result<Option<StoredWindow>, UnreadableWindow> {
        let Some(text) = text else { return Ok(None) };
        let stored: StoredWindow =
            serde_json::from_str(text).map_err(|e| UnreadableWindow(e.to_string()))?;
        stored.window()?;
        Ok(Some(stored))
    }

    /// A policy's `window` column, counting from the policy's creation: `None` when it has
    /// none, an error when it has one that cannot be read.
    pub fn of_policy(
        text: Option<&str>,
        created: DateTime<Utc>,
    ) -> Result<Option<StoredWindow>, UnreadableWindow> {
        let Some(text) = text else { return Ok(None) };
        let spec: PolicyWindow =
            serde_json::from_str(text).map_err(|e| UnreadableWindow(e.to_string()))?;
        let stored = StoredWindow {
            rrule: spec.rrule,
            duration_minutes: spec.duration_minutes,
            time_zone: spec.time_zone,
            created,
        };
        stored.window()?;
        Ok(Some(stored))
    }
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

    #[test]
    fn no_stored_window_is_no_window() {
        assert_eq!(StoredWindow::read(None), Ok(None));
        assert_eq!(StoredWindow::of_policy(None, created()), Ok(None));
    }

    #[test]
    fn a_policy_window_reads_with_the_policy_creation() {
        let stored = StoredWindow::of_policy(Some(SATURDAYS), created());
        assert!(
            matches!(&stored, Ok(Some(w)) if w.created == created() && w.duration_minutes == 120)
        );
        // And as a proposal stores it, it reads back the same.
        let text = stored
            .ok()
            .flatten()
            .and_then(|w| serde_json::to_string(&w).ok());
        assert!(matches!(StoredWindow::read(text.as_deref()), Ok(Some(_))));
    }

    #[test]
    fn corrupt_json_or_a_rule_that_no_longer_parses_is_an_error_not_no_window() {
        assert!(StoredWindow::of_policy(Some("{not json"), created()).is_err());
        assert!(StoredWindow::of_policy(Some(r#"{"rrule":"FREQ=WEEKLY"}"#), created()).is_err());
        let bad_zone = SATURDAYS.replace("Europe/Berlin", "Mars/Olympus");
        assert!(StoredWindow::of_policy(Some(&bad_zone), created()).is_err());
        assert!(StoredWindow::read(Some("[]")).is_err());
    }
}

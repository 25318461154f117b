//! Which channels an event goes to: a `test` event to the one channel it names, any other to
//! every channel of its organization whose `events` filter is absent (all) or names it.

use super::EventKind;

/// A channel's filter as stored: a JSON array of event types, or null for every event.
pub fn parse_filter(stored: Option<&str>) -> Option<Vec<String>> {
    stored.and_then(|text| serde_json::from_str::<Vec<String>>(text).ok())
}

/// Whether a channel with `filter` (as stored) wants an event of `kind`. An unreadable filter
/// is treated as every event: a channel configured to hear things must not fall silent.
pub fn wants(filter: Option<&str>, kind: EventKind) -> bool {
    match (kind, filter) {
        (EventKind::Test, _) => false,
        (_, None) => true,
        (_, Some(text)) => match serde_json::from_str::<Vec<String>>(text) {
            Ok(list) => list.iter().any(|k| k == kind.as_str()),
            Err(_) => true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_without_a_filter_hears_every_event_but_test() {
        assert!(wants(None, EventKind::ProposalApproved));
        assert!(wants(None, EventKind::HostOffline));
        assert!(!wants(None, EventKind::Test), "test goes only where asked");
    }

    #[test]
    fn a_filter_names_the_events_a_channel_hears() {
        let filter = r#"["proposal.failed","host.offline"]"#;
        assert!(wants(Some(filter), EventKind::ProposalFailed));
        assert!(wants(Some(filter), EventKind::HostOffline));
        assert!(!wants(Some(filter), EventKind::ProposalApproved));
        assert!(!wants(Some("[]"), EventKind::ProposalApproved));
        assert_eq!(
            parse_filter(Some(filter)),
            Some(vec![
                "proposal.failed".to_owned(),
                "host.offline".to_owned()
            ])
        );
        assert_eq!(parse_filter(None), None);
    }
}

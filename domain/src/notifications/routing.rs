//! Which channels an event goes to: a `test` event to the one channel it names, any other to
//! every channel of its organization whose `events` filter is absent (all) or names it.

use entities::json::JsonText;

use super::EventKind;

/// A channel's filter as stored: a JSON array of event types, or null for every event (also
/// shown for a filter that cannot be read, which routes every event; see [`wants`]).
pub fn parse_filter(stored: Option<&JsonText<Vec<String>>>) -> Option<Vec<String>> {
    stored.and_then(|filter| filter.read().ok())
}

/// Whether a channel with `filter` (as stored) wants an event of `kind`. An unreadable filter
/// is treated as every event: a channel configured to hear things must not fall silent.
pub fn wants(filter: Option<&JsonText<Vec<String>>>, kind: EventKind) -> bool {
    match (kind, filter.map(JsonText::read)) {
        (EventKind::Test, _) => false,
        (_, None | Some(Err(_))) => true,
        (_, Some(Ok(list))) => list.iter().any(|k| k.parse() == Ok(kind)),
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
        let filter = JsonText::from_stored(r#"["proposal.failed","host.offline"]"#);
        let filter = Some(&filter);
        assert!(wants(filter, EventKind::ProposalFailed));
        assert!(wants(filter, EventKind::HostOffline));
        assert!(!wants(filter, EventKind::ProposalApproved));
        assert!(!wants(
            Some(&JsonText::from_stored("[]")),
            EventKind::ProposalApproved
        ));
        assert_eq!(
            parse_filter(filter),
            Some(vec![
                "proposal.failed".to_owned(),
                "host.offline".to_owned()
            ])
        );
        assert_eq!(parse_filter(None), None);
    }

    #[test]
    fn a_filter_that_cannot_be_read_routes_every_event_and_shows_none() {
        let broken = JsonText::from_stored(r#"["proposal.failed""#);
        assert!(wants(Some(&broken), EventKind::ProposalApproved));
        assert!(!wants(Some(&broken), EventKind::Test));
        assert_eq!(parse_filter(Some(&broken)), None);
    }
}

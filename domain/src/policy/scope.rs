//! Which hosts a policy covers: live hosts of its organization that are in one of its groups
//! (every host when it names none) and match its label selector (when it has one).
//!
//! Scope fails closed: a stored group list or selector that cannot be read covers no host
//! (never every host), and a host whose labels cannot be read is not matched by a selector.

use std::collections::BTreeSet;

use crate::fleet::selector::Selector;
use entities::{
    json::{JsonText, Labels},
    policies,
};
use uuid::Uuid;

/// A policy's scope, read from its row.
#[derive(Clone, Debug)]
pub struct Scope {
    /// Empty: every host of the organization.
    groups: Vec<Uuid>,
    selector: Option<Selector>,
}

/// Why a stored scope cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnreadableScope {
    #[error("the stored group list cannot be read: {0}")]
    Groups(#[source] entities::json::Unreadable),
    #[error("the stored selector does not parse: {0}")]
    Selector(#[source] crate::fleet::selector::SelectorError),
}

impl Scope {
    /// Reads `scope_groups` and `selector` as stored.
    pub fn read(
        scope_groups: &JsonText<Vec<Uuid>>,
        selector: Option<&str>,
    ) -> Result<Scope, UnreadableScope> {
        let groups = scope_groups.read().map_err(UnreadableScope::Groups)?;
        let selector = selector
            .map(Selector::parse)
            .transpose()
            .map_err(UnreadableScope::Selector)?;
        Ok(Scope { groups, selector })
    }

    /// The scope of `policy`.
    pub fn of(policy: &policies::Model) -> Result<Scope, UnreadableScope> {
        Scope::read(&policy.scope_groups, policy.selector.as_deref())
    }

    /// The groups a host must be in one of; empty when any host will do.
    pub fn groups(&self) -> &[Uuid] {
        &self.groups
    }

    /// Whether a host with these stored labels matches the selector. Without a selector
    /// every host does; with one, labels that cannot be read match nothing.
    pub fn admits(&self, labels: &JsonText<Labels>) -> bool {
        let Some(selector) = &self.selector else {
            return true;
        };
        labels.read().is_ok_and(|labels| selector.matches(&labels))
    }

    /// The whole rule for one host: in a scope group (or the scope names none) and admitted
    /// by the selector. Evaluation applies the group part in its query and [`Scope::admits`]
    /// to the rows it reads; this says what the two together mean.
    pub fn covers(&self, host_groups: &BTreeSet<Uuid>, labels: &JsonText<Labels>) -> bool {
        let in_group =
            self.groups.is_empty() || self.groups.iter().any(|g| host_groups.contains(g));
        in_group && self.admits(labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn groups(ids: &[u128]) -> BTreeSet<Uuid> {
        ids.iter().map(|n| id(*n)).collect()
    }

    fn json<T>(text: &str) -> JsonText<T> {
        JsonText::from_stored(text)
    }

    fn read(groups: &str, selector: Option<&str>) -> Result<Scope, UnreadableScope> {
        Scope::read(&json(groups), selector)
    }

    fn prod_web() -> JsonText<Labels> {
        json(r#"{"env":"prod","tier":"web"}"#)
    }

    fn staging_db() -> JsonText<Labels> {
        json(r#"{"env":"staging","tier":"db"}"#)
    }

    #[test]
    fn no_groups_and_no_selector_cover_every_live_host() {
        let scope = read("[]", None).expect("readable");
        assert!(scope.groups().is_empty());
        assert!(scope.covers(&groups(&[]), &prod_web()));
        assert!(scope.covers(&groups(&[7]), &json("{}")));
    }

    #[test]
    fn groups_cover_their_members_only() {
        let text = serde_json::to_string(&[id(1), id(2)]).unwrap_or_default();
        let scope = read(&text, None).expect("readable");
        assert!(scope.covers(&groups(&[2, 9]), &prod_web()));
        assert!(!scope.covers(&groups(&[9]), &prod_web()));
        assert!(!scope.covers(&groups(&[]), &prod_web()));
    }

    #[test]
    fn the_selector_must_also_match() {
        let text = serde_json::to_string(&[id(1)]).unwrap_or_default();
        let scope = read(&text, Some("env=prod,tier in (web,db)")).expect("readable");
        assert!(scope.covers(&groups(&[1]), &prod_web()));
        assert!(!scope.covers(&groups(&[1]), &staging_db()), "env differs");
        assert!(
            !scope.covers(&groups(&[2]), &prod_web()),
            "not in the group"
        );
    }

    #[test]
    fn an_unreadable_group_list_or_selector_is_an_error_not_every_host() {
        assert!(matches!(
            read("not json", None),
            Err(UnreadableScope::Groups(_))
        ));
        assert!(matches!(
            read(r#"["not-a-uuid"]"#, None),
            Err(UnreadableScope::Groups(_))
        ));
        assert!(matches!(
            read("[]", Some("env in prod")),
            Err(UnreadableScope::Selector(_))
        ));
        assert!(matches!(
            read("[]", Some("")),
            Err(UnreadableScope::Selector(_))
        ));
    }

    #[test]
    fn labels_that_cannot_be_read_match_no_selector_even_a_negative_one() {
        let scope = read("[]", Some("env!=prod")).expect("readable");
        assert!(scope.admits(&staging_db()));
        assert!(!scope.admits(&json("{broken")));
        let everyone = read("[]", None).expect("readable");
        assert!(
            everyone.admits(&json("{broken")),
            "no selector: labels do not matter"
        );
    }
}

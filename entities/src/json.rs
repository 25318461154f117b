//! JSON held in TEXT columns, typed, and the shapes stored in them.
//!
//! A [`JsonText<T>`] column keeps the text exactly as stored, so a row read and written back
//! is byte-identical, and is parsed only when asked: [`JsonText::read`] returns the value or
//! [`Unreadable`], never a default. Reading a row never fails because one of its JSON columns
//! is corrupt (a host whose labels cannot be read can still have new labels written); using
//! the value does, and each caller decides what that means: an error (`DbErr::Json` in the
//! domain and worker, a 500 problem in the api) or a documented fail-closed choice.
//!
//! The columns are TEXT on both databases, so the value is bound as a string. sea-orm's
//! `FromJsonQueryResult` would bind `Value::Json`, which Postgres refuses for a TEXT column.

use std::{any::type_name, collections::BTreeMap, fmt, marker::PhantomData};

use chrono::{DateTime, Utc};
use platform::ids::AccountId;
use sea_orm::{
    ColIdx, DbErr, QueryResult, TryGetError, TryGetable, Value,
    sea_query::{ArrayType, ColumnType, Nullable, ValueType, ValueTypeErr},
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

pub use crate::json_rollout::{Amount, PlannedWave, RolloutSpec, WaveSpec};

/// A TEXT column holding the JSON of a `T`, kept as stored.
pub struct JsonText<T> {
    text: String,
    of: PhantomData<fn() -> T>,
}

/// A stored JSON value that cannot be read as the type its column holds. It says which type
/// and where the text went wrong, never what the text holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stored JSON cannot be read as {what}: {problem} at line {line}, column {column}")]
pub struct Unreadable {
    what: String,
    problem: &'static str,
    line: usize,
    column: usize,
}

/// A value that cannot be written as JSON (a map whose keys are not strings, say): the
/// program's fault, never the data's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} cannot be written as JSON: {problem}")]
pub struct Unwritable {
    what: String,
    problem: &'static str,
}

fn problem(err: &serde_json::Error) -> &'static str {
    match err.classify() {
        serde_json::error::Category::Syntax => "not JSON",
        serde_json::error::Category::Eof => "JSON cut short",
        serde_json::error::Category::Data => "JSON of another shape",
        serde_json::error::Category::Io => "an I/O error",
    }
}

/// `T`'s name without module paths: `BTreeMap<String, String>`, not
/// `alloc::collections::btree::map::BTreeMap<alloc::string::String, …>`.
fn short_name<T: ?Sized>() -> String {
    let full = type_name::<T>();
    let mut out = String::with_capacity(full.len());
    let mut segment = String::new();
    for c in full.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            segment.push(c);
        } else {
            out.push_str(segment.rsplit("::").next().unwrap_or_default());
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(segment.rsplit("::").next().unwrap_or_default());
    out
}

impl<T> JsonText<T> {
    /// Text as stored, unchecked: what a row holds.
    pub fn from_stored(text: impl Into<String>) -> Self {
        JsonText {
            text: text.into(),
            of: PhantomData,
        }
    }

    /// The text as stored.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl<T: DeserializeOwned> JsonText<T> {
    /// The stored value, or why it cannot be read.
    pub fn read(&self) -> Result<T, Unreadable> {
        serde_json::from_str(&self.text).map_err(|err| Unreadable {
            what: short_name::<T>(),
            problem: problem(&err),
            line: err.line(),
            column: err.column(),
        })
    }
}

impl<T: Serialize> JsonText<T> {
    /// `value` as JSON text.
    pub fn new(value: &T) -> Result<Self, Unwritable> {
        serde_json::to_string(value)
            .map(Self::from_stored)
            .map_err(|err| Unwritable {
                what: short_name::<T>(),
                problem: problem(&err),
            })
    }
}

impl<T> Clone for JsonText<T> {
    fn clone(&self) -> Self {
        Self::from_stored(self.text.clone())
    }
}

/// Equal when the stored text is: compare read values to compare meaning.
impl<T> PartialEq for JsonText<T> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl<T> Eq for JsonText<T> {}

impl<T> fmt::Debug for JsonText<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("JsonText").field(&self.text).finish()
    }
}

impl From<Unreadable> for DbErr {
    fn from(err: Unreadable) -> DbErr {
        DbErr::Json(err.to_string())
    }
}

impl From<Unwritable> for DbErr {
    fn from(err: Unwritable) -> DbErr {
        DbErr::Json(err.to_string())
    }
}

// The column is TEXT: read and bound as a string.

impl<T> From<JsonText<T>> for Value {
    fn from(json: JsonText<T>) -> Value {
        Value::String(Some(json.text))
    }
}

impl<T> TryGetable for JsonText<T> {
    fn try_get_by<I: ColIdx>(res: &QueryResult, index: I) -> Result<Self, TryGetError> {
        String::try_get_by(res, index).map(Self::from_stored)
    }
}

impl<T> ValueType for JsonText<T> {
    fn try_from(v: Value) -> Result<Self, ValueTypeErr> {
        <String as ValueType>::try_from(v).map(Self::from_stored)
    }

    fn type_name() -> String {
        format!("JsonText<{}>", short_name::<T>())
    }

    fn array_type() -> ArrayType {
        ArrayType::String
    }

    fn column_type() -> ColumnType {
        <String as ValueType>::column_type()
    }
}

impl<T> Nullable for JsonText<T> {
    fn null() -> Value {
        Value::String(None)
    }
}

impl<T> sea_orm::IntoActiveValue<JsonText<T>> for JsonText<T> {
    fn into_active_value(self) -> sea_orm::ActiveValue<JsonText<T>> {
        sea_orm::ActiveValue::Set(self)
    }
}

// What the columns hold.

/// Labels, key to value (`hosts.labels`, `enrollment_tokens.labels`).
pub type Labels = BTreeMap<String, String>;

/// A package an update would newly install (`Impact::installs`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImpactInstall {
    pub name: String,
    pub version: String,
}

/// What applying an update would do to its host, as its agent worked it out before approval
/// (`host_updates.impact`, decisions §21).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Impact {
    #[serde(default)]
    pub reboot: bool,
    #[serde(default)]
    pub restarts: Vec<String>,
    #[serde(default)]
    pub installs: Vec<ImpactInstall>,
    #[serde(default)]
    pub removes: Vec<String>,
}

/// What a proposal's changes would do to one of its hosts (`proposal_hosts.impact`, decisions
/// §21): what its agent said of each change, together. Lists are sorted and hold each entry
/// once.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, Default)]
pub struct HostImpact {
    /// The agent said what every change would do; `false`: for some it did not (the host
    /// counts as unknown, and what is listed is what it did say).
    pub known: bool,
    /// A change needs a reboot (its impact says so, or the update was reported
    /// `requires_reboot`).
    pub reboot: bool,
    #[serde(default)]
    pub restarts: Vec<String>,
    #[serde(default)]
    pub installs: Vec<ImpactInstall>,
    #[serde(default)]
    pub removes: Vec<String>,
}

/// A unit or package and on how many of a proposal's hosts it restarts, is installed or removed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImpactCount {
    pub name: String,
    pub hosts: i64,
}

/// A proposal's hosts' impacts summed up (`proposal_impacts.summary`, decisions §21): lists
/// most hosts first, then by name.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct ImpactSummary {
    pub hosts: i64,
    pub hosts_rebooting: i64,
    pub hosts_unknown: i64,
    #[serde(default)]
    pub restarts: Vec<ImpactCount>,
    #[serde(default)]
    pub installs: Vec<ImpactCount>,
    #[serde(default)]
    pub removes: Vec<ImpactCount>,
    /// Distinct units, packages installed and packages removed in all (the lists may be cut).
    #[serde(default)]
    pub restarts_total: i64,
    #[serde(default)]
    pub installs_total: i64,
    #[serde(default)]
    pub removes_total: i64,
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// An advisory an update fixes, as stored (`host_updates.advisories`,
/// `proposal_changes.advisories`): as its agent reported it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Advisory {
    pub external_id: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default)]
    pub cves: Vec<String>,
}

/// A member a comment mentions, as resolved when it was written (`comments.mentions`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Mention {
    pub id: AccountId,
    pub email: String,
    pub name: Option<String>,
}

/// One of a SCIM user's email addresses as its provider sent it (`scim_users.emails` holds a
/// list of them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScimEmail {
    pub value: String,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
}

/// A maintenance window's rule, as a policy stores it (`policies.window`) and a proposal and a
/// host job copy it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WindowSpec {
    /// RFC 5545 `RRULE` text, optionally with a `DTSTART` line (see `domain::window`).
    pub rrule: String,
    /// How long each occurrence stays open, `1..=10080`.
    pub duration_minutes: u32,
    /// IANA time zone the rule is read in, e.g. `Europe/Berlin`.
    pub time_zone: String,
}

/// The maintenance window a proposal copied from its policy (`proposals.window`): the rule,
/// and the instant it counts from when it has no DTSTART (the policy's creation).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProposalWindow {
    #[serde(flatten)]
    pub rule: WindowSpec,
    pub created: DateTime<Utc>,
}

/// A release, as far as it is known.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Release {
    #[serde(default)]
    pub codename: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
}

/// The release upgrade a host's agent says is offered (`hosts.release_upgrade`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OfferedUpgrade {
    pub to: Release,
}

/// The release upgrade a proposal carries out (`proposals.release_upgrade`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReleaseUpgrade {
    pub distro: String,
    pub from: Release,
    pub to: Release,
}

/// What an agent is asked to do for one proposal (`host_jobs.payload`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobPayload {
    pub proposal_id: String,
    pub proposal_number: i64,
    pub kind: String,
    /// never, immediate or in_window; the agent reboots only if its own configuration permits.
    pub reboot: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<JobChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_upgrade: Option<ReleaseUpgrade>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSpec>,
    /// The reboot this job was allowed before the organization's reboot budget held it back
    /// (`reboot` then says `never`): a separate `reboot` job follows its success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_reboot: Option<String>,
}

/// What sign-up asked for, kept with its token until verified (`email_tokens.payload`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SignUpPayload {
    pub name: String,
    pub organization_name: String,
    pub organization_slug: String,
}

/// A role single sign-on or SCIM may give (interface.md, Authentication 3): never owner, so a
/// stored mapping cannot name one.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum SsoRole {
    // Declared least powerful first: `Ord` is the order of power.
    Viewer,
    Operator,
    Admin,
}

impl SsoRole {
    pub const ALL: [SsoRole; 3] = [SsoRole::Admin, SsoRole::Operator, SsoRole::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            SsoRole::Admin => "admin",
            SsoRole::Operator => "operator",
            SsoRole::Viewer => "viewer",
        }
    }

    /// admin, operator or viewer; anything else (owner included) is none.
    pub fn parse(s: &str) -> Option<SsoRole> {
        SsoRole::ALL.into_iter().find(|role| role.as_str() == s)
    }
}

impl fmt::Display for SsoRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of an SSO connection's `role_mappings` (`sso_connections.role_mappings`): a value
/// of the groups claim, matched exactly, and the role it gives.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RoleMapping {
    pub group: String,
    pub role: SsoRole,
}

/// One package a job moves.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobChange {
    pub package: String,
    pub ecosystem: String,
    pub from_version: String,
    pub to_version: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_is_kept_verbatim_and_read_on_demand() {
        let stored = r#"{ "b":"2",  "a":"1" }"#;
        let json: JsonText<Labels> = JsonText::from_stored(stored);
        assert_eq!(json.as_str(), stored, "written back byte for byte");
        assert_eq!(
            Value::from(json.clone()),
            Value::String(Some(stored.into()))
        );
        let labels = json.read().expect("readable");
        assert_eq!(labels.get("a").map(String::as_str), Some("1"));
        let written = JsonText::new(&labels).expect("writable");
        assert_eq!(written.as_str(), r#"{"a":"1","b":"2"}"#);
    }

    #[test]
    fn unreadable_text_is_an_error_that_names_the_type_and_not_the_data() {
        let not_json: JsonText<Labels> = JsonText::from_stored("{secret");
        let err = not_json.read().expect_err("not JSON");
        assert_eq!(
            err.to_string(),
            "stored JSON cannot be read as BTreeMap<String, String>: not JSON at line 1, column 2"
        );
        let wrong: JsonText<Vec<String>> = JsonText::from_stored(r#"{"password":"hunter2"}"#);
        let err = wrong.read().expect_err("not a list").to_string();
        assert!(err.contains("Vec<String>: JSON of another shape"), "{err}");
        assert!(
            !err.contains("hunter2") && !err.contains("password"),
            "{err}"
        );
        let cut: JsonText<Vec<i32>> = JsonText::from_stored("[1, 2");
        assert!(
            cut.read()
                .is_err_and(|e| e.to_string().contains("cut short"))
        );
        assert!(matches!(DbErr::from(err_of(&cut)), DbErr::Json(_)));
    }

    fn err_of(json: &JsonText<Vec<i32>>) -> Unreadable {
        json.read().expect_err("unreadable")
    }

    #[test]
    fn a_proposal_window_reads_and_writes_the_shape_proposals_always_stored() {
        let stored = r#"{"rrule":"FREQ=DAILY","duration_minutes":60,"time_zone":"UTC","created":"2026-11-02T09:00:00Z"}"#;
        let window = JsonText::<ProposalWindow>::from_stored(stored)
            .read()
            .expect("readable");
        assert_eq!(window.rule.duration_minutes, 60);
        assert_eq!(JsonText::new(&window).expect("writable").as_str(), stored);
    }

    #[test]
    fn role_mappings_store_lowercase_roles_and_refuse_owner() {
        let stored = r#"[{"group":"ops","role":"operator"},{"group":"it","role":"admin"}]"#;
        let list = JsonText::<Vec<RoleMapping>>::from_stored(stored)
            .read()
            .expect("readable");
        assert_eq!(list[0].role, SsoRole::Operator);
        assert_eq!(JsonText::new(&list).expect("writable").as_str(), stored);
        let owner = JsonText::<Vec<RoleMapping>>::from_stored(r#"[{"group":"x","role":"owner"}]"#);
        assert!(owner.read().is_err());
        assert_eq!(SsoRole::parse("owner"), None);
        assert_eq!(SsoRole::parse("viewer"), Some(SsoRole::Viewer));
        assert!(SsoRole::Admin > SsoRole::Operator && SsoRole::Operator > SsoRole::Viewer);
    }

    #[test]
    fn advisories_read_with_or_without_the_fields_left_out() {
        let stored = r#"[{"external_id":"1","source":"usn","severity":null,"cves":[]},{"external_id":"2","source":"usn"}]"#;
        let list = JsonText::<Vec<Advisory>>::from_stored(stored)
            .read()
            .expect("readable");
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].severity, None);
        assert_eq!(
            JsonText::new(&list).expect("writable").as_str(),
            r#"[{"external_id":"1","source":"usn","cves":[]},{"external_id":"2","source":"usn","cves":[]}]"#
        );
    }
}

/// One entry of a cached Debian changelog (decisions §16).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangelogEntry {
    pub version: String,
    /// RFC 3339, from the entry's trailer; absent when the trailer is missing or unreadable.
    #[serde(default)]
    pub date: Option<String>,
    /// `Name <email>` from the trailer.
    #[serde(default)]
    pub author: Option<String>,
    #[serde(default)]
    pub urgency: Option<String>,
    /// The distributions the entry's header names (`noble-security`, `unstable`), space-separated.
    #[serde(default)]
    pub distribution: Option<String>,
    pub text: String,
    #[serde(default)]
    pub cves: Vec<String>,
}

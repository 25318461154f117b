//! SCIM Users (RFC 7644 §3.3–§3.6): list (`filter=userName eq "…"` only, `startIndex`,
//! `count`), create (just-in-time account and membership), get, replace, PATCH (RFC 7644
//! §3.5.2, with the forms Okta and Microsoft Entra send), delete. A user's `id` is the
//! member's account id (`usr_`). `userName` is unique in the organization without regard to
//! case; the account's email address is the primary email (else `userName`) when the user is
//! created, and is not changed later (an account is the person's across organizations).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use entities::json::{JsonText, ScimEmail};
use entities::{scim_group_members, scim_groups, scim_users};
use platform::ids::{AccountId, ScimGroupId};
use scim_v2::filter::{AttrExp, CompValue, CompareOp, Filter, PatchPath, ValFilter};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, DatabaseTransaction, EntityTrait,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, Select, Set,
};
use uuid::Uuid;

use super::{
    provision::{self, RoleRules},
    resources::{
        Email, LIST_SCHEMA, Meta, Name, PatchOperation, Reference, USER_SCHEMA, User, UserInput,
        UserList, lenient_bool,
    },
    wire::ScimError,
};
use crate::{AppState, http::input};
use entities::scope::{OrgScope, Tenant};

/// Longest `userName`, `externalId`, `displayName` or name part accepted.
const MAX_TEXT: usize = 255;
/// Default and largest page (`count`).
pub const DEFAULT_COUNT: u64 = 100;
pub const MAX_COUNT: u64 = 500;

/// The paging of a list request (RFC 7644 §3.4.2.4): `startIndex` is 1-based (below 1 reads
/// as 1), `count` at most [`MAX_COUNT`] (negative reads as 0).
#[derive(Clone, Copy, Debug)]
pub struct Paging {
    pub start_index: u64,
    pub count: u64,
}

impl Paging {
    pub fn new(start_index: Option<i64>, count: Option<i64>) -> Self {
        Paging {
            start_index: start_index.unwrap_or(1).max(1).unsigned_abs(),
            count: count
                .map_or(DEFAULT_COUNT, |c| c.max(0).unsigned_abs())
                .min(MAX_COUNT),
        }
    }

    pub fn offset(&self) -> u64 {
        self.start_index - 1
    }

    /// How many rows `query` finds, and this page of them in the order of `order` (the second
    /// column breaks ties); none are read for a page of `count` 0.
    pub async fn fetch<E: EntityTrait>(
        &self,
        db: &DatabaseConnection,
        query: Select<E>,
        order: [E::Column; 2],
    ) -> Result<(u64, Vec<E::Model>), ScimError>
    where
        E::Model: Send + Sync,
    {
        let total = query.clone().count(db).await?;
        if self.count == 0 {
            return Ok((total, Vec::new()));
        }
        let [first, then] = order;
        let rows = query
            .order_by_asc(first)
            .order_by_asc(then)
            .offset(self.offset())
            .limit(self.count)
            .all(db)
            .await?;
        Ok((total, rows))
    }
}

/// The value of `filter=<attribute> eq "…"`, the one filter form a list supports (RFC 7644
/// §3.4.2.2); the attribute's name may carry the resource's `schema` URI.
pub fn eq_filter(raw: &str, attribute: &str, schema: &str) -> Result<String, ScimError> {
    let filter: Filter = raw
        .parse()
        .map_err(|e| ScimError::filter(format!("The filter cannot be read: {e}")))?;
    match filter {
        Filter::Attr(AttrExp::Comparison(path, CompareOp::Eq, CompValue::Str(value)))
            if path.name.eq_ignore_ascii_case(attribute)
                && path.sub_attr.is_none()
                && path
                    .uri
                    .as_deref()
                    .is_none_or(|uri| uri.eq_ignore_ascii_case(schema)) =>
        {
            Ok(value)
        }
        _ => Err(ScimError::filter(format!(
            "Only filter={attribute} eq \"…\" is supported here."
        ))),
    }
}

pub fn text(field: &str, value: &str) -> Result<String, ScimError> {
    let value = value.trim();
    if value.is_empty() || value.chars().count() > MAX_TEXT || value.chars().any(char::is_control) {
        return Err(ScimError::value(format!(
            "{field} must be 1 to {MAX_TEXT} printable characters"
        )));
    }
    Ok(value.to_owned())
}

fn optional_text(field: &str, value: Option<&str>) -> Result<Option<String>, ScimError> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => text(field, v).map(Some),
    }
}

pub fn user_location(state: &AppState, id: Uuid) -> String {
    format!(
        "{}/Users/{}",
        crate::scim::token::base_url(state),
        AccountId::from(id)
    )
}

/// The user's editable attributes, as a PATCH or a replace builds them.
#[derive(Clone, Debug)]
struct Draft {
    user_name: String,
    external_id: Option<String>,
    display_name: Option<String>,
    given_name: Option<String>,
    family_name: Option<String>,
    emails: Vec<Email>,
    active: bool,
}

/// The stored emails; none when there are none, and none (with a warning) when they cannot be
/// read: the provider sends them again with its next update of the user.
fn read_emails(stored: Option<&JsonText<Vec<ScimEmail>>>) -> Vec<Email> {
    match stored.map(JsonText::read) {
        None => Vec::new(),
        Some(Ok(list)) => list.into_iter().map(Email::from).collect(),
        Some(Err(err)) => {
            tracing::warn!(error = %err, "a SCIM user's stored emails cannot be read: shown as none");
            Vec::new()
        }
    }
}

fn emails_of(value: &serde_json::Value) -> Result<Vec<Email>, ScimError> {
    let items = match value {
        serde_json::Value::Null => return Ok(Vec::new()),
        serde_json::Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    };
    let emails: Vec<Email> = items
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<_, _>>()
        .map_err(|e| ScimError::value(format!("emails: {e}")))?;
    checked_emails(emails)
}

fn checked_emails(emails: Vec<Email>) -> Result<Vec<Email>, ScimError> {
    if emails.len() > 20 {
        return Err(ScimError::value("At most 20 emails."));
    }
    for email in &emails {
        text("emails.value", &email.value)?;
        if let Some(kind) = &email.kind {
            text("emails.type", kind)?;
        }
    }
    Ok(emails)
}

impl Draft {
    fn of(row: &scim_users::Model) -> Self {
        Draft {
            user_name: row.user_name.clone(),
            external_id: row.external_id.clone(),
            display_name: row.display_name.clone(),
            given_name: row.given_name.clone(),
            family_name: row.family_name.clone(),
            emails: read_emails(row.emails.as_ref()),
            active: row.active,
        }
    }

    fn from_input(input: &UserInput) -> Result<Self, ScimError> {
        let name = input.name.clone().unwrap_or_default();
        Ok(Draft {
            user_name: text("userName", &input.user_name)?,
            external_id: optional_text("externalId", input.external_id.as_deref())?,
            display_name: optional_text("displayName", input.display_name.as_deref())?,
            given_name: optional_text("name.givenName", name.given_name.as_deref())?,
            family_name: optional_text("name.familyName", name.family_name.as_deref())?,
            emails: checked_emails(input.emails.clone().unwrap_or_default())?,
            active: input.active.unwrap_or(true),
        })
    }

    fn string(field: &str, value: &serde_json::Value) -> Result<Option<String>, ScimError> {
        match value {
            serde_json::Value::Null => Ok(None),
            serde_json::Value::String(s) => optional_text(field, Some(s)),
            _ => Err(ScimError::value(format!("{field} must be a string"))),
        }
    }

    /// Sets (add, replace) or clears (remove: `value` None) attribute `name` (with
    /// `sub_attr`), compared without regard to case. Attributes this service does not keep
    /// (extensions, phone numbers, titles, further emails) are accepted and ignored.
    fn set(
        &mut self,
        name: &str,
        sub_attr: Option<&str>,
        value: Option<&serde_json::Value>,
        add: bool,
    ) -> Result<(), ScimError> {
        let name = name.to_ascii_lowercase();
        let sub = sub_attr.map(str::to_ascii_lowercase);
        let null = serde_json::Value::Null;
        let given = value.unwrap_or(&null);
        match (name.as_str(), sub.as_deref()) {
            ("active", None) => match value {
                Some(v) => {
                    self.active = lenient_bool(v)
                        .ok_or_else(|| ScimError::value("active must be true or false"))?;
                }
                None => self.active = false,
            },
            ("username", None) => match value {
                Some(serde_json::Value::String(s)) => self.user_name = text("userName", s)?,
                _ => {
                    return Err(ScimError::new(
                        poem::http::StatusCode::BAD_REQUEST,
                        Some("mutability"),
                        "userName is required and must be a string",
                    ));
                }
            },
            ("externalid", None) => self.external_id = Self::string("externalId", given)?,
            ("displayname", None) => self.display_name = Self::string("displayName", given)?,
            ("name", Some("givenname")) => {
                self.given_name = Self::string("name.givenName", given)?;
            }
            ("name", Some("familyname")) => {
                self.family_name = Self::string("name.familyName", given)?;
            }
            ("name", Some(_)) => {}
            ("emails", None) => match value {
                Some(v) => {
                    let given = emails_of(v)?;
                    if add {
                        self.emails.extend(given);
                    } else {
                        self.emails = given;
                    }
                }
                None => self.emails.clear(),
            },
            ("name", None) => match given {
                serde_json::Value::Object(parts) => {
                    for (key, part) in parts {
                        self.set("name", Some(key), Some(part), add)?;
                    }
                }
                serde_json::Value::Null => {
                    self.given_name = None;
                    self.family_name = None;
                }
                _ => return Err(ScimError::value("name must be an object")),
            },
            _ => {}
        }
        Ok(())
    }

    /// A key of a path-less value object: an attribute, a dotted `name.givenName`, or one
    /// qualified by the User schema's URN; other schemas' attributes are ignored.
    fn set_key(
        &mut self,
        key: &str,
        value: &serde_json::Value,
        add: bool,
    ) -> Result<(), ScimError> {
        let key = match key.get(..USER_SCHEMA.len()) {
            Some(prefix) if prefix.eq_ignore_ascii_case(USER_SCHEMA) => {
                key[USER_SCHEMA.len()..].trim_start_matches(':')
            }
            _ if key.contains(':') => return Ok(()),
            _ => key,
        };
        if key.is_empty() {
            // The schema's URN with an object of its attributes.
            if let serde_json::Value::Object(inner) = value {
                for (k, v) in inner {
                    self.set_key(k, v, add)?;
                }
            }
            return Ok(());
        }
        match key.split_once('.') {
            Some((name, sub)) => self.set(name, Some(sub), Some(value), add),
            None => self.set(key, None, Some(value), add),
        }
    }

    /// Changes the emails a `emails[type eq "…"]` (or `value eq`, `primary eq`) selects.
    fn set_selected_email(
        &mut self,
        filter: &ValFilter,
        sub_attr: Option<&str>,
        value: Option<&serde_json::Value>,
    ) -> Result<(), ScimError> {
        let ValFilter::Attr(AttrExp::Comparison(path, CompareOp::Eq, wanted)) = filter else {
            return Err(ScimError::path(
                "Only emails[<attr> eq \"…\"] selects emails.",
            ));
        };
        let selects = |email: &Email| match (path.name.to_ascii_lowercase().as_str(), wanted) {
            ("type", CompValue::Str(v)) => email
                .kind
                .as_deref()
                .is_some_and(|k| k.eq_ignore_ascii_case(v)),
            ("value", CompValue::Str(v)) => email.value.eq_ignore_ascii_case(v),
            ("primary", CompValue::True) => email.primary == Some(true),
            ("primary", CompValue::False) => email.primary != Some(true),
            _ => false,
        };
        let Some(value) = value else {
            self.emails.retain(|e| !selects(e));
            return Ok(());
        };
        match sub_attr.map(str::to_ascii_lowercase).as_deref() {
            Some("value") => {
                let serde_json::Value::String(address) = value else {
                    return Err(ScimError::value("emails.value must be a string"));
                };
                let address = text("emails.value", address)?;
                if let Some(email) = self.emails.iter_mut().find(|e| selects(e)) {
                    email.value = address;
                } else {
                    let kind = match (path.name.eq_ignore_ascii_case("type"), wanted) {
                        (true, CompValue::Str(v)) => Some(v.clone()),
                        _ => None,
                    };
                    self.emails.push(Email {
                        value: address,
                        kind,
                        primary: None,
                    });
                }
                Ok(())
            }
            Some("primary") => {
                let primary = lenient_bool(value)
                    .ok_or_else(|| ScimError::value("emails.primary must be true or false"))?;
                for email in self.emails.iter_mut().filter(|e| selects(e)) {
                    email.primary = Some(primary);
                }
                Ok(())
            }
            Some("type") => {
                let kind = Self::string("emails.type", value)?;
                for email in self.emails.iter_mut().filter(|e| selects(e)) {
                    email.kind = kind.clone();
                }
                Ok(())
            }
            Some(_) => Err(ScimError::path("Not an attribute of an email.")),
            None => {
                let replacement = emails_of(value)?;
                self.emails.retain(|e| !selects(e));
                self.emails.extend(replacement);
                Ok(())
            }
        }
    }

    fn apply(&mut self, op: &PatchOperation) -> Result<(), ScimError> {
        let kind = op.op.to_ascii_lowercase();
        if !matches!(kind.as_str(), "add" | "replace" | "remove") {
            return Err(ScimError::value(format!(
                "op must be add, remove or replace, not {:?}",
                op.op
            )));
        }
        let Some(path) = op.path.as_deref().map(str::trim).filter(|p| !p.is_empty()) else {
            if kind == "remove" {
                return Err(ScimError::new(
                    poem::http::StatusCode::BAD_REQUEST,
                    Some("noTarget"),
                    "remove needs a path",
                ));
            }
            return match &op.value {
                Some(serde_json::Value::Object(values)) => {
                    for (key, value) in values {
                        self.set_key(key, value, kind == "add")?;
                    }
                    Ok(())
                }
                _ => Err(ScimError::value(
                    "Without a path, value must be an object of attributes",
                )),
            };
        };
        let parsed: PatchPath = path
            .parse()
            .map_err(|e| ScimError::path(format!("The path cannot be read: {e}")))?;
        let value = if kind == "remove" {
            None
        } else {
            Some(
                op.value
                    .as_ref()
                    .ok_or_else(|| ScimError::value(format!("{kind} needs a value")))?,
            )
        };
        match parsed {
            PatchPath::Attr(attr) => {
                if attr
                    .uri
                    .as_deref()
                    .is_some_and(|uri| !uri.eq_ignore_ascii_case(USER_SCHEMA))
                {
                    return Ok(());
                }
                self.set(&attr.name, attr.sub_attr.as_deref(), value, kind == "add")
            }
            // `emails[type eq "work"].value` (Entra), `emails[type eq "work"]`.
            PatchPath::Value(selected) if selected.attr.name.eq_ignore_ascii_case("emails") => {
                self.set_selected_email(&selected.filter, selected.sub_attr.as_deref(), value)
            }
            // Other multi-valued attributes (phone numbers, addresses): not kept.
            PatchPath::Value(_) => Ok(()),
        }
    }
}

/// Looks the user `id` up in the organization; `None` for an unknown id, a malformed one, or
/// another organization's.
pub async fn find<C: sea_orm::ConnectionTrait>(
    db: &C,
    scope: OrgScope,
    id: &str,
) -> Result<Option<scim_users::Model>, ScimError> {
    let Some(account_id) = AccountId::parse(id) else {
        return Ok(None);
    };
    Ok(scope
        .rows::<scim_users::Entity>()
        .filter(scim_users::Column::AccountId.eq(account_id))
        .one(db)
        .await?)
}

/// The SCIM resources of `rows` with their groups, in three queries.
pub async fn resources<C: sea_orm::ConnectionTrait>(
    state: &AppState,
    db: &C,
    scope: OrgScope,
    rows: Vec<scim_users::Model>,
) -> Result<Vec<User>, ScimError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = rows.iter().map(|r| r.account_id).collect();
    let places = scope
        .rows::<scim_group_members::Entity>()
        .filter(scim_group_members::Column::AccountId.is_in(ids))
        .all(db)
        .await?;
    let group_ids: BTreeSet<Uuid> = places.iter().map(|p| p.group_id).collect();
    let names: HashMap<Uuid, String> = if group_ids.is_empty() {
        HashMap::new()
    } else {
        scope
            .rows::<scim_groups::Entity>()
            .filter(scim_groups::Column::Id.is_in(group_ids))
            .all(db)
            .await?
            .into_iter()
            .map(|g| (g.id, g.display_name))
            .collect()
    };
    let base = crate::scim::token::base_url(state);
    Ok(rows
        .into_iter()
        .map(|row| {
            let groups = places
                .iter()
                .filter(|p| p.account_id == row.account_id)
                .map(|p| Reference {
                    value: ScimGroupId::from(p.group_id).to_string(),
                    display: names.get(&p.group_id).cloned(),
                    reference: Some(format!("{base}/Groups/{}", ScimGroupId::from(p.group_id))),
                })
                .collect();
            resource(state, row, groups)
        })
        .collect())
}

fn resource(state: &AppState, row: scim_users::Model, groups: Vec<Reference>) -> User {
    let stored_emails = read_emails(row.emails.as_ref());
    let name = (row.given_name.is_some() || row.family_name.is_some()).then(|| Name {
        given_name: row.given_name.clone(),
        family_name: row.family_name.clone(),
        formatted: None,
    });
    User {
        schemas: vec![USER_SCHEMA.to_owned()],
        id: AccountId::from(row.account_id).to_string(),
        external_id: row.external_id,
        user_name: row.user_name,
        name,
        display_name: row.display_name,
        emails: stored_emails,
        active: row.active,
        groups,
        meta: Meta {
            resource_type: "User".to_owned(),
            created: row.created_at,
            last_modified: row.updated_at,
            location: user_location(state, row.account_id),
        },
    }
}

pub async fn one(
    state: &AppState,
    db: &impl sea_orm::ConnectionTrait,
    scope: OrgScope,
    row: scim_users::Model,
) -> Result<User, ScimError> {
    resources(state, db, scope, vec![row])
        .await?
        .pop()
        .ok_or_else(|| ScimError::internal(anyhow::anyhow!("a user resource went missing")))
}

/// `GET /Users`.
pub async fn list(
    state: &AppState,
    scope: OrgScope,
    filter: Option<&str>,
    paging: Paging,
) -> Result<UserList, ScimError> {
    let mut query = scope.rows::<scim_users::Entity>();
    if let Some(raw) = filter.map(str::trim).filter(|f| !f.is_empty()) {
        let user_name = eq_filter(raw, "userName", USER_SCHEMA)?;
        query = query.filter(scim_users::Column::UserNameKey.eq(user_name.to_lowercase()));
    }
    let db = &state.db.orm;
    let (total, rows) = paging
        .fetch(
            db,
            query,
            [scim_users::Column::CreatedAt, scim_users::Column::AccountId],
        )
        .await?;
    let resources = resources(state, db, scope, rows).await?;
    Ok(UserList {
        schemas: vec![LIST_SCHEMA.to_owned()],
        total_results: total,
        start_index: paging.start_index,
        items_per_page: resources.len() as u64,
        resources,
    })
}

/// Whether another of the organization's `E` rows holds `key` in `key_column` (a user's
/// `userName` and a group's `displayName` are unique per organization, case-insensitively);
/// `except` is the row being changed, by its id column.
pub async fn key_taken<E: Tenant>(
    txn: &DatabaseTransaction,
    scope: OrgScope,
    key_column: E::Column,
    key: &str,
    except: Option<(E::Column, Uuid)>,
) -> Result<bool, ScimError>
where
    E::Model: Sync,
{
    let mut query = scope.rows::<E>().filter(key_column.eq(key));
    if let Some((column, id)) = except {
        query = query.filter(column.ne(id));
    }
    Ok(query.count(txn).await? > 0)
}

fn stored_emails(emails: &[Email]) -> Result<Option<JsonText<Vec<ScimEmail>>>, ScimError> {
    if emails.is_empty() {
        return Ok(None);
    }
    let list: Vec<ScimEmail> = emails.iter().cloned().map(ScimEmail::from).collect();
    JsonText::new(&list)
        .map(Some)
        .map_err(|e| ScimError::internal(anyhow::anyhow!("store emails: {e}")))
}

fn unique_violation(err: &sea_orm::DbErr) -> bool {
    matches!(
        err.sql_err(),
        Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
    )
}

/// The address the account is created with: the primary email, else the first, else
/// `userName`. A user with no email address at all (some providers send only a `userName`) gets
/// an account keyed by the lowercased `userName`: provisioned, but unable to sign in by email.
fn address(input: &UserInput) -> Result<String, ScimError> {
    let emails = input.emails.as_deref().unwrap_or_default();
    let chosen = emails
        .iter()
        .find(|e| e.primary == Some(true))
        .or_else(|| emails.first())
        .map_or(input.user_name.as_str(), |e| e.value.as_str());
    match input::Email::parse("email", chosen) {
        Ok(email) => Ok(email.into_string()),
        Err(_) => Ok(text("userName", &input.user_name)?.to_lowercase()),
    }
}

/// `POST /Users`: the account (found by address, or created) and its SCIM user; a membership
/// when the user's groups or the default role give one.
pub async fn create(
    state: &AppState,
    scope: OrgScope,
    input: UserInput,
) -> Result<User, ScimError> {
    let draft = Draft::from_input(&input)?;
    let email = address(&input)?;
    let now = state.clock.now();
    let txn = provision::begin(state, scope).await?;
    let key = draft.user_name.to_lowercase();
    if key_taken::<scim_users::Entity>(&txn, scope, scim_users::Column::UserNameKey, &key, None)
        .await?
    {
        return Err(ScimError::uniqueness("A user with that userName exists."));
    }
    let name =
        draft
            .display_name
            .clone()
            .or_else(|| match (&draft.given_name, &draft.family_name) {
                (Some(g), Some(f)) => Some(format!("{g} {f}")),
                (Some(one), None) | (None, Some(one)) => Some(one.clone()),
                (None, None) => None,
            });
    let (account, _) = domain::accounts::for_address(&txn, &email, name, now).await?;
    if find(&txn, scope, &AccountId::from(account.id).to_string())
        .await?
        .is_some()
    {
        return Err(ScimError::uniqueness(
            "A user with that email address is provisioned already.",
        ));
    }
    let row = scim_users::ActiveModel {
        org_id: Set(scope.org_id().uuid()),
        account_id: Set(account.id),
        user_name: Set(draft.user_name.clone()),
        user_name_key: Set(key),
        external_id: Set(draft.external_id),
        display_name: Set(draft.display_name),
        given_name: Set(draft.given_name),
        family_name: Set(draft.family_name),
        emails: Set(stored_emails(&draft.emails)?),
        active: Set(draft.active),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await
    .map_err(|err| {
        if unique_violation(&err) {
            ScimError::uniqueness("A user with that userName exists.")
        } else {
            err.into()
        }
    })?;
    let rules = provision::role_rules(&txn, scope).await?;
    provision::sync_new_member(&txn, scope, &rules, account.id, now).await?;
    let user = resource(state, row, Vec::new());
    txn.commit().await?;
    rules.send_invitations(state).await?;
    Ok(user)
}

async fn store(
    state: &AppState,
    txn: DatabaseTransaction,
    scope: OrgScope,
    row: scim_users::Model,
    draft: Draft,
    now: DateTime<Utc>,
) -> Result<User, ScimError> {
    let key = draft.user_name.to_lowercase();
    if key != row.user_name_key
        && key_taken::<scim_users::Entity>(
            &txn,
            scope,
            scim_users::Column::UserNameKey,
            &key,
            Some((scim_users::Column::AccountId, row.account_id)),
        )
        .await?
    {
        return Err(ScimError::uniqueness("A user with that userName exists."));
    }
    let account_id = row.account_id;
    let mut changed: scim_users::ActiveModel = row.into();
    changed.user_name = Set(draft.user_name);
    changed.user_name_key = Set(key);
    changed.external_id = Set(draft.external_id);
    changed.display_name = Set(draft.display_name);
    changed.given_name = Set(draft.given_name);
    changed.family_name = Set(draft.family_name);
    changed.emails = Set(stored_emails(&draft.emails)?);
    changed.active = Set(draft.active);
    changed.updated_at = Set(now);
    let row = changed.update(&txn).await.map_err(|err| {
        if unique_violation(&err) {
            ScimError::uniqueness("A user with that userName exists.")
        } else {
            err.into()
        }
    })?;
    let rules: RoleRules = provision::role_rules(&txn, scope).await?;
    provision::sync_member(&txn, scope, &rules, account_id, now).await?;
    let user = one(state, &txn, scope, row).await?;
    txn.commit().await?;
    rules.send_invitations(state).await?;
    Ok(user)
}

/// `PUT /Users/{id}`.
pub async fn replace(
    state: &AppState,
    scope: OrgScope,
    id: &str,
    input: UserInput,
) -> Result<User, ScimError> {
    let draft = Draft::from_input(&input)?;
    let now = state.clock.now();
    let txn = provision::begin(state, scope).await?;
    let row = find(&txn, scope, id)
        .await?
        .ok_or_else(|| ScimError::not_found("user"))?;
    store(state, txn, scope, row, draft, now).await
}

/// `PATCH /Users/{id}`: every operation applies, or none does.
pub async fn patch(
    state: &AppState,
    scope: OrgScope,
    id: &str,
    operations: &[PatchOperation],
) -> Result<User, ScimError> {
    let now = state.clock.now();
    let txn = provision::begin(state, scope).await?;
    let row = find(&txn, scope, id)
        .await?
        .ok_or_else(|| ScimError::not_found("user"))?;
    let mut draft = Draft::of(&row);
    for op in operations {
        draft.apply(op)?;
    }
    store(state, txn, scope, row, draft, now).await
}

/// `DELETE /Users/{id}`: the SCIM user, its group places and its membership go; the account
/// stays (it may belong to other organizations).
pub async fn delete(state: &AppState, scope: OrgScope, id: &str) -> Result<(), ScimError> {
    let now = state.clock.now();
    let txn = provision::begin(state, scope).await?;
    let row = find(&txn, scope, id)
        .await?
        .ok_or_else(|| ScimError::not_found("user"))?;
    scope
        .delete_rows::<scim_group_members::Entity>()
        .filter(scim_group_members::Column::AccountId.eq(row.account_id))
        .exec(&txn)
        .await?;
    scope
        .delete_rows::<scim_users::Entity>()
        .filter(scim_users::Column::AccountId.eq(row.account_id))
        .exec(&txn)
        .await?;
    let rules = provision::role_rules(&txn, scope).await?;
    provision::sync_member(&txn, scope, &rules, row.account_id, now).await?;
    txn.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_user_name_eq_is_a_filter() {
        assert_eq!(
            eq_filter(r#"userName eq "Ann@Acme.test""#, "userName", USER_SCHEMA).ok(),
            Some("Ann@Acme.test".to_owned())
        );
        assert_eq!(
            eq_filter(r#"username EQ "a""#, "userName", USER_SCHEMA).ok(),
            Some("a".to_owned())
        );
        for bad in [
            r#"userName co "a""#,
            r#"emails.value eq "a""#,
            r#"userName eq "a" or userName eq "b""#,
            "userName eq",
            r#"displayName eq "a""#,
        ] {
            let err = eq_filter(bad, "userName", USER_SCHEMA).expect_err(bad);
            assert_eq!(err.scim_type, Some("invalidFilter"), "{bad}");
        }
    }

    #[test]
    fn paging_reads_out_of_range_values_as_the_nearest_allowed() {
        let p = Paging::new(Some(0), Some(-3));
        assert_eq!((p.start_index, p.count), (1, 0));
        let p = Paging::new(None, Some(10_000));
        assert_eq!((p.start_index, p.count), (1, MAX_COUNT));
        assert_eq!(Paging::new(Some(11), None).offset(), 10);
    }

    fn op(json: serde_json::Value) -> PatchOperation {
        serde_json::from_value(json).expect("an operation")
    }

    fn draft() -> Draft {
        Draft {
            user_name: "ann@acme.test".into(),
            external_id: None,
            display_name: None,
            given_name: None,
            family_name: None,
            emails: Vec::new(),
            active: true,
        }
    }

    #[test]
    fn okta_and_entra_deactivations_both_apply() {
        let mut d = draft();
        d.apply(&op(
            serde_json::json!({"op": "replace", "value": {"active": false}}),
        ))
        .expect("okta");
        assert!(!d.active);
        let mut d = draft();
        d.apply(&op(
            serde_json::json!({"op": "Replace", "path": "active", "value": "False"}),
        ))
        .expect("entra");
        assert!(!d.active);
        d.apply(&op(
            serde_json::json!({"op": "Replace", "path": "active", "value": "True"}),
        ))
        .expect("entra");
        assert!(d.active);
        let err = d
            .apply(&op(
                serde_json::json!({"op": "replace", "path": "active", "value": "maybe"}),
            ))
            .expect_err("not a boolean");
        assert_eq!(err.scim_type, Some("invalidValue"));
    }

    #[test]
    fn names_and_extensions_patch_as_providers_send_them() {
        let mut d = draft();
        d.apply(&op(
            serde_json::json!({"op": "Add", "path": "name.givenName", "value": "Ann"}),
        ))
        .expect("given");
        d.apply(&op(serde_json::json!({
            "op": "replace",
            "value": {"name.familyName": "Lee", "displayName": "Ann Lee",
                      "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department": "Ops"}
        })))
        .expect("path-less");
        d.apply(&op(serde_json::json!({
            "op": "Replace", "path": "emails[type eq \"work\"].value", "value": "x@acme.test"
        })))
        .expect("emails are accepted");
        assert_eq!(d.given_name.as_deref(), Some("Ann"));
        assert_eq!(d.family_name.as_deref(), Some("Lee"));
        assert_eq!(d.display_name.as_deref(), Some("Ann Lee"));
        let err = d
            .apply(&op(
                serde_json::json!({"op": "replace", "path": "name[", "value": "x"}),
            ))
            .expect_err("a broken path");
        assert_eq!(err.scim_type, Some("invalidPath"));
        let err = d
            .apply(&op(serde_json::json!({"op": "remove"})))
            .expect_err("remove without path");
        assert_eq!(err.scim_type, Some("noTarget"));
    }
}

//! The SCIM resources as this service reads and writes them (RFC 7643): User and Group bodies,
//! list responses and PATCH requests. Each type derives `Object` for the OpenAPI document and
//! serde for the wire; both name fields the same (camelCase). Input is lenient where providers
//! differ: unknown attributes (extensions, `password`) are ignored, and `active` may arrive as
//! `true` or as the string `"True"` (Microsoft Entra).

use poem_openapi::Object;
use serde::{Deserialize, Deserializer, Serialize};

pub const USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
pub const GROUP_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";
pub const LIST_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:ListResponse";
pub const PATCH_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";

/// A boolean as providers send it: `true`/`false`, or the strings `"true"`/`"false"` in any
/// case.
pub fn lenient_bool(value: &serde_json::Value) -> Option<bool> {
    match value {
        serde_json::Value::Bool(b) => Some(*b),
        serde_json::Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
        serde_json::Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

fn de_lenient_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => lenient_bool(&v)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom("active must be true or false")),
    }
}

/// `meta` of a resource (RFC 7643 §3.1).
#[derive(Object, Serialize, Debug, Clone)]
#[oai(rename = "ScimMeta", rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// `User` or `Group`.
    pub resource_type: String,
    pub created: chrono::DateTime<chrono::Utc>,
    pub last_modified: chrono::DateTime<chrono::Utc>,
    /// The resource's URI.
    pub location: String,
}

/// `name` of a user.
#[derive(Object, Serialize, Deserialize, Debug, Clone, Default)]
#[oai(rename = "ScimName", rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct Name {
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given_name: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family_name: Option<String>,
    /// Accepted and not kept (read only).
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formatted: Option<String>,
}

/// One of a user's email addresses.
#[derive(Object, Serialize, Deserialize, Debug, Clone)]
#[oai(rename = "ScimEmail")]
pub struct Email {
    pub value: String,
    #[oai(rename = "type", skip_serializing_if_is_none)]
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    #[serde(
        default,
        deserialize_with = "de_lenient_bool",
        skip_serializing_if = "Option::is_none"
    )]
    pub primary: Option<bool>,
}

impl From<entities::json::ScimEmail> for Email {
    fn from(stored: entities::json::ScimEmail) -> Self {
        Email {
            value: stored.value,
            kind: stored.kind,
            primary: stored.primary,
        }
    }
}

impl From<Email> for entities::json::ScimEmail {
    fn from(email: Email) -> Self {
        entities::json::ScimEmail {
            value: email.value,
            kind: email.kind,
            primary: email.primary,
        }
    }
}

/// A reference to a group (in a user) or to a user (in a group's `members`).
#[derive(Object, Serialize, Deserialize, Debug, Clone)]
#[oai(rename = "ScimReference")]
pub struct Reference {
    /// The referenced resource's `id`.
    pub value: String,
    #[oai(skip_serializing_if_is_none)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// The referenced resource's URI (read only).
    #[oai(rename = "$ref", skip_serializing_if_is_none)]
    #[serde(rename = "$ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// A provisioned user. `id` is the member's account id (`usr_`); `groups` is read only.
#[derive(Object, Serialize, Debug, Clone)]
#[oai(rename = "ScimUser", rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct User {
    pub schemas: Vec<String>,
    pub id: String,
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    pub user_name: String,
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<Name>,
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// As the provider sent them (the account's own address is fixed when the user is created:
    /// the primary email, else the first, else `userName`).
    /// Absent when the provider sent none.
    #[oai(default, skip_serializing_if_is_empty)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub emails: Vec<Email>,
    /// false: provisioned but not a member (no access, sessions ended). Absent only when
    /// `attributes`/`excludedAttributes` leave it out.
    #[oai(default)]
    pub active: bool,
    /// Absent only when `attributes`/`excludedAttributes` leave it out.
    #[oai(default)]
    pub groups: Vec<Reference>,
    pub meta: Meta,
}

/// A user as the provider sends it (create, replace).
#[derive(Object, Deserialize, Debug, Clone)]
#[oai(rename = "ScimUserInput", rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UserInput {
    #[serde(default)]
    pub schemas: Option<Vec<String>>,
    /// Unique in the organization, compared without regard to case. The account's email
    /// address unless `emails` names one.
    pub user_name: String,
    #[serde(default)]
    pub external_id: Option<String>,
    #[serde(default)]
    pub name: Option<Name>,
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub emails: Option<Vec<Email>>,
    /// Default true. `false` removes the membership and ends the member's sessions.
    #[serde(default, deserialize_with = "de_lenient_bool")]
    pub active: Option<bool>,
}

/// A provisioned group. Its `displayName` maps to a role through the SSO connection's
/// `role_mappings`.
#[derive(Object, Serialize, Debug, Clone)]
#[oai(rename = "ScimGroup", rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct Group {
    pub schemas: Vec<String>,
    pub id: String,
    pub display_name: String,
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    pub members: Vec<Reference>,
    pub meta: Meta,
}

/// A group as the provider sends it (create, replace).
#[derive(Object, Deserialize, Debug, Clone)]
#[oai(rename = "ScimGroupInput", rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct GroupInput {
    #[serde(default)]
    pub schemas: Option<Vec<String>>,
    pub display_name: String,
    #[serde(default)]
    pub external_id: Option<String>,
    /// Users of this organization, by `id`.
    #[serde(default)]
    pub members: Option<Vec<Reference>>,
}

/// One PATCH operation (RFC 7644 §3.5.2): `op` is add, remove or replace (in any case); `path`
/// an attribute path, or absent with `value` an object of attributes.
#[derive(Object, Deserialize, Debug, Clone)]
#[oai(rename = "ScimPatchOperation")]
pub struct PatchOperation {
    pub op: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub value: Option<serde_json::Value>,
}

/// A PATCH request (`urn:ietf:params:scim:api:messages:2.0:PatchOp`).
#[derive(Object, Deserialize, Debug, Clone)]
#[oai(rename = "ScimPatchRequest")]
pub struct PatchRequest {
    #[serde(default)]
    pub schemas: Option<Vec<String>>,
    #[oai(rename = "Operations")]
    #[serde(rename = "Operations", alias = "operations")]
    pub operations: Vec<PatchOperation>,
}

/// A page of users (`urn:ietf:params:scim:api:messages:2.0:ListResponse`).
#[derive(Object, Serialize, Debug, Clone)]
#[oai(rename = "ScimUserList", rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UserList {
    pub schemas: Vec<String>,
    pub total_results: u64,
    pub start_index: u64,
    pub items_per_page: u64,
    #[oai(rename = "Resources")]
    #[serde(rename = "Resources")]
    pub resources: Vec<User>,
}

/// A page of groups (`urn:ietf:params:scim:api:messages:2.0:ListResponse`).
#[derive(Object, Serialize, Debug, Clone)]
#[oai(rename = "ScimGroupList", rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct GroupList {
    pub schemas: Vec<String>,
    pub total_results: u64,
    pub start_index: u64,
    pub items_per_page: u64,
    #[oai(rename = "Resources")]
    #[serde(rename = "Resources")]
    pub resources: Vec<Group>,
}

//! The SCIM 2.0 service provider (RFC 7643/7644, decisions §15) at
//! `{SERVICE_BASE_URL}/scim/v2`, authenticated by the organization's SCIM token
//! ([`auth::Provider`]). Not organization-path-scoped and not problem+json: the token names the
//! organization, and bodies and errors are `application/scim+json` ([`wire`]). The document
//! lists these operations under the `Scim` tag with their real media type.

pub mod auth;
pub mod discovery;
pub mod groups;
pub mod provision;
pub mod resources;
pub mod users;
pub mod wire;

use poem_openapi::{ApiResponse, OpenApi, param::Path, param::Query};

use self::{
    auth::Provider,
    resources::{Group, GroupInput, GroupList, PatchRequest, User, UserInput, UserList},
    users::Paging,
    wire::{Projected, ScimError, ScimErrors, ScimJson, Selection},
};
use crate::{AppState, http::tags::Tag};

type ScimResult<T> = Result<T, ScimErrors>;

#[derive(ApiResponse)]
pub enum UserCreated {
    /// Created; `Location` is the user's URI.
    #[oai(status = 201)]
    Created(ScimJson<User>, #[oai(header = "Location")] String),
}

#[derive(ApiResponse)]
pub enum GroupCreated {
    /// Created; `Location` is the group's URI.
    #[oai(status = 201)]
    Created(ScimJson<Group>, #[oai(header = "Location")] String),
}

#[derive(ApiResponse)]
pub enum SearchAnswer {
    /// SCIM error: not supported.
    #[oai(status = 501)]
    NotImplemented(ScimJson<wire::ScimErrorBody>),
}

#[derive(ApiResponse)]
pub enum Deleted {
    /// Deleted.
    #[oai(status = 204)]
    Deleted,
}

fn base(state: &AppState) -> String {
    crate::scim::token::base_url(state)
}

pub struct ScimApi;

// One argument per query parameter of RFC 7644 §3.4.2 on the list operations.
#[allow(clippy::too_many_arguments)]
#[OpenApi(tag = "Tag::Scim")]
impl ScimApi {
    /// SCIM: what this service provider supports (RFC 7644 §4).
    #[oai(
        path = "/scim/v2/ServiceProviderConfig",
        method = "get",
        operation_id = "scimServiceProviderConfig"
    )]
    async fn service_provider_config(
        &self,
        _provider: Provider,
        state: poem::web::Data<&AppState>,
    ) -> ScimResult<ScimJson<serde_json::Value>> {
        Ok(ScimJson(discovery::service_provider_config(&base(&state))))
    }

    /// SCIM: the resource types, User and Group.
    #[oai(
        path = "/scim/v2/ResourceTypes",
        method = "get",
        operation_id = "scimListResourceTypes"
    )]
    async fn resource_types(
        &self,
        _provider: Provider,
        state: poem::web::Data<&AppState>,
    ) -> ScimResult<ScimJson<serde_json::Value>> {
        Ok(ScimJson(discovery::list(discovery::resource_types(&base(
            &state,
        )))))
    }

    /// SCIM: one resource type (`User` or `Group`).
    #[oai(
        path = "/scim/v2/ResourceTypes/:id",
        method = "get",
        operation_id = "scimGetResourceType"
    )]
    async fn resource_type(
        &self,
        _provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
    ) -> ScimResult<ScimJson<serde_json::Value>> {
        discovery::resource_types(&base(&state))
            .into_iter()
            .find(|t| t["id"] == id.0.as_str())
            .map(ScimJson)
            .ok_or_else(|| ScimError::not_found("resource type").into())
    }

    /// SCIM: the User and Group schemas, with the attributes this service keeps.
    #[oai(
        path = "/scim/v2/Schemas",
        method = "get",
        operation_id = "scimListSchemas"
    )]
    async fn schemas(
        &self,
        _provider: Provider,
        state: poem::web::Data<&AppState>,
    ) -> ScimResult<ScimJson<serde_json::Value>> {
        Ok(ScimJson(discovery::list(discovery::schemas(&base(&state)))))
    }

    /// SCIM: one schema, by its URN.
    #[oai(
        path = "/scim/v2/Schemas/:id",
        method = "get",
        operation_id = "scimGetSchema"
    )]
    async fn schema(
        &self,
        _provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
    ) -> ScimResult<ScimJson<serde_json::Value>> {
        discovery::schemas(&base(&state))
            .into_iter()
            .find(|s| s["id"] == id.0.as_str())
            .map(ScimJson)
            .ok_or_else(|| ScimError::not_found("schema").into())
    }

    /// SCIM: the organization's provisioned users. `filter` may only be `userName eq "…"`
    /// (compared without regard to case); any other is 400 `invalidFilter`.
    #[oai(
        path = "/scim/v2/Users",
        method = "get",
        operation_id = "scimListUsers"
    )]
    async fn list_users(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        /// `userName eq "…"`.
        filter: Query<Option<String>>,
        /// 1-based index of the first result (default 1).
        #[oai(name = "startIndex")]
        start_index: Query<Option<i64>>,
        /// Page size (default 100, at most 500; 0 answers only `totalResults`).
        count: Query<Option<i64>>,
        /// Only these attributes (comma-separated; `id` and `schemas` always).
        attributes: Query<Option<String>>,
        /// All but these attributes (comma-separated).
        #[oai(name = "excludedAttributes")]
        excluded_attributes: Query<Option<String>>,
    ) -> ScimResult<Projected<UserList>> {
        let paging = Paging::new(start_index.0, count.0);
        let selection = Selection::new(attributes.0.as_deref(), excluded_attributes.0.as_deref());
        let list = users::list(&state, provider.scope(), filter.0.as_deref(), paging).await?;
        Ok(Projected::list(&list, &selection)?)
    }

    /// SCIM: provision a user: the account (found by its address, or created) and, when the
    /// user's groups or the SSO connection's `default_role` give a role, the membership.
    /// 409 `uniqueness` when the userName (or the address) is provisioned already.
    #[oai(
        path = "/scim/v2/Users",
        method = "post",
        operation_id = "scimCreateUser"
    )]
    async fn create_user(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        body: ScimJson<UserInput>,
    ) -> ScimResult<UserCreated> {
        let user = users::create(&state, provider.scope(), body.0).await?;
        let location = user.meta.location.clone();
        Ok(UserCreated::Created(ScimJson(user), location))
    }

    /// SCIM: one provisioned user (`id` is the member's `usr_` id).
    #[oai(
        path = "/scim/v2/Users/:id",
        method = "get",
        operation_id = "scimGetUser"
    )]
    async fn get_user(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
        /// Only these attributes (comma-separated; `id` and `schemas` always).
        attributes: Query<Option<String>>,
        /// All but these attributes (comma-separated).
        #[oai(name = "excludedAttributes")]
        excluded_attributes: Query<Option<String>>,
    ) -> ScimResult<Projected<User>> {
        let scope = provider.scope();
        let row = users::find(&state.db.orm, scope, &id)
            .await?
            .ok_or_else(|| ScimError::not_found("user"))?;
        let user = users::one(&state, &state.db.orm, scope, row).await?;
        let selection = Selection::new(attributes.0.as_deref(), excluded_attributes.0.as_deref());
        Ok(Projected::one(&user, &selection)?)
    }

    /// SCIM: replace a user. `active: false` removes the membership and ends the member's
    /// sessions at once; the last owner is never removed (409).
    #[oai(
        path = "/scim/v2/Users/:id",
        method = "put",
        operation_id = "scimReplaceUser"
    )]
    async fn replace_user(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
        body: ScimJson<UserInput>,
    ) -> ScimResult<ScimJson<User>> {
        Ok(ScimJson(
            users::replace(&state, provider.scope(), &id, body.0).await?,
        ))
    }

    /// SCIM: change a user (RFC 7644 §3.5.2), as Okta and Microsoft Entra send it: `replace`
    /// of `active` with `true`/`false` or `"True"`/`"False"`, path-less `replace` with a value
    /// object, `name.givenName` and the like. All operations apply or none does.
    #[oai(
        path = "/scim/v2/Users/:id",
        method = "patch",
        operation_id = "scimPatchUser"
    )]
    async fn patch_user(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
        body: ScimJson<PatchRequest>,
    ) -> ScimResult<ScimJson<User>> {
        Ok(ScimJson(
            users::patch(&state, provider.scope(), &id, &body.0.operations).await?,
        ))
    }

    /// SCIM: deprovision a user: the membership goes (sessions ended, API tokens revoked); the
    /// account stays. The last owner is never removed (409).
    #[oai(
        path = "/scim/v2/Users/:id",
        method = "delete",
        operation_id = "scimDeleteUser"
    )]
    async fn delete_user(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
    ) -> ScimResult<Deleted> {
        users::delete(&state, provider.scope(), &id).await?;
        Ok(Deleted::Deleted)
    }

    /// SCIM: the organization's provisioned groups. `filter` may only be
    /// `displayName eq "…"`.
    #[oai(
        path = "/scim/v2/Groups",
        method = "get",
        operation_id = "scimListGroups"
    )]
    async fn list_groups(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        /// `displayName eq "…"`.
        filter: Query<Option<String>>,
        /// 1-based index of the first result (default 1).
        #[oai(name = "startIndex")]
        start_index: Query<Option<i64>>,
        /// Page size (default 100, at most 500).
        count: Query<Option<i64>>,
        /// Only these attributes (comma-separated; `id` and `schemas` always).
        attributes: Query<Option<String>>,
        /// All but these attributes (comma-separated), such as `members`.
        #[oai(name = "excludedAttributes")]
        excluded_attributes: Query<Option<String>>,
    ) -> ScimResult<Projected<GroupList>> {
        let paging = Paging::new(start_index.0, count.0);
        let selection = Selection::new(attributes.0.as_deref(), excluded_attributes.0.as_deref());
        let list = groups::list(&state, provider.scope(), filter.0.as_deref(), paging).await?;
        Ok(Projected::list(&list, &selection)?)
    }

    /// SCIM: create a group; its members' roles follow from its `displayName` through the SSO
    /// role mappings. 409 `uniqueness` when the name is taken.
    #[oai(
        path = "/scim/v2/Groups",
        method = "post",
        operation_id = "scimCreateGroup"
    )]
    async fn create_group(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        body: ScimJson<GroupInput>,
    ) -> ScimResult<GroupCreated> {
        let group = groups::create(&state, provider.scope(), body.0).await?;
        let location = group.meta.location.clone();
        Ok(GroupCreated::Created(ScimJson(group), location))
    }

    /// SCIM: one group (`scg_` id).
    #[oai(
        path = "/scim/v2/Groups/:id",
        method = "get",
        operation_id = "scimGetGroup"
    )]
    async fn get_group(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
        /// Only these attributes (comma-separated; `id` and `schemas` always).
        attributes: Query<Option<String>>,
        /// All but these attributes (comma-separated), such as `members`.
        #[oai(name = "excludedAttributes")]
        excluded_attributes: Query<Option<String>>,
    ) -> ScimResult<Projected<Group>> {
        let group = groups::get(&state, provider.scope(), &id).await?;
        let selection = Selection::new(attributes.0.as_deref(), excluded_attributes.0.as_deref());
        Ok(Projected::one(&group, &selection)?)
    }

    /// SCIM: searching several resource types at once (`POST /.search`) is not supported
    /// (501, RFC 7644 §3.4.3); list each type with `filter` instead. Not in the document: it
    /// is SCIM's answer to a provider probing for it, not an operation a client may call.
    #[oai(
        path = "/scim/v2/.search",
        method = "post",
        operation_id = "scimSearch",
        hidden
    )]
    async fn search(&self, _provider: Provider) -> ScimResult<SearchAnswer> {
        let refused = ScimError::new(
            poem::http::StatusCode::NOT_IMPLEMENTED,
            None,
            "Searching several resource types at once is not supported: list /Users or /Groups with a filter.",
        );
        Ok(SearchAnswer::NotImplemented(ScimJson(refused.body())))
    }

    /// SCIM: replace a group (name and whole member list).
    #[oai(
        path = "/scim/v2/Groups/:id",
        method = "put",
        operation_id = "scimReplaceGroup"
    )]
    async fn replace_group(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
        body: ScimJson<GroupInput>,
    ) -> ScimResult<ScimJson<Group>> {
        Ok(ScimJson(
            groups::replace(&state, provider.scope(), &id, body.0).await?,
        ))
    }

    /// SCIM: change a group (RFC 7644 §3.5.2): `members` add, remove (by value list or
    /// `members[value eq "…"]`) and replace; `displayName`; path-less replace. All operations
    /// apply or none does.
    #[oai(
        path = "/scim/v2/Groups/:id",
        method = "patch",
        operation_id = "scimPatchGroup"
    )]
    async fn patch_group(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
        body: ScimJson<PatchRequest>,
    ) -> ScimResult<ScimJson<Group>> {
        Ok(ScimJson(
            groups::patch(&state, provider.scope(), &id, &body.0.operations).await?,
        ))
    }

    /// SCIM: delete a group; its members' roles are recomputed without it.
    #[oai(
        path = "/scim/v2/Groups/:id",
        method = "delete",
        operation_id = "scimDeleteGroup"
    )]
    async fn delete_group(
        &self,
        provider: Provider,
        state: poem::web::Data<&AppState>,
        id: Path<String>,
    ) -> ScimResult<Deleted> {
        groups::delete(&state, provider.scope(), &id).await?;
        Ok(Deleted::Deleted)
    }
}

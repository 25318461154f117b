//! The row layer's tenancy: the one way code reaches the database's rows, so that a query of a
//! tenant table without its organization does not build.
//!
//! - A **tenant table** (its rows belong to one organization by a column: hosts, groups,
//!   policies, proposals, tokens, …; [`Tenant`]) is reached through the organization's
//!   [`OrgScope`], whose every query is filtered by that organization: `org.scope()` in a handler,
//!   `OrgScope::of(job.org_id)` in a job, then `scope.get(db, host_id)`,
//!   `scope.rows::<hosts::Entity>()`, `scope.update_rows::<…>()`.
//! - Work that truly spans organizations (the scheduler's sweeps, housekeeping and retention,
//!   billing over every organization, the caller's own memberships) says so through [`AllOrgs`],
//!   so such a query reads as deliberate.
//! - A tenant row is found **by the credential it holds** (a token's hash, a key's id) before
//!   any organization is known, through [`Credential`]; the row then names its organization.
//! - A **table of no organization** (accounts, sessions, …), or a **child table** reached by the
//!   id of a tenant row found first (a group's members, a proposal's changes), through
//!   [`Untenanted`]: `accounts::Entity::rows()`.
//!
//! The workspace's `clippy.toml` forbids sea-orm's own entry points (`EntityTrait::find`,
//! `find_by_id`, `update_many`, `delete_many`, `delete_by_id`, `sea_query::Query::select`, raw
//! statements) everywhere but here; a table is in exactly one of the three lists below.

#![allow(clippy::disallowed_methods)]

use platform::ids::{
    AccountId, ApiTokenId, ChannelId, CommentId, DeliveryId, EnrollmentTokenId, GroupId, HostId,
    HostJobId, InvitationId, OrgId, PolicyId, ProposalId,
};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, DeleteMany, EntityTrait, PrimaryKeyTrait, QueryFilter,
    Select, UpdateMany,
    sea_query::{Query, SelectStatement},
};
use uuid::Uuid;

use crate::{
    accounts, agent_nonces, agent_releases, api_tokens, audit_events, changelogs, comments,
    deployment_secrets, digest_settings, email_sends, email_tokens, enrollment_tokens, group_hosts,
    groups, host_days, host_events, host_inventories, host_jobs, host_keys, host_labels,
    host_packages, host_updates, hosts, invitations, known_exploited, memberships,
    notification_attempts, notification_channels, notification_deliveries, notification_events,
    organizations, payment_events, policies, policy_dirty, proposal_changes, proposal_decisions,
    proposal_hosts, proposal_impacts, proposal_rollouts, proposals, scim_group_members,
    scim_groups, scim_tokens, scim_users, sessions, sso_connections, sso_domains, sso_logins,
    subscriptions, usage_days,
};

/// A table whose rows each belong to one organization.
pub trait Tenant: EntityTrait {
    /// The column naming the row's organization.
    const ORG: Self::Column;
}

/// An id kind that names one row of a tenant table.
pub trait RowId: Copy + Into<Uuid> + Into<sea_orm::Value> {
    type Entity: Tenant;
    /// The column the id is stored in.
    const COLUMN: <Self::Entity as EntityTrait>::Column;
}

/// A tenant table whose rows can be found by the credential they hold, before the organization
/// is known (the row names it).
pub trait Credential: Tenant {
    /// The column holding the credential: a secret's hash, or a key's id proven by a signature.
    const CREDENTIAL: Self::Column;

    /// The row holding `credential`.
    fn by_credential(credential: impl Into<sea_orm::Value>) -> Select<Self> {
        Self::find().filter(Self::CREDENTIAL.eq(credential))
    }
}

/// A table of no organization, or a child table reached through the id of a tenant row found
/// by an [`OrgScope`] first.
pub trait Untenanted: EntityTrait {
    fn rows() -> Select<Self> {
        Self::find()
    }

    fn row<T>(id: T) -> Select<Self>
    where
        T: Into<<Self::PrimaryKey as PrimaryKeyTrait>::ValueType>,
    {
        Self::find_by_id(id)
    }

    fn update_rows() -> UpdateMany<Self> {
        Self::update_many()
    }

    fn delete_rows() -> DeleteMany<Self> {
        Self::delete_many()
    }

    /// `SELECT … FROM <table>` with no column yet (add columns and conditions).
    fn select() -> SelectStatement {
        Query::select().from(Self::default()).to_owned()
    }

    /// `SELECT <column> FROM <table>`, to filter by (`… IN (subquery)`).
    fn column_of(column: Self::Column) -> SelectStatement {
        Self::select().column(column).to_owned()
    }
}

macro_rules! tenant {
    ($($table:ident => $column:ident),* $(,)?) => {
        $(impl Tenant for $table::Entity {
            const ORG: $table::Column = $table::Column::$column;
        })*
    };
}

tenant!(
    organizations => Id,
    memberships => OrgId,
    invitations => OrgId,
    api_tokens => OrgId,
    audit_events => OrgId,
    enrollment_tokens => OrgId,
    hosts => OrgId,
    host_labels => OrgId,
    host_events => OrgId,
    host_jobs => OrgId,
    host_keys => OrgId,
    host_days => OrgId,
    usage_days => OrgId,
    subscriptions => OrgId,
    groups => OrgId,
    policies => OrgId,
    proposals => OrgId,
    proposal_rollouts => OrgId,
    comments => OrgId,
    notification_channels => OrgId,
    notification_events => OrgId,
    notification_deliveries => OrgId,
    digest_settings => OrgId,
    scim_tokens => OrgId,
    scim_users => OrgId,
    scim_groups => OrgId,
    scim_group_members => OrgId,
    sso_connections => OrgId,
    sso_domains => OrgId,
);

macro_rules! row_id {
    ($($id:ty => $table:ident),* $(,)?) => {
        $(impl RowId for $id {
            type Entity = $table::Entity;
            const COLUMN: $table::Column = $table::Column::Id;
        })*
    };
}

row_id!(
    HostId => hosts,
    GroupId => groups,
    PolicyId => policies,
    ProposalId => proposals,
    CommentId => comments,
    HostJobId => host_jobs,
    ApiTokenId => api_tokens,
    EnrollmentTokenId => enrollment_tokens,
    InvitationId => invitations,
    ChannelId => notification_channels,
    DeliveryId => notification_deliveries,
);

impl Credential for api_tokens::Entity {
    const CREDENTIAL: api_tokens::Column = api_tokens::Column::TokenHash;
}
impl Credential for enrollment_tokens::Entity {
    const CREDENTIAL: enrollment_tokens::Column = enrollment_tokens::Column::TokenHash;
}
impl Credential for invitations::Entity {
    const CREDENTIAL: invitations::Column = invitations::Column::TokenHash;
}
impl Credential for scim_tokens::Entity {
    const CREDENTIAL: scim_tokens::Column = scim_tokens::Column::TokenHash;
}
impl Credential for host_keys::Entity {
    const CREDENTIAL: host_keys::Column = host_keys::Column::KeyId;
}
/// A verified domain names the organization an address signs in through.
impl Credential for sso_domains::Entity {
    const CREDENTIAL: sso_domains::Column = sso_domains::Column::VerifiedDomain;
}

// Of no organization.
impl Untenanted for accounts::Entity {}
impl Untenanted for sessions::Entity {}
impl Untenanted for email_tokens::Entity {}
impl Untenanted for email_sends::Entity {}
impl Untenanted for known_exploited::Entity {}
impl Untenanted for agent_nonces::Entity {}
impl Untenanted for deployment_secrets::Entity {}
impl Untenanted for policy_dirty::Entity {}
impl Untenanted for payment_events::Entity {}
// Shared by every organization (decisions §16).
impl Untenanted for changelogs::Entity {}
impl Untenanted for agent_releases::Entity {}
/// Sign-ins in flight, found by their `state`'s hash (like `email_tokens`), before anybody is
/// signed in.
impl Untenanted for sso_logins::Entity {}
// Children, keyed by a tenant row's id.
impl Untenanted for group_hosts::Entity {}
impl Untenanted for proposal_hosts::Entity {}
impl Untenanted for proposal_impacts::Entity {}
impl Untenanted for proposal_changes::Entity {}
impl Untenanted for proposal_decisions::Entity {}
impl Untenanted for host_packages::Entity {}
impl Untenanted for host_updates::Entity {}
impl Untenanted for host_inventories::Entity {}
impl Untenanted for notification_attempts::Entity {}

/// Why [`OrgScope::get`] found no row.
#[derive(Debug, thiserror::Error)]
pub enum RowError {
    /// The row does not exist, or is another organization's.
    #[error("no such row in the organization")]
    NotFound,
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// One organization's handle on its rows: every query it builds is filtered by the
/// organization.
///
/// Where the organization comes from is the caller's to show: a handler's access
/// (`org.scope()`), a credential's row (an agent's host key, an accepted invitation), a job's
/// payload (whose producer had the scope), or a row found through [`AllOrgs`] by a sweep.
#[derive(Clone, Copy, Debug)]
pub struct OrgScope {
    org_id: OrgId,
}

impl OrgScope {
    /// The scope of an organization known by the caller's access, a credential's row, a job's
    /// payload or a sweep's row.
    pub fn of(org_id: impl Into<OrgId>) -> Self {
        OrgScope {
            org_id: org_id.into(),
        }
    }

    pub fn org_id(&self) -> OrgId {
        self.org_id
    }

    /// The organization's rows of table `E`.
    pub fn rows<E: Tenant>(&self) -> Select<E> {
        E::find().filter(E::ORG.eq(self.org_id))
    }

    /// The organization's row `id`, if it is one of the organization's.
    pub fn row<I: RowId>(&self, id: I) -> Select<I::Entity> {
        self.rows::<I::Entity>().filter(I::COLUMN.eq(id))
    }

    /// The organization's row of table `E` by its primary key (for tables whose id has no
    /// [`RowId`] type), if it is one of the organization's.
    pub fn row_by_key<E: Tenant>(
        &self,
        key: impl Into<<E::PrimaryKey as PrimaryKeyTrait>::ValueType>,
    ) -> Select<E> {
        E::find_by_id(key).filter(E::ORG.eq(self.org_id))
    }

    /// The organization's row `id`; [`RowError::NotFound`] for any other, another
    /// organization's included.
    pub async fn get<I: RowId, C: ConnectionTrait>(
        &self,
        db: &C,
        id: I,
    ) -> Result<<I::Entity as EntityTrait>::Model, RowError> {
        self.row(id).one(db).await?.ok_or(RowError::NotFound)
    }

    /// The organization's membership of `account`.
    pub fn member(&self, account: AccountId) -> Select<memberships::Entity> {
        self.rows::<memberships::Entity>()
            .filter(memberships::Column::AccountId.eq(account))
    }

    /// An update of the organization's rows of table `E` (add what to set and which rows).
    pub fn update_rows<E: Tenant>(&self) -> UpdateMany<E> {
        E::update_many().filter(E::ORG.eq(self.org_id))
    }

    /// A delete of the organization's rows of table `E` (add which rows).
    pub fn delete_rows<E: Tenant>(&self) -> DeleteMany<E> {
        E::delete_many().filter(E::ORG.eq(self.org_id))
    }

    /// `SELECT … FROM <table> WHERE <org> = …` with no column yet (add columns and conditions).
    pub fn select<E: Tenant>(&self) -> SelectStatement {
        Query::select()
            .from(E::default())
            .and_where(E::ORG.eq(self.org_id))
            .to_owned()
    }

    /// `SELECT <column> FROM <table> WHERE <org> = …`, to filter by (`… IN (subquery)`).
    pub fn column_of<E: Tenant>(&self, column: E::Column) -> SelectStatement {
        self.select::<E>().column(column).to_owned()
    }
}

/// Work that truly spans organizations, named so: the scheduler's sweeps, housekeeping and
/// retention, billing over every organization, and the caller's own rows across organizations
/// (an account's memberships, the organization a slug names, which access then checks).
///
/// A sweep that then works on one organization's rows takes that organization's [`OrgScope`]
/// (`OrgScope::of(row.org_id)`).
#[derive(Clone, Copy, Debug)]
pub struct AllOrgs;

impl AllOrgs {
    /// Every organization's rows of table `E`.
    pub fn rows<E: Tenant>() -> Select<E> {
        E::find()
    }

    /// The row of table `E` with primary key `key`, whichever organization's it is (a job's
    /// own row, named by its payload).
    pub fn row<E: Tenant>(
        key: impl Into<<E::PrimaryKey as PrimaryKeyTrait>::ValueType>,
    ) -> Select<E> {
        E::find_by_id(key)
    }

    /// An update of every organization's rows of table `E` (add what to set and which rows).
    pub fn update_rows<E: Tenant>() -> UpdateMany<E> {
        E::update_many()
    }

    /// A delete of every organization's rows of table `E` (add which rows).
    pub fn delete_rows<E: Tenant>() -> DeleteMany<E> {
        E::delete_many()
    }

    /// `SELECT … FROM <table>` over every organization, with no column yet.
    pub fn select<E: Tenant>() -> SelectStatement {
        Query::select().from(E::default()).to_owned()
    }

    /// `SELECT <column> FROM <table>` over every organization, to filter by.
    pub fn column_of<E: Tenant>(column: E::Column) -> SelectStatement {
        Self::select::<E>().column(column).to_owned()
    }

    /// The memberships of `account`, in every organization or in `only` (an API token's own).
    pub fn memberships_of(account: AccountId, only: Option<OrgId>) -> Select<memberships::Entity> {
        let mine = memberships::Entity::find().filter(memberships::Column::AccountId.eq(account));
        match only {
            Some(org_id) => mine.filter(memberships::Column::OrgId.eq(org_id)),
            None => mine,
        }
    }

    /// The organization addressed by `slug` (whether the caller may enter it is access's
    /// question).
    pub fn organization_by_slug(slug: &str) -> Select<organizations::Entity> {
        organizations::Entity::find().filter(organizations::Column::Slug.eq(slug))
    }

    /// The organizations among `ids` (a caller's memberships).
    pub fn organizations(ids: impl IntoIterator<Item = Uuid>) -> Select<organizations::Entity> {
        organizations::Entity::find().filter(organizations::Column::Id.is_in(ids))
    }
}

//! SCIM provisioning (decisions §15): one provisioning token per organization (its hash only),
//! the users an identity provider provisioned (each linked to an account, with the provider's
//! `userName`, `externalId` and `active`), and its groups with their members. A member's role
//! follows from their groups through the SSO connection's role mappings.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Accounts {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum ScimTokens {
    Table,
    OrgId,
    TokenHash,
    IssuedBy,
    IssuedAt,
    LastUsedAt,
}

#[derive(DeriveIden)]
enum ScimUsers {
    Table,
    OrgId,
    AccountId,
    UserName,
    UserNameKey,
    ExternalId,
    DisplayName,
    GivenName,
    FamilyName,
    Emails,
    Active,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ScimGroups {
    Table,
    Id,
    OrgId,
    DisplayName,
    DisplayNameKey,
    ExternalId,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ScimGroupMembers {
    Table,
    OrgId,
    GroupId,
    AccountId,
}

fn index(name: &str, table: impl IntoIden) -> IndexCreateStatement {
    Index::create().name(name).table(table).to_owned()
}

fn org_fk(table: impl IntoIden, column: impl IntoIden) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .from(table, column)
        .to(Organizations::Table, Organizations::Id)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(ScimTokens::Table)
                .col(uuid(ScimTokens::OrgId).primary_key())
                .col(binary(ScimTokens::TokenHash))
                .col(uuid(ScimTokens::IssuedBy))
                .col(timestamp_with_time_zone(ScimTokens::IssuedAt))
                .col(timestamp_with_time_zone_null(ScimTokens::LastUsedAt))
                .foreign_key(&mut org_fk(ScimTokens::Table, ScimTokens::OrgId))
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("scim_tokens_hash", ScimTokens::Table)
                .col(ScimTokens::TokenHash)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ScimUsers::Table)
                .col(uuid(ScimUsers::OrgId))
                .col(uuid(ScimUsers::AccountId))
                .col(string(ScimUsers::UserName))
                .col(string(ScimUsers::UserNameKey))
                .col(string_null(ScimUsers::ExternalId))
                .col(string_null(ScimUsers::DisplayName))
                .col(string_null(ScimUsers::GivenName))
                .col(string_null(ScimUsers::FamilyName))
                .col(text_null(ScimUsers::Emails))
                .col(boolean(ScimUsers::Active))
                .col(timestamp_with_time_zone(ScimUsers::CreatedAt))
                .col(timestamp_with_time_zone(ScimUsers::UpdatedAt))
                .primary_key(
                    Index::create()
                        .col(ScimUsers::OrgId)
                        .col(ScimUsers::AccountId),
                )
                .foreign_key(&mut org_fk(ScimUsers::Table, ScimUsers::OrgId))
                .foreign_key(
                    ForeignKey::create()
                        .from(ScimUsers::Table, ScimUsers::AccountId)
                        .to(Accounts::Table, Accounts::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        // `filter=userName eq "…"` is one indexed lookup; userName is case-insensitive (RFC 7643
        // §4.1.1), so the key is the lowercased name, unique in the organization.
        m.create_index(
            index("scim_users_org_user_name", ScimUsers::Table)
                .col(ScimUsers::OrgId)
                .col(ScimUsers::UserNameKey)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ScimGroups::Table)
                .col(uuid(ScimGroups::Id).primary_key())
                .col(uuid(ScimGroups::OrgId))
                .col(string(ScimGroups::DisplayName))
                .col(string(ScimGroups::DisplayNameKey))
                .col(string_null(ScimGroups::ExternalId))
                .col(timestamp_with_time_zone(ScimGroups::CreatedAt))
                .col(timestamp_with_time_zone(ScimGroups::UpdatedAt))
                .foreign_key(&mut org_fk(ScimGroups::Table, ScimGroups::OrgId))
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("scim_groups_org_display_name", ScimGroups::Table)
                .col(ScimGroups::OrgId)
                .col(ScimGroups::DisplayNameKey)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ScimGroupMembers::Table)
                .col(uuid(ScimGroupMembers::OrgId))
                .col(uuid(ScimGroupMembers::GroupId))
                .col(uuid(ScimGroupMembers::AccountId))
                .primary_key(
                    Index::create()
                        .col(ScimGroupMembers::GroupId)
                        .col(ScimGroupMembers::AccountId),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(ScimGroupMembers::Table, ScimGroupMembers::GroupId)
                        .to(ScimGroups::Table, ScimGroups::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            ScimGroupMembers::Table,
                            (ScimGroupMembers::OrgId, ScimGroupMembers::AccountId),
                        )
                        .to(ScimUsers::Table, (ScimUsers::OrgId, ScimUsers::AccountId))
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("scim_group_members_user", ScimGroupMembers::Table)
                .col(ScimGroupMembers::OrgId)
                .col(ScimGroupMembers::AccountId)
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            ScimGroupMembers::Table.into_iden(),
            ScimGroups::Table.into_iden(),
            ScimUsers::Table.into_iden(),
            ScimTokens::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

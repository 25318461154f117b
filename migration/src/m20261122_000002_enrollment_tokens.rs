//! Enrollment tokens: the `enr_` credentials that admit hosts to an organization.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum EnrollmentTokens {
    Table,
    Id,
    OrgId,
    Name,
    Labels,
    TokenHash,
    MaxUses,
    Uses,
    ExpiresAt,
    RevokedAt,
    CreatedBy,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(EnrollmentTokens::Table)
                .col(uuid(EnrollmentTokens::Id).primary_key())
                .col(uuid(EnrollmentTokens::OrgId))
                .col(string(EnrollmentTokens::Name))
                .col(text(EnrollmentTokens::Labels))
                .col(binary_len_uniq(EnrollmentTokens::TokenHash, 32))
                .col(integer_null(EnrollmentTokens::MaxUses))
                .col(integer(EnrollmentTokens::Uses).default(0))
                .col(timestamp_with_time_zone_null(EnrollmentTokens::ExpiresAt))
                .col(timestamp_with_time_zone_null(EnrollmentTokens::RevokedAt))
                .col(uuid(EnrollmentTokens::CreatedBy))
                .col(timestamp_with_time_zone(EnrollmentTokens::CreatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(EnrollmentTokens::Table, EnrollmentTokens::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("enrollment_tokens_org")
                .table(EnrollmentTokens::Table)
                .col(EnrollmentTokens::OrgId)
                .col(EnrollmentTokens::Id)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(EnrollmentTokens::Table).to_owned())
            .await
    }
}

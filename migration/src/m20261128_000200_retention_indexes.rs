//! Retention (decisions §23): the hourly pruning finds old rows by age, so each kind it prunes
//! is indexed by the time it is aged from; without these every batch would read the whole table.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum NotificationEvents {
    Table,
    CreatedAt,
}

#[derive(DeriveIden)]
enum NotificationDeliveries {
    Table,
    CreatedAt,
}

#[derive(DeriveIden)]
enum HostEvents {
    Table,
    CreatedAt,
}

#[derive(DeriveIden)]
enum AuditEvents {
    Table,
    CreatedAt,
}

#[derive(DeriveIden)]
enum HostJobs {
    Table,
    FinishedAt,
}

fn index(name: &str, table: impl IntoIden, column: impl IntoIden) -> IndexCreateStatement {
    Index::create()
        .name(name)
        .table(table)
        .col(column)
        .if_not_exists()
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(index(
            "notification_events_created",
            NotificationEvents::Table,
            NotificationEvents::CreatedAt,
        ))
        .await?;
        m.create_index(index(
            "notification_deliveries_created",
            NotificationDeliveries::Table,
            NotificationDeliveries::CreatedAt,
        ))
        .await?;
        m.create_index(index(
            "host_events_created",
            HostEvents::Table,
            HostEvents::CreatedAt,
        ))
        .await?;
        m.create_index(index(
            "audit_events_created",
            AuditEvents::Table,
            AuditEvents::CreatedAt,
        ))
        .await?;
        m.create_index(index(
            "host_jobs_finished",
            HostJobs::Table,
            HostJobs::FinishedAt,
        ))
        .await
    }
}

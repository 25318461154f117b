//! Notifications: channels (configuration sealed under `SECRETS_KEY`), the events outbox
//! written in the same transaction as the change it tells of, one delivery per event and
//! channel with its attempts, and each member's digest setting with the key of the last digest
//! sent (so that a restart or a second scheduler never sends two).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum NotificationChannels {
    Table,
    Id,
    OrgId,
    Kind,
    Name,
    Display,
    Config,
    Events,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum NotificationEvents {
    Table,
    Id,
    OrgId,
    Kind,
    Subject,
    ChannelId,
    Data,
    CreatedAt,
    DispatchedAt,
}

#[derive(DeriveIden)]
enum NotificationDeliveries {
    Table,
    Id,
    OrgId,
    ChannelId,
    EventId,
    EventKind,
    Status,
    Attempts,
    NextAttemptAt,
    QueuedAttempt,
    Reason,
    CreatedAt,
    UpdatedAt,
    FinishedAt,
}

#[derive(DeriveIden)]
enum NotificationAttempts {
    Table,
    Id,
    DeliveryId,
    Number,
    At,
    StatusCode,
    Error,
    DurationMs,
}

#[derive(DeriveIden)]
enum DigestSettings {
    Table,
    OrgId,
    AccountId,
    Frequency,
    MentionEmail,
    LastSentKey,
    LastSentAt,
    UpdatedAt,
}

fn index(name: &str, table: impl IntoIden) -> IndexCreateStatement {
    Index::create().name(name).table(table).to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(NotificationChannels::Table)
                .col(uuid(NotificationChannels::Id).primary_key())
                .col(uuid(NotificationChannels::OrgId))
                .col(string(NotificationChannels::Kind))
                .col(string(NotificationChannels::Name))
                .col(string(NotificationChannels::Display))
                .col(text(NotificationChannels::Config))
                .col(text_null(NotificationChannels::Events))
                .col(timestamp_with_time_zone(NotificationChannels::CreatedAt))
                .col(timestamp_with_time_zone(NotificationChannels::UpdatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(NotificationChannels::Table, NotificationChannels::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            index(
                "notification_channels_org_name",
                NotificationChannels::Table,
            )
            .col(NotificationChannels::OrgId)
            .col(NotificationChannels::Name)
            .unique()
            .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(NotificationEvents::Table)
                .col(uuid(NotificationEvents::Id).primary_key())
                .col(uuid(NotificationEvents::OrgId))
                .col(string(NotificationEvents::Kind))
                .col(string_null(NotificationEvents::Subject))
                .col(uuid_null(NotificationEvents::ChannelId))
                .col(text(NotificationEvents::Data))
                .col(timestamp_with_time_zone(NotificationEvents::CreatedAt))
                .col(timestamp_with_time_zone_null(
                    NotificationEvents::DispatchedAt,
                ))
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("notification_events_pending", NotificationEvents::Table)
                .col(NotificationEvents::DispatchedAt)
                .col(NotificationEvents::Id)
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("notification_events_org_kind", NotificationEvents::Table)
                .col(NotificationEvents::OrgId)
                .col(NotificationEvents::Kind)
                .col(NotificationEvents::CreatedAt)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(NotificationDeliveries::Table)
                .col(uuid(NotificationDeliveries::Id).primary_key())
                .col(uuid(NotificationDeliveries::OrgId))
                .col(uuid(NotificationDeliveries::ChannelId))
                .col(uuid(NotificationDeliveries::EventId))
                .col(string(NotificationDeliveries::EventKind))
                .col(string(NotificationDeliveries::Status))
                .col(integer(NotificationDeliveries::Attempts).default(0))
                .col(timestamp_with_time_zone_null(
                    NotificationDeliveries::NextAttemptAt,
                ))
                .col(integer_null(NotificationDeliveries::QueuedAttempt))
                .col(text_null(NotificationDeliveries::Reason))
                .col(timestamp_with_time_zone(NotificationDeliveries::CreatedAt))
                .col(timestamp_with_time_zone(NotificationDeliveries::UpdatedAt))
                .col(timestamp_with_time_zone_null(
                    NotificationDeliveries::FinishedAt,
                ))
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            NotificationDeliveries::Table,
                            NotificationDeliveries::ChannelId,
                        )
                        .to(NotificationChannels::Table, NotificationChannels::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            NotificationDeliveries::Table,
                            NotificationDeliveries::EventId,
                        )
                        .to(NotificationEvents::Table, NotificationEvents::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        // One delivery per event and channel, whatever races.
        m.create_index(
            index(
                "notification_deliveries_event_channel",
                NotificationDeliveries::Table,
            )
            .col(NotificationDeliveries::EventId)
            .col(NotificationDeliveries::ChannelId)
            .unique()
            .to_owned(),
        )
        .await?;
        m.create_index(
            index(
                "notification_deliveries_channel",
                NotificationDeliveries::Table,
            )
            .col(NotificationDeliveries::ChannelId)
            .col(NotificationDeliveries::Id)
            .to_owned(),
        )
        .await?;
        m.create_index(
            index("notification_deliveries_due", NotificationDeliveries::Table)
                .col(NotificationDeliveries::Status)
                .col(NotificationDeliveries::NextAttemptAt)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(NotificationAttempts::Table)
                .col(uuid(NotificationAttempts::Id).primary_key())
                .col(uuid(NotificationAttempts::DeliveryId))
                .col(integer(NotificationAttempts::Number))
                .col(timestamp_with_time_zone(NotificationAttempts::At))
                .col(integer_null(NotificationAttempts::StatusCode))
                .col(text_null(NotificationAttempts::Error))
                .col(big_integer(NotificationAttempts::DurationMs))
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            NotificationAttempts::Table,
                            NotificationAttempts::DeliveryId,
                        )
                        .to(NotificationDeliveries::Table, NotificationDeliveries::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            index(
                "notification_attempts_delivery_number",
                NotificationAttempts::Table,
            )
            .col(NotificationAttempts::DeliveryId)
            .col(NotificationAttempts::Number)
            .unique()
            .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(DigestSettings::Table)
                .col(uuid(DigestSettings::OrgId))
                .col(uuid(DigestSettings::AccountId))
                .col(string(DigestSettings::Frequency))
                .col(boolean(DigestSettings::MentionEmail))
                .col(string_null(DigestSettings::LastSentKey))
                .col(timestamp_with_time_zone_null(DigestSettings::LastSentAt))
                .col(timestamp_with_time_zone(DigestSettings::UpdatedAt))
                .primary_key(
                    Index::create()
                        .col(DigestSettings::OrgId)
                        .col(DigestSettings::AccountId),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(DigestSettings::Table, DigestSettings::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("digest_settings_frequency", DigestSettings::Table)
                .col(DigestSettings::Frequency)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            DigestSettings::Table.into_iden(),
            NotificationAttempts::Table.into_iden(),
            NotificationDeliveries::Table.into_iden(),
            NotificationEvents::Table.into_iden(),
            NotificationChannels::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

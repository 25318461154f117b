//! Plans and billing: each organization's subscription (the plan the payment processor or an
//! operator gave it, and the processor's customer it belongs to) and the processor's events
//! already handled, each recorded once by its id.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Subscriptions {
    Table,
    OrgId,
    Plan,
    CustomerId,
    SubscriptionId,
    Status,
    CurrentPeriodEnd,
    BillableFrom,
    EventCreated,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum PaymentEvents {
    Table,
    Id,
    Kind,
    CustomerId,
    Created,
    OrgId,
    Payload,
    ReceivedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Subscriptions::Table)
                .col(uuid(Subscriptions::OrgId).primary_key())
                .col(string_null(Subscriptions::Plan))
                .col(string_null(Subscriptions::CustomerId))
                .col(string_null(Subscriptions::SubscriptionId))
                .col(string_null(Subscriptions::Status))
                .col(timestamp_with_time_zone_null(
                    Subscriptions::CurrentPeriodEnd,
                ))
                .col(date_null(Subscriptions::BillableFrom))
                .col(big_integer_null(Subscriptions::EventCreated))
                .col(timestamp_with_time_zone(Subscriptions::UpdatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from(Subscriptions::Table, Subscriptions::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("subscriptions_customer")
                .table(Subscriptions::Table)
                .col(Subscriptions::CustomerId)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(PaymentEvents::Table)
                .col(string(PaymentEvents::Id).primary_key())
                .col(string(PaymentEvents::Kind))
                .col(string_null(PaymentEvents::CustomerId))
                .col(big_integer(PaymentEvents::Created))
                .col(uuid_null(PaymentEvents::OrgId))
                .col(text_null(PaymentEvents::Payload))
                .col(timestamp_with_time_zone(PaymentEvents::ReceivedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("payment_events_customer")
                .table(PaymentEvents::Table)
                .col(PaymentEvents::CustomerId)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(PaymentEvents::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(Subscriptions::Table).to_owned())
            .await
    }
}

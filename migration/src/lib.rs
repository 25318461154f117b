//! The service's schema, as one migration set that runs on SQLite and Postgres alike.
//!
//! Column types stay within what both databases share: UUIDs, text, integers, booleans,
//! timestamps with time zone, binary hashes and JSON as text. Migrations are append-only.

// Schema code, not row queries: a migration writes DDL and backfills by hand-written SQL, as a
// migration must (the entities of today need not match the schema of its day).
#![allow(clippy::disallowed_methods)]

pub use sea_orm_migration::prelude::*;

mod m20261122_000001_identity;
mod m20261122_000002_enrollment_tokens;
mod m20261122_000003_hosts_groups;
mod m20261122_000004_agents;
mod m20261122_000005_proposals;
mod m20261124_000001_billing;
mod m20261124_000200_notifications;
mod m20261124_000300_sso;
mod m20261124_000400_scim;
mod m20261124_000500_intelligence;
mod m20261126_000100_identity_changes;
mod m20261126_000200_host_inventories;
mod m20261126_000300_host_updates_seq;
mod m20261126_000400_host_inventories_lz4;
mod m20261127_000100_host_update_impact;
mod m20261127_000200_trust_boundaries;
mod m20261128_000100_proposal_impact;
mod m20261128_000200_retention_indexes;
mod m20261128_003100_rollouts;

pub struct Migrator;

impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_identity::Migration),
            Box::new(m20261122_000002_enrollment_tokens::Migration),
            Box::new(m20261122_000003_hosts_groups::Migration),
            Box::new(m20261122_000004_agents::Migration),
            Box::new(m20261122_000005_proposals::Migration),
            Box::new(m20261124_000001_billing::Migration),
            Box::new(m20261124_000200_notifications::Migration),
            Box::new(m20261124_000300_sso::Migration),
            Box::new(m20261124_000400_scim::Migration),
            Box::new(m20261124_000500_intelligence::Migration),
            Box::new(m20261126_000100_identity_changes::Migration),
            Box::new(m20261126_000200_host_inventories::Migration),
            Box::new(m20261126_000300_host_updates_seq::Migration),
            Box::new(m20261126_000400_host_inventories_lz4::Migration),
            Box::new(m20261127_000100_host_update_impact::Migration),
            Box::new(m20261127_000200_trust_boundaries::Migration),
            Box::new(m20261128_000100_proposal_impact::Migration),
            Box::new(m20261128_000200_retention_indexes::Migration),
            Box::new(m20261128_003100_rollouts::Migration),
        ]
    }
}

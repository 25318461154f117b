//! `host_inventories` keeps a fingerprint per stored package and update (about 30 KB of text
//! for a host of 500 packages), rewritten by every check-in that sends an inventory. Postgres
//! compresses such a value with pglz by default, which was the largest single item of
//! Postgres's CPU in the changed check-in benchmark (13% of it; BENCHMARKS.md, "Changed
//! check-ins at 200/s"). lz4 compresses and decompresses several times faster at a similar ratio.
//!
//! Postgres only (SQLite does not compress). A server built without lz4 refuses the setting
//! with an error this migration turns into a notice: its columns keep pglz, and nothing else
//! differs.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const LZ4: &str = "DO $$ BEGIN \
     EXECUTE 'ALTER TABLE host_inventories ALTER COLUMN packages SET COMPRESSION lz4, \
              ALTER COLUMN updates SET COMPRESSION lz4'; \
     EXCEPTION WHEN feature_not_supported THEN \
     RAISE NOTICE 'lz4 is not available: host_inventories keeps pglz'; \
     END $$";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        if m.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            m.get_connection().execute_unprepared(LZ4).await?;
        }
        Ok(())
    }
}

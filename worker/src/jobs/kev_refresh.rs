//! `kev.refresh`: the known-exploited catalogue (decisions §16). Loads the shipped snapshot
//! when none is loaded (so the first start works offline), then reads `KEV_URL` when set. A
//! feed that cannot be read is a warning (the catalogue stays as it was); a bad record in it is
//! skipped with a warning. CVEs new to the catalogue make the policies of undecided proposals
//! that fix them evaluate again, which marks those proposals `known_exploited` and announces
//! `advisory.known_exploited` once per organization and CVE.

use apalis::prelude::{BoxDynError, Data};
use domain::intel::jobs::RefreshKev;
use domain::intel::kev;

use crate::Deps;

pub async fn run(_job: RefreshKev, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let mut added = kev::load_snapshot_if_empty(&deps.db).await?;
    if let Some(url) = deps.config.kev_url.clone() {
        let feed = deps
            .outbound
            .fetch_document(&url, kev::MAX_FEED_BYTES, "the feed", kev::parse);
        match feed.await {
            Ok(records) => {
                let new = kev::store(&deps.db, records).await?;
                tracing::info!(added = new.len(), "known-exploited catalogue refreshed");
                added.extend(new);
            }
            Err(err) => {
                tracing::warn!(
                    error = format!("{err:#}"),
                    "known-exploited feed not read; the catalogue is unchanged"
                )
            }
        }
    }
    let policies = kev::policies_fixing(&deps.db, &added).await?;
    if !policies.is_empty() {
        domain::policy::mark_policies_dirty(&deps.db, &policies, deps.clock.now()).await?;
    }
    Ok(())
}

//! `kev.refresh`: the known-exploited catalogue (decisions §16). Loads the shipped snapshot
//! when none is loaded (so the first start works offline), then reads `KEV_URL` when set. A
//! feed that cannot be read is a warning (the catalogue stays as it was); a bad record in it is
//! skipped with a warning. CVEs new to the catalogue make the policies of undecided proposals
//! that fix them evaluate again, which marks those proposals `known_exploited` and announces
//! `advisory.known_exploited` once per organization and CVE.

use apalis::prelude::{BoxDynError, Data};
use domain::intel::kev;
use platform::{jobs::RefreshKev, outbound::read_limited};
use reqwest::Method;

use crate::Deps;

pub async fn run(_job: RefreshKev, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let mut added = kev::load_snapshot_if_empty(&deps.db).await?;
    if let Some(url) = deps.config.kev_url.clone() {
        match read_feed(&deps, &url).await {
            Ok(records) => {
                let new = kev::store(&deps.db, records).await?;
                tracing::info!(added = new.len(), "known-exploited catalogue refreshed");
                added.extend(new);
            }
            Err(reason) => {
                tracing::warn!(%reason, "known-exploited feed not read; the catalogue is unchanged")
            }
        }
    }
    let policies = kev::policies_fixing(&deps.db, &added).await?;
    if !policies.is_empty() {
        domain::policy::mark_policies_dirty(&deps.db, &policies, deps.clock.now()).await?;
    }
    Ok(())
}

async fn read_feed(deps: &Deps, url: &url::Url) -> Result<Vec<kev::Record>, String> {
    let request = deps
        .outbound
        .request(Method::GET, url)
        .map_err(|e| e.to_string())?;
    let response = deps
        .outbound
        .send(request)
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the feed answered {}", response.status()));
    }
    let body = read_limited(response, kev::MAX_FEED_BYTES)
        .await
        .map_err(|e| e.to_string())?;
    kev::parse(&body).map_err(|e| e.to_string())
}

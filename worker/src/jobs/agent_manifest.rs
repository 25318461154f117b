//! `agent.manifest`: the agent release channels from `AGENT_MANIFEST_URL` (decisions §11,
//! §16), read at start and hourly. A manifest that cannot be fetched or read (not JSON, an
//! unknown channel, a version that is not semver) is a warning and the channels already known
//! are kept.

use apalis::prelude::{BoxDynError, Data};
use domain::intel::releases;
use platform::{jobs::ReadAgentManifest, outbound::read_limited};
use reqwest::Method;

use crate::Deps;

pub async fn run(_job: ReadAgentManifest, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let Some(url) = deps.config.agent_manifest_url.clone() else {
        return Ok(());
    };
    match read(&deps, &url).await {
        Ok(channels) => {
            releases::store(&deps.db, channels, deps.clock.now()).await?;
        }
        Err(reason) => {
            tracing::warn!(%reason, "agent manifest not read; the channels known are kept")
        }
    }
    Ok(())
}

async fn read(deps: &Deps, url: &url::Url) -> Result<Vec<releases::Release>, String> {
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
        return Err(format!("the manifest answered {}", response.status()));
    }
    let body = read_limited(response, releases::MAX_MANIFEST_BYTES)
        .await
        .map_err(|e| e.to_string())?;
    releases::parse(&body).map_err(|e| e.to_string())
}

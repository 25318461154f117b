//! `agent.manifest`: the agent release channels from `AGENT_MANIFEST_URL` (decisions §11,
//! §16), read at start and hourly. A manifest that cannot be fetched or read (not JSON, an
//! unknown channel, a version that is not semver) is a warning and the channels already known
//! are kept.

use anyhow::Context;
use apalis::prelude::{BoxDynError, Data};
use domain::intel::releases;
use platform::jobs::ReadAgentManifest;

use crate::Deps;

pub async fn run(_job: ReadAgentManifest, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let Some(url) = deps.config.agent_manifest_url.clone() else {
        return Ok(());
    };
    match read(&deps, &url).await {
        Ok(channels) => {
            releases::store(&deps.db, channels, deps.clock.now()).await?;
        }
        Err(err) => {
            tracing::warn!(
                error = format!("{err:#}"),
                "agent manifest not read; the channels known are kept"
            )
        }
    }
    Ok(())
}

async fn read(deps: &Deps, url: &url::Url) -> anyhow::Result<Vec<releases::Release>> {
    let body = deps
        .outbound
        .fetch(url, releases::MAX_MANIFEST_BYTES)
        .await
        .context("fetching the manifest")?;
    releases::parse(&body).context("reading the manifest")
}

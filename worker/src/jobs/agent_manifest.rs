//! `agent.manifest`: the agent release channels from `AGENT_MANIFEST_URL` (decisions §11,
//! §16), read at start and hourly. A manifest that cannot be fetched or read (not JSON, an
//! unknown channel, a version that is not semver) is a warning and the channels already known
//! are kept.

use apalis::prelude::{BoxDynError, Data};
use domain::intel::jobs::ReadAgentManifest;
use domain::intel::releases;

use crate::Deps;

pub async fn run(_job: ReadAgentManifest, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let Some(url) = deps.config.agent_manifest_url.clone() else {
        return Ok(());
    };
    let manifest = deps.outbound.fetch_document(
        &url,
        releases::MAX_MANIFEST_BYTES,
        "the manifest",
        releases::parse,
    );
    match manifest.await {
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

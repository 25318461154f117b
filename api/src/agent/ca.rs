//! The deployment's agent CA: generated on first start and stored in the database, its key
//! sealed with `SECRETS_KEY` when one is configured. Several replicas starting at once agree on
//! one CA: the first insert wins and the others read it back.

use entities::scope::Untenanted;
use std::sync::Arc;

use anyhow::Context;
use entities::deployment_secrets;
use platform::{
    agent_ca::{AgentCa, StoredCa},
    clock::Clock,
    config::Config,
    db::Database,
};
use sea_orm::{ActiveModelTrait, Set};

use serde::{Deserialize, Serialize};

const NAME: &str = "agent_ca";

#[derive(Serialize, Deserialize)]
struct Stored {
    cert_pem: String,
    key: String,
}

pub async fn load_or_create(
    db: &Database,
    config: &Config,
    clock: &dyn Clock,
) -> anyhow::Result<Arc<AgentCa>> {
    let secrets_key = config.secrets_key.as_ref().map(|k| k.expose());
    if let Some(row) = deployment_secrets::Entity::row(NAME).one(&db.orm).await? {
        return load(&row.value, secrets_key);
    }
    let ca = AgentCa::generate(clock.now()).context("generating the agent CA")?;
    let stored = ca.to_stored(secrets_key);
    if !stored.is_sealed() {
        tracing::warn!("SECRETS_KEY is not set: the agent CA key is stored unencrypted");
    }
    let value = serde_json::to_string(&Stored {
        cert_pem: stored.cert_pem,
        key: stored.key,
    })?;
    let inserted = deployment_secrets::ActiveModel {
        name: Set(NAME.to_owned()),
        value: Set(value),
        created_at: Set(clock.now()),
    }
    .insert(&db.orm)
    .await;
    if inserted.is_ok() {
        tracing::info!(ca = %ca.common_name(), "generated the agent CA");
        return Ok(Arc::new(ca));
    }
    // Another replica stored one first: use that.
    let row = deployment_secrets::Entity::row(NAME)
        .one(&db.orm)
        .await?
        .context("storing the agent CA failed")?;
    load(&row.value, secrets_key)
}

fn load(value: &str, secrets_key: Option<&[u8; 32]>) -> anyhow::Result<Arc<AgentCa>> {
    let stored: Stored = serde_json::from_str(value).context("reading the stored agent CA")?;
    let ca = AgentCa::from_stored(
        &StoredCa {
            cert_pem: stored.cert_pem,
            key: stored.key,
        },
        secrets_key,
    )
    .context("loading the agent CA (is SECRETS_KEY the one it was sealed with?)")?;
    Ok(Arc::new(ca))
}

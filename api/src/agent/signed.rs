//! Signed agent requests (RFC 9421): the one way an agent call is authenticated. The extractor
//! reads the exact body, checks freshness, finds the key the service certified under `keyid`,
//! verifies the signature, refuses a nonce seen before (in the database, so across replicas),
//! and only then decodes the JSON body.
//!
//! Every refusal is 401 `unauthenticated` without saying which check failed; the reason is
//! logged.

use chrono::{DateTime, Utc};
use entities::{host_keys, hosts};
use platform::http_signature::{self, PublicKey, SignedRequest};
use poem::{Request, RequestBody};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions,
    registry::{MetaMediaType, MetaRequest, Registry},
    types::Type,
};
use sea_orm::{EntityTrait, Set};
use serde::de::DeserializeOwned;

use super::body;
use crate::{AppState, error::ApiError};

/// An authenticated agent request with body `T`.
pub struct Signed<T> {
    pub host: hosts::Model,
    pub key: host_keys::Model,
    pub body: T,
}

fn refuse(reason: impl std::fmt::Display) -> ApiError {
    tracing::info!(%reason, "agent request refused");
    ApiError::Unauthenticated
}

/// The public authority signatures must name: the service's own, never a client's `Host`.
fn authority(state: &AppState) -> String {
    let url = &state.config.base_url;
    let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    }
}

/// Verifies the request and returns the host and key it is signed by.
pub async fn authenticate(
    state: &AppState,
    req: &Request,
    raw: &[u8],
    now: DateTime<Utc>,
) -> Result<(hosts::Model, host_keys::Model), ApiError> {
    let headers: Vec<(&str, &str)> = req
        .headers()
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let authority = authority(state);
    let signed = SignedRequest {
        method: req.method().as_str(),
        authority: &authority,
        path: req.uri().path(),
        query: req.uri().query(),
        headers: &headers,
        body: (!raw.is_empty()).then_some(raw),
    };
    let parsed = http_signature::parse(&signed).map_err(refuse)?;
    parsed.params.check_fresh(now.timestamp()).map_err(refuse)?;
    let key = host_keys::Entity::find_by_id(parsed.params.key_id.clone())
        .one(&state.db.orm)
        .await?
        .ok_or_else(|| refuse("unknown keyid"))?;
    if key.revoked_at.is_some() || key.not_after <= now {
        return Err(refuse("key revoked or certificate expired"));
    }
    let host = hosts::Entity::find_by_id(key.host_id)
        .one(&state.db.orm)
        .await?
        .ok_or_else(|| refuse("no host for key"))?;
    if host.decommissioned_at.is_some() {
        return Err(refuse("host decommissioned"));
    }
    let public = PublicKey::from_spki_der(&key.public_key).map_err(refuse)?;
    parsed.verify(&public).map_err(refuse)?;
    remember_nonce(state, &key.key_id, &parsed.params.nonce, now).await?;
    Ok((host, key))
}

/// Records `(key_id, nonce)`; a second use is a replay.
async fn remember_nonce(
    state: &AppState,
    key_id: &str,
    nonce: &str,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    use entities::agent_nonces;
    let inserted = agent_nonces::Entity::insert(agent_nonces::ActiveModel {
        key_id: Set(key_id.to_owned()),
        nonce: Set(nonce.to_owned()),
        seen_at: Set(now),
    })
    .on_conflict_do_nothing()
    .exec(&state.db.orm)
    .await?;
    if matches!(inserted, sea_orm::TryInsertResult::Conflicted) {
        return Err(refuse("nonce replayed"));
    }
    // Nonces whose signatures can no longer be fresh are forgotten by the minutely fleet
    // upkeep (`platform::jobs::NONCE_TTL_S`), not on every request.
    Ok(())
}

impl<'a, T: Type + DeserializeOwned + Send> ApiExtractor<'a> for Signed<T> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        Some(MetaRequest {
            description: Some(
                "JSON, optionally `Content-Encoding: gzip` (at most 16 MiB decompressed), signed \
                 per RFC 9421 with the key the service certified: `Signature-Input` covering \
                 `@method`, `@authority`, `@path`, `@query` when present and `content-digest` \
                 (RFC 9530, sha-256), with `created`, `keyid` and `nonce`.",
            ),
            content: vec![MetaMediaType {
                content_type: "application/json",
                schema: T::schema_ref(),
            }],
            required: true,
        })
    }

    async fn from_request(
        req: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let state = req.data::<AppState>().ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!("the application state is missing"))
        })?;
        let raw = body
            .take()?
            .into_bytes_limit(crate::middleware::AGENT_BODY_LIMIT)
            .await
            .map_err(|_| ApiError::PayloadTooLarge)?;
        let now = state.clock.now();
        let (host, key) = authenticate(state, req, &raw, now).await?;
        let decoded = body::decode(&raw, req.header("content-encoding"))?;
        let parsed = body::json(&decoded)?;
        Ok(Signed {
            host,
            key,
            body: parsed,
        })
    }
}

//! Signed agent requests (RFC 9421): the one way an agent call is authenticated. The extractor
//! works on the request's head first: it checks freshness, finds the key the service
//! certified under `keyid`, verifies the signature (which covers the announced
//! `Content-Digest`), refuses a nonce seen before (in the database, so across replicas), and
//! takes the call from the host's limit. Only then does it read the body, up to 16 MiB,
//! holding it to the announced digest as it streams in, and decode the JSON.
//!
//! The first use of a key retires every key the host was given before it (decisions §6: a
//! renewed key replaces the old one once it is used, and not before, so an agent that lost
//! the renewal's answer keeps working with its old key).
//!
//! Every refusal is 401 `unauthenticated` without saying which check failed; the reason is
//! logged.

use chrono::{DateTime, Utc};
use entities::{host_keys, hosts};
use platform::http_signature::{self, ParsedSignature, PublicKey, RequestHead};
use platform::ids::HostId;
use poem::{Request, RequestBody};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions,
    registry::{MetaMediaType, MetaRequest, Registry},
    types::Type,
};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, Set, sea_query::Expr};
use serde::de::DeserializeOwned;

use super::{body, limits};
use crate::{
    AppState,
    http::error::ApiError,
    http::scope::{Credential, OrgScope},
};

/// An authenticated agent request with body `T`.
pub struct Signed<T> {
    pub host: hosts::Model,
    pub key: host_keys::Model,
    pub body: T,
}

impl<T> Signed<T> {
    /// The host's organization: its key named it.
    pub fn scope(&self) -> OrgScope {
        OrgScope::of(self.host.org_id)
    }
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

/// Verifies the request's head and returns the host and key it is signed by, with what its
/// body must turn out to be. Reads nothing of the body.
pub async fn authenticate(
    state: &AppState,
    req: &Request,
    now: DateTime<Utc>,
) -> Result<(hosts::Model, host_keys::Model, ParsedSignature), ApiError> {
    let headers: Vec<(&str, &str)> = req
        .headers()
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let authority = authority(state);
    let head = RequestHead {
        method: req.method().as_str(),
        authority: &authority,
        path: req.uri().path(),
        query: req.uri().query(),
        headers: &headers,
    };
    let parsed = http_signature::parse_head(&head).map_err(refuse)?;
    parsed.params.check_fresh(now.timestamp()).map_err(refuse)?;
    let key = host_keys::Entity::by_credential(parsed.params.key_id.as_str())
        .one(&state.db.orm)
        .await?
        .ok_or_else(|| refuse("unknown keyid"))?;
    if key.revoked_at.is_some() || key.not_after <= now {
        return Err(refuse("key revoked or certificate expired"));
    }
    let host = OrgScope::of(key.org_id)
        .row(HostId::from(key.host_id))
        .one(&state.db.orm)
        .await?
        .ok_or_else(|| refuse("no host for key"))?;
    if host.decommissioned_at.is_some() {
        return Err(refuse("host decommissioned"));
    }
    let public = PublicKey::from_spki_der(&key.public_key).map_err(refuse)?;
    parsed.verify(&public).map_err(refuse)?;
    remember_nonce(state, &key.key_id, &parsed.params.nonce, now).await?;
    retire_earlier_keys(state, &key, now).await?;
    Ok((host, key, parsed))
}

/// Revokes the host's keys issued before `key`, now that `key` is proven in use. A read first,
/// so that the usual call (nothing to retire) writes nothing.
async fn retire_earlier_keys(
    state: &AppState,
    key: &host_keys::Model,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let scope = OrgScope::of(key.org_id);
    let retired: Vec<String> = scope
        .rows::<host_keys::Entity>()
        .filter(host_keys::Column::HostId.eq(key.host_id))
        .filter(host_keys::Column::KeyId.ne(key.key_id.as_str()))
        .filter(host_keys::Column::RevokedAt.is_null())
        .filter(host_keys::Column::CreatedAt.lte(key.created_at))
        .all(&state.db.orm)
        .await?
        .into_iter()
        .map(|k| k.key_id)
        .collect();
    if retired.is_empty() {
        return Ok(());
    }
    scope
        .update_rows::<host_keys::Entity>()
        .col_expr(host_keys::Column::RevokedAt, Expr::value(Some(now)))
        .filter(host_keys::Column::KeyId.is_in(retired.iter().map(String::as_str)))
        .filter(host_keys::Column::RevokedAt.is_null())
        .exec(&state.db.orm)
        .await?;
    tracing::info!(
        key_id = %key.key_id,
        retired = ?retired,
        "first use of a host key: earlier keys revoked"
    );
    Ok(())
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
                "JSON, optionally `Content-Encoding: gzip` (at most 16 MiB as sent and \
                 decompressed), signed per RFC 9421 with the key the service certified: \
                 `Signature-Input` covering `@method`, `@authority`, `@path`, `@query` when \
                 present and `content-digest` (RFC 9530, sha-256), with `created`, `keyid` and \
                 `nonce`. The body is read only once the signature is verified.",
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
        let now = state.clock.now();
        let (host, key, signature) = authenticate(state, req, now).await?;
        limits::signed_call(state, host.id, now).await?;
        let mut check = signature.body_check();
        let raw = body::read(body.take()?, body::MAX_SIGNED, |piece| {
            check.update(piece).map_err(refuse)
        })
        .await?;
        check.finish().map_err(refuse)?;
        let decoded = body::decode(&raw, req.header("content-encoding"), body::MAX_SIGNED)?;
        let parsed = body::json(&decoded)?;
        Ok(Signed {
            host,
            key,
            body: parsed,
        })
    }
}

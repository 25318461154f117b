//! Signed agent requests (RFC 9421): the one way an agent call is authenticated. The extractor
//! works on the request's head first: it checks freshness, finds the key the service
//! certified under `keyid` (remembered per process: `super::keys`), verifies the signature (which covers the announced
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

use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use domain::HostJobStatus;
use entities::{agent_nonces, host_keys, hosts};
use platform::ids::HostId;
use poem::{Request, RequestBody};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions,
    registry::{MetaRequest, Registry},
    types::Type,
};
use protocol::signature::{self, ParsedSignature, RequestHead};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, FromQueryResult, QueryFilter, Statement,
    sea_query::Expr,
};
use serde::de::DeserializeOwned;

use super::{body, keys::CertifiedKey, limits};
use crate::{AppState, http::error::ApiError};
use entities::scope::{Credential, OrgScope, Untenanted};

/// An authenticated agent request with body `T`.
pub struct Signed<T> {
    pub host: hosts::Model,
    /// Whether the host had a job it has not reported on yet (`host_jobs`, pending or
    /// dispatched) when this request's nonce was recorded: read in the same statement as the
    /// host's row, so a check-in without jobs makes no statement of its own to learn that.
    pub jobs_waiting: bool,
    pub key: Arc<CertifiedKey>,
    pub body: T,
}

/// The host a signed request comes from, as the statement that recorded its nonce read it.
pub struct SigningHost {
    pub host: hosts::Model,
    /// See [`Signed::jobs_waiting`].
    pub jobs_waiting: bool,
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
///
/// A key this process has seen before is taken from [`super::keys::KeyCache`] (what never
/// changes about it); one it has not is read and, once its signature verifies, remembered.
/// Either way the nonce is recorded by one statement that also requires the key unrevoked and
/// its host not decommissioned, and (on Postgres, in the same statement) reads the host's
/// current row.
pub async fn authenticate(
    state: &AppState,
    req: &Request,
    now: DateTime<Utc>,
) -> Result<(SigningHost, Arc<CertifiedKey>, ParsedSignature), ApiError> {
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
    let parsed = signature::parse_head(&head).map_err(refuse)?;
    parsed.params.check_fresh(now.timestamp()).map_err(refuse)?;
    let key_id = parsed.params.key_id.as_str();
    let (key, first_seen) = match state.agent_keys.get(key_id) {
        Some(key) => (key, false),
        None => {
            let row = host_keys::Entity::by_credential(key_id)
                .one(&state.db.orm)
                .await?
                .ok_or_else(|| refuse("unknown keyid"))?;
            if row.revoked_at.is_some() {
                return Err(refuse("key revoked or certificate expired"));
            }
            let key = CertifiedKey::from_row(&row).map_err(refuse)?;
            (Arc::new(key), true)
        }
    };
    if key.not_after <= now {
        return Err(refuse("key revoked or certificate expired"));
    }
    parsed.verify(&key.public).map_err(refuse)?;
    let host = match remember_nonce(state, &key, &parsed.params.nonce, now).await? {
        Some(host) => host,
        None => {
            let reason = why_refused(state, &key, &parsed.params.nonce).await?;
            if reason != REPLAYED {
                state.agent_keys.forget(&key.key_id);
            }
            return Err(refuse(reason));
        }
    };
    if first_seen {
        // Every process retires on its first sight of a key, so the key's first use anywhere
        // retires the earlier ones.
        retire_earlier_keys(state, &key, now).await?;
        state.agent_keys.insert(key.clone());
    }
    Ok((host, key, parsed))
}

/// Revokes the host's keys issued before `key`, now that `key` is proven in use. A read first,
/// so that the usual call (nothing to retire) writes nothing.
async fn retire_earlier_keys(
    state: &AppState,
    key: &CertifiedKey,
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
    for retired in &retired {
        state.agent_keys.forget(retired);
    }
    tracing::info!(
        key_id = %key.key_id,
        retired = ?retired,
        "first use of a host key: earlier keys revoked"
    );
    Ok(())
}

/// `EXISTS (…)`: the key `param` names is usable right now (unrevoked, its host present and
/// not decommissioned). The nonce statements below insert only when it holds.
fn key_usable(param: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM host_keys k JOIN hosts h \
         ON h.id = k.host_id AND h.org_id = k.org_id \
         WHERE k.key_id = {param} AND k.revoked_at IS NULL AND h.decommissioned_at IS NULL)"
    )
}

/// The host's row (`h`) and whether it has jobs not reported on yet, as `jobs_waiting`.
fn host_and_jobs_waiting() -> String {
    let unfinished = HostJobStatus::UNFINISHED
        .iter()
        .map(|status| format!("'{status}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT h.*, EXISTS (SELECT 1 FROM host_jobs j WHERE j.host_id = h.id \
         AND j.org_id = h.org_id AND j.status IN ({unfinished})) AS jobs_waiting FROM hosts h"
    )
}

/// Postgres: the nonce recorded, the host's row and whether jobs wait for it read, in one
/// statement.
static NONCE_AND_HOST_PG: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH fresh AS (\
           INSERT INTO agent_nonces (key_id, nonce, seen_at) SELECT $1, $2, $3 \
           WHERE {} ON CONFLICT DO NOTHING RETURNING 1) \
         {} WHERE h.id = $4 AND h.org_id = $5 AND EXISTS (SELECT 1 FROM fresh)",
        key_usable("$1"),
        host_and_jobs_waiting()
    )
});

/// SQLite: the host's row and whether jobs wait for it, read after the nonce is recorded.
static HOST_SQLITE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} WHERE h.id = ?1 AND h.org_id = ?2",
        host_and_jobs_waiting()
    )
});

/// SQLite: the nonce recorded (the host is read next; a round trip costs little in-process).
static NONCE_SQLITE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO agent_nonces (key_id, nonce, seen_at) SELECT ?1, ?2, ?3 \
         WHERE {} ON CONFLICT DO NOTHING",
        key_usable("?1")
    )
});

/// Records `(key_id, nonce)` if the key is still usable and the nonce new, and answers the
/// host's current row and whether jobs wait for it; `None` when nothing was recorded (a
/// replay, or a key revoked or a host decommissioned since the key was cached: [`why_refused`]
/// tells which). The check and the insert are one statement, so a revocation committed by any
/// process is seen by the next request. On Postgres the host's row and the jobs' flag come
/// back from the same statement.
// Hand-written SQL, allowed here only: tenant rows reached by the credential (the key's id,
// proven by the signature just verified) and the host it names, in its own organization, as
// `Credential::by_credential` and `OrgScope::row` would (`clippy.toml`).
#[allow(clippy::disallowed_methods)]
async fn remember_nonce(
    state: &AppState,
    key: &CertifiedKey,
    nonce: &str,
    now: DateTime<Utc>,
) -> Result<Option<SigningHost>, ApiError> {
    let db = &state.db.orm;
    let row = match db.get_database_backend() {
        DbBackend::Postgres => {
            let statement = Statement::from_sql_and_values(
                DbBackend::Postgres,
                NONCE_AND_HOST_PG.as_str(),
                [
                    key.key_id.as_str().into(),
                    nonce.into(),
                    now.into(),
                    key.host_id.into(),
                    key.org_id.into(),
                ],
            );
            db.query_one_raw(statement).await?
        }
        backend => {
            // On SQLite the insert takes its turn on the writing connection, behind the
            // writes queued before it (`Database::writer`).
            let inserted = state
                .db
                .writer()
                .execute_raw(Statement::from_sql_and_values(
                    backend,
                    NONCE_SQLITE.as_str(),
                    [key.key_id.as_str().into(), nonce.into(), now.into()],
                ))
                .await?;
            if inserted.rows_affected() != 1 {
                return Ok(None);
            }
            // Nonces whose signatures can no longer be fresh are forgotten by the minutely
            // fleet upkeep (`domain::fleet::jobs::NONCE_TTL_S`), not on every request.
            db.query_one_raw(Statement::from_sql_and_values(
                backend,
                HOST_SQLITE.as_str(),
                [key.host_id.into(), key.org_id.into()],
            ))
            .await?
        }
    };
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(SigningHost {
        host: hosts::Model::from_query_result(&row, "")?,
        jobs_waiting: row.try_get("", "jobs_waiting")?,
    }))
}

const REPLAYED: &str = "nonce replayed";

/// Why [`remember_nonce`] recorded nothing, for the log (the caller only learns 401).
async fn why_refused(
    state: &AppState,
    key: &CertifiedKey,
    nonce: &str,
) -> Result<&'static str, ApiError> {
    let db = &state.db.orm;
    let row = host_keys::Entity::by_credential(key.key_id.as_str())
        .one(db)
        .await?;
    if row.is_none_or(|row| row.revoked_at.is_some()) {
        return Ok("key revoked or certificate expired");
    }
    let host = OrgScope::of(key.org_id)
        .row(HostId::from(key.host_id))
        .one(db)
        .await?;
    Ok(match host {
        None => "no host for key",
        Some(host) if host.decommissioned_at.is_some() => "host decommissioned",
        Some(_) => {
            let seen = agent_nonces::Entity::rows()
                .filter(agent_nonces::Column::KeyId.eq(key.key_id.as_str()))
                .filter(agent_nonces::Column::Nonce.eq(nonce))
                .one(db)
                .await?;
            if seen.is_some() {
                REPLAYED
            } else {
                "key revoked or host decommissioned meanwhile"
            }
        }
    })
}

impl<'a, T: Type + DeserializeOwned + Send> ApiExtractor<'a> for Signed<T> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        Some(super::body::json_request::<T>(
            "JSON, optionally `Content-Encoding: gzip` (at most 16 MiB as sent and \
             decompressed), signed per RFC 9421 with the key the service certified: \
             `Signature-Input` covering `@method`, `@authority`, `@path`, `@query` when \
             present and `content-digest` (RFC 9530, sha-256), with `created`, `keyid` and \
             `nonce`. The body is read only once the signature is verified.",
        ))
    }

    async fn from_request(
        req: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let state = AppState::of(req)?;
        let now = state.clock.now();
        let (SigningHost { host, jobs_waiting }, key, signature) =
            authenticate(state, req, now).await?;
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
            jobs_waiting,
            key,
            body: parsed,
        })
    }
}

//! What authentication reads on every request (the session or API token behind a credential,
//! the caller's place in an organization, the caller's organizations), kept in memory so that a
//! request needs no database round trip to learn who is calling.
//!
//! Correctness does not rest on the lifetime: an answer is served only while nothing it depends
//! on has changed anywhere (`platform::identity_changes`: on Postgres every replica hears of every
//! change, and this process counts its own as it answers them, [`SettleChanges`]; on SQLite the
//! database keeps the count). A signed-out session, a revoked API token, a removed
//! member, a changed role or a deprovisioned person is therefore refused or re-scoped from the
//! next request on, at every replica. The [`LIFETIME`] only bounds memory: if Postgres' listening
//! connection drops, the caches are bypassed until it is back.
//!
//! Expiry (a session's idle and absolute limits, an API token's `expires_at`) is checked on
//! every request against the clock, cached or not.

use std::{hash::Hash, sync::Arc, time::Duration};

use entities::{accounts, api_tokens, memberships, organizations, sessions};
use platform::identity_changes::Mark;
use uuid::Uuid;

use crate::http::rights::Role;

/// Whether answering a request may have changed who may do what: every change made through
/// the API except an agent's own calls, and the single sign-on callback (a `GET` that signs a
/// person in and may set their role).
pub fn may_change_identity(method: &poem::http::Method, path: &str) -> bool {
    (!method.is_safe() && !path.starts_with("/v1/agent/")) || path == "/v1/auth/sso/callback"
}

/// Answers a change only once every api replica has heard of it, so that the caller's next
/// request is decided on it wherever it lands (`platform::identity_changes`; SQLite's count is
/// in the database already, so there is nothing to wait for).
#[derive(Clone)]
pub struct SettleChanges {
    changes: platform::identity_changes::IdentityChanges,
    pool: platform::db::Pool,
}

impl SettleChanges {
    pub fn new(db: &platform::db::Database) -> SettleChanges {
        SettleChanges {
            changes: db.identity.clone(),
            pool: db.pool.clone(),
        }
    }
}

impl<E: poem::Endpoint> poem::Middleware<E> for SettleChanges {
    type Output = SettleChangesEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        SettleChangesEndpoint {
            inner,
            settle: self.clone(),
        }
    }
}

pub struct SettleChangesEndpoint<E> {
    inner: E,
    settle: SettleChanges,
}

impl<E: poem::Endpoint> poem::Endpoint for SettleChangesEndpoint<E> {
    type Output = poem::Response;

    async fn call(&self, req: poem::Request) -> poem::Result<Self::Output> {
        let pool = match &self.settle.pool {
            platform::db::Pool::Postgres(pool)
                if may_change_identity(req.method(), req.uri().path()) =>
            {
                Some(pool)
            }
            _ => None,
        };
        let answer = self
            .inner
            .call(req)
            .await
            .map(poem::IntoResponse::into_response);
        // A request answered 503 because the database could not serve it changed nothing that
        // is answered: waiting for the replicas would only wait for the same database again
        // (another 5 s for a pooled connection while Postgres is down), past the bound on a
        // 503's wait.
        let status = match &answer {
            Ok(response) => response.status(),
            Err(err) => err.status(),
        };
        let refused = status == poem::http::StatusCode::SERVICE_UNAVAILABLE;
        if let Some(pool) = pool.filter(|_| !refused) {
            // Boxed: its statements' state would otherwise make every request's future larger.
            let settled = Box::pin(self.settle.changes.settle(pool)).await;
            if let Err(err) = settled {
                tracing::warn!(error = %err, "could not wait for the api replicas to hear of a change");
            }
        }
        answer
    }
}

/// The longest an answer is kept.
pub const LIFETIME: Duration = Duration::from_secs(10);
/// The most answers of one kind kept (the least recently used go first).
const CAPACITY: u64 = 100_000;

/// A session and its account.
#[derive(Clone, Debug)]
pub struct SessionAnswer {
    pub session: sessions::Model,
    pub account: accounts::Model,
}

/// An API token, the account it acts for and that account's role in the token's organization.
#[derive(Clone, Debug)]
pub struct TokenAnswer {
    pub token: api_tokens::Model,
    pub account: accounts::Model,
    pub creator_role: Role,
}

/// The caller's organizations with their roles, and the plans in force (`GET /v1/me`).
#[derive(Clone, Debug)]
pub struct MineAnswer {
    pub memberships: Vec<(memberships::Model, organizations::Model)>,
    pub plans: domain::billing::PlansOf,
}

/// One kind of answer, each kept under the generation it was read in.
pub struct Shelf<K, V> {
    kept: moka::sync::Cache<K, (u64, Arc<V>)>,
}

impl<K: Hash + Eq + Send + Sync + 'static, V: Send + Sync + 'static> Shelf<K, V> {
    fn new() -> Self {
        Shelf {
            kept: moka::sync::Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(LIFETIME)
                .build(),
        }
    }

    /// The answer for `key`, if one is kept and nothing has changed between its read and
    /// `mark` (the asking request's).
    pub fn get(&self, mark: Option<Mark>, key: &K) -> Option<Arc<V>> {
        let found = self.find(mark, key);
        platform::metrics::metrics().identity_lookup(found.is_some());
        found
    }

    fn find(&self, mark: Option<Mark>, key: &K) -> Option<Arc<V>> {
        let mark = mark?;
        let (generation, value) = self.kept.get(key)?;
        (generation == mark.generation()).then_some(value)
    }

    /// Keeps `value`, read after `mark`, for requests marked with the same generation.
    pub fn keep(&self, mark: Option<Mark>, key: K, value: V) -> Arc<V> {
        let value = Arc::new(value);
        if let Some(mark) = mark {
            self.kept.insert(key, (mark.generation(), value.clone()));
        }
        value
    }
}

/// Every kind of answer; one per process, in the application state.
pub struct IdentityCache {
    /// By the hash of the session cookie.
    pub sessions: Shelf<Vec<u8>, SessionAnswer>,
    /// By the hash of the API token.
    pub tokens: Shelf<Vec<u8>, TokenAnswer>,
    /// A person's organization and role there, by account and the organization's slug.
    pub places: Shelf<(Uuid, String), (organizations::Model, Role)>,
    /// An organization by its slug (what an API token's requests need).
    pub organizations: Shelf<String, organizations::Model>,
    /// A caller's organizations, by account and, for an API token, its organization.
    pub mine: Shelf<(Uuid, Option<Uuid>), MineAnswer>,
    /// The plan in force, by organization.
    pub plans: Shelf<Uuid, domain::billing::Plan>,
    /// Credentials whose last use a request is writing now.
    pub touches: Touches,
}

/// The credentials (hashes) whose `last_seen_at` or `last_used_at` a request of this process is
/// writing now. When a credential's minute is up, every request it makes meanwhile finds it due;
/// the first writes it and the rest go on without, instead of queueing one update each behind
/// the row's lock (a client with 16 requests at once wrote it 16 times).
#[derive(Default)]
pub struct Touches {
    writing: std::sync::Mutex<std::collections::HashSet<Vec<u8>>>,
}

impl Touches {
    /// The right to write `credential`'s last use, unless another request is writing it; given
    /// back when the claim drops (the write done, failed or abandoned).
    pub fn claim(&self, credential: &[u8]) -> Option<TouchClaim<'_>> {
        let mut writing = self.writing.lock().ok()?;
        writing.insert(credential.to_vec()).then(|| TouchClaim {
            touches: self,
            credential: credential.to_vec(),
        })
    }
}

/// A request's claim on writing a credential's last use ([`Touches::claim`]).
pub struct TouchClaim<'a> {
    touches: &'a Touches,
    credential: Vec<u8>,
}

impl Drop for TouchClaim<'_> {
    fn drop(&mut self) {
        if let Ok(mut writing) = self.touches.writing.lock() {
            writing.remove(&self.credential);
        }
    }
}

impl IdentityCache {
    /// The plan in force in organization `org_id` (`domain::billing::plan_of`, kept like the rest).
    /// `mark` is the asking request's ([`crate::http::access::Caller::mark`]).
    pub async fn plan_of(
        &self,
        state: &crate::AppState,
        mark: Option<Mark>,
        org_id: Uuid,
    ) -> Result<domain::billing::Plan, sea_orm::DbErr> {
        if let Some(kept) = self.plans.get(mark, &org_id) {
            return Ok(kept.as_ref().clone());
        }
        let plan = domain::billing::plan_of(
            &state.db.orm,
            org_id.into(),
            &domain::billing::default_plan(&state.config),
        )
        .await?;
        Ok(self.plans.keep(mark, org_id, plan).as_ref().clone())
    }
}

impl Default for IdentityCache {
    fn default() -> Self {
        IdentityCache {
            sessions: Shelf::new(),
            tokens: Shelf::new(),
            places: Shelf::new(),
            organizations: Shelf::new(),
            mine: Shelf::new(),
            plans: Shelf::new(),
            touches: Touches::default(),
        }
    }
}

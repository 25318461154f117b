//! The agent side's own request limits (decisions §6: no organization limit applies to it):
//! enrolments per client address, taken before the enrolment body is read, and signed calls
//! per host, counted once the signature and nonce are verified so that nobody but the host
//! can spend its budget. Enrolments are counted in the database; signed calls where
//! organizations' limits are kept (`RATE_LIMIT_STORE`, [`rate_limit::take_configured`]).

use chrono::{DateTime, Utc};
use poem::Request;
use poem_openapi::registry::MetaHeader;
use uuid::Uuid;

use crate::{
    AppState,
    http::client_address,
    http::error::{ApiError, ErrorStatus, TooManyRequests},
    http::rate_limit::{self, Limit},
};

/// Enrolments per client address: generous, since a whole fleet may enrol from behind one
/// NAT, yet bounded.
pub const ENROL_PER_ADDRESS: Limit = Limit {
    burst: 1000,
    per_second: 50.0,
};

/// Signed calls per host: far above what a healthy agent needs (a check-in every few minutes
/// and a result per job), low enough that a stolen or looping key cannot load the service.
pub const SIGNED_PER_HOST: Limit = Limit {
    burst: 60,
    per_second: 1.0,
};

fn refuse(decision: rate_limit::Decision) -> Result<(), ApiError> {
    if decision.allowed {
        Ok(())
    } else {
        Err(ApiError::RateLimited {
            retry_after_s: decision.retry_after_s,
            limit: decision.limit,
        })
    }
}

/// Takes one enrolment from the client address's bucket (an IPv6 client's /64).
pub async fn enrolment(state: &AppState, req: &Request) -> Result<(), ApiError> {
    let decision = rate_limit::take(
        &state.db,
        &format!("enrol-ip:{}", client_address::limit_key(req)),
        ENROL_PER_ADDRESS,
        state.clock.now(),
    )
    .await?;
    refuse(decision)
}

/// Takes one signed call from the host's bucket.
pub async fn signed_call(
    state: &AppState,
    host_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let decision = rate_limit::take_configured(
        state,
        &format!("agent-host:{host_id}"),
        SIGNED_PER_HOST,
        now,
    )
    .await?;
    refuse(decision)
}

/// 429 on enrolment.
pub struct EnrolmentRateLimited;
impl ErrorStatus for EnrolmentRateLimited {
    const STATUS: u16 = 429;
    const DESCRIPTION: &'static str = "`rate-limited`: over the client address's enrolment limit \
         (burst 1,000, then 50 a second), checked before the body is read. `Retry-After` says \
         when to retry.";
    fn headers() -> Vec<MetaHeader> {
        TooManyRequests::headers()
    }
}

/// 429 on a signed agent call.
pub struct HostRateLimited;
impl ErrorStatus for HostRateLimited {
    const STATUS: u16 = 429;
    const DESCRIPTION: &'static str = "`rate-limited`: over the host's limit of signed calls \
         (burst 60, then 1 a second, shared by every agent operation). `Retry-After` says when \
         to retry.";
    fn headers() -> Vec<MetaHeader> {
        TooManyRequests::headers()
    }
}

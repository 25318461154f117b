//! The agent operations: enrol, check in, renew the certificate.

use chrono::{DateTime, Duration, Utc};
use domain::{
    HostEventKind,
    fleet::{
        check_in,
        enrolment::{self, EnrolRefusal, Machine},
        events::record_event,
    },
};
use entities::{enrollment_tokens, host_keys, hosts, json::JsonText};
use platform::ids::HostId;
use poem::{Request, RequestBody};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ApiResponse, ExtractParamOptions, OpenApi,
    payload::Json,
    registry::{MetaRequest, Registry},
    types::Type,
};
use protocol::wire::{CheckIn, CheckInAnswer, EnrollRequest, Enrolled, RenewRequest, Renewed};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, QueryFilter, QuerySelect, Set, TryIntoModel, sea_query::Expr,
};
use serde::de::DeserializeOwned;

use super::{
    body,
    limits::{self, EnrolmentRateLimited, HostRateLimited},
    signed::Signed,
    store, validate,
};
use crate::{
    AppState,
    fleet::enrollment_tokens::{TOKEN_PREFIX, usable},
    http::error::{ApiError, BadRequest, Conflict, Errors, Forbidden, Unauthorized},
    http::tags::Tag,
};
use entities::scope::{Credential, OrgScope};

/// Certificates are valid this long.
pub const CERTIFICATE_VALIDITY: Duration = Duration::days(90);
/// Renewal is accepted in the last this-long of validity.
pub const RENEWAL_WINDOW: Duration = Duration::days(30);

/// The enrolment body: strict JSON, optionally gzip, at most 64 KiB as sent and decompressed.
/// The client address's enrolment limit is taken before a byte of it is read.
pub struct EnrolmentBody<T>(pub T);

impl<'a, T: Type + DeserializeOwned + Send> ApiExtractor<'a> for EnrolmentBody<T> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        Some(body::json_request::<T>(
            "JSON, optionally `Content-Encoding: gzip`; at most 64 KiB as sent and decompressed.",
        ))
    }

    async fn from_request(
        req: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let state = AppState::of(req)?;
        limits::enrolment(state, req).await?;
        let raw = body::read(body.take()?, body::MAX_ENROLMENT, |_| Ok(())).await?;
        let decoded = body::decode(&raw, req.header("content-encoding"), body::MAX_ENROLMENT)?;
        Ok(EnrolmentBody(body::json(&decoded)?))
    }
}

#[derive(ApiResponse)]
pub enum EnrollAnswer {
    /// Enrolled. The enrollment token's use is charged on the first check-in.
    #[oai(status = 201)]
    Created(Json<Enrolled>),
}

fn csr_error(err: platform::agent_ca::CaError) -> ApiError {
    use platform::agent_ca::CaError;
    match err {
        CaError::CsrTooLarge
        | CaError::CsrMalformed
        | CaError::CsrSignatureInvalid
        | CaError::UnsupportedKey => ApiError::invalid(format!("csr: {err}")),
        other => ApiError::Internal(anyhow::anyhow!("issuing a certificate: {other}")),
    }
}

/// Issues a certificate for the host and records its key.
async fn certify<C: sea_orm::ConnectionTrait>(
    state: &AppState,
    db: &C,
    host: &hosts::Model,
    csr: &str,
    now: DateTime<Utc>,
) -> Result<platform::agent_ca::Issued, ApiError> {
    let issued = state
        .agent_ca
        .issue(
            csr,
            &HostId::from(host.id).to_string(),
            now,
            CERTIFICATE_VALIDITY,
        )
        .map_err(csr_error)?;
    host_keys::ActiveModel {
        key_id: Set(issued.serial_hex.clone()),
        host_id: Set(host.id),
        org_id: Set(host.org_id),
        public_key: Set(issued.public_key_spki_der.clone()),
        certificate: Set(issued.certificate_pem.clone()),
        not_after: Set(issued.not_after),
        revoked_at: Set(None),
        created_at: Set(now),
    }
    .insert(db)
    .await?;
    OrgScope::of(host.org_id)
        .update_rows::<hosts::Entity>()
        .col_expr(hosts::Column::CertExpiresAt, Expr::value(issued.not_after))
        .filter(hosts::Column::Id.eq(host.id))
        .exec(db)
        .await?;
    Ok(issued)
}

pub struct AgentApi;

#[OpenApi(tag = "Tag::Agent")]
impl AgentApi {
    /// Enrol a host with an enrollment token and a CSR. A token that is not usable (unknown,
    /// revoked, expired or used up: its `max_uses` counts the hosts it enrolled that are still
    /// pending as well as the uses charged) is 403 `forbidden` without saying why; a malformed CSR or
    /// facts 400; a body over 64 KiB (as sent or decompressed) 413. Limited per client address
    /// (burst 1,000, then 50 a second), checked before the body is read.
    ///
    /// The `machine_id` of a host of the token's organization: a host that never checked in
    /// (`pending`) or is `decommissioned` is re-bound to the new key (revived, pending until its
    /// first check-in) and every earlier key of it is revoked; a host that has checked in and is
    /// not decommissioned is 409 `conflict`: decommission it first, or let its agent renew with
    /// its current key.
    ///
    /// `labels` (optional) are put on a host enrolling for the first time beside the token's
    /// labels, which win where both name a key; together at most 64 (400 otherwise). A host
    /// enrolling again keeps its labels.
    ///
    /// The plan's host cap: on the free plan an organization has at most 5 hosts that are not
    /// decommissioned, and a sixth machine is 403 `plan-required` (re-enrolling a pending host
    /// does not count again; reviving a decommissioned one does). A host still pending 24 hours
    /// after enrolling is removed (audited as `host.pending_expired`), freeing its place.
    #[oai(
        path = "/v1/agent/enroll",
        method = "post",
        operation_id = "agentEnroll"
    )]
    async fn enroll(
        &self,
        state: poem::web::Data<&AppState>,
        body: EnrolmentBody<EnrollRequest>,
    ) -> Result<EnrollAnswer, Errors<(BadRequest, Forbidden, Conflict, EnrolmentRateLimited)>> {
        let request = body.0;
        validate::facts(&request.facts)?;
        let asked_labels = match &request.labels {
            Some(labels) => crate::http::input::labels("labels", labels)?,
            None => Default::default(),
        };
        let now = state.clock.now();
        let refused = || ApiError::forbidden("This enrollment token cannot enrol hosts.");
        if !platform::secrets::well_formed(TOKEN_PREFIX, request.token.trim()) {
            return Err(refused().into());
        }
        let txn = state.db.begin_write().await?;
        let mut token =
            enrollment_tokens::Entity::by_credential(platform::secrets::hash(request.token.trim()));
        if state.db.kind() == platform::config::DatabaseKind::Postgres {
            // Enrolments of one token take turns, so that `max_uses` counts each pending host
            // (SQLite's writers already take turns).
            token = token.lock_exclusive();
        }
        let token = token
            .one(&txn)
            .await?
            .filter(|t| usable(t, now))
            .ok_or_else(refused)?;
        let default_plan = domain::billing::default_plan(&state.config);
        let facts = |host: &mut hosts::ActiveModel| store::apply_facts(host, &request.facts);
        let machine = Machine {
            machine_id: &request.facts.machine_id,
            facts: &facts,
        };
        let host = enrolment::enrol_host(&txn, &token, &machine, &asked_labels, now, &default_plan)
            .await
            .map_err(refusal)?;
        let issued = certify(&state, &txn, &host, &request.csr, now).await?;
        txn.commit().await?;
        // A re-bound host's earlier keys were revoked (the nonce statement would refuse them
        // anyway; this keeps the refusal's logged reason exact).
        state.agent_keys.forget_host(host.id);
        domain::notifications::jobs::dispatch_soon(&state.queue).await;
        Ok(EnrollAnswer::Created(Json(Enrolled {
            host_id: HostId::from(host.id).to_string(),
            key_id: issued.serial_hex,
            certificate: issued.certificate_pem,
            ca_certificate: state.agent_ca.certificate_pem().to_owned(),
            expires_at: issued.not_after,
            check_in_interval_s: host.check_in_interval_s,
        })))
    }

    /// Check in: facts always, the inventory when it changed. Records the host's UTC day for
    /// billing, charges the enrollment token's use on the first check-in (403 `forbidden` when
    /// the token is used up or revoked by then), and queues re-evaluation whenever an
    /// inventory is sent (even one the host reported before). Facts naming another host's
    /// `machine_id` are 403 `forbidden`.
    ///
    /// `jobs` (decisions §20): jobs handed out before and not reported yet, again; a new job
    /// only for a host of its proposal's current wave, while the rollout is not halted and
    /// fewer than its `max_in_flight` jobs are out; a job that may reboot only while fewer than
    /// the organization's `max_concurrent_reboots` hosts are rebooting (a host over the budget
    /// gets its job with `reboot: never` now and a separate `reboot` job when a slot frees). A
    /// host is rebooting from such a job handed out until its first check-in after the job's
    /// result, at most 30 minutes. A job whose host no longer reports any of its packages as
    /// upgradable is withdrawn (`cancelled`: the host left the proposal) instead.
    ///
    /// What people are shown is bounded (400 `invalid-request` naming the field): facts,
    /// package and update fields, advisory ids, sources, severities and CVEs at most 255
    /// characters, advisory titles 1,000, advisory `url` at most 2,048 and only `https` (no
    /// user name or password in it), `agent_permissions` at most 64 entries; each update's
    /// `impact` (decisions §21) at most 1,000 `restarts`, `installs` and `removes` each, every
    /// unit, name and version 1–255 characters without control characters. An update without
    /// `impact` is stored as unknown, never as "no impact".
    #[oai(
        path = "/v1/agent/check-in",
        method = "post",
        operation_id = "agentCheckIn"
    )]
    async fn check_in(
        &self,
        state: poem::web::Data<&AppState>,
        request: Signed<CheckIn>,
    ) -> Result<Json<CheckInAnswer>, Errors<(BadRequest, Unauthorized, Forbidden, HostRateLimited)>>
    {
        let scope = request.scope();
        let Signed {
            host,
            jobs_waiting,
            body,
            ..
        } = request;
        if body.facts.machine_id != host.machine_id {
            return Err(ApiError::forbidden("facts.machine_id is not this host's").into());
        }
        validate::check_in(&body)?;
        let now = state.clock.now();
        let inventory = body.packages.is_some() || body.updates.is_some();
        // The row as this check-in leaves it; only the columns that differ are written.
        let mut next: hosts::ActiveModel = host.clone().into();
        store::apply_facts(&mut next, &body.facts)?;
        let mut next = next.try_into_model()?;
        next.reboot_required = body.reboot_required;
        if let Some(services) = &body.services_need_restart {
            next.services_need_restart = JsonText::new(services)?;
        }
        if let Some(held) = &body.held_packages {
            next.held_packages = JsonText::new(held)?;
        }
        if inventory {
            next.release_upgrade = body
                .release_upgrade
                .clone()
                .map(|offer| JsonText::new(&store::offered_upgrade(offer)))
                .transpose()?;
            next.inventory_digest = Some(body.inventory_digest.clone());
            next.last_inventory_at = Some(now);
        }
        if next != host {
            next.updated_at = now;
        }
        if check_in::touch_due(&host, now) {
            next.last_seen_at = Some(now);
            next.status = domain::HostStatus::Online.to_string();
        }
        // The first check-in after the result of a job that took a reboot slot frees it.
        if domain::proposals::dispatch::frees_reboot_slot(&host, now) {
            next.reboot_slot_until = None;
            next.reboot_slot_job = None;
        }
        let gap = check_in::after_gap(&host, now);
        // Every check-in records its UTC day, so one earlier today already did (and a new day
        // is always a touch, so the next check-in knows).
        let new_day = host.last_seen_at.map(|seen| seen.date_naive()) != Some(now.date_naive());
        let first_possible = host.last_seen_at.is_none();
        let mut first = false;
        let jobs = if first_possible || inventory || gap || new_day {
            let txn = state.db.begin_write().await?;
            // The first check-in is decided by one conditional update, so two at once cannot
            // both believe they are first.
            first = first_possible
                && scope
                    .update_rows::<hosts::Entity>()
                    .col_expr(hosts::Column::LastSeenAt, Expr::value(now))
                    .filter(hosts::Column::Id.eq(host.id))
                    .filter(hosts::Column::LastSeenAt.is_null())
                    .exec(&txn)
                    .await?
                    .rows_affected
                    == 1;
            if first
                && let Some(token_id) = host.enrollment_token_id
                && !enrolment::charge_token(&txn, scope, token_id).await?
            {
                return Err(
                    ApiError::forbidden("The enrollment token is used up or revoked.").into(),
                );
            }
            // The host's row first: an inventory changes it (`last_inventory_at`), and its lock,
            // held to the commit, keeps two check-ins of the host from comparing inventories
            // at once.
            check_in::write_host(&txn, scope, &host, &next).await?;
            if inventory && store::replace_inventory(&txn, host.id, &body).await? {
                scope
                    .update_rows::<hosts::Entity>()
                    .col_expr(
                        hosts::Column::UpdatesSeq,
                        sea_orm::ExprTrait::add(Expr::col(hosts::Column::UpdatesSeq), 1),
                    )
                    .filter(hosts::Column::Id.eq(host.id))
                    .exec(&txn)
                    .await?;
            }
            if gap {
                record_event(&txn, &next, HostEventKind::CheckedInAfterGap, None, now).await?;
            }
            if new_day {
                check_in::record_day(&txn, &next, now).await?;
            }
            let jobs = super::jobs::dispatch(&txn, &next, now).await?;
            txn.commit().await?;
            jobs
        } else {
            // The usual check-in: at most one statement writes (facts that changed, or
            // `last_seen_at` once a minute), each statement its own transaction.
            check_in::write_host(state.db.writer(), scope, &host, &next).await?;
            if jobs_waiting {
                let txn = state.db.begin_write().await?;
                let jobs = super::jobs::dispatch(&txn, &next, now).await?;
                txn.commit().await?;
                jobs
            } else {
                Vec::new()
            }
        };
        if inventory || first {
            // One evaluation per check-in that changed something: the time is in the key, so an
            // inventory that returns to an earlier digest is evaluated again.
            let key = format!(
                "evaluate:{}:{}:{}",
                host.id,
                now.timestamp_millis(),
                body.inventory_digest
            );
            state
                .queue
                .push_unique(&key, domain::fleet::jobs::EvaluateHost { host_id: host.id })
                .await?;
        }
        let send_inventory =
            next.inventory_digest.as_deref() != Some(body.inventory_digest.as_str());
        platform::metrics::metrics().checkins.inc();
        Ok(Json(CheckInAnswer {
            next_check_in_s: next.check_in_interval_s,
            jobs,
            send_inventory,
        }))
    }

    /// Renew the agent's certificate for a new key, within the last 30 days of the current
    /// one's validity (409 `invalid-state` before that). The current key keeps working until
    /// the new one is first used; from then on it is revoked, and a renewal signed with it is
    /// 401 `unauthenticated`. The same request again (same key in the CSR) before the new key
    /// is used answers the same certificate, so an agent that lost the answer can ask again.
    #[oai(
        path = "/v1/agent/certificate",
        method = "post",
        operation_id = "agentRenewCertificate"
    )]
    async fn renew(
        &self,
        state: poem::web::Data<&AppState>,
        request: Signed<RenewRequest>,
    ) -> Result<Json<Renewed>, Errors<(BadRequest, Unauthorized, Conflict, HostRateLimited)>> {
        let now = state.clock.now();
        if request.key.not_after - now > RENEWAL_WINDOW {
            return Err(ApiError::state(
                crate::http::error::StateRefusal::InvalidState,
                "Renew within the last 30 days of the certificate's validity.",
            )
            .into());
        }
        let public_key =
            platform::agent_ca::AgentCa::csr_public_key(&request.body.csr).map_err(csr_error)?;
        let txn = state.db.begin_write().await?;
        // A retry: the same key was certified by this renewal before and not used yet.
        let earlier = request
            .scope()
            .rows::<host_keys::Entity>()
            .filter(host_keys::Column::HostId.eq(request.host.id))
            .filter(host_keys::Column::KeyId.ne(request.key.key_id.as_str()))
            .filter(host_keys::Column::RevokedAt.is_null())
            .filter(host_keys::Column::CreatedAt.gte(request.key.created_at))
            .filter(host_keys::Column::PublicKey.eq(public_key))
            .one(&txn)
            .await?;
        let renewed = match earlier {
            Some(key) => Renewed {
                key_id: key.key_id,
                certificate: key.certificate,
                ca_certificate: state.agent_ca.certificate_pem().to_owned(),
                expires_at: key.not_after,
            },
            None => {
                let issued = certify(&state, &txn, &request.host, &request.body.csr, now).await?;
                Renewed {
                    key_id: issued.serial_hex,
                    certificate: issued.certificate_pem,
                    ca_certificate: state.agent_ca.certificate_pem().to_owned(),
                    expires_at: issued.not_after,
                }
            }
        };
        txn.commit().await?;
        Ok(Json(renewed))
    }
}

/// A machine not enrolled, as the api answers it.
fn refusal(refused: EnrolRefusal) -> ApiError {
    match refused {
        EnrolRefusal::CheckedIn => ApiError::Conflict(refused.to_string()),
        EnrolRefusal::TokenCannotEnrol => ApiError::forbidden(refused.to_string()),
        EnrolRefusal::TooManyLabels => ApiError::invalid(refused.to_string()),
        EnrolRefusal::PlanRequired(plan) => plan.into(),
        EnrolRefusal::Unreadable(err) => err.into(),
        EnrolRefusal::Unwritable(err) => err.into(),
        EnrolRefusal::Db(err) => err.into(),
    }
}

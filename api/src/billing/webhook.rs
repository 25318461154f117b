//! `POST /v1/payments/webhook`: the payment processor's events (decisions §9, §17).
//!
//! The signature is checked over the exact bytes received, before they are parsed; each event
//! is handled once by its id (`domain::billing::events`); owners are emailed when a payment
//! failed, through the email job.

use domain::billing::events::{self, Event};
use entities::{accounts, memberships, organizations};
use poem::{Request, RequestBody};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions, Object, OpenApi,
    param::Header,
    payload::Json,
    registry::{MetaMediaType, MetaRequest, Registry},
    types::Type,
};
use sea_orm::{ColumnTrait, QueryFilter};

use crate::{
    AppState,
    agent::body,
    http::error::{ApiError, BadRequest, Errors, NotConfigured},
    http::middleware::BODY_LIMIT,
    http::rights::Role,
    http::tags::Tag,
};
use entities::scope::OrgScope;

/// A payment processor event (only the envelope is described; the object is the processor's).
#[derive(Object)]
pub struct PaymentEvent {
    /// The event's id (`evt_…`); an event is handled at most once by it.
    pub id: String,
    /// `checkout.session.completed`, `customer.subscription.created`, `…updated`,
    /// `…deleted`, `invoice.payment_failed`; others are acknowledged and ignored.
    #[oai(rename = "type")]
    pub kind: String,
    /// Unix seconds; of two events about one subscription the newer wins.
    pub created: i64,
    pub data: PaymentEventData,
}

#[derive(Object)]
pub struct PaymentEventData {
    /// The subscription, checkout session or invoice the event is about.
    pub object: std::collections::HashMap<String, serde_json::Value>,
}

/// The request body exactly as sent (the signature covers these bytes), at most 1 MiB.
pub struct RawEvent(pub Vec<u8>);

impl<'a> ApiExtractor<'a> for RawEvent {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        PaymentEvent::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        Some(MetaRequest {
            description: Some(
                "The processor's event, byte for byte as signed; at most 1 MiB. The \
                 `Payment-Signature` header covers these exact bytes.",
            ),
            content: vec![MetaMediaType {
                content_type: "application/json",
                schema: PaymentEvent::schema_ref(),
            }],
            required: true,
        })
    }

    async fn from_request(
        _req: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        Ok(RawEvent(
            body::read(body.take()?, BODY_LIMIT, |_| Ok(())).await?,
        ))
    }
}

#[derive(Object)]
pub struct Acknowledged {
    /// Always true: the event was handled now, was handled before, or is not about this
    /// service's subscriptions.
    pub received: bool,
}

pub struct WebhookApi;

#[OpenApi(tag = "Tag::Billing")]
impl WebhookApi {
    /// The payment processor's events. No session: authenticated by `Payment-Signature:
    /// t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` over the exact bytes received,
    /// keyed by `PAYMENTS_WEBHOOK_SECRET`; several `v1` entries may appear (one matching is
    /// enough) and `t` must be within 300 s of now. Answered 200 `{"received": true}` whether
    /// the event was handled now, handled before (each event id is handled once, also when it
    /// arrives twice at the same instant), or is not about a customer of this service
    /// (ignored). A subscription event for a customer whose checkout has not arrived yet is
    /// kept and applied when it does; of two events about one subscription the newer
    /// `created` wins. 400 `invalid-request` when unsigned, badly signed, stale or not an
    /// event; 503 `not-configured` without `PAYMENTS_WEBHOOK_SECRET`.
    #[oai(
        path = "/v1/payments/webhook",
        method = "post",
        operation_id = "paymentsWebhook"
    )]
    async fn receive(
        &self,
        state: poem::web::Data<&AppState>,
        /// `t=<unix seconds>,v1=<hex HMAC-SHA256>[,v1=…]`.
        #[oai(name = "Payment-Signature")]
        signature: Header<Option<String>>,
        body: RawEvent,
    ) -> Result<Json<Acknowledged>, Errors<(BadRequest, NotConfigured)>> {
        let Some(secret) = &state.config.payments_webhook_secret else {
            return Err(ApiError::NotConfigured(
                "This deployment takes no payments: PAYMENTS_WEBHOOK_SECRET is not set.".into(),
            )
            .into());
        };
        let now = state.clock.now();
        platform::payment_signature::verify(
            secret.expose(),
            signature.0.as_deref(),
            &body.0,
            now.timestamp(),
        )
        .map_err(|e| ApiError::invalid(e.to_string()))?;
        let event = Event::parse(&body.0).ok_or_else(|| {
            ApiError::invalid(
                "The body is not a processor event: {id, type, created, data.object}.",
            )
        })?;
        let txn = state.db.begin_write().await?;
        let received = events::receive(&txn, &event, &body.0, now).await?;
        let emails = match received.payment_failed {
            Some(org_id) => payment_failed_emails(&state, &txn, OrgScope::of(org_id)).await?,
            None => Vec::new(),
        };
        txn.commit().await?;
        tracing::info!(event = %event.id, kind = %event.kind, outcome = ?received.outcome, "payment event");
        for email in emails {
            if let Err(err) = state.queue.push(email).await {
                tracing::error!(event = %event.id, error = %err, "could not queue a payment-failed email");
            }
        }
        Ok(Json(Acknowledged { received: true }))
    }
}

/// The emails telling each owner of the organization that a payment failed.
async fn payment_failed_emails<C: sea_orm::ConnectionTrait>(
    state: &AppState,
    db: &C,
    scope: OrgScope,
) -> Result<Vec<domain::notifications::jobs::SendEmail>, ApiError> {
    let Some(org) = scope.rows::<organizations::Entity>().one(db).await? else {
        return Ok(Vec::new());
    };
    let owners = scope
        .rows::<memberships::Entity>()
        .filter(memberships::Column::Role.eq(Role::Owner.as_str()))
        .find_also_related(accounts::Entity)
        .all(db)
        .await?;
    Ok(owners
        .into_iter()
        .filter_map(|(_, account)| account)
        .map(|account| {
            domain::notifications::emails::payment_failed(
                &state.config.base_url,
                &account.email,
                &org.name,
                &org.slug,
            )
        })
        .collect())
}

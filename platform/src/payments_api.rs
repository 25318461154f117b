//! The payment processor's API (decisions §17), Stripe-compatible: form-encoded requests,
//! JSON answers, `Authorization: Bearer <PAYMENTS_API_KEY>`, `Idempotency-Key` on writes that
//! must happen once. Every call goes through the one outbound client.

use reqwest::Method;
use serde_json::Value;
use url::Url;

use crate::{
    config::Config,
    outbound::{Outbound, OutboundError, read_limited},
};

/// Largest answer read from the processor.
const ANSWER_LIMIT: usize = 256 * 1024;

/// Why a call to the processor did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum PaymentsError {
    /// No answer (connect, timeout, refused destination): worth retrying.
    #[error("the payment processor did not answer: {0}")]
    Unreachable(#[from] OutboundError),
    /// 5xx or 429: worth retrying.
    #[error("the payment processor failed ({0})")]
    Failed(u16),
    /// Any other non-2xx: the request itself is wrong; retrying does not help.
    #[error("the payment processor refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
    /// A 2xx whose body is not what the API answers.
    #[error("the payment processor's answer is not understood: {0}")]
    BadAnswer(String),
}

impl PaymentsError {
    /// Whether trying again later may succeed.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            PaymentsError::Unreachable(_) | PaymentsError::Failed(_)
        )
    }
}

/// A processor API client for one deployment.
#[derive(Clone, Debug)]
pub struct PaymentsApi {
    outbound: Outbound,
    base: Url,
    key: Option<crate::config::Secret<String>>,
}

impl PaymentsApi {
    /// The client, when `PAYMENTS_API_URL` is set.
    pub fn from_config(config: &Config, outbound: &Outbound) -> Option<PaymentsApi> {
        config.payments_api_url.as_ref().map(|base| PaymentsApi {
            outbound: outbound.clone(),
            base: base.clone(),
            key: config.payments_api_key.clone(),
        })
    }

    fn url(&self, path: &str) -> Url {
        let mut url = self.base.clone();
        url.set_path(&format!("{}{path}", self.base.path().trim_end_matches('/')));
        url.set_query(None);
        url
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        form: &[(&str, String)],
        idempotency_key: Option<&str>,
    ) -> Result<Value, PaymentsError> {
        let mut request = self.outbound.request(method.clone(), &self.url(path))?;
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        if !query.is_empty() {
            request = request.query(query);
        }
        if method == Method::POST {
            request = request.form(form);
        }
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let answer = self.outbound.send(request).await?;
        let status = answer.status().as_u16();
        let body = read_limited(answer, ANSWER_LIMIT).await?;
        if (200..300).contains(&status) {
            return serde_json::from_slice(&body)
                .map_err(|e| PaymentsError::BadAnswer(e.to_string()));
        }
        if status == 429 || status >= 500 {
            return Err(PaymentsError::Failed(status));
        }
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        Err(PaymentsError::Refused { status, message })
    }

    /// The id of the active price whose lookup key is `lookup_key` (a plan's name).
    pub async fn price_for(&self, lookup_key: &str) -> Result<String, PaymentsError> {
        let answer = self
            .call(
                Method::GET,
                "/v1/prices",
                &[
                    ("lookup_keys[]", lookup_key.to_owned()),
                    ("active", "true".to_owned()),
                ],
                &[],
                None,
            )
            .await?;
        answer
            .pointer("/data/0/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| PaymentsError::Refused {
                status: 404,
                message: format!("no active price has the lookup key {lookup_key}"),
            })
    }

    /// Creates a subscription checkout session for `price`, naming the organization by its
    /// slug as `client_reference_id`; its URL.
    pub async fn checkout_session(
        &self,
        session: &CheckoutSession<'_>,
    ) -> Result<String, PaymentsError> {
        let mut form = vec![
            ("mode", "subscription".to_owned()),
            ("client_reference_id", session.slug.to_owned()),
            ("line_items[0][price]", session.price.to_owned()),
            ("success_url", session.success_url.to_owned()),
            ("cancel_url", session.cancel_url.to_owned()),
            ("metadata[org]", session.slug.to_owned()),
            ("subscription_data[metadata][org]", session.slug.to_owned()),
        ];
        if let Some(customer) = session.customer {
            form.push(("customer", customer.to_owned()));
        }
        let answer = self
            .call(Method::POST, "/v1/checkout/sessions", &[], &form, None)
            .await?;
        answer
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| PaymentsError::BadAnswer("the checkout session has no url".into()))
    }

    /// Reports `value` host-days for `customer` as one meter event, once: `identifier` is also
    /// the `Idempotency-Key`, so a repeat is the same event to the processor.
    pub async fn meter_event(&self, event: &MeterEvent<'_>) -> Result<(), PaymentsError> {
        let form = [
            ("event_name", "host_days".to_owned()),
            ("payload[stripe_customer_id]", event.customer.to_owned()),
            ("payload[value]", event.value.to_string()),
            ("identifier", event.identifier.to_owned()),
            ("timestamp", event.timestamp.to_string()),
        ];
        self.call(
            Method::POST,
            "/v1/billing/meter_events",
            &[],
            &form,
            Some(event.identifier),
        )
        .await
        .map(|_| ())
    }
}

/// What a checkout session is for.
#[derive(Clone, Debug)]
pub struct CheckoutSession<'a> {
    pub price: &'a str,
    pub slug: &'a str,
    /// The customer already linked to the organization, if any.
    pub customer: Option<&'a str>,
    pub success_url: &'a str,
    pub cancel_url: &'a str,
}

/// One day's usage of one organization.
#[derive(Clone, Debug)]
pub struct MeterEvent<'a> {
    pub customer: &'a str,
    pub value: i64,
    /// `<org>:<day>`.
    pub identifier: &'a str,
    /// Unix seconds within the day reported.
    pub timestamp: i64,
}

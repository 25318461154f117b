//! The payment processor as tests see it: events signed with the webhook scheme (checked
//! against the shared vector by `platform::payment_signature`'s own tests) and posted to the
//! service, and builders for the events of decisions §17.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::{PAYMENTS_WEBHOOK_SECRET, TestApp, TestResponse};

pub const WEBHOOK: &str = "/v1/payments/webhook";

/// The `Payment-Signature` value for `body` signed at `at`.
pub fn signature(body: &[u8], at: DateTime<Utc>) -> String {
    platform::payment_signature::sign(PAYMENTS_WEBHOOK_SECRET, at.timestamp(), body)
}

/// `customer.subscription.{created,updated,deleted}` about `subscription` of `customer`.
pub fn subscription_event(
    id: &str,
    kind: &str,
    created: i64,
    customer: &str,
    subscription: &str,
    plan: &str,
    status: &str,
) -> Value {
    json!({
        "id": id,
        "object": "event",
        "type": format!("customer.subscription.{kind}"),
        "created": created,
        "data": {"object": {
            "id": subscription,
            "object": "subscription",
            "customer": customer,
            "status": status,
            "start_date": created,
            "current_period_end": created + 30 * 86_400,
            "items": {"object": "list", "data": [
                {"id": "si_1", "price": {"id": "price_1", "lookup_key": plan}}
            ]}
        }}
    })
}

/// `checkout.session.completed` linking `customer` to the organization `slug`.
pub fn checkout_completed(id: &str, created: i64, customer: &str, slug: &str) -> Value {
    json!({
        "id": id,
        "object": "event",
        "type": "checkout.session.completed",
        "created": created,
        "data": {"object": {
            "id": format!("cs_{id}"),
            "object": "checkout.session",
            "customer": customer,
            "client_reference_id": slug,
            "mode": "subscription",
            "subscription": "sub_1"
        }}
    })
}

/// `invoice.payment_failed` for `customer`.
pub fn payment_failed(id: &str, created: i64, customer: &str) -> Value {
    json!({
        "id": id,
        "object": "event",
        "type": "invoice.payment_failed",
        "created": created,
        "data": {"object": {
            "id": format!("in_{id}"),
            "object": "invoice",
            "customer": customer,
            "subscription": "sub_1"
        }}
    })
}

impl TestApp {
    /// Posts `body` to the webhook with the given `Payment-Signature` (or none).
    pub async fn post_payment_raw(&self, body: Vec<u8>, signature: Option<&str>) -> TestResponse {
        let mut request = self
            .http
            .post(self.url(WEBHOOK))
            .header("content-type", "application/json")
            .body(body);
        if let Some(signature) = signature {
            request = request.header("payment-signature", signature);
        }
        let response = request.send().await.expect("request sent");
        TestResponse {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.expect("body read"),
        }
    }

    /// Posts `event` signed now, as the processor would.
    pub async fn post_payment_event(&self, event: &Value) -> TestResponse {
        let body = event.to_string().into_bytes();
        let signature = signature(&body, self.clock_now());
        self.post_payment_raw(body, Some(&signature)).await
    }
}

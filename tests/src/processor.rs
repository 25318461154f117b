//! A payment processor on loopback (HTTPS, signed by the test CA) that answers like the real
//! API: form-encoded requests, JSON answers, `Idempotency-Key` honoured (a repeated key gets
//! the first answer again and is not a new event). It records every request, counts the meter
//! events it accepted, and fails on demand.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use serde_json::json;

use crate::receiver::{Received, Receiver, Reply};

#[derive(Default)]
struct Books {
    /// First answers by idempotency key.
    answered: HashMap<String, Reply>,
    /// Meter events accepted, once per idempotency key: the form fields of each.
    meter_events: Vec<Vec<(String, String)>>,
    checkout_sessions: Vec<Vec<(String, String)>>,
    /// Requests to fail (500) before answering normally.
    failures: usize,
}

pub struct TestProcessor {
    pub receiver: Receiver,
    books: Arc<Mutex<Books>>,
}

fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn answer(books: &Mutex<Books>, request: &Received) -> Reply {
    let Ok(mut books) = books.lock() else {
        return Reply::Status(500, String::new());
    };
    if books.failures > 0 {
        books.failures -= 1;
        return Reply::json(
            500,
            json!({"error": {"message": "try again", "type": "api_error"}}),
        );
    }
    if request.header("authorization") != Some(&format!("Bearer {}", crate::PAYMENTS_API_KEY)) {
        return Reply::json(401, json!({"error": {"message": "bad key"}}));
    }
    let key = request.header("idempotency-key").map(str::to_owned);
    if let Some(first) = key.as_ref().and_then(|k| books.answered.get(k)) {
        return first.clone();
    }
    let form = request.form();
    let reply = match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/v1/prices") => {
            let query = request.query.clone().unwrap_or_default();
            let lookup: Vec<String> = url::form_urlencoded::parse(query.as_bytes())
                .filter(|(k, _)| k == "lookup_keys[]")
                .map(|(_, v)| v.into_owned())
                .collect();
            Reply::json(
                200,
                json!({"object": "list", "data": lookup.iter().map(|k| json!({
                    "id": format!("price_{k}"), "object": "price", "lookup_key": k, "active": true
                })).collect::<Vec<_>>()}),
            )
        }
        ("POST", "/v1/checkout/sessions") => {
            let id = format!("cs_test_{}", books.checkout_sessions.len() + 1);
            books.checkout_sessions.push(form);
            Reply::json(
                200,
                json!({"id": id, "object": "checkout.session", "url": format!("https://checkout.test/c/{id}")}),
            )
        }
        ("POST", "/v1/billing/meter_events") => {
            if field(&form, "event_name") != Some("host_days")
                || field(&form, "payload[stripe_customer_id]").is_none()
                || field(&form, "identifier").is_none()
            {
                Reply::json(400, json!({"error": {"message": "missing fields"}}))
            } else {
                let identifier = field(&form, "identifier").unwrap_or_default().to_owned();
                books.meter_events.push(form);
                Reply::json(
                    200,
                    json!({"object": "billing.meter_event", "event_name": "host_days", "identifier": identifier}),
                )
            }
        }
        _ => Reply::json(404, json!({"error": {"message": "no such route"}})),
    };
    if let Some(key) = key {
        books.answered.insert(key, reply.clone());
    }
    reply
}

impl TestProcessor {
    pub async fn start() -> TestProcessor {
        let books = Arc::new(Mutex::new(Books::default()));
        let shared = books.clone();
        let receiver = Receiver::with_handler(move |request| answer(&shared, request)).await;
        TestProcessor { receiver, books }
    }

    /// `PAYMENTS_API_URL` for it.
    pub fn url(&self) -> String {
        self.receiver.url("")
    }

    /// The next `n` requests fail with 500.
    pub fn fail_next(&self, n: usize) {
        if let Ok(mut books) = self.books.lock() {
            books.failures += n;
        }
    }

    /// The meter events accepted (once per idempotency key), in order.
    pub fn meter_events(&self) -> Vec<Vec<(String, String)>> {
        self.books
            .lock()
            .map(|b| b.meter_events.clone())
            .unwrap_or_default()
    }

    pub fn checkout_sessions(&self) -> Vec<Vec<(String, String)>> {
        self.books
            .lock()
            .map(|b| b.checkout_sessions.clone())
            .unwrap_or_default()
    }

    /// One form field.
    pub fn field(form: &[(String, String)], name: &str) -> Option<String> {
        field(form, name).map(str::to_owned)
    }
}

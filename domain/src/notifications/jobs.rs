//! The notification jobs: dispatching the outbox, one delivery attempt, a member's digest, and
//! the emails the service sends (a message, a link carrying a one-time credential).

use platform::jobs::Queue;
use serde::{Deserialize, Serialize};

/// Deliver one email.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SendEmail {
    /// Unique per message; becomes its Message-ID (and the outbox file name).
    pub id: String,
    pub to: String,
    pub subject: String,
    pub text: String,
    pub html: String,
    /// The sign-in (or other) link the message carries; logged when there is no SMTP server.
    #[serde(default)]
    pub link: Option<String>,
}

platform::job!(SendEmail, "email.send");

impl SendEmail {
    pub fn new(
        to: impl Into<String>,
        subject: impl Into<String>,
        text: String,
        html: String,
    ) -> Self {
        SendEmail {
            id: uuid::Uuid::now_v7().simple().to_string(),
            to: to.into(),
            subject: subject.into(),
            text,
            html,
            link: None,
        }
    }
}

/// Email a link that carries a one-time credential (sign-in, sign-up, invitation).
///
/// The payload names what to send, never the credential: the worker mints the token when it
/// sends the message and keeps only its hash, so the queue (whose finished rows are kept for
/// days) never holds a secret. Queued the same way whether or not the address has an account,
/// so the api's answer takes the same time for both.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SendLink {
    /// A sign-in link, sent only if an account has this address.
    SignIn { email: String },
    /// A sign-up confirmation for a new organization.
    SignUp {
        email: String,
        name: String,
        organization_name: String,
        organization_slug: String,
    },
    /// The link of a pending invitation (nothing is sent once it is accepted or revoked).
    Invitation { invitation_id: uuid::Uuid },
}

platform::job!(SendLink, "email.link");

/// Dispatch the notification outbox: every event not yet dispatched becomes one delivery per
/// matching channel, then every delivery due for an attempt gets its `notify.deliver` job.
/// Queued after a change that may have written an event, and by the scheduler whenever an
/// event or a delivery is waiting (so nothing waits for ever if that push was lost).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NotifyDispatch {
    /// The second the scheduler queued it for; absent when queued after a change.
    #[serde(default)]
    pub at: Option<String>,
}

platform::job!(NotifyDispatch, "notify.dispatch", retries = 5);

/// One attempt at one notification delivery. `attempt` is the number of attempts made before
/// it (0 for the first), so a duplicate job for an attempt already made does nothing; its
/// idempotency key is `deliver:{delivery}:{attempt}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliverNotification {
    pub delivery_id: uuid::Uuid,
    pub attempt: i32,
}

// Only for the database failing: a receiver's failure is recorded as an attempt and
// retried on the delivery's own schedule, not by the queue.
platform::job!(DeliverNotification, "notify.deliver", retries = 3);

impl DeliverNotification {
    /// The idempotency key of this attempt's job.
    pub fn key(&self) -> String {
        format!("deliver:{}:{}", self.delivery_id, self.attempt)
    }

    /// The key of this attempt's job queued again in `window` after an earlier job ended
    /// without recording it (`domain::notifications::due`).
    pub fn key_again(&self, window: i64) -> String {
        format!("{}:again:{window}", self.key())
    }
}

/// One member's digest for one period (`key`: `daily:2026-11-03`, `weekly:2026-11-02`).
/// Queued by the scheduler with the idempotency key `digest:{org}:{account}:{key}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SendDigest {
    pub org_id: uuid::Uuid,
    pub account_id: uuid::Uuid,
    pub key: String,
}

platform::job!(SendDigest, "digest.send", retries = 5);

/// Queues a dispatch of the notification outbox, after a change that may have written an
/// event. A failure is logged, not returned: the change is committed, and the scheduler
/// dispatches waiting events within seconds anyway.
pub async fn dispatch_soon(queue: &Queue) {
    if let Err(err) = queue.push(NotifyDispatch::default()).await {
        tracing::warn!(error = %err, "could not queue a notification dispatch; the scheduler will");
    }
}

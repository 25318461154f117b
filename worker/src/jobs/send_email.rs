//! `email.send`: deliver one email. A refused address aborts at once; a failing server is
//! retried with backoff, and after the last retry the job ends `Failed` with the error kept.

use apalis::prelude::{AbortError, Attempt, BoxDynError, Data};
use domain::notifications::jobs::SendEmail;

use crate::{Deps, mailer::DeliveryError};

pub async fn run(email: SendEmail, deps: Data<Deps>, attempt: Attempt) -> Result<(), BoxDynError> {
    match deps.mailer.deliver(&email).await {
        Ok(()) => {
            tracing::info!(id = %email.id, attempt = attempt.current(), "email delivered");
            Ok(())
        }
        Err(err @ DeliveryError::Permanent(_)) => {
            tracing::warn!(id = %email.id, error = %err, "email undeliverable, not retrying");
            Err(AbortError::new(err).into())
        }
        Err(err @ DeliveryError::Transient(_)) => {
            tracing::warn!(id = %email.id, attempt = attempt.current(), error = %err, "email delivery failed");
            Err(err.into())
        }
    }
}

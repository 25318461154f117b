//! Email delivery: SMTP through lettre when `SMTP_URL` is set; otherwise each message is written
//! to `data/outbox/<id>.eml` and its link is logged, so a fresh clone can sign in without a mail
//! server.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use domain::notifications::jobs::SendEmail;
use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
    message::{Mailbox, MultiPart, header::MessageId},
};
use platform::config::Config;

#[derive(Clone)]
pub enum Mailer {
    Smtp {
        transport: AsyncSmtpTransport<Tokio1Executor>,
        from: Mailbox,
    },
    Outbox {
        dir: PathBuf,
        from: Mailbox,
    },
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The SMTP URL may carry credentials: never print it.
        match self {
            Mailer::Smtp { .. } => f.write_str("Mailer::Smtp"),
            Mailer::Outbox { dir, .. } => write!(f, "Mailer::Outbox({})", dir.display()),
        }
    }
}

/// Why a delivery failed, and whether trying again can help.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The message itself is unusable (a bad address): retrying cannot help.
    #[error("undeliverable: {0}")]
    Permanent(#[source] Cause),
    /// The server or the disk failed: retry later.
    #[error("delivery failed: {0}")]
    Transient(#[source] Cause),
}

/// What failed, kept as the error that said so.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    #[error("the recipient address is not valid")]
    Recipient(#[source] lettre::address::AddressError),
    #[error("the message cannot be built: {0}")]
    Message(#[source] lettre::error::Error),
    #[error("{0}")]
    Smtp(#[source] lettre::transport::smtp::Error),
    #[error("writing {}: {source}", .path.display())]
    Outbox {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The invitation's organization was deleted before its link went out.
    #[error("the organization is gone")]
    OrganizationGone,
}

impl Mailer {
    pub fn from_config(config: &Config) -> anyhow::Result<Mailer> {
        let from = config.email_from.clone();
        match &config.smtp_url {
            Some(url) => {
                let transport =
                    AsyncSmtpTransport::<Tokio1Executor>::from_url(url.expose().as_str())
                        .context("SMTP_URL")?
                        .timeout(Some(Duration::from_secs(20)))
                        .build();
                Ok(Mailer::Smtp { transport, from })
            }
            None => Ok(Mailer::Outbox {
                dir: config.data_dir().join("outbox"),
                from,
            }),
        }
    }

    fn build(&self, email: &SendEmail, recipients: &[String]) -> Result<Message, DeliveryError> {
        let from = match self {
            Mailer::Smtp { from, .. } | Mailer::Outbox { from, .. } => from.clone(),
        };
        let domain = from.email.domain().to_owned();
        let mut builder = Message::builder().from(from);
        for recipient in recipients {
            let to: Mailbox = recipient
                .parse()
                .map_err(|e| DeliveryError::Permanent(Cause::Recipient(e)))?;
            builder = builder.to(to);
        }
        builder
            .subject(email.subject.clone())
            .header(MessageId::from(format!("<{}@{domain}>", email.id)))
            .multipart(MultiPart::alternative_plain_html(
                email.text.clone(),
                email.html.clone(),
            ))
            .map_err(|e| DeliveryError::Permanent(Cause::Message(e)))
    }

    pub async fn deliver(&self, email: &SendEmail) -> Result<(), DeliveryError> {
        self.deliver_to(email, std::slice::from_ref(&email.to))
            .await
    }

    /// Delivers `email` as one message to every address of `recipients` (an email channel's
    /// list), so a retry never sends a partial list twice.
    pub async fn deliver_to(
        &self,
        email: &SendEmail,
        recipients: &[String],
    ) -> Result<(), DeliveryError> {
        let message = self.build(email, recipients)?;
        match self {
            Mailer::Smtp { transport, .. } => {
                transport.send(message).await.map_err(|e| {
                    if e.is_permanent() {
                        DeliveryError::Permanent(Cause::Smtp(e))
                    } else {
                        DeliveryError::Transient(Cause::Smtp(e))
                    }
                })?;
            }
            Mailer::Outbox { dir, .. } => {
                let outbox = |path: &std::path::Path| {
                    let path = path.to_owned();
                    move |source| DeliveryError::Transient(Cause::Outbox { path, source })
                };
                tokio::fs::create_dir_all(dir)
                    .await
                    .map_err(outbox(dir.as_path()))?;
                let path = dir.join(format!("{}.eml", email.id));
                tokio::fs::write(&path, message.formatted())
                    .await
                    .map_err(outbox(path.as_path()))?;
                match &email.link {
                    Some(link) => tracing::info!(
                        to = %email.to, subject = %email.subject, %link, file = %path.display(),
                        "no SMTP_URL: email written to the outbox"
                    ),
                    None => tracing::info!(
                        to = %email.to, subject = %email.subject, file = %path.display(),
                        "no SMTP_URL: email written to the outbox"
                    ),
                }
            }
        }
        Ok(())
    }
}

//! The service, over HTTP: enrolment (unsigned) and every other call signed per RFC 9421 with
//! the agent's key ([`protocol::signature`]). One small client: rustls with the system's
//! roots, plus `FLEET_AGENT_CA_FILE` for a private CA; every request has a deadline, so a
//! server that hangs costs a minute, not the agent; answers are read to a bound.

use std::time::Duration;

use anyhow::Context;
use flate2::{Compression, write::GzEncoder};
use protocol::signature::{Outgoing, Signer, SigningKey};
use serde::{Serialize, de::DeserializeOwned};

/// Connecting may take this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Bodies larger than this are sent gzip-compressed (the service accepts gzip).
const GZIP_FROM: usize = 16 * 1024;
/// The largest answer read: a check-in answer holds at most 20 jobs.
const MAX_ANSWER: usize = 8 * 1024 * 1024;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No answer: the service could not be reached, or did not answer in time.
    #[error("the service could not be reached: {0}")]
    Unreachable(String),
    /// The service answered with an error status.
    #[error("the service answered {status}: {detail}")]
    Refused {
        status: u16,
        /// The problem's `detail` (or the start of the body).
        detail: String,
        /// `Retry-After`, in seconds, when the service sent one.
        retry_after: Option<u64>,
    },
    /// The answer was not what the protocol says.
    #[error("the service's answer could not be read: {0}")]
    Unreadable(String),
    /// The request could not be made (signing, encoding).
    #[error("{0}")]
    Local(String),
}

impl CallError {
    /// Whether trying again later may help (unreachable, 408, 429, 5xx).
    pub fn transient(&self) -> bool {
        match self {
            CallError::Unreachable(_) | CallError::Unreadable(_) => true,
            CallError::Refused { status, .. } => *status == 408 || *status == 429 || *status >= 500,
            CallError::Local(_) => false,
        }
    }

    pub fn retry_after(&self) -> Option<u64> {
        match self {
            CallError::Refused { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Signs as the enrolled host.
pub struct Identity<'a> {
    pub key: &'a SigningKey,
    pub key_id: &'a str,
}

pub struct Client {
    http: reqwest::Client,
    base: url::Url,
    authority: String,
}

impl Client {
    /// A client for the service at `server` (`https://…`, or `http://` for a service on this
    /// machine or in tests), trusting `FLEET_AGENT_CA_FILE` besides the system's roots; a call
    /// may take `timeout`.
    pub fn new(server: &str, timeout: Duration) -> anyhow::Result<Client> {
        let base = url::Url::parse(server).with_context(|| format!("{server:?} is not a URL"))?;
        if !matches!(base.scheme(), "https" | "http") || base.host_str().is_none() {
            anyhow::bail!("{server:?} is not an https:// (or http://) address");
        }
        let host = base.host_str().unwrap_or_default().to_ascii_lowercase();
        let authority = match base.port() {
            Some(port) => format!("{host}:{port}"),
            None => host,
        };
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("fleet-agent/", env!("CARGO_PKG_VERSION")));
        if let Some(file) = std::env::var_os("FLEET_AGENT_CA_FILE") {
            let pem = std::fs::read(&file).with_context(|| {
                format!("reading FLEET_AGENT_CA_FILE {}", file.to_string_lossy())
            })?;
            let roots = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| anyhow::anyhow!("FLEET_AGENT_CA_FILE: {e}"))?;
            if roots.is_empty() {
                anyhow::bail!("FLEET_AGENT_CA_FILE holds no PEM certificate");
            }
            builder = builder.tls_certs_merge(roots);
        }
        let http = builder.build().context("building the HTTP client")?;
        Ok(Client {
            http,
            base,
            authority,
        })
    }

    fn url(&self, path: &str) -> Result<url::Url, CallError> {
        let base = self.base.as_str().trim_end_matches('/');
        url::Url::parse(&format!("{base}{path}")).map_err(|e| CallError::Local(e.to_string()))
    }

    /// An unsigned POST (enrolment).
    pub async fn post<B: Serialize, A: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<A, CallError> {
        let bytes = serde_json::to_vec(body).map_err(|e| CallError::Local(e.to_string()))?;
        let request = self
            .http
            .post(self.url(path)?)
            .header("content-type", "application/json")
            .body(bytes);
        let text = self.send(request).await?;
        serde_json::from_slice(&text).map_err(|e| CallError::Unreadable(e.to_string()))
    }

    /// A signed POST whose answer is JSON.
    pub async fn post_signed<B: Serialize, A: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        identity: &Identity<'_>,
    ) -> Result<A, CallError> {
        let text = self.post_signed_raw(path, body, identity).await?;
        serde_json::from_slice(&text).map_err(|e| CallError::Unreadable(e.to_string()))
    }

    /// A signed POST; the answer's bytes.
    pub async fn post_signed_raw<B: Serialize>(
        &self,
        path: &str,
        body: &B,
        identity: &Identity<'_>,
    ) -> Result<Vec<u8>, CallError> {
        let json = serde_json::to_vec(body).map_err(|e| CallError::Local(e.to_string()))?;
        let (bytes, gzip) = if json.len() >= GZIP_FROM {
            let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
            std::io::Write::write_all(&mut encoder, &json)
                .map_err(|e| CallError::Local(e.to_string()))?;
            let compressed = encoder
                .finish()
                .map_err(|e| CallError::Local(e.to_string()))?;
            (compressed, true)
        } else {
            (json, false)
        };
        let url = self.url(path)?;
        let nonce = format!("{:032x}", rand::random::<u128>());
        let headers = protocol::signature::sign(
            &Outgoing {
                method: "POST",
                authority: &self.authority,
                path: url.path(),
                query: url.query(),
                body: &bytes,
            },
            &Signer {
                key: identity.key,
                key_id: identity.key_id,
                created: crate::now().timestamp(),
                nonce: &nonce,
            },
        )
        .map_err(|e| CallError::Local(format!("signing the request: {e}")))?;
        let mut request = self
            .http
            .post(url)
            .header("content-type", "application/json");
        for (name, value) in headers.pairs() {
            request = request.header(name, value);
        }
        if gzip {
            request = request.header("content-encoding", "gzip");
        }
        self.send(request.body(bytes)).await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Vec<u8>, CallError> {
        let mut response = request
            .send()
            .await
            .map_err(|e| CallError::Unreachable(chain(&e.without_url())))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_ANSWER {
                        return Err(CallError::Unreadable(format!(
                            "the answer is larger than {MAX_ANSWER} bytes"
                        )));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return Err(CallError::Unreachable(chain(&e.without_url()))),
            }
        }
        if status.is_success() {
            return Ok(body);
        }
        let detail = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("detail").and_then(|d| d.as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
        Err(CallError::Refused {
            status: status.as_u16(),
            detail,
            retry_after,
        })
    }
}

/// An error with its causes (`error sending request: … operation timed out`).
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

//! The identity provider is called through the one outbound client (decisions §13): this
//! adapts [`Outbound`] to `openidconnect`'s asynchronous HTTP client trait, so discovery, the
//! key set, the code exchange and userinfo all pass the guard on private destinations, trust
//! `OUTBOUND_CA_FILE`, and keep the timeouts and redirect rule. `openidconnect`'s own reqwest
//! feature would bring a second reqwest (0.12) without any of that.

use std::{future::Future, pin::Pin};

use openidconnect::{AsyncHttpClient, HttpRequest, HttpResponse, http};
use url::Url;

use crate::outbound::{Outbound, OutboundError, read_limited};

/// The largest answer read from an identity provider (discovery documents and key sets are a
/// few kilobytes).
pub const MAX_ANSWER: usize = 1024 * 1024;

impl<'c> AsyncHttpClient<'c> for Outbound {
    type Error = OutboundError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, OutboundError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let url = Url::parse(&parts.uri.to_string())
                .map_err(|_| OutboundError::Refused("not a URL".into()))?;
            let mut builder = self.request(parts.method, &url)?;
            for (name, value) in &parts.headers {
                builder = builder.header(name, value);
            }
            let response = self.send(builder.body(body)).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = read_limited(response, MAX_ANSWER).await?;
            let mut answer = http::Response::builder().status(status);
            if let Some(map) = answer.headers_mut() {
                *map = headers;
            }
            answer
                .body(body)
                .map_err(|e| OutboundError::Failed(e.to_string()))
        })
    }
}

//! The web console (decisions §22): the single-page app built from `console/` into
//! `console/dist`, embedded in the binary (rust-embed; a debug build reads the folder), and
//! served at `/` and every path that is not the API's.
//!
//! - `GET`/`HEAD` of a path outside `/v1`, `/scim`, `/healthz`, `/readyz` and `/docs` is the
//!   console's: a built file when one has that path, else `index.html`, so that the app's own
//!   routes (`/sign-in/verify?token=…`, `/orgs/acme/hosts`) load it. A missing file under
//!   `/assets/` is not a route: it goes on to the API, whose answer is the problem 404.
//! - Files under `/assets/` carry a content hash in their names and are cached for a year;
//!   everything else is revalidated (`no-cache` with an `ETag`).
//! - Every console answer carries a strict Content-Security-Policy (scripts and styles only
//!   from the service itself, no inline script, no framing) and asks browsers not to send
//!   the page's address on (the emailed links carry tokens).
//! - Text files are sent gzip-compressed to clients that accept it, compressed once and kept.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use poem::{
    Endpoint, IntoResponse, Middleware, Request, Response, Result,
    http::{Method, StatusCode, header},
};

#[derive(rust_embed::Embed)]
#[folder = "../console/dist"]
struct Built;

/// The policy every console answer carries. `style-src 'self'` alone: the app sets styles
/// through the DOM (allowed), never with inline `<style>` or `style` attributes in markup.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; \
    manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const IMMUTABLE: &str = "public, max-age=31536000, immutable";
const REVALIDATE: &str = "no-cache";

/// Whether `path` belongs to the API (or the probes and docs) rather than the console.
pub fn is_api_path(path: &str) -> bool {
    ["/v1", "/scim", "/healthz", "/readyz", "/docs"]
        .iter()
        .any(|prefix| {
            path.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

/// The content type of a built file, by its extension.
fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json" | "map") => "application/json",
        Some("webmanifest") => "application/manifest+json",
        Some("txt") => "text/plain; charset=utf-8",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

fn compressible(path: &str) -> bool {
    matches!(
        path.rsplit_once('.').map(|(_, ext)| ext),
        Some("html" | "js" | "css" | "svg" | "json" | "map" | "txt" | "webmanifest")
    )
}

/// Serves the console in front of the API.
#[derive(Clone, Default)]
pub struct Console {
    /// gzip of each compressible file, made on first request.
    gzipped: Arc<Mutex<HashMap<String, Arc<Vec<u8>>>>>,
}

impl Console {
    fn gzip(&self, path: &str, data: &[u8]) -> Option<Arc<Vec<u8>>> {
        if let Ok(cache) = self.gzipped.lock()
            && let Some(found) = cache.get(path)
        {
            return Some(found.clone());
        }
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut encoder, data).ok()?;
        let compressed = Arc::new(encoder.finish().ok()?);
        if let Ok(mut cache) = self.gzipped.lock() {
            cache.insert(path.to_owned(), compressed.clone());
        }
        Some(compressed)
    }

    /// The console's answer to `req`, or `None` when the request is the API's.
    pub fn answer(&self, req: &Request) -> Option<Response> {
        if !matches!(*req.method(), Method::GET | Method::HEAD) {
            return None;
        }
        let path = req.uri().path();
        if is_api_path(path) {
            return None;
        }
        let wanted = path.trim_start_matches('/');
        let (name, file) = match Built::get(wanted).filter(|_| !wanted.is_empty()) {
            Some(file) => (wanted, file),
            // A missing hashed file is not an app route.
            None if wanted.starts_with("assets/") => return None,
            None => ("index.html", Built::get("index.html")?),
        };
        let etag = format!(
            "\"{}\"",
            file.metadata
                .sha256_hash()
                .iter()
                .take(16)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let cache = if name.starts_with("assets/") {
            IMMUTABLE
        } else {
            REVALIDATE
        };
        let mut response = Response::builder()
            .header(header::CONTENT_TYPE, content_type(name))
            .header(header::CACHE_CONTROL, cache)
            .header(header::ETAG, etag.as_str())
            .header(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY)
            .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
            .header(header::REFERRER_POLICY, "no-referrer")
            .header(header::X_FRAME_OPTIONS, "DENY")
            .header("cross-origin-opener-policy", "same-origin")
            .header(header::VARY, "accept-encoding");
        let unchanged = req
            .headers()
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag));
        if unchanged {
            return Some(response.status(StatusCode::NOT_MODIFIED).finish());
        }
        let gzip_accepted = req
            .headers()
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(accepts_gzip);
        if gzip_accepted
            && compressible(name)
            && let Some(compressed) = self.gzip(name, &file.data)
        {
            response = response.header(header::CONTENT_ENCODING, "gzip");
            return Some(response.body(compressed.as_slice().to_vec()));
        }
        Some(response.body(file.data.into_owned()))
    }
}

/// Whether an `Accept-Encoding` value accepts gzip (and does not refuse it with `q=0`).
fn accepts_gzip(value: &str) -> bool {
    value.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or_default();
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
    })
}

impl<E: Endpoint> Middleware<E> for Console {
    type Output = ConsoleEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        ConsoleEndpoint {
            console: self.clone(),
            inner,
        }
    }
}

pub struct ConsoleEndpoint<E> {
    console: Console,
    inner: E,
}

impl<E: Endpoint> Endpoint for ConsoleEndpoint<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> Result<Self::Output> {
        match self.console.answer(&req) {
            Some(response) => Ok(response),
            None => self.inner.call(req).await.map(IntoResponse::into_response),
        }
    }
}

#[cfg(test)]
mod tests {
    use poem::http::HeaderValue;

    use super::*;

    #[test]
    fn the_api_keeps_its_paths_and_everything_else_is_the_console() {
        for api in [
            "/v1",
            "/v1/me",
            "/v1/nope",
            "/scim/v2/Users",
            "/healthz",
            "/readyz",
            "/docs",
        ] {
            assert!(is_api_path(api), "{api}");
        }
        for console in [
            "/",
            "/sign-in/verify",
            "/invitations/accept",
            "/orgs/acme/hosts",
            "/v1x",
            "/docsy",
        ] {
            assert!(!is_api_path(console), "{console}");
        }
    }

    #[test]
    fn gzip_is_sent_only_where_accepted() {
        assert!(accepts_gzip("gzip, deflate, br"));
        assert!(accepts_gzip("br;q=1.0, gzip;q=0.5"));
        assert!(accepts_gzip("*"));
        assert!(!accepts_gzip("gzip;q=0"));
        assert!(!accepts_gzip("br, identity"));
    }

    #[test]
    fn the_policy_is_a_valid_header_value() {
        assert!(HeaderValue::from_str(CONTENT_SECURITY_POLICY).is_ok());
    }
}

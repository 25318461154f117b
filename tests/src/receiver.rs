//! Real HTTPS peers for tests: a test certificate authority (its PEM file is what tests pass as
//! `OUTBOUND_CA_FILE`) and receivers on loopback that record every request and answer as the
//! test says (a status, JSON, a hang, a redirect, a huge body, or anything a closure computes).
//! Webhook receivers, chat gateways, the payment processor, changelog and feed servers and the
//! identity provider are all built on this.

use std::{
    collections::VecDeque,
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use reqwest::header::HeaderMap;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The certificate authority every test receiver's certificate chains to.
pub struct TestCa {
    /// PEM of the CA certificate.
    pub pem: String,
    /// A file holding [`TestCa::pem`]: the value for `OUTBOUND_CA_FILE`.
    pub file: PathBuf,
    server: Arc<rustls::ServerConfig>,
}

impl TestCa {
    /// The process's test CA (made once).
    pub fn get() -> &'static TestCa {
        static CA: OnceLock<TestCa> = OnceLock::new();
        CA.get_or_init(TestCa::create)
    }

    fn create() -> TestCa {
        platform::outbound::install_crypto_provider();
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "fleet test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);

        let server_key = KeyPair::generate().expect("server key");
        let mut server_params =
            CertificateParams::new(vec!["localhost".to_owned()]).expect("server params");
        server_params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().expect("ip")));
        server_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let server_cert = server_params
            .signed_by(&server_key, &issuer)
            .expect("server certificate");

        let server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![server_cert.der().clone(), ca_cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )
            .expect("server TLS config");

        let pem = ca_cert.pem();
        let file = std::env::temp_dir().join(format!(
            "fleet-test-ca-{}-{}.pem",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::write(&file, &pem).expect("write the CA file");
        TestCa {
            pem,
            file,
            server: Arc::new(server),
        }
    }
}

/// A request as the receiver got it.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// When its head arrived.
    pub at: std::time::Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    /// `application/x-www-form-urlencoded` fields, in order.
    pub fn form(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(&self.body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }
}

/// How the receiver answers one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A status with a body (content type `application/json` when the body parses as JSON,
    /// else `text/plain`).
    Status(u16, String),
    /// Never answers (until the receiver stops).
    Hang,
    /// `302 Found` to `location`.
    Redirect(String),
    /// 200 with a body of this many bytes, streamed.
    Huge(usize),
    /// This reply, after a delay (an archive's latency).
    Delayed(Duration, Box<Reply>),
    /// A status with headers and a body.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Status(200, String::new())
    }

    pub fn json(status: u16, value: serde_json::Value) -> Reply {
        Reply::Status(status, value.to_string())
    }
}

type Handler = dyn Fn(&Received) -> Reply + Send + Sync;

struct Shared {
    received: Mutex<Vec<Received>>,
    /// Replies to use first, in order; then `handler`.
    queued: Mutex<VecDeque<Reply>>,
    handler: Box<Handler>,
    notify: tokio::sync::Notify,
}

/// An HTTPS server on loopback, signed by [`TestCa`].
pub struct Receiver {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Receiver {
    /// A receiver that answers 200 to everything.
    pub async fn start() -> Receiver {
        Self::with_handler(|_| Reply::ok()).await
    }

    /// A receiver that answers each request with `handler`'s reply.
    pub async fn with_handler(
        handler: impl Fn(&Received) -> Reply + Send + Sync + 'static,
    ) -> Receiver {
        let ca = TestCa::get();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let shared = Arc::new(Shared {
            received: Mutex::new(Vec::new()),
            queued: Mutex::new(VecDeque::new()),
            handler: Box::new(handler),
            notify: tokio::sync::Notify::new(),
        });
        let stop = CancellationToken::new();
        let acceptor = tokio_rustls::TlsAcceptor::from(ca.server.clone());
        {
            let shared = shared.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    let accepted = tokio::select! {
                        _ = stop.cancelled() => break,
                        accepted = listener.accept() => accepted,
                    };
                    let Ok((tcp, _)) = accepted else { continue };
                    let acceptor = acceptor.clone();
                    let shared = shared.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = service_fn(move |request| {
                            let shared = shared.clone();
                            let stop = stop.clone();
                            async move { Ok::<_, Infallible>(answer(&shared, &stop, request).await) }
                        });
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            });
        }
        Receiver { addr, shared, stop }
    }

    /// `https://localhost:{port}{path}`
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    /// Answers the next requests with these replies, in order, before the handler's.
    pub fn queue(&self, replies: impl IntoIterator<Item = Reply>) {
        if let Ok(mut queued) = self.shared.queued.lock() {
            queued.extend(replies);
        }
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared
            .received
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Waits until `count` requests have arrived; fails the test after `timeout`.
    pub async fn wait_for(&self, count: usize, timeout: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.notify.notified();
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "expected {count} requests within {timeout:?}, got {}",
                    self.received().len()
                );
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn answer(
    shared: &Shared,
    stop: &CancellationToken,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let at = std::time::Instant::now();
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let received = Received {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        body,
        at,
    };
    let reply = shared
        .queued
        .lock()
        .ok()
        .and_then(|mut q| q.pop_front())
        .unwrap_or_else(|| (shared.handler)(&received));
    if let Ok(mut all) = shared.received.lock() {
        all.push(received);
    }
    shared.notify.notify_waiters();
    let mut reply = reply;
    while let Reply::Delayed(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    let response = |status: u16, headers: Vec<(String, String)>, body: Vec<u8>| {
        let mut builder = Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        builder
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
    };
    match reply {
        Reply::Status(status, body) => {
            let kind = if serde_json::from_str::<serde_json::Value>(&body).is_ok() {
                "application/json"
            } else {
                "text/plain"
            };
            response(
                status,
                vec![("content-type".into(), kind.into())],
                body.into_bytes(),
            )
        }
        Reply::Hang => {
            stop.cancelled().await;
            response(503, Vec::new(), Vec::new())
        }
        Reply::Redirect(location) => response(302, vec![("location".into(), location)], Vec::new()),
        Reply::Huge(size) => response(200, Vec::new(), vec![b'x'; size]),
        Reply::Full {
            status,
            headers,
            body,
        } => response(status, headers, body),
        Reply::Delayed(..) => response(500, Vec::new(), Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use platform::outbound::{Outbound, OutboundError, OutboundSettings, read_limited};
    use reqwest::Method;

    use super::*;

    fn client() -> Outbound {
        Outbound::new(&OutboundSettings {
            extra_roots_pem: Some(TestCa::get().pem.clone().into_bytes()),
            allow_private: true,
            proxy: None,
        })
        .expect("client")
    }

    #[tokio::test]
    async fn the_outbound_client_trusts_the_test_ca_and_the_receiver_records() {
        let receiver = Receiver::start().await;
        receiver.queue([Reply::json(201, serde_json::json!({"ok": true}))]);
        let client = client();
        let url = url::Url::parse(&receiver.url("/hook?x=1")).expect("url");
        let request = client
            .request(Method::POST, &url)
            .expect("allowed")
            .body("hello");
        let answer = client.send(request).await.expect("answered");
        assert_eq!(answer.status().as_u16(), 201);
        let got = receiver.wait_for(1, Duration::from_secs(5)).await;
        assert_eq!(got[0].path, "/hook");
        assert_eq!(got[0].query.as_deref(), Some("x=1"));
        assert_eq!(got[0].text(), "hello");
        assert!(
            got[0]
                .header("user-agent")
                .is_some_and(|ua| ua.starts_with("fleet-update-service/"))
        );
    }

    #[tokio::test]
    async fn without_the_test_ca_the_receiver_is_not_trusted_and_private_is_refused() {
        let receiver = Receiver::start().await;
        let url = url::Url::parse(&receiver.url("/")).expect("url");
        let untrusting = Outbound::new(&OutboundSettings {
            extra_roots_pem: None,
            allow_private: true,
            proxy: None,
        })
        .expect("client");
        let request = untrusting.request(Method::GET, &url).expect("allowed");
        assert!(untrusting.send(request).await.is_err());
        let guarded = Outbound::new(&OutboundSettings {
            extra_roots_pem: Some(TestCa::get().pem.clone().into_bytes()),
            allow_private: false,
            proxy: None,
        })
        .expect("client");
        let request = guarded.request(Method::GET, &url).expect("a name");
        assert!(matches!(
            guarded.send(request).await,
            Err(OutboundError::Refused(_))
        ));
        assert!(receiver.received().is_empty());
    }

    #[tokio::test]
    async fn redirects_elsewhere_stop_and_huge_bodies_are_cut() {
        let receiver = Receiver::start().await;
        let other = Receiver::start().await;
        receiver.queue([
            Reply::Redirect(other.url("/elsewhere")),
            Reply::Redirect(receiver.url("/same")),
            Reply::ok(),
            Reply::Huge(2 * 1024 * 1024),
        ]);
        let client = client();
        let url = url::Url::parse(&receiver.url("/start")).expect("url");
        let first = client
            .send(client.request(Method::GET, &url).expect("allowed"))
            .await
            .expect("answered");
        assert_eq!(first.status().as_u16(), 302, "not followed to another host");
        let second = client
            .send(client.request(Method::GET, &url).expect("allowed"))
            .await
            .expect("answered");
        assert_eq!(second.status().as_u16(), 200, "followed on the same host");
        assert!(other.received().is_empty());
        let huge = client
            .send(client.request(Method::GET, &url).expect("allowed"))
            .await
            .expect("answered");
        assert!(matches!(
            read_limited(huge, 1024 * 1024).await,
            Err(OutboundError::TooLarge(_))
        ));
    }
}

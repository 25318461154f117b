//! The one outbound HTTP client (decisions §13): every call the service makes (notification
//! channels, the identity provider, changelogs, feeds, the payment processor) goes through it.
//!
//! - Timeouts: 5 s to connect, 15 s for the whole exchange; a `User-Agent` naming the service.
//! - Redirects are followed only to the same scheme, host and port (at most 5); a redirect
//!   elsewhere is answered to the caller as the 3xx it is, which callers treat as a failure.
//! - `OUTBOUND_CA_FILE` adds roots to the platform's trust store (private CAs, tests).
//! - Server-side request forgery guard: a destination that resolves to a loopback, private,
//!   link-local, multicast, unspecified or otherwise non-public address is refused (NAT64,
//!   Teredo and 6to4 included, decisions §18), unless `OUTBOUND_ALLOW_PRIVATE`, which never
//!   opens link-local addresses (cloud metadata). The check runs in the client's own resolver, so it holds on every
//!   connect (a DNS answer that changes after a URL was saved cannot slip past it); addresses
//!   written as IP literals, which skip the resolver, are checked before each request.
//! - Errors never carry the URL: a chat webhook URL is itself a credential.
//! - Proxies: only `OUTBOUND_PROXY`; the environment's proxy variables are ignored.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use reqwest::{
    Method, RequestBuilder, Response,
    dns::{Addrs, Name, Resolve, Resolving},
    redirect,
};
use url::{Host, Url};

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(15);
const MAX_REDIRECTS: usize = 5;

/// What the outbound client is configured with.
#[derive(Clone, Debug, Default)]
pub struct OutboundSettings {
    /// PEM certificates to trust besides the platform's roots.
    pub extra_roots_pem: Option<Vec<u8>>,
    /// Allow loopback and private destinations (on-premises deployments, tests); link-local
    /// ones (cloud metadata) never.
    pub allow_private: bool,
    /// `OUTBOUND_PROXY`: the one proxy outbound calls go through. Proxy variables of the
    /// environment (`HTTPS_PROXY`, …) are never read.
    pub proxy: Option<Url>,
}

/// Why an outbound call did not get an answer. Never names the URL.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    /// The destination is not allowed (scheme, or a non-public address).
    #[error("destination refused: {0}")]
    Refused(String),
    #[error("timed out")]
    Timeout,
    #[error("could not connect: {0}")]
    Connect(String),
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    #[error("request failed: {0}")]
    Failed(String),
}

impl From<reqwest::Error> for OutboundError {
    fn from(err: reqwest::Error) -> Self {
        let err = err.without_url();
        if err.is_timeout() {
            OutboundError::Timeout
        } else if err.is_connect() {
            // The cause chain holds the resolver's refusal when the guard said no.
            let mut cause: Option<&dyn std::error::Error> = Some(&err);
            while let Some(current) = cause {
                if let Some(refused) = current.downcast_ref::<RefusedAddress>() {
                    return OutboundError::Refused(refused.to_string());
                }
                cause = current.source();
            }
            OutboundError::Connect(chain(&err))
        } else {
            OutboundError::Failed(chain(&err))
        }
    }
}

fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(current) = cause {
        text.push_str(": ");
        text.push_str(&current.to_string());
        cause = current.source();
    }
    text
}

/// The resolver's refusal of a name whose every address is non-public.
#[derive(Debug, thiserror::Error)]
#[error("{0} resolves only to non-public addresses")]
struct RefusedAddress(String);

/// Whether `ip` is an address on the public internet (not loopback, private, link-local,
/// shared, multicast, unspecified, broadcast, documentation or reserved; IPv4 mapped into
/// IPv6 is judged as the IPv4 address it carries).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            is_public_v6(v6)
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        // Shared address space (carrier-grade NAT), 100.64.0.0/10.
        || (a == 100 && (b & 0xc0) == 64)
        // IETF protocol assignments, 192.0.0.0/24.
        || (a == 192 && b == 0 && c == 0)
        // Benchmarking, 198.18.0.0/15.
        || (a == 198 && (b & 0xfe) == 18)
        // Reserved, 240.0.0.0/4.
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        // Unique local, fc00::/7.
        || (first & 0xfe00) == 0xfc00
        // Link-local, fe80::/10.
        || (first & 0xffc0) == 0xfe80
        // Documentation, 2001:db8::/32.
        || (first == 0x2001 && ip.segments()[1] == 0x0db8)
        // IPv4-compatible (deprecated) and the discard prefix.
        || ip.segments()[..6] == [0, 0, 0, 0, 0, 0]
        || first == 0x0100
        // NAT64, 64:ff9b::/96 and the local-use 64:ff9b:1::/48: they reach IPv4 space
        // through a translator, private space included.
        || (first == 0x0064 && ip.segments()[1] == 0xff9b
            && (ip.segments()[2..6] == [0, 0, 0, 0] || ip.segments()[2] == 1))
        // Teredo, 2001::/32, and 6to4, 2002::/16: tunnels to IPv4 hosts.
        || (first == 0x2001 && ip.segments()[1] == 0)
        || first == 0x2002)
}

/// Link-local addresses (169.254.0.0/16, fe80::/10, and IPv4 link-local mapped into IPv6):
/// where cloud metadata services answer. Refused even when private destinations are allowed.
pub fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4.is_link_local();
            }
            let [a, b, c, d] = [
                v6.segments()[6] >> 8,
                v6.segments()[6] & 0xff,
                v6.segments()[7] >> 8,
                v6.segments()[7] & 0xff,
            ];
            let compatible = v6.segments()[..6] == [0, 0, 0, 0, 0, 0]
                && Ipv4Addr::new(a as u8, b as u8, c as u8, d as u8).is_link_local();
            compatible || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// Whether the guard lets the service connect to `ip`: a public address, or, with
/// `OUTBOUND_ALLOW_PRIVATE`, any address but a link-local one.
pub fn is_allowed(ip: IpAddr, allow_private: bool) -> bool {
    is_public(ip) || (allow_private && !is_link_local(ip))
}

/// Resolves through the system resolver and keeps only the addresses the guard allows. The
/// configured proxy's own name (`OUTBOUND_PROXY`, chosen by the operator) is resolved without
/// the guard: through a proxy, the destination is the proxy's to reach.
struct GuardedResolver {
    allow_private: bool,
    proxy_host: Option<String>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let allow_private = self.allow_private;
        let unguarded = self
            .proxy_host
            .as_deref()
            .is_some_and(|proxy| proxy.eq_ignore_ascii_case(&host));
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|addr| unguarded || is_allowed(addr.ip(), allow_private))
                .collect();
            if allowed.is_empty() {
                return Err(
                    Box::new(RefusedAddress(host)) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// The service's outbound HTTP client. Cheap to clone.
#[derive(Clone)]
pub struct Outbound {
    client: reqwest::Client,
    allow_private: bool,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("allow_private", &self.allow_private)
            .finish_non_exhaustive()
    }
}

/// Installs the process's TLS crypto provider (ring) once; later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Outbound {
    pub fn new(settings: &OutboundSettings) -> anyhow::Result<Outbound> {
        install_crypto_provider();
        let redirects = redirect::Policy::custom(|attempt| {
            let first = attempt.previous().first().cloned();
            if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error("too many redirects")
            } else if first.is_some_and(|first| same_origin(&first, attempt.url())) {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TOTAL_TIMEOUT)
            .user_agent(concat!(
                "fleet-update-service/",
                env!("CARGO_PKG_VERSION"),
                " (+outbound)"
            ))
            .redirect(redirects)
            .dns_resolver(Arc::new(GuardedResolver {
                allow_private: settings.allow_private,
                proxy_host: settings
                    .proxy
                    .as_ref()
                    .and_then(|p| p.host_str().map(str::to_owned)),
            }));
        // reqwest reads `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` from the environment unless
        // told otherwise: a variable set for some other program would carry the service's
        // calls past its guard.
        builder = match &settings.proxy {
            Some(proxy) => builder.proxy(
                reqwest::Proxy::all(proxy.as_str())
                    .map_err(|e| anyhow::anyhow!("OUTBOUND_PROXY: {}", e.without_url()))?,
            ),
            None => builder.no_proxy(),
        };
        if let Some(pem) = &settings.extra_roots_pem {
            let roots = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| anyhow::anyhow!("OUTBOUND_CA_FILE: {}", e.without_url()))?;
            if roots.is_empty() {
                anyhow::bail!("OUTBOUND_CA_FILE: no PEM certificate in the file");
            }
            builder = builder.tls_certs_merge(roots);
        }
        let client = builder
            .build()
            .map_err(|e| anyhow::anyhow!("building the outbound HTTP client: {e}"))?;
        Ok(Outbound {
            client,
            allow_private: settings.allow_private,
        })
    }

    /// The underlying client, for libraries that take a `reqwest::Client` (its guard still
    /// applies to names; call [`Outbound::check_url`] for the URLs given to them).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub fn allows_private(&self) -> bool {
        self.allow_private
    }

    /// Refuses a URL that is not http(s) or names a non-public IP literal. Names are checked
    /// again by the resolver at every connect.
    pub fn check_url(&self, url: &Url) -> Result<(), OutboundError> {
        check_url(url, self.allow_private)
    }

    /// The check made when a URL is saved: [`Outbound::check_url`], then the host is resolved
    /// now and refused when it does not resolve or any of its addresses is not public.
    pub async fn check_destination(&self, url: &Url) -> Result<(), OutboundError> {
        check_destination(url, self.allow_private).await
    }

    /// A request to `url`, after [`Outbound::check_url`].
    pub fn request(&self, method: Method, url: &Url) -> Result<RequestBuilder, OutboundError> {
        self.check_url(url)?;
        Ok(self.client.request(method, url.clone()))
    }

    /// Sends a request built by [`Outbound::request`].
    pub async fn send(&self, request: RequestBuilder) -> Result<Response, OutboundError> {
        Ok(request.send().await?)
    }

    /// `GET url` for a document the service reads (a feed, a manifest): the body of a 2xx
    /// answer, at most `limit` bytes.
    pub async fn fetch(&self, url: &Url, limit: usize) -> Result<Vec<u8>, FetchError> {
        let response = self.send(self.request(Method::GET, url)?).await?;
        if !response.status().is_success() {
            return Err(FetchError::Status(response.status()));
        }
        Ok(read_limited(response, limit).await?)
    }

    /// A published document (a feed, a manifest): fetched as [`Outbound::fetch`] does, then read
    /// by `parse`. The error names which of the two failed and `what` was being read.
    pub async fn fetch_document<T, E>(
        &self,
        url: &Url,
        limit: usize,
        what: &str,
        parse: impl FnOnce(&[u8]) -> Result<T, E>,
    ) -> anyhow::Result<T>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        use anyhow::Context;
        let body = self
            .fetch(url, limit)
            .await
            .with_context(|| format!("fetching {what}"))?;
        parse(&body).with_context(|| format!("reading {what}"))
    }
}

/// Why [`Outbound::fetch`] has no document.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Outbound(#[from] OutboundError),
    #[error("the server answered {0}")]
    Status(reqwest::StatusCode),
}

/// [`Outbound::check_url`] without a client: what a URL must be before it is even resolved.
pub fn check_url(url: &Url, allow_private: bool) -> Result<(), OutboundError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(OutboundError::Refused(
            "only http and https are allowed".into(),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(OutboundError::Refused(
            "credentials in the URL are not allowed".into(),
        ));
    }
    let ip = match url.host() {
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip),
        Some(Host::Domain(_)) => return Ok(()),
        None => return Err(OutboundError::Refused("the URL has no host".into())),
    };
    if is_allowed(ip, allow_private) {
        Ok(())
    } else {
        Err(OutboundError::Refused(format!(
            "{ip} is not a public address"
        )))
    }
}

/// The check made when a URL is saved (a channel, an SSO issuer), without a client: see
/// [`Outbound::check_destination`].
pub async fn check_destination(url: &Url, allow_private: bool) -> Result<(), OutboundError> {
    check_url(url, allow_private)?;
    let Some(Host::Domain(name)) = url.host() else {
        return Ok(());
    };
    let name = name.trim_end_matches('.');
    let port = url.port_or_known_default().unwrap_or(443);
    let found: Vec<SocketAddr> =
        tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((name, port)))
            .await
            .map_err(|_| OutboundError::Timeout)?
            .map_err(|_| OutboundError::Refused(format!("{name} does not resolve")))?
            .collect();
    if found.is_empty() {
        return Err(OutboundError::Refused(format!("{name} does not resolve")));
    }
    if found
        .iter()
        .any(|addr| !is_allowed(addr.ip(), allow_private))
    {
        return Err(OutboundError::Refused(format!(
            "{name} resolves to a non-public address"
        )));
    }
    Ok(())
}

/// Reads at most `limit` bytes of an answer's body; a longer body is [`OutboundError::TooLarge`]
/// and is not read further.
pub async fn read_limited(response: Response, limit: usize) -> Result<Vec<u8>, OutboundError> {
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(OutboundError::TooLarge(limit));
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > limit {
            return Err(OutboundError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads at most `limit` bytes of an answer's body and stops there (the rest is never read);
/// answers the bytes and whether the body went on past them.
pub async fn read_prefix(
    response: Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), OutboundError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_and_non_public_addresses() {
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "100.128.0.1"] {
            assert!(is_public(public.parse().expect("ip")), "{public}");
        }
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "192.0.0.1",
            "198.18.0.1",
            "240.0.0.1",
        ] {
            assert!(!is_public(private.parse().expect("ip")), "{private}");
        }
    }

    /// Decisions §18: ranges that reach private or reserved IPv4 space through translation or
    /// tunnelling, and IPv4 forms embedded in IPv6, are refused like what they carry.
    #[test]
    fn translated_tunnelled_and_embedded_addresses_are_not_public() {
        for refused in [
            // NAT64 (RFC 6052, RFC 8215), even of a public IPv4 address.
            "64:ff9b::8.8.8.8",
            "64:ff9b::10.0.0.1",
            "64:ff9b:1::a00:1",
            // Teredo and 6to4.
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2002:808:808::1",
            "2002:a00:1::1",
            // IPv4-mapped and -compatible forms of refused IPv4 addresses.
            "::ffff:100.64.0.1",
            "::ffff:169.254.169.254",
            "::a9fe:a9fe",
            "::ffff:198.18.0.1",
            // Carrier-grade NAT, IETF assignments, benchmarking, reserved.
            "100.127.255.254",
            "192.0.0.170",
            "198.19.255.255",
            "250.1.2.3",
        ] {
            assert!(!is_public(refused.parse().expect("ip")), "{refused}");
        }
        // Nearby public space stays public.
        for public in [
            "2001:4860:4860::8888",
            "2003::1",
            "64:ff9a::1",
            "100.63.255.255",
        ] {
            assert!(is_public(public.parse().expect("ip")), "{public}");
        }
    }

    /// Cloud metadata lives at link-local addresses; allowing private destinations (on-premises
    /// receivers) never opens those.
    #[test]
    fn link_local_destinations_are_refused_even_when_private_ones_are_allowed() {
        let open = Outbound::new(&OutboundSettings {
            allow_private: true,
            ..OutboundSettings::default()
        })
        .expect("client");
        let url = |s: &str| Url::parse(s).expect("url");
        for refused in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]/",
            "http://[::ffff:169.254.169.254]/",
        ] {
            assert!(
                matches!(
                    open.check_url(&url(refused)),
                    Err(OutboundError::Refused(_))
                ),
                "{refused}"
            );
        }
        assert!(open.check_url(&url("http://10.0.0.1/hook")).is_ok());
        assert!(open.check_url(&url("http://127.0.0.1/hook")).is_ok());
    }

    #[test]
    fn literal_destinations_are_checked_before_sending() {
        let guarded = Outbound::new(&OutboundSettings::default()).expect("client");
        let url = |s: &str| Url::parse(s).expect("url");
        assert!(guarded.check_url(&url("https://8.8.8.8/hook")).is_ok());
        assert!(guarded.check_url(&url("https://example.com/hook")).is_ok());
        for refused in [
            "https://127.0.0.1/hook",
            "https://[::1]/hook",
            "http://169.254.169.254/latest/meta-data",
            "https://[::ffff:10.0.0.1]/",
            "ftp://example.com/",
            "file:///etc/passwd",
            "https://user:pw@example.com/",
        ] {
            assert!(
                matches!(
                    guarded.check_url(&url(refused)),
                    Err(OutboundError::Refused(_))
                ),
                "{refused}"
            );
        }
        let open = Outbound::new(&OutboundSettings {
            allow_private: true,
            ..OutboundSettings::default()
        })
        .expect("client");
        assert!(open.check_url(&url("https://127.0.0.1/hook")).is_ok());
    }

    #[tokio::test]
    async fn names_resolving_to_loopback_are_refused_at_save_and_at_connect() {
        let guarded = Outbound::new(&OutboundSettings::default()).expect("client");
        let url = Url::parse("http://localhost:9/").expect("url");
        assert!(matches!(
            guarded.check_destination(&url).await,
            Err(OutboundError::Refused(_))
        ));
        let request = guarded
            .request(Method::GET, &url)
            .expect("a name passes the literal check");
        match guarded.send(request).await {
            Err(OutboundError::Refused(reason)) => assert!(reason.contains("localhost")),
            other => panic!("expected the resolver to refuse localhost, got {other:?}"),
        }
    }
}

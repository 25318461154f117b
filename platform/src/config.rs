//! Configuration shared by every binary (decisions §11): environment variables, each of which a
//! `--flag` of the same name (kebab-case) may override.
//!
//! Values arrive as raw strings and are validated here, so that a bad value stops the binary
//! with one line naming the variable instead of a parser's usage text or a panic.

use std::{fmt, net::SocketAddr};

use base64::Engine;
use clap::Args;
use url::Url;

/// Raw values as given on the command line or in the environment.
#[derive(Args, Clone, Default)]
pub struct RawConfig {
    /// SQLite (embedded default) or `postgres://…`. Migrations run at start.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Address the api listens on.
    #[arg(long, env = "SERVICE_BIND")]
    pub service_bind: Option<String>,
    /// Public address, used in emails, SSO redirect URI, SCIM base URL.
    #[arg(long, env = "SERVICE_BASE_URL")]
    pub service_base_url: Option<String>,
    /// Whether the api also runs the worker and scheduler in-process.
    #[arg(long, env = "EMBEDDED_WORKERS")]
    pub embedded_workers: Option<String>,
    /// `smtp://host:port`; unset writes emails to `data/outbox/*.eml`.
    #[arg(long, env = "SMTP_URL")]
    pub smtp_url: Option<String>,
    /// Sender address of every email.
    #[arg(long, env = "EMAIL_FROM")]
    pub email_from: Option<String>,
    /// Base64 of 32 bytes: the AES-256-GCM key for stored credentials.
    #[arg(long, env = "SECRETS_KEY", hide_env_values = true)]
    pub secrets_key: Option<String>,
    /// Secret the payment processor signs its webhook with.
    #[arg(long, env = "PAYMENTS_WEBHOOK_SECRET", hide_env_values = true)]
    pub payments_webhook_secret: Option<String>,
    /// Where daily usage is reported and checkout sessions are created.
    #[arg(long, env = "PAYMENTS_API_URL")]
    pub payments_api_url: Option<String>,
    /// Key for the payment processor's API.
    #[arg(long, env = "PAYMENTS_API_KEY", hide_env_values = true)]
    pub payments_api_key: Option<String>,
    /// The plan of an organization without a subscription: free, team, business or
    /// enterprise (default: `free` when PAYMENTS_WEBHOOK_SECRET is set, else `enterprise`).
    #[arg(long, env = "DEFAULT_PLAN")]
    pub default_plan: Option<String>,
    /// PEM file of certificates the outbound HTTP client trusts besides the platform's roots.
    #[arg(long, env = "OUTBOUND_CA_FILE")]
    pub outbound_ca_file: Option<String>,
    /// Let outbound calls reach loopback and private addresses (on-premises, tests); never
    /// link-local ones (cloud metadata).
    #[arg(long, env = "OUTBOUND_ALLOW_PRIVATE")]
    pub outbound_allow_private: Option<String>,
    /// The proxy every outbound call goes through (`http://host:port`). The environment's
    /// `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` are never read.
    #[arg(long, env = "OUTBOUND_PROXY", hide_env_values = true)]
    pub outbound_proxy: Option<String>,
    /// PagerDuty Events API v2 enqueue address.
    #[arg(long, env = "PAGERDUTY_EVENTS_URL")]
    pub pagerduty_events_url: Option<String>,
    /// JSON manifest of the agent release channels, read hourly.
    #[arg(long, env = "AGENT_MANIFEST_URL")]
    pub agent_manifest_url: Option<String>,

    #[arg(long, env = "CHANGELOG_URL_UBUNTU")]
    pub changelog_url_ubuntu: Option<String>,

    #[arg(long, env = "CHANGELOG_URL_DEBIAN")]
    pub changelog_url_debian: Option<String>,

    #[arg(long, env = "KEV_URL")]
    pub kev_url: Option<String>,
    /// Requests an organization may make in a burst.
    #[arg(long, env = "RATE_LIMIT_BURST")]
    pub rate_limit_burst: Option<String>,
    /// Sustained requests per second per organization.
    #[arg(long, env = "RATE_LIMIT_PER_SECOND")]
    pub rate_limit_per_second: Option<String>,
    /// Where organizations' limits are kept: `memory` (each api replica's own) or `database`.
    #[arg(long, env = "RATE_LIMIT_STORE")]
    pub rate_limit_store: Option<String>,
    /// CIDRs of the reverse proxies whose `X-Forwarded-For` is believed (comma-separated).
    #[arg(long, env = "TRUSTED_PROXIES")]
    pub trusted_proxies: Option<String>,
    /// `ip:port` of the DNS server that domain claims are looked up at (default: the system's
    /// resolvers).
    #[arg(long, env = "DNS_RESOLVER")]
    pub dns_resolver: Option<String>,
    /// `json` for JSON log lines; anything else is human-readable text.
    #[arg(long, env = "LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Address of this process's Prometheus metrics (`/metrics`); unset: no metrics served.
    #[arg(long, env = "METRICS_BIND")]
    pub metrics_bind: Option<String>,
    /// Days notification events and their deliveries are kept (default 90).
    #[arg(long, env = "RETENTION_NOTIFICATIONS_DAYS")]
    pub retention_notifications_days: Option<String>,
    /// Days host events are kept (default 180).
    #[arg(long, env = "RETENTION_HOST_EVENTS_DAYS")]
    pub retention_host_events_days: Option<String>,
    /// Days audit events are kept (default 400).
    #[arg(long, env = "RETENTION_AUDIT_EVENTS_DAYS")]
    pub retention_audit_events_days: Option<String>,
    /// Days finished host jobs are kept (default 180).
    #[arg(long, env = "RETENTION_HOST_JOBS_DAYS")]
    pub retention_host_jobs_days: Option<String>,
}

/// How long records that only grow are kept (decisions §23), in days; the hourly housekeeping
/// prunes what is older.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub notifications_days: u32,
    pub host_events_days: u32,
    pub audit_events_days: u32,
    pub host_jobs_days: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            notifications_days: 90,
            host_events_days: 180,
            audit_events_days: 400,
            host_jobs_days: 180,
        }
    }
}

/// A number of days a record is kept: 1 to 36,500.
fn parse_days(
    variable: &'static str,
    value: Option<String>,
    default: u32,
) -> Result<u32, ConfigError> {
    match non_empty(value) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|d| (1..=36_500).contains(d))
            .ok_or_else(|| {
                bad(
                    variable,
                    format!("expected a number of days from 1 to 36500, got {v:?}"),
                )
            }),
    }
}

/// A configuration value that cannot be used; its `Display` is the one line printed at start.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {variable}: {problem}")]
pub struct ConfigError {
    pub variable: &'static str,
    pub problem: String,
}

fn bad(variable: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        variable,
        problem: problem.into(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatabaseKind {
    Sqlite,
    Postgres,
}

/// A secret value: never printed, not even by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    pub fn new(value: T) -> Self {
        Self(value)
    }
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Where organizations' request limits are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateLimitStore {
    /// In each api replica's memory: no database round trip per request. With N replicas
    /// behind a balancer an organization may get up to N times its limit.
    Memory,
    /// In the database, one upsert per bucket and request: exact across any number of replicas.
    Database,
}

/// Validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub database_url: Secret<String>,
    pub database_kind: DatabaseKind,
    pub bind: SocketAddr,
    pub base_url: Url,
    pub embedded_workers: bool,
    pub smtp_url: Option<Secret<Url>>,
    pub email_from: lettre::message::Mailbox,
    pub secrets_key: Option<Secret<[u8; 32]>>,
    pub payments_webhook_secret: Option<Secret<String>>,
    pub payments_api_url: Option<Url>,
    pub payments_api_key: Option<Secret<String>>,
    /// One of [`PLAN_NAMES`] (decisions §17).
    pub default_plan: String,
    /// PEM certificates from `OUTBOUND_CA_FILE`.
    pub outbound_ca_pem: Option<Vec<u8>>,
    pub outbound_allow_private: bool,
    /// `OUTBOUND_PROXY` (it may carry credentials: never printed).
    pub outbound_proxy: Option<Secret<Url>>,
    /// Where PagerDuty channels send (Events API v2).
    pub pagerduty_events_url: Url,
    pub agent_manifest_url: Option<Url>,
    /// Changelog URL templates (decisions §16): `{component}`, `{prefix}`, `{source}`,
    /// `{version}` are filled in.
    pub changelog_url_ubuntu: String,
    pub changelog_url_debian: String,
    /// The known-exploited catalogue feed; unset, the shipped snapshot is all there is.
    pub kev_url: Option<Url>,
    pub rate_limit_burst: u32,
    pub rate_limit_per_second: f64,
    /// Where organizations' limits are kept (`RATE_LIMIT_STORE`).
    pub rate_limit_store: RateLimitStore,
    /// The reverse proxies in front of the api: only from these is `X-Forwarded-For` read.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Where SSO domain claims' TXT records are looked up (`DNS_RESOLVER`); none: the
    /// system's resolvers.
    pub dns_resolver: Option<SocketAddr>,
    pub log_json: bool,
    /// Where this process serves its Prometheus metrics (`METRICS_BIND`); none: nowhere.
    pub metrics_bind: Option<SocketAddr>,
    /// How long growing records are kept (`RETENTION_*_DAYS`).
    pub retention: Retention,
}

/// The plans, least to most privileged (`DEFAULT_PLAN` must name one; `domain::billing::Plan`
/// holds their rules).
pub const PLAN_NAMES: [&str; 4] = ["free", "team", "business", "enterprise"];

/// Where Ubuntu and Debian publish changelogs (decisions §16).
pub const CHANGELOG_URL_UBUNTU: &str = "https://changelogs.ubuntu.com/changelogs/pool/{component}/{prefix}/{source}/{source}_{version}/changelog";
pub const CHANGELOG_URL_DEBIAN: &str = "https://metadata.ftp-master.debian.org/changelogs/{component}/{prefix}/{source}/{source}_{version}_changelog";

/// A changelog URL template: an http(s) URL once filled in, naming `{source}` and `{version}`.
fn parse_template(variable: &'static str, value: &str) -> Result<String, ConfigError> {
    let value = value.trim();
    if !value.contains("{source}") || !value.contains("{version}") {
        return Err(bad(variable, "must contain {source} and {version}"));
    }
    let sample = value
        .replace("{component}", "main")
        .replace("{prefix}", "o")
        .replace("{source}", "openssl")
        .replace("{version}", "3.0.13-0ubuntu3.5");
    parse_url(variable, &sample)?;
    Ok(value.to_owned())
}

/// The public PagerDuty Events API v2 enqueue address.
pub const PAGERDUTY_EVENTS_URL: &str = "https://events.pagerduty.com/v2/enqueue";

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

fn parse_url(variable: &'static str, value: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(value).map_err(|e| bad(variable, format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(variable, "must be an http:// or https:// address"));
    }
    Ok(url)
}

/// A list of networks separated by commas or spaces; a bare address is a network of one.
fn parse_networks(variable: &'static str, value: &str) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<ipnet::IpNet>()
                .or_else(|_| item.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map(|net| net.trunc())
                .map_err(|_| {
                    bad(
                        variable,
                        format!("expected CIDRs such as 10.0.0.0/8, fd00::/8, got {item:?}"),
                    )
                })
        })
        .collect()
}

fn parse_bool(variable: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(bad(
            variable,
            format!("expected true or false, got {value:?}"),
        )),
    }
}

impl RawConfig {
    pub fn validate(self) -> Result<Config, ConfigError> {
        let database_url = non_empty(self.database_url)
            .unwrap_or_else(|| "sqlite://data/service.db?mode=rwc".to_owned());
        let database_kind = if database_url.starts_with("sqlite:") {
            DatabaseKind::Sqlite
        } else if database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://")
        {
            DatabaseKind::Postgres
        } else {
            return Err(bad(
                "DATABASE_URL",
                "must start with sqlite: or postgres:// (the value is not shown, it may hold a password)",
            ));
        };

        let bind_text = non_empty(self.service_bind).unwrap_or_else(|| "127.0.0.1:8080".to_owned());
        let bind: SocketAddr = bind_text.parse().map_err(|_| {
            bad(
                "SERVICE_BIND",
                format!("expected an address and port such as 127.0.0.1:8080, got {bind_text:?}"),
            )
        })?;

        let base_url = parse_url(
            "SERVICE_BASE_URL",
            &non_empty(self.service_base_url).unwrap_or_else(|| "http://localhost:8080".to_owned()),
        )?;

        let embedded_workers = match non_empty(self.embedded_workers) {
            Some(v) => parse_bool("EMBEDDED_WORKERS", &v)?,
            None => database_kind == DatabaseKind::Sqlite,
        };

        let smtp_url = match non_empty(self.smtp_url) {
            Some(v) => {
                let url = Url::parse(&v).map_err(|_| {
                    bad("SMTP_URL", "expected smtp://host:port or smtps://host:port")
                })?;
                if !matches!(url.scheme(), "smtp" | "smtps") || url.host_str().is_none() {
                    return Err(bad(
                        "SMTP_URL",
                        "expected smtp://host:port or smtps://host:port",
                    ));
                }
                Some(Secret(url))
            }
            None => None,
        };

        let from_text =
            non_empty(self.email_from).unwrap_or_else(|| "Service <no-reply@localhost>".to_owned());
        let email_from = from_text.parse().map_err(|_| {
            bad(
                "EMAIL_FROM",
                format!("expected an address such as \"Service <no-reply@example.com>\", got {from_text:?}"),
            )
        })?;

        let secrets_key = match non_empty(self.secrets_key) {
            Some(v) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.trim())
                    .map_err(|_| bad("SECRETS_KEY", "not valid base64"))?;
                let key: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
                    bad(
                        "SECRETS_KEY",
                        format!("must decode to 32 bytes, got {}", b.len()),
                    )
                })?;
                Some(Secret(key))
            }
            None => None,
        };

        let payments_api_url = non_empty(self.payments_api_url)
            .map(|v| parse_url("PAYMENTS_API_URL", &v))
            .transpose()?;
        let agent_manifest_url = non_empty(self.agent_manifest_url)
            .map(|v| parse_url("AGENT_MANIFEST_URL", &v))
            .transpose()?;

        let changelog_url_ubuntu = parse_template(
            "CHANGELOG_URL_UBUNTU",
            &non_empty(self.changelog_url_ubuntu)
                .unwrap_or_else(|| CHANGELOG_URL_UBUNTU.to_owned()),
        )?;
        let changelog_url_debian = parse_template(
            "CHANGELOG_URL_DEBIAN",
            &non_empty(self.changelog_url_debian)
                .unwrap_or_else(|| CHANGELOG_URL_DEBIAN.to_owned()),
        )?;
        let kev_url = non_empty(self.kev_url)
            .map(|v| parse_url("KEV_URL", &v))
            .transpose()?;

        let payments_webhook_secret = non_empty(self.payments_webhook_secret).map(Secret);
        let default_plan = match non_empty(self.default_plan) {
            Some(v) => {
                let plan = v.trim().to_ascii_lowercase();
                if !PLAN_NAMES.contains(&plan.as_str()) {
                    return Err(bad(
                        "DEFAULT_PLAN",
                        format!("expected free, team, business or enterprise, got {v:?}"),
                    ));
                }
                plan
            }
            // A deployment that takes payments starts organizations on free; one that takes
            // none (the embedded default, self-hosting) has every feature.
            None if payments_webhook_secret.is_some() => "free".to_owned(),
            None => "enterprise".to_owned(),
        };
        let outbound_ca_pem = match non_empty(self.outbound_ca_file) {
            Some(path) => {
                let pem = std::fs::read(path.trim())
                    .map_err(|e| bad("OUTBOUND_CA_FILE", format!("cannot read {path:?}: {e}")))?;
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(bad("OUTBOUND_CA_FILE", "holds no PEM certificate"));
                }
                Some(pem)
            }
            None => None,
        };
        let outbound_allow_private = match non_empty(self.outbound_allow_private) {
            Some(v) => parse_bool("OUTBOUND_ALLOW_PRIVATE", &v)?,
            None => false,
        };
        let outbound_proxy = match non_empty(self.outbound_proxy) {
            Some(raw) => {
                let url = Url::parse(raw.trim())
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
                    .ok_or_else(|| {
                        bad(
                            "OUTBOUND_PROXY",
                            "must be an http:// or https:// proxy address",
                        )
                    })?;
                Some(Secret(url))
            }
            None => None,
        };
        let pagerduty_events_url = parse_url(
            "PAGERDUTY_EVENTS_URL",
            &non_empty(self.pagerduty_events_url)
                .unwrap_or_else(|| PAGERDUTY_EVENTS_URL.to_owned()),
        )?;

        let rate_limit_burst = match non_empty(self.rate_limit_burst) {
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| {
                    bad(
                        "RATE_LIMIT_BURST",
                        format!("expected a positive integer, got {v:?}"),
                    )
                })?,
            None => 120,
        };
        let rate_limit_per_second = match non_empty(self.rate_limit_per_second) {
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite() && *n > 0.0)
                .ok_or_else(|| {
                    bad(
                        "RATE_LIMIT_PER_SECOND",
                        format!("expected a positive number, got {v:?}"),
                    )
                })?,
            None => 20.0,
        };

        let rate_limit_store = match non_empty(self.rate_limit_store).as_deref().map(str::trim) {
            None | Some("memory") => RateLimitStore::Memory,
            Some("database") => RateLimitStore::Database,
            Some(other) => {
                return Err(bad(
                    "RATE_LIMIT_STORE",
                    format!("expected memory or database, got {other:?}"),
                ));
            }
        };

        let trusted_proxies = match non_empty(self.trusted_proxies) {
            Some(v) => parse_networks("TRUSTED_PROXIES", &v)?,
            None => Vec::new(),
        };

        let dns_resolver = match non_empty(self.dns_resolver) {
            Some(v) => Some(v.trim().parse::<SocketAddr>().map_err(|_| {
                bad(
                    "DNS_RESOLVER",
                    format!("expected an address and port such as 127.0.0.1:53, got {v:?}"),
                )
            })?),
            None => None,
        };

        let log_json = match non_empty(self.log_format) {
            Some(v) => match v.trim() {
                "json" => true,
                "text" | "pretty" => false,
                _ => {
                    return Err(bad(
                        "LOG_FORMAT",
                        format!("expected json or text, got {v:?}"),
                    ));
                }
            },
            None => false,
        };

        let metrics_bind = match non_empty(self.metrics_bind) {
            Some(v) => Some(v.trim().parse::<SocketAddr>().map_err(|_| {
                bad(
                    "METRICS_BIND",
                    format!("expected an address and port such as 127.0.0.1:9090, got {v:?}"),
                )
            })?),
            None => None,
        };
        let defaults = Retention::default();
        let retention = Retention {
            notifications_days: parse_days(
                "RETENTION_NOTIFICATIONS_DAYS",
                self.retention_notifications_days,
                defaults.notifications_days,
            )?,
            host_events_days: parse_days(
                "RETENTION_HOST_EVENTS_DAYS",
                self.retention_host_events_days,
                defaults.host_events_days,
            )?,
            audit_events_days: parse_days(
                "RETENTION_AUDIT_EVENTS_DAYS",
                self.retention_audit_events_days,
                defaults.audit_events_days,
            )?,
            host_jobs_days: parse_days(
                "RETENTION_HOST_JOBS_DAYS",
                self.retention_host_jobs_days,
                defaults.host_jobs_days,
            )?,
        };

        Ok(Config {
            metrics_bind,
            retention,
            database_url: Secret(database_url),
            database_kind,
            bind,
            base_url,
            embedded_workers,
            smtp_url,
            email_from,
            secrets_key,
            payments_webhook_secret,
            payments_api_url,
            payments_api_key: non_empty(self.payments_api_key).map(Secret),
            default_plan,
            outbound_ca_pem,
            outbound_allow_private,
            outbound_proxy,
            pagerduty_events_url,
            agent_manifest_url,
            changelog_url_ubuntu,
            changelog_url_debian,
            kev_url,
            rate_limit_burst,
            rate_limit_per_second,
            rate_limit_store,
            trusted_proxies,
            dns_resolver,
            log_json,
        })
    }
}

impl Config {
    /// Configuration from defaults only, as a fresh machine sees it (tests start from this).
    pub fn defaults() -> Config {
        match RawConfig::default().validate() {
            Ok(config) => config,
            // The defaults are constants checked by `defaults_are_valid` below.
            Err(e) => unreachable!("built-in defaults are invalid: {e}"),
        }
    }

    /// What the one outbound HTTP client is built with (`OUTBOUND_CA_FILE`,
    /// `OUTBOUND_ALLOW_PRIVATE`, `OUTBOUND_PROXY`).
    pub fn outbound_settings(&self) -> crate::outbound::OutboundSettings {
        crate::outbound::OutboundSettings {
            extra_roots_pem: self.outbound_ca_pem.clone(),
            allow_private: self.outbound_allow_private,
            proxy: self.outbound_proxy.as_ref().map(|p| p.expose().clone()),
        }
    }

    /// The changelog URL template of a distribution, if it publishes changelogs.
    pub fn changelog_template(&self, distro: &str) -> Option<&str> {
        match distro {
            "ubuntu" => Some(&self.changelog_url_ubuntu),
            "debian" => Some(&self.changelog_url_debian),
            _ => None,
        }
    }

    /// The directory that holds the SQLite file and the email outbox.
    pub fn data_dir(&self) -> std::path::PathBuf {
        std::path::PathBuf::from("data")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let config = Config::defaults();
        assert_eq!(config.database_kind, DatabaseKind::Sqlite);
        assert!(config.embedded_workers);
        assert_eq!(config.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(config.rate_limit_burst, 120);
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        let raw = RawConfig {
            rate_limit_burst: Some("lots".into()),
            ..RawConfig::default()
        };
        let err = raw.validate().expect_err("must be refused");
        assert_eq!(err.variable, "RATE_LIMIT_BURST");
        assert!(
            err.to_string()
                .starts_with("configuration error: RATE_LIMIT_BURST:")
        );
    }

    #[test]
    fn trusted_proxies_are_networks_and_a_bad_one_stops_the_binary() {
        assert!(Config::defaults().trusted_proxies.is_empty());
        let raw = RawConfig {
            trusted_proxies: Some("10.0.0.0/8, 192.168.1.7 fd00::/8".into()),
            ..RawConfig::default()
        };
        let nets: Vec<String> = raw
            .validate()
            .expect("valid")
            .trusted_proxies
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(nets, ["10.0.0.0/8", "192.168.1.7/32", "fd00::/8"]);
        for wrong in ["10.0.0.0/33", "proxy.internal", "10.0.0.0/8,,nope"] {
            let raw = RawConfig {
                trusted_proxies: Some(wrong.into()),
                ..RawConfig::default()
            };
            let err = raw.validate().expect_err(wrong);
            assert_eq!(err.variable, "TRUSTED_PROXIES", "{wrong}");
        }
    }

    #[test]
    fn the_default_plan_follows_whether_payments_are_taken() {
        assert_eq!(Config::defaults().default_plan, "enterprise");
        let paying = RawConfig {
            payments_webhook_secret: Some("whsec_x".into()),
            ..RawConfig::default()
        };
        assert_eq!(paying.validate().expect("valid").default_plan, "free");
        let chosen = RawConfig {
            payments_webhook_secret: Some("whsec_x".into()),
            default_plan: Some("Team".into()),
            ..RawConfig::default()
        };
        assert_eq!(chosen.validate().expect("valid").default_plan, "team");
        let wrong = RawConfig {
            default_plan: Some("gold".into()),
            ..RawConfig::default()
        };
        assert_eq!(wrong.validate().expect_err("gold").variable, "DEFAULT_PLAN");
        let missing = RawConfig {
            outbound_ca_file: Some("/nonexistent/ca.pem".into()),
            ..RawConfig::default()
        };
        assert_eq!(
            missing.validate().expect_err("no file").variable,
            "OUTBOUND_CA_FILE"
        );
    }

    #[test]
    fn outbound_settings_default_to_guarded_and_pagerduty_to_its_public_address() {
        let config = Config::defaults();
        assert!(!config.outbound_allow_private);
        assert!(config.outbound_ca_pem.is_none());
        assert_eq!(config.pagerduty_events_url.as_str(), PAGERDUTY_EVENTS_URL);
        let wrong = RawConfig {
            outbound_allow_private: Some("sometimes".into()),
            ..RawConfig::default()
        };
        assert_eq!(
            wrong.validate().expect_err("not a bool").variable,
            "OUTBOUND_ALLOW_PRIVATE"
        );
        let not_pem = std::env::temp_dir().join(format!("not-pem-{}", std::process::id()));
        std::fs::write(&not_pem, "hello").expect("write");
        let raw = RawConfig {
            outbound_ca_file: Some(not_pem.display().to_string()),
            ..RawConfig::default()
        };
        assert_eq!(
            raw.validate().expect_err("no PEM").variable,
            "OUTBOUND_CA_FILE"
        );
        let _ = std::fs::remove_file(not_pem);
    }

    #[test]
    fn dns_resolver_is_an_address_and_port() {
        assert_eq!(Config::defaults().dns_resolver, None);
        let raw = RawConfig {
            dns_resolver: Some("127.0.0.1:5353".into()),
            ..RawConfig::default()
        };
        assert_eq!(
            raw.validate().expect("valid").dns_resolver,
            Some("127.0.0.1:5353".parse().expect("address"))
        );
        let wrong = RawConfig {
            dns_resolver: Some("dns.internal".into()),
            ..RawConfig::default()
        };
        assert_eq!(
            wrong.validate().expect_err("no port").variable,
            "DNS_RESOLVER"
        );
    }

    #[test]
    fn metrics_are_off_by_default_and_retention_follows_decisions_23() {
        let config = Config::defaults();
        assert_eq!(config.metrics_bind, None);
        assert_eq!(config.retention, Retention::default());
        assert_eq!(config.retention.audit_events_days, 400);
        let raw = RawConfig {
            metrics_bind: Some("127.0.0.1:9464".into()),
            retention_host_events_days: Some("30".into()),
            ..RawConfig::default()
        };
        let config = raw.validate().expect("valid");
        assert_eq!(
            config.metrics_bind,
            Some("127.0.0.1:9464".parse().expect("address"))
        );
        assert_eq!(config.retention.host_events_days, 30);
        for (raw, variable) in [
            (
                RawConfig {
                    metrics_bind: Some("9464".into()),
                    ..RawConfig::default()
                },
                "METRICS_BIND",
            ),
            (
                RawConfig {
                    retention_audit_events_days: Some("0".into()),
                    ..RawConfig::default()
                },
                "RETENTION_AUDIT_EVENTS_DAYS",
            ),
            (
                RawConfig {
                    retention_host_jobs_days: Some("a year".into()),
                    ..RawConfig::default()
                },
                "RETENTION_HOST_JOBS_DAYS",
            ),
        ] {
            assert_eq!(raw.validate().expect_err(variable).variable, variable);
        }
    }

    #[test]
    fn postgres_turns_embedded_workers_off_by_default() {
        let raw = RawConfig {
            database_url: Some("postgres://postgres@127.0.0.1/test".into()),
            ..RawConfig::default()
        };
        let config = raw.validate().expect("valid");
        assert_eq!(config.database_kind, DatabaseKind::Postgres);
        assert!(!config.embedded_workers);
    }

    #[test]
    fn secrets_key_must_be_32_bytes_and_is_never_printed() {
        let short = RawConfig {
            secrets_key: Some("AAAA".into()),
            ..RawConfig::default()
        };
        assert_eq!(short.validate().expect_err("short").variable, "SECRETS_KEY");
        let good = RawConfig {
            secrets_key: Some(base64::engine::general_purpose::STANDARD.encode([7u8; 32])),
            ..RawConfig::default()
        };
        let config = good.validate().expect("valid");
        assert!(!format!("{config:?}").contains("BwcH"));
    }
}

//! DNS TXT lookups for SSO domain claims (decisions §15), through a real resolver: the one
//! `DNS_RESOLVER` names (`ip:port`, UDP and TCP), or the system's (`/etc/resolv.conf`).
//!
//! A resolver is built for each lookup with its cache off, so that a record published after a
//! failed verification is seen on the next try rather than a cached "no such record".

use std::{net::SocketAddr, time::Duration};

use hickory_resolver::{
    TokioResolver,
    config::{NameServerConfig, ResolverConfig},
    net::runtime::TokioRuntimeProvider,
    proto::rr::RData,
};

/// How long one lookup may take, retries included.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a TXT lookup gave no records. Never an error of the caller's: the record is missing,
/// or DNS did not answer.
#[derive(Debug, thiserror::Error)]
pub enum TxtError {
    #[error("no TXT record at {0}")]
    NotFound(String),
    #[error("DNS did not answer for {0}: {1}")]
    Failed(String, String),
}

fn resolver(server: Option<SocketAddr>) -> Result<TokioResolver, TxtError> {
    let failed = |e: &dyn std::fmt::Display| TxtError::Failed("the resolver".into(), e.to_string());
    let mut builder = match server {
        Some(addr) => {
            let mut name_server = NameServerConfig::udp_and_tcp(addr.ip());
            for connection in &mut name_server.connections {
                connection.port = addr.port();
            }
            TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(vec![name_server]),
                TokioRuntimeProvider::default(),
            )
        }
        None => TokioResolver::builder_tokio().map_err(|e| failed(&e))?,
    };
    let options = builder.options_mut();
    options.cache_size = 0;
    options.timeout = Duration::from_secs(2);
    options.attempts = 2;
    builder.build().map_err(|e| failed(&e))
}

/// The TXT records at `name` (a fully qualified name; a final dot is added), each as the
/// strings it is made of. `server`: `DNS_RESOLVER`, or none for the system's resolvers.
pub async fn txt_records(
    server: Option<SocketAddr>,
    name: &str,
) -> Result<Vec<Vec<Vec<u8>>>, TxtError> {
    let resolver = resolver(server)?;
    let fqdn = format!("{}.", name.trim_end_matches('.'));
    let lookup = tokio::time::timeout(LOOKUP_TIMEOUT, resolver.txt_lookup(fqdn.as_str()))
        .await
        .map_err(|_| TxtError::Failed(name.to_owned(), "timed out".into()))?;
    let lookup = match lookup {
        Ok(lookup) => lookup,
        Err(err) if err.is_no_records_found() || err.is_nx_domain() => {
            return Err(TxtError::NotFound(name.to_owned()));
        }
        Err(err) => return Err(TxtError::Failed(name.to_owned(), err.to_string())),
    };
    let records: Vec<Vec<Vec<u8>>> = lookup
        .answers()
        .iter()
        .filter_map(|record| match &record.data {
            RData::TXT(txt) => Some(txt.txt_data.iter().map(|s| s.to_vec()).collect()),
            _ => None,
        })
        .collect();
    if records.is_empty() {
        return Err(TxtError::NotFound(name.to_owned()));
    }
    Ok(records)
}

//! `fleet-agent enroll`: a new key, kept in the state directory (0600) before anything is
//! sent; a CSR for it; the service's certificate for it, kept beside it.

use std::collections::BTreeMap;

use anyhow::Context;
use protocol::{
    signature::SigningKey,
    wire::{EnrollRequest, Enrolled, paths},
};

use crate::{
    client::Client,
    config::Config,
    facts::Host,
    state::{CA_FILE, CERTIFICATE_FILE, Enrollment, KEY_FILE, StateDir},
    system::System,
};

/// A PKCS#10 request (PEM) for `key`.
pub fn csr(key: &SigningKey) -> anyhow::Result<String> {
    let der = key
        .to_pkcs8_der()
        .map_err(|e| anyhow::anyhow!("encoding the key: {e}"))?;
    let pair = rcgen::KeyPair::try_from(der.as_slice()).context("reading the key for the CSR")?;
    rcgen::CertificateParams::default()
        .serialize_request(&pair)
        .and_then(|request| request.pem())
        .context("making the CSR")
}

/// A new Ed25519 key.
pub fn new_key() -> SigningKey {
    SigningKey::ed25519_from_seed(&rand::random::<[u8; 32]>())
}

pub async fn enroll(
    config: &Config,
    system: &System,
    state_dir: &StateDir,
    server: &str,
    token: &str,
    labels: Vec<(String, String)>,
) -> anyhow::Result<()> {
    let _lock = state_dir.lock()?;
    let mut state = state_dir.load()?;
    if let Some(enrollment) = &state.enrollment {
        anyhow::bail!(
            "this host is enrolled already, as {} with {}; to enrol it again, decommission it in \
             the service and remove {}",
            enrollment.host_id,
            enrollment.server,
            state_dir.path(crate::state::STATE_FILE).display()
        );
    }
    let host = Host::read(system, config).await?;
    let client = Client::new(
        server,
        std::time::Duration::from_secs(config.request_timeout_s),
    )?;
    let key = new_key();
    state_dir.write_key(KEY_FILE, &key)?;
    let request = EnrollRequest {
        token: token.trim().to_owned(),
        csr: csr(&key)?,
        facts: host.facts(system, config, "daemon"),
        labels: (!labels.is_empty()).then(|| labels.into_iter().collect::<BTreeMap<_, _>>()),
    };
    let enrolled: Enrolled = client
        .post(paths::ENROLL, &request)
        .await
        .map_err(|e| anyhow::anyhow!("enrolment failed: {e}"))?;
    state_dir.write(CERTIFICATE_FILE, enrolled.certificate.as_bytes())?;
    state_dir.write(CA_FILE, enrolled.ca_certificate.as_bytes())?;
    state.enrollment = Some(Enrollment {
        server: server.to_owned(),
        host_id: enrolled.host_id.clone(),
        key_id: enrolled.key_id,
        certificate_expires_at: enrolled.expires_at,
        enrolled_at: crate::now(),
    });
    state_dir.save(&state)?;
    tracing::info!(host = %enrolled.host_id, server, "enrolled");
    println!("{}", enrolled.host_id);
    Ok(())
}

//! `fleet-agent run` and `run --once` (decisions §19): check in, send the inventory when it
//! changed, apply the jobs handed out, report their results, renew the certificate in its last
//! 30 days, and again after `next_check_in_s` (±10 %).
//!
//! Through a server outage the agent keeps its state and backs off (30 s doubling to an hour,
//! or the server's `Retry-After`); results it could not report are reported once the server is
//! back. Only one agent process runs per state directory, and it runs one package-manager
//! transaction at a time.

use std::{process::ExitCode, time::Duration};

use protocol::{
    signature::SigningKey,
    wire::{CheckIn, CheckInAnswer, JobStatus, RenewRequest, Renewed, paths},
};

use crate::{
    client::{CallError, Client, Identity},
    config::{Config, Permission},
    enroll::{csr, new_key},
    facts::Host,
    impact,
    inventory::Inventory,
    jobs::Applier,
    output::Tail,
    procs::Running,
    state::{
        CA_FILE, CERTIFICATE_FILE, INVENTORY_FILE, KEY_FILE, PENDING_KEY_FILE, Scan, State,
        StateDir,
    },
    system::System,
};

/// Bounds on the wait between check-ins, whatever the service asks.
const MIN_INTERVAL: Duration = Duration::from_secs(30);
const MAX_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);
/// After a job ran, the next check-in (with the new inventory) comes this soon.
const AFTER_JOBS: Duration = Duration::from_secs(30);
/// The longest back-off after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(60 * 60);
/// Package lists are refreshed at most this often.
const REFRESH_EVERY: chrono::Duration = chrono::Duration::hours(6);
/// The certificate is renewed in its last this-long.
const RENEW_WITHIN: chrono::Duration = chrono::Duration::days(30);
/// The digest a check-in carries when the agent may not read the inventory.
const NO_INVENTORY: &str = "none";

pub async fn run(
    config: &Config,
    system: &System,
    state_dir: &StateDir,
    once: bool,
) -> anyhow::Result<ExitCode> {
    let _lock = state_dir.lock()?;
    let state = state_dir.load()?;
    let Some(enrollment) = state.enrollment.clone() else {
        anyhow::bail!(
            "this host is not enrolled: run `fleet-agent enroll --server URL --token enr_…` first"
        );
    };
    let Some(key) = state_dir.key(KEY_FILE)? else {
        anyhow::bail!(
            "the agent's key {} is missing: enrol again",
            state_dir.path(KEY_FILE).display()
        );
    };
    let server = config.server.clone().unwrap_or(enrollment.server);
    let mut agent = Agent {
        config,
        system,
        state_dir,
        host: Host::read(system, config).await?,
        client: Client::new(
            &server,
            std::time::Duration::from_secs(config.request_timeout_s),
        )?,
        state,
        key,
        mode: if once { "once" } else { "daemon" },
        failures: 0,
    };
    Applier {
        system,
        config,
        backend: agent.host.backend,
        state_dir,
    }
    .recover(&mut agent.state)
    .await?;
    if once {
        let cycle = agent.cycle().await;
        return Ok(if cycle.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let cycle = agent.cycle().await;
        let wait = jitter(cycle.next);
        tracing::debug!(seconds = wait.as_secs(), "next check-in");
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    tracing::info!("stopping");
    Ok(ExitCode::SUCCESS)
}

/// ±10 %.
fn jitter(wait: Duration) -> Duration {
    let factor = 0.9 + rand::random::<f64>() * 0.2;
    wait.mul_f64(factor)
}

/// The wait the service asked for, within bounds (said in the log when out of them).
pub fn interval(asked: i32) -> Duration {
    let asked = Duration::from_secs(u64::try_from(asked).unwrap_or(0));
    if asked < MIN_INTERVAL {
        tracing::warn!(
            seconds = asked.as_secs(),
            "the service asked for a check-in sooner than 30 s: waiting 30 s"
        );
        MIN_INTERVAL
    } else if asked > MAX_INTERVAL {
        tracing::warn!(
            seconds = asked.as_secs(),
            "the service asked for a check-in later than a day: checking in again within a day"
        );
        MAX_INTERVAL
    } else {
        asked
    }
}

/// The wait after `failures` failures in a row, at least what the service asked.
pub fn backoff(failures: u32, retry_after: Option<u64>) -> Duration {
    let doubled =
        MIN_INTERVAL.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)));
    let asked = Duration::from_secs(retry_after.unwrap_or(0));
    doubled.max(asked).min(MAX_BACKOFF)
}

/// How a cycle went: whether every step succeeded, and when to check in next.
pub struct Cycle {
    pub ok: bool,
    pub next: Duration,
}

/// The last scan, with the packages when they were read.
struct Scanned {
    scan: Scan,
    inventory: Option<Inventory>,
}

struct Agent<'a> {
    config: &'a Config,
    system: &'a System,
    state_dir: &'a StateDir,
    host: Host,
    client: Client,
    state: State,
    key: SigningKey,
    mode: &'static str,
    failures: u32,
}

impl Agent<'_> {
    fn key_id(&self) -> String {
        self.state
            .enrollment
            .as_ref()
            .map(|e| e.key_id.clone())
            .unwrap_or_default()
    }

    fn failed(&mut self, err: &CallError) -> Cycle {
        self.failures = self.failures.saturating_add(1);
        if let CallError::Refused { status: 401, .. } = err {
            tracing::error!(
                "the service refused this host's signature: the host may have been \
                 decommissioned or its key revoked (enrol again), or this host's clock is off"
            );
        }
        self.state.last_error = Some(err.to_string());
        let _ = self.state_dir.save(&self.state);
        Cycle {
            ok: false,
            next: backoff(self.failures, err.retry_after()),
        }
    }

    pub async fn cycle(&mut self) -> Cycle {
        let mut ok = self.report_owed().await;
        if let Err(err) = self.renew_if_due().await {
            tracing::warn!("renewing the certificate: {err:#}");
            ok = false;
        }
        let scanned = if self.config.allows(Permission::ReadInventory) {
            match self.scan().await {
                Ok(scanned) => Some(scanned),
                Err(err) => {
                    tracing::warn!("reading the inventory: {err:#}");
                    ok = false;
                    None
                }
            }
        } else {
            None
        };
        let mut scanned = scanned;
        let answer = match self.check_in(scanned.as_mut(), false).await {
            Ok(answer) => answer,
            Err(err) => {
                tracing::warn!("check-in failed: {err}");
                return self.failed(&err);
            }
        };
        let answer = if answer.send_inventory && scanned.is_some() {
            tracing::info!("the service asks for the inventory: sending it");
            match self.check_in(scanned.as_mut(), true).await {
                Ok(answer) => answer,
                Err(err) => {
                    tracing::warn!("check-in with the inventory failed: {err}");
                    return self.failed(&err);
                }
            }
        } else {
            answer
        };
        self.failures = 0;
        let mut ran = false;
        for job in &answer.jobs {
            if self.state.ran(&job.id) {
                continue;
            }
            ran = true;
            let applier = Applier {
                system: self.system,
                config: self.config,
                backend: self.host.backend,
                state_dir: self.state_dir,
            };
            match applier.apply(&mut self.state, job).await {
                Ok(outcome) => {
                    if outcome.result.status == JobStatus::Failed {
                        ok = false;
                    }
                    if outcome.rebooting {
                        break;
                    }
                }
                Err(err) => {
                    tracing::error!(job = %job.id, "the job could not be run: {err:#}");
                    ok = false;
                }
            }
        }
        if !self.report_owed().await {
            ok = false;
        }
        Cycle {
            ok,
            next: if ran {
                AFTER_JOBS
            } else {
                interval(answer.next_check_in_s)
            },
        }
    }

    /// One check-in; the packages and updates when the service lacks them (or `force`).
    async fn check_in(
        &mut self,
        scanned: Option<&mut Scanned>,
        force: bool,
    ) -> Result<CheckInAnswer, CallError> {
        let facts = self.host.facts(self.system, self.config, self.mode);
        let mut body = CheckIn {
            facts,
            inventory_digest: NO_INVENTORY.to_owned(),
            packages: None,
            updates: None,
            release_upgrade: None,
            reboot_required: None,
            services_need_restart: None,
            held_packages: None,
        };
        let mut digest = None;
        if let Some(scanned) = scanned {
            let scan = &scanned.scan;
            body.inventory_digest.clone_from(&scan.digest);
            body.reboot_required = scan.reboot_required;
            body.services_need_restart = Some(scan.services_need_restart.clone());
            body.held_packages = Some(scan.held.clone());
            digest = Some(scan.digest.clone());
            if force || self.state.service_digest.as_deref() != Some(scan.digest.as_str()) {
                if scanned.inventory.is_none() {
                    scanned.inventory = self.cached_inventory(&scan.digest);
                }
                if let Some(inventory) = &scanned.inventory {
                    body.packages = Some(inventory.packages.clone());
                    body.updates = Some(inventory.updates.clone());
                }
            }
        }
        let key_id = self.key_id();
        let identity = Identity {
            key: &self.key,
            key_id: &key_id,
        };
        let answer: CheckInAnswer = self
            .client
            .post_signed(paths::CHECK_IN, &body, &identity)
            .await?;
        self.state.last_check_in = Some(crate::now());
        self.state.last_error = None;
        self.state.service_digest = if answer.send_inventory { None } else { digest };
        if let Err(err) = self.state_dir.save(&self.state) {
            tracing::warn!("saving the state: {err:#}");
        }
        Ok(answer)
    }

    fn cached_inventory(&self, digest: &str) -> Option<Inventory> {
        let bytes = self.state_dir.read(INVENTORY_FILE).ok().flatten()?;
        let inventory: Inventory = serde_json::from_slice(&bytes).ok()?;
        (inventory.digest() == digest).then_some(inventory)
    }

    /// The inventory: the last scan when nothing it was computed from changed, else a new one.
    async fn scan(&mut self) -> anyhow::Result<Scanned> {
        let backend = self.host.backend;
        if self.config.refresh_lists
            && self
                .state
                .lists_refreshed_at
                .is_none_or(|at| crate::now() - at >= REFRESH_EVERY)
        {
            let mut log = Tail::new();
            match backend.refresh(self.system, &mut log).await {
                Ok(true) => tracing::info!("package lists refreshed"),
                Ok(false) | Err(_) => tracing::warn!(
                    "refreshing the package lists failed; the inventory uses those at hand:\n{}",
                    log.as_str().trim_end()
                ),
            }
            self.state.lists_refreshed_at = Some(crate::now());
        }
        let inputs = format!(
            "{}boot:{}",
            backend.inputs(self.system, &self.host.database),
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .unwrap_or_default()
                .trim()
        );
        if let Some(scan) = self.state.scan.clone().filter(|s| s.inputs == inputs) {
            let mut scan = scan;
            if !scan.services_need_restart.is_empty() {
                scan.services_need_restart = Running::scan(self.system).stale_units();
            }
            return Ok(Scanned {
                scan,
                inventory: None,
            });
        }
        tracing::info!("reading the inventory");
        let installed = backend.installed(self.system).await?;
        let mut updates = backend.updates(self.system, &installed).await?;
        let running = Running::scan(self.system);
        impact::compute(self.system, backend, &mut updates, &running).await;
        let inventory = Inventory::new(installed, updates);
        let scan = Scan {
            inputs,
            digest: inventory.digest(),
            at: crate::now(),
            reboot_required: backend.reboot_required(self.system).await,
            held: inventory.held.clone(),
            services_need_restart: running.stale_units(),
        };
        self.state_dir
            .write(INVENTORY_FILE, &serde_json::to_vec(&inventory)?)?;
        self.state.scan = Some(scan.clone());
        self.state_dir.save(&self.state)?;
        tracing::info!(
            packages = inventory.packages.len(),
            updates = inventory.updates.len(),
            digest = %scan.digest,
            "inventory read"
        );
        Ok(Scanned {
            scan,
            inventory: Some(inventory),
        })
    }

    /// Reports every result the service has not acknowledged; false when one could not be.
    async fn report_owed(&mut self) -> bool {
        let mut ok = true;
        let key_id = self.key_id();
        for owed in self.state.owed.clone() {
            let identity = Identity {
                key: &self.key,
                key_id: &key_id,
            };
            let path = paths::job_result(&owed.job_id);
            match self
                .client
                .post_signed_raw(&path, &owed.result, &identity)
                .await
            {
                Ok(_) => {
                    tracing::info!(job = %owed.job_id, "result reported");
                    self.state.acknowledged(&owed.job_id);
                }
                Err(CallError::Refused { status, detail, .. })
                    if status == 404 || status == 409 =>
                {
                    // Nothing to report to (another host's job, or gone), or a different
                    // result recorded already: telling it again cannot help.
                    tracing::warn!(job = %owed.job_id, status, "the service does not take the result: {detail}");
                    self.state.acknowledged(&owed.job_id);
                }
                Err(err) => {
                    tracing::warn!(job = %owed.job_id, "reporting the result failed (kept for later): {err}");
                    ok = false;
                }
            }
        }
        if let Err(err) = self.state_dir.save(&self.state) {
            tracing::warn!("saving the state: {err:#}");
        }
        ok
    }

    /// In the certificate's last 30 days: a new key, certified by the service, replaces the
    /// current one. The new key is kept before it is sent, so a lost answer is asked again
    /// with the same key (the service answers the same certificate).
    async fn renew_if_due(&mut self) -> anyhow::Result<()> {
        let Some(enrollment) = self.state.enrollment.clone() else {
            return Ok(());
        };
        if enrollment.certificate_expires_at - crate::now() > RENEW_WITHIN {
            return Ok(());
        }
        let new = match self.state_dir.key(PENDING_KEY_FILE)? {
            Some(key) => key,
            None => {
                let key = new_key();
                self.state_dir.write_key(PENDING_KEY_FILE, &key)?;
                key
            }
        };
        let identity = Identity {
            key: &self.key,
            key_id: &enrollment.key_id,
        };
        let renewed: Renewed = self
            .client
            .post_signed(
                paths::CERTIFICATE,
                &RenewRequest { csr: csr(&new)? },
                &identity,
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        self.state_dir
            .write(CERTIFICATE_FILE, renewed.certificate.as_bytes())?;
        self.state_dir
            .write(CA_FILE, renewed.ca_certificate.as_bytes())?;
        self.state_dir.write_key(KEY_FILE, &new)?;
        self.state_dir.remove(PENDING_KEY_FILE)?;
        if let Some(enrollment) = self.state.enrollment.as_mut() {
            enrollment.key_id = renewed.key_id;
            enrollment.certificate_expires_at = renewed.expires_at;
        }
        self.state_dir.save(&self.state)?;
        self.key = new;
        tracing::info!(expires = %renewed.expires_at, "certificate renewed");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_cannot_make_the_agent_hurry_or_sleep_forever() {
        assert_eq!(interval(300), Duration::from_secs(300));
        assert_eq!(interval(0), MIN_INTERVAL);
        assert_eq!(interval(-5), MIN_INTERVAL);
        assert_eq!(interval(i32::MAX), MAX_INTERVAL);
    }

    #[test]
    fn failures_back_off_to_an_hour() {
        assert_eq!(backoff(1, None), Duration::from_secs(30));
        assert_eq!(backoff(2, None), Duration::from_secs(60));
        assert_eq!(backoff(5, None), Duration::from_secs(480));
        assert_eq!(backoff(40, None), MAX_BACKOFF);
        assert_eq!(backoff(1, Some(120)), Duration::from_secs(120));
        assert_eq!(backoff(1, Some(u64::MAX)), MAX_BACKOFF);
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(100));
            assert!(j >= Duration::from_secs(90) && j <= Duration::from_secs(110));
        }
    }
}

//! Applying a job (decisions §19): exactly the versions it names, never a held package, never
//! more than the host's permissions allow, non-interactively with configuration files kept;
//! the result carries the package manager's output (its last 64 KiB). A reboot follows only
//! when the job allows it, the host's `reboot` permission is set and the host needs one. A
//! `reboot` job (decisions §20: the reboot the organization's reboot budget held back from an
//! earlier job) changes no package: it reboots under the same three conditions.
//!
//! Before the package manager runs, the job is written down as running; if the agent finds it
//! so at its next start (it was stopped mid-job), [`recover`] works out the outcome from the
//! package database instead of running it again. Every result is kept until the service has
//! acknowledged it, so it is reported once however often the agent restarts.

use std::{collections::HashMap, time::Duration};

use protocol::wire::{Job, JobChange, JobResult, JobStatus};

use crate::{
    config::{Config, Permission},
    inventory::{Backend, Installed, needs_reboot},
    output::Tail,
    state::{OwedResult, RunningJob, State, StateDir},
    system::System,
};

/// The package manager may take this long for one job.
const JOB_LIMIT: Duration = Duration::from_secs(2 * 60 * 60);
/// The job kind this agent applies.
pub const APPLY_UPDATES: &str = "apply_updates";
/// The job kind of a reboot on its own.
pub const REBOOT: &str = "reboot";

/// Everything a job needs.
pub struct Applier<'a> {
    pub system: &'a System,
    pub config: &'a Config,
    pub backend: Backend,
    pub state_dir: &'a StateDir,
}

/// A job's outcome as it is reported, and whether the host is now rebooting.
pub struct Outcome {
    pub result: JobResult,
    pub rebooting: bool,
}

/// Whether `text` can be handed to the package manager as a package name or version: it never
/// starts like an option and holds nothing but the characters names and versions use.
pub fn plain(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 255
        && text
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+-_~:^".contains(c))
}

fn failed(mut log: Tail, why: &str) -> Outcome {
    tracing::warn!("job refused: {why}");
    log.line(format!("fleet-agent: {why}"));
    Outcome {
        result: JobResult {
            status: JobStatus::Failed,
            log: Some(log.into_string()),
            rebooted: Some(false),
            finished_at: crate::now(),
        },
        rebooting: false,
    }
}

impl Applier<'_> {
    /// Applies `job`, recording it as running while the package manager runs and its result
    /// as owed once it is done.
    pub async fn apply(&self, state: &mut State, job: &Job) -> anyhow::Result<Outcome> {
        tracing::info!(job = %job.id, kind = %job.kind, changes = job.changes.len(), "applying a job");
        let outcome = self.outcome(state, job).await?;
        state.running_job = None;
        state.owed.push(OwedResult {
            job_id: job.id.clone(),
            result: outcome.result.clone(),
        });
        self.state_dir.save(state)?;
        if outcome.rebooting {
            self.reboot(state, &job.id).await?;
        }
        match outcome.result.status {
            JobStatus::Succeeded => tracing::info!(job = %job.id, "job succeeded"),
            JobStatus::Failed => tracing::warn!(job = %job.id, "job failed: see its log"),
        }
        Ok(outcome)
    }

    async fn outcome(&self, state: &mut State, job: &Job) -> anyhow::Result<Outcome> {
        let mut log = Tail::new();
        log.line(format!(
            "fleet-agent {}: job {} ({}) of proposal #{} {}",
            crate::VERSION,
            job.id,
            job.kind,
            job.proposal_number,
            job.proposal_id
        ));
        if job.kind == REBOOT {
            // Nothing to install: the reboot, if the job allows it, the host needs it and its
            // configuration permits it (the result is reported after the reboot).
            return Ok(self.finished(log, job, JobStatus::Succeeded).await);
        }
        if job.kind != APPLY_UPDATES {
            return Ok(failed(
                log,
                &format!(
                    "this agent does not run {:?} jobs (it runs {APPLY_UPDATES} and {REBOOT}); \
                     nothing was changed",
                    job.kind
                ),
            ));
        }
        if !self.config.allows(Permission::ApplyUpdates) {
            return Ok(failed(
                log,
                "this host's agent.toml does not permit apply_updates (permissions = [...]); \
                 nothing was changed",
            ));
        }
        if job.changes.is_empty() {
            return Ok(failed(log, "the job names no package; nothing was changed"));
        }
        for change in &job.changes {
            if change.ecosystem != self.backend.ecosystem() {
                return Ok(failed(
                    log,
                    &format!(
                        "{} is a {} package, and this host's packages are {}; nothing was changed",
                        change.package,
                        change.ecosystem,
                        self.backend.ecosystem()
                    ),
                ));
            }
            if !plain(&change.package) || !plain(&change.to_version) {
                return Ok(failed(
                    log,
                    &format!(
                        "{:?} {:?} is not a package name and version this agent hands to the \
                         package manager; nothing was changed",
                        change.package, change.to_version
                    ),
                ));
            }
        }
        let installed = self.backend.installed(self.system).await?;
        let by_name: HashMap<&str, &Installed> =
            installed.iter().map(|p| (p.name.as_str(), p)).collect();
        let mut targets = Vec::new();
        for change in &job.changes {
            let Some(current) = by_name.get(change.package.as_str()) else {
                return Ok(failed(
                    log,
                    &format!(
                        "{} is not installed on this host; nothing was changed",
                        change.package
                    ),
                ));
            };
            if current.held {
                return Ok(failed(
                    log,
                    &format!(
                        "{} is held on this host, and the agent never upgrades a held package \
                         (apt-mark unhold / dnf versionlock delete allows it); nothing was changed",
                        change.package
                    ),
                ));
            }
            if current.version == change.to_version {
                log.line(format!(
                    "fleet-agent: {} is at {} already",
                    change.package, change.to_version
                ));
                continue;
            }
            if current.version != change.from_version {
                log.line(format!(
                    "fleet-agent: {} is at {}, not {} as the proposal saw it; upgrading to {} as approved",
                    change.package, current.version, change.from_version, change.to_version
                ));
            }
            targets.push(self.backend.target(&change.package, &change.to_version));
        }
        if targets.is_empty() {
            return Ok(self.finished(log, job, JobStatus::Succeeded).await);
        }
        state.running_job = Some(RunningJob {
            job_id: job.id.clone(),
            started_at: crate::now(),
            changes: job.changes.clone(),
        });
        self.state_dir.save(state)?;
        if self.config.refresh_lists {
            match self.backend.refresh(self.system, &mut log).await {
                Ok(true) => state.lists_refreshed_at = Some(crate::now()),
                Ok(false) => log.line(
                    "fleet-agent: refreshing the package lists failed; going on with those at hand",
                ),
                Err(err) => log.line(format!(
                    "fleet-agent: refreshing the package lists: {err:#}"
                )),
            }
        }
        let code = match self
            .backend
            .apply(self.system, &targets, JOB_LIMIT, &mut log)
            .await
        {
            Ok(code) => code,
            Err(err) => {
                return Ok(failed(
                    log,
                    &format!("the package manager could not run: {err:#}"),
                ));
            }
        };
        let now_installed = self.backend.installed(self.system).await?;
        let mismatched = mismatches(&now_installed, &job.changes);
        if code != Some(0) {
            log.line(format!(
                "fleet-agent: the package manager failed (exit status {})",
                code.map_or("none: stopped".to_owned(), |c| c.to_string())
            ));
            for line in &mismatched {
                log.line(format!("fleet-agent: {line}"));
            }
            return Ok(self.finished(log, job, JobStatus::Failed).await);
        }
        if !mismatched.is_empty() {
            for line in &mismatched {
                log.line(format!("fleet-agent: {line}"));
            }
            log.line(
                "fleet-agent: the package manager succeeded but did not install the job's versions",
            );
            return Ok(self.finished(log, job, JobStatus::Failed).await);
        }
        log.line("fleet-agent: every package is at the job's version");
        Ok(self.finished(log, job, JobStatus::Succeeded).await)
    }

    /// The result, with the reboot decided for a job that succeeded.
    async fn finished(&self, mut log: Tail, job: &Job, status: JobStatus) -> Outcome {
        let mut rebooting = false;
        if status == JobStatus::Succeeded {
            rebooting = self.reboot_decision(&mut log, job).await;
        }
        Outcome {
            result: JobResult {
                status,
                log: Some(log.into_string()),
                rebooted: Some(rebooting),
                finished_at: crate::now(),
            },
            rebooting,
        }
    }

    async fn reboot_decision(&self, log: &mut Tail, job: &Job) -> bool {
        let allowed = match job.reboot.as_str() {
            "immediate" => true,
            "in_window" => match &job.window {
                Some(window) if crate::window::is_open(window, crate::now()) => true,
                Some(_) => {
                    log.line("fleet-agent: the job allows a reboot in its window, which is shut now: not rebooting");
                    false
                }
                None => {
                    log.line("fleet-agent: the job allows a reboot in a window it does not name: not rebooting");
                    false
                }
            },
            _ => false,
        };
        if !allowed {
            return false;
        }
        let needed = self.backend.reboot_required(self.system).await == Some(true)
            || job.changes.iter().any(|c| needs_reboot(&c.package));
        if !needed {
            log.line("fleet-agent: no reboot needed");
            return false;
        }
        if !self.config.allows(Permission::Reboot) {
            log.line(
                "fleet-agent: the host needs a reboot and the job allows it, but this host's \
                 agent.toml does not permit reboot: not rebooting",
            );
            return false;
        }
        log.line(format!(
            "fleet-agent: rebooting ({}); the result is reported after the reboot",
            self.config.reboot_command
        ));
        true
    }

    /// Runs the reboot command, the result (rebooted) already owed; if the command fails, the
    /// owed result says so instead.
    async fn reboot(&self, state: &mut State, job_id: &str) -> anyhow::Result<()> {
        let mut words = self.config.reboot_command.split_whitespace();
        let program = words.next().unwrap_or("systemctl");
        let args: Vec<&str> = words.collect();
        tracing::warn!(command = %self.config.reboot_command, "rebooting the host");
        let outcome = self
            .system
            .run(program, &args, Duration::from_secs(300))
            .await;
        let problem = match outcome {
            Ok(out) if out.success() => None,
            Ok(out) => Some(format!(
                "the reboot command failed ({:?}): {}",
                out.code,
                out.stderr.trim()
            )),
            Err(err) => Some(format!("the reboot command could not run: {err:#}")),
        };
        if let Some(problem) = problem {
            tracing::error!("{problem}");
            if let Some(owed) = state.owed.iter_mut().find(|o| o.job_id == job_id) {
                owed.result.rebooted = Some(false);
                let mut log = Tail::new();
                log.push(owed.result.log.as_deref().unwrap_or_default());
                log.line(format!("fleet-agent: {problem}"));
                owed.result.log = Some(log.into_string());
            }
            self.state_dir.save(state)?;
        }
        Ok(())
    }

    /// A job found running at start: the agent was stopped while the package manager ran.
    /// Waits for any package manager still running, then reports from the package database.
    pub async fn recover(&self, state: &mut State) -> anyhow::Result<()> {
        let Some(running) = state.running_job.clone() else {
            return Ok(());
        };
        tracing::warn!(job = %running.job_id, "the agent stopped while applying a job: working out its outcome");
        wait_for_package_managers(self.system).await;
        let installed = self.backend.installed(self.system).await?;
        let mismatched = mismatches(&installed, &running.changes);
        let mut log = Tail::new();
        log.line(format!(
            "fleet-agent {}: the agent stopped while applying job {} (begun {}); on restart:",
            crate::VERSION,
            running.job_id,
            running.started_at.to_rfc3339()
        ));
        let status = if mismatched.is_empty() {
            log.line("fleet-agent: every package is at the job's version");
            JobStatus::Succeeded
        } else {
            for line in &mismatched {
                log.line(format!("fleet-agent: {line}"));
            }
            JobStatus::Failed
        };
        state.running_job = None;
        state.owed.push(OwedResult {
            job_id: running.job_id,
            result: JobResult {
                status,
                log: Some(log.into_string()),
                rebooted: Some(false),
                finished_at: crate::now(),
            },
        });
        self.state_dir.save(state)
    }
}

/// For each change not at its version: what it is at.
fn mismatches(installed: &[Installed], changes: &[JobChange]) -> Vec<String> {
    changes
        .iter()
        .filter_map(|change| {
            let now = installed
                .iter()
                .find(|p| p.name == change.package)
                .map(|p| p.version.as_str());
            (now != Some(change.to_version.as_str())).then(|| {
                format!(
                    "{} is at {}, not {}",
                    change.package,
                    now.unwrap_or("(not installed)"),
                    change.to_version
                )
            })
        })
        .collect()
}

/// Waits (at most 30 minutes) while a package manager runs in the system.
async fn wait_for_package_managers(system: &System) {
    let names = [
        "apt-get",
        "apt",
        "dpkg",
        "dnf",
        "rpm",
        "yum",
        "unattended-upgr",
    ];
    let root = std::fs::canonicalize(system.root()).unwrap_or_else(|_| system.root().to_owned());
    for _ in 0..(30 * 60 / 2) {
        let busy = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|entry| {
                let dir = entry.path();
                std::fs::read_link(dir.join("root")).ok().as_deref() == Some(root.as_path())
                    && std::fs::read_to_string(dir.join("comm"))
                        .is_ok_and(|comm| names.contains(&comm.trim()))
            });
        if !busy {
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tracing::warn!("a package manager is still running after 30 minutes");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_and_versions_reach_the_package_manager() {
        for fine in [
            "openssl",
            "libc6",
            "1:2.36-9+deb12u9",
            "3.0.7-27.el9",
            "g++-12",
            "python3.11",
            "1.0~rc1",
            "fleet_x",
        ] {
            assert!(plain(fine), "{fine}");
        }
        for bad in [
            "",
            "-o",
            "--allow-downgrades",
            "a b",
            "x;rm",
            "a\nb",
            "$(x)",
            "a/b",
            "*",
            &"a".repeat(256),
        ] {
            assert!(!plain(bad), "{bad:?}");
        }
    }

    #[test]
    fn mismatches_say_what_is_installed() {
        let installed = vec![Installed {
            name: "a".into(),
            version: "2".into(),
            arch: "all".into(),
            source_name: None,
            source_version: None,
            held: false,
        }];
        let change = |package: &str, to: &str| JobChange {
            package: package.into(),
            ecosystem: "deb".into(),
            from_version: "1".into(),
            to_version: to.into(),
        };
        assert!(mismatches(&installed, &[change("a", "2")]).is_empty());
        assert_eq!(
            mismatches(&installed, &[change("a", "3")]),
            ["a is at 2, not 3"]
        );
        assert_eq!(
            mismatches(&installed, &[change("b", "1")]),
            ["b is at (not installed), not 1"]
        );
    }
}

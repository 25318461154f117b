//! `fleet-sim`: enrols N simulated hosts with realistic Ubuntu, Debian and RHEL-family
//! inventories against a running service, then checks them in at a steady rate, printing
//! progress and a summary.
//!
//! ```text
//! cargo run --release -p tests --bin fleet-sim -- --token enr_… --hosts 200
//! cargo run --release -p tests --bin fleet-sim -- --org acme --api-token sat_… --hosts 10000
//! ```
//!
//! Inventories are generated from a seed: hundreds of packages per host from a per-family
//! universe, each package on one of two or three starting versions, and a shared pool of
//! available updates, so that proposals group by package and both versions.
//!
//! Each update carries the impact a real agent reports (decisions §21, [`impact_of`]): kernel,
//! libc, systemd and dbus updates reboot (a kernel installs its new image package), OpenSSL and
//! libraries linked into daemons restart the SSH server and the host's own service by its role,
//! and on Ubuntu 24.04 OpenSSL installs `libssl3t64` and removes `libssl3`. Every tenth host
//! (`--unknown-impact-every`) runs an older agent that does not say; `--no-impact` leaves
//! impacts out everywhere, `--impact-split` on odd hosts only (to measure what carrying them
//! costs, BENCHMARKS.md "Impact before approval").
//!
//! Jobs (the steady schedule): each host does the jobs its check-in answer hands it and reports
//! each result, as an agent whose packages all install would: `apply_updates` and
//! `dist_upgrade` succeed (hosts picked by `--fail-every` fail them instead); a job whose
//! `reboot` allows it (`immediate` or `in_window`) and a `reboot` job (decisions §20: the
//! reboot the organization's reboot budget held back) reboot a host that needs it (its
//! `reboot_required` then reads false), reported `rebooted: true`. The summary counts them.
//! For rollouts (decisions §20, tests `rollout_black_box`): `--fail-jobs 3` fails the third job
//! the fleet is handed whichever host gets it, `--need-reboot` has every host need a reboot,
//! `--job-ms` makes each job take that long, and `--job-log` records every check-in's jobs and
//! every result with their times.
//!
//! Benchmark phases (`--phases`, used by `bench-fleet`; BENCHMARKS.md "Fleet inventory"): after
//! enrolling every host and one full check-in each, run timed phases one after the other, each
//! closed-loop with `--concurrency` requests in flight, round-robin over the hosts:
//!
//! ```text
//! fleet-sim --org acme --api-token sat_… --hosts 10000 --role-labels --distinct-ips \
//!     --phases unchanged:20,changed:20,list:10 --selector role=web --watch api=1234
//! ```
//!
//! - `unchanged:S`: check-ins carrying only facts and the digest the service already has.
//! - `changed:S`: every check-in reports a new digest with `--changed-packages` packages (one
//!   version bumped) and their updates. When a `changed` phase is run, the first full
//!   check-in already reports those `--changed-packages` packages, so a changed check-in
//!   differs from what the service has by the bumped version (and the one bumped before it,
//!   which is back to its own), as the target "one package changed" means. (Before, the first
//!   inventory had 300 to 499 packages, so a host's first changed check-in also added the
//!   100 or so packages it lacked.)
//! - `list:S`: `GET /v1/orgs/{org}/hosts?selector=…` (first page), `--list-concurrency` in
//!   flight, cycling through `--selector`s.
//! - With `--impact-split`, `unchanged@impact:S`, `changed@plain:S` …: the check-ins of only
//!   the hosts that report impacts (`@impact`) or of only those that do not (`@plain`), so that
//!   alternating phases give the CPU time per check-in of each (BENCHMARKS.md, "Impact before
//!   approval").
//! - `rollout:S`: first creates `--rollout-policy` (by default 5 waves: 100 hosts, 10 %, 25 %,
//!   50 %, the rest), waits for its proposal to open over every host and approves it; then
//!   unchanged check-ins as above for S seconds, the proposal's list entry asked every 500 ms
//!   until it is applied (its rollout done), which the phase reports (BENCHMARKS.md,
//!   "Rollouts").
//! - `direct:S`: the same without the policy's `rollout` (every target is handed its job at its
//!   next check-in): the same jobs and results in a phase of the same length, so that
//!   alternating `direct` and `rollout` phases compare check-ins with and without rollouts.
//!
//! In every phase a host does the jobs its check-in answer hands it and reports them at once
//! (the latency recorded for such a check-in includes the result's); `--job-log` records the
//! results.
//!
//! Each phase prints check-ins (or requests) per second, latency p50/p90/p99/max, the CPU time
//! of this process and of each `--watch`ed process group over the phase, the machine's busy
//! CPU (so load from outside shows as `other`), and the peak RSS of `--rss-pid`; then one
//! `RESULT {json}` line.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use protocol::wire::{
    Advisory, AgentInstall, CheckIn, CheckInAnswer, EnrollRequest, Enrolled, Facts, Impact,
    ImpactInstall, Job, JobResult, JobStatus, Package, Update,
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use tests::agent::{TestAgent, authority_of};

#[derive(Parser, Debug)]
#[command(about = "Simulates a fleet of agents against a running service.")]
struct Args {
    /// The service's public address; signatures name its host[:port] (`SERVICE_BASE_URL`).
    #[arg(long, default_value = "http://localhost:8080")]
    url: String,
    /// An enrollment token (`enr_…`). Or give --org and --api-token to have one made.
    #[arg(long)]
    token: Option<String>,
    /// Organization slug, to create an enrollment token with --api-token.
    #[arg(long)]
    org: Option<String>,
    /// An API token (`sat_…`) of an admin of --org.
    #[arg(long)]
    api_token: Option<String>,
    /// How many hosts.
    #[arg(long, default_value_t = 100)]
    hosts: usize,
    /// Seconds between each host's check-ins.
    #[arg(long, default_value_t = 60)]
    interval: u64,
    /// How long to keep checking in after enrolment (seconds); 0 stops after one round.
    #[arg(long, default_value_t = 120)]
    duration: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Seed of the generated inventories.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Instead of the steady schedule: after enrolment and one full check-in per host, these
    /// timed phases, NAME:SECONDS comma-separated; NAME is unchanged, changed or list.
    #[arg(long, value_delimiter = ',')]
    phases: Vec<String>,
    /// Packages per host in `changed` phases.
    #[arg(long, default_value_t = 500)]
    changed_packages: usize,
    /// Label selectors for `list` phases and probes (repeatable; `list` cycles through them).
    #[arg(long)]
    selector: Vec<String>,
    /// Requests in flight in `list` phases.
    #[arg(long, default_value_t = 4)]
    list_concurrency: usize,
    /// During check-in phases, one host-list request (first --selector) every this many ms,
    /// its latency reported apart; 0: none.
    #[arg(long, default_value_t = 0)]
    probe_every_ms: u64,
    /// With --org: one enrollment token per role and environment, so hosts carry the labels
    /// `role` (web, db, cache, worker, as the hostname) and `env` (prod, staging) besides
    /// `sim=true`.
    #[arg(long)]
    role_labels: bool,
    /// Each host enrols with an `X-Forwarded-For` address of its own (10.x.y.z), as a fleet
    /// not behind one NAT does; otherwise all enrolments share this machine's address and its
    /// per-address limit (burst 1,000, then 50/s; refused enrolments are retried). The api
    /// believes the header only from a trusted proxy: start it with
    /// `TRUSTED_PROXIES=127.0.0.1/32` (bench-fleet does).
    #[arg(long)]
    distinct_ips: bool,
    /// In phases, account CPU time to processes: LABEL=PID, or LABEL=~TEXT for every process
    /// whose command line contains TEXT (e.g. `pg=~bench_fleet` for Postgres backends).
    #[arg(long)]
    watch: Vec<String>,
    /// In phases, sample this process's VmRSS every 100 ms; its peak and VmHWM are reported.
    #[arg(long)]
    rss_pid: Option<u32>,
    /// No host reports the impact of its updates (as agents before decisions §21 did); by
    /// default every host does but those of `--unknown-impact-every`.
    #[arg(long)]
    no_impact: bool,
    /// Every this-many-th host (indexes N-1, 2N-1, …) runs an older agent that does not report
    /// impacts (the service counts those hosts as unknown); 0: every host reports them.
    #[arg(long, default_value_t = 10)]
    unknown_impact_every: usize,
    /// In phases, only hosts of even index report impacts (odd ones run an agent that does not),
    /// and check-in latencies are reported for each half apart: the cost of carrying impacts,
    /// measured side by side in one phase (BENCHMARKS.md, "Impact before approval"). A phase
    /// named `changed@impact` or `unchanged@plain` checks in only the hosts of that half, so
    /// the processes' CPU time over the phase is what that half's check-ins cost.
    #[arg(long)]
    impact_split: bool,
    /// Every host whose index is a multiple of N fails the jobs it is handed (0: none fails).
    #[arg(long, default_value_t = 0)]
    fail_every: usize,
    /// These jobs fail, by the order in which the fleet was first handed them (1-based,
    /// comma-separated, counted across every host): `--fail-jobs 3` fails the third job handed
    /// out, whichever host it went to.
    #[arg(long, value_delimiter = ',')]
    fail_jobs: Vec<u64>,
    /// Every host needs a reboot (`reboot_required: true`) until a job lets it reboot.
    #[arg(long)]
    need_reboot: bool,
    /// How long each job takes before its result is reported, in milliseconds (the host does
    /// not check in meanwhile, as a busy agent does not).
    #[arg(long, default_value_t = 0)]
    job_ms: u64,
    /// Appends one JSON line per check-in (`{"event":"check_in", host, sent_ms, answered_ms,
    /// jobs: [{id, kind, reboot}]}`) and per job result (`{"event":"result", host, job, kind,
    /// status, rebooted, sent_ms, answered_ms}`) to this file; times are Unix milliseconds of
    /// the request being sent and its answer read, so a test can tell what the service handed
    /// out when (tests `rollout_black_box`).
    #[arg(long)]
    job_log: Option<std::path::PathBuf>,
    /// Steady schedule: writes one line per check-in to this file, `MACHINE_ID SEQ STATUS
    /// SENT_MS TOOK_MS` (STATUS the HTTP status, or 0 for no answer; SENT_MS Unix time in
    /// milliseconds), so that a fault campaign can tell what was answered, and when.
    #[arg(long)]
    journal: Option<std::path::PathBuf>,
    /// Steady schedule: each check-in of a host reports its sequence number in the
    /// `virtualization` fact (`sim-SEQ`), so that every check-in writes and what the service
    /// kept can be compared with what it acknowledged (the journal's last 2xx of each host).
    #[arg(long)]
    count_in_facts: bool,
    /// The policy a `rollout` phase creates (JSON; its name gets the phase's number), whose
    /// proposal over every host it approves before the phase's clock starts.
    #[arg(long, default_value = DEFAULT_ROLLOUT_POLICY)]
    rollout_policy: String,
}

/// A 5-wave rollout over every host: 100 canaries, 10 %, 25 %, 50 %, and the rest.
const DEFAULT_ROLLOUT_POLICY: &str = r#"{"name": "rollout", "scope": {"groups": []},
 "required_approvals": 1, "apply": "asap", "reboot": "never", "auto_merge": false,
 "updates": "all", "rollout": {"waves": [{"name": "canary", "size": 100},
 {"name": "tenth", "size": "10%"}, {"name": "quarter", "size": "25%"},
 {"name": "half", "size": "50%"}]}}"#;

impl Args {
    /// What [`inventory`] is given for host `index`: `None` when it reports no impacts.
    fn impacts_of(&self, index: usize) -> Option<usize> {
        let split_out = self.impact_split && index % 2 == 1;
        (!self.no_impact && !split_out).then_some(self.unknown_impact_every)
    }
}

#[derive(Clone, Copy)]
struct Family {
    distro: &'static str,
    version: &'static str,
    codename: &'static str,
    os_family: &'static str,
    ecosystem: &'static str,
    arch: &'static str,
}

const FAMILIES: [Family; 4] = [
    Family {
        distro: "ubuntu",
        version: "24.04",
        codename: "noble",
        os_family: "debian",
        ecosystem: "deb",
        arch: "amd64",
    },
    Family {
        distro: "ubuntu",
        version: "22.04",
        codename: "jammy",
        os_family: "debian",
        ecosystem: "deb",
        arch: "amd64",
    },
    Family {
        distro: "debian",
        version: "12",
        codename: "bookworm",
        os_family: "debian",
        ecosystem: "deb",
        arch: "amd64",
    },
    Family {
        distro: "rocky",
        version: "9.4",
        codename: "blue onyx",
        os_family: "rhel",
        ecosystem: "rpm",
        arch: "x86_64",
    },
];

const REAL_PACKAGES: &[&str] = &[
    "openssl",
    "libssl3",
    "curl",
    "libcurl4",
    "openssh-server",
    "openssh-client",
    "bash",
    "coreutils",
    "systemd",
    "libsystemd0",
    "sudo",
    "tzdata",
    "ca-certificates",
    "gnupg",
    "python3",
    "python3-minimal",
    "perl",
    "perl-base",
    "git",
    "vim",
    "nano",
    "less",
    "tar",
    "gzip",
    "xz-utils",
    "zlib1g",
    "libc6",
    "libc-bin",
    "glibc",
    "glibc-common",
    "linux-image-generic",
    "kernel",
    "grub-common",
    "rsyslog",
    "logrotate",
    "cron",
    "nginx",
    "apache2",
    "postgresql-client",
    "libpq5",
    "libxml2",
    "libexpat1",
    "sqlite3",
    "libsqlite3-0",
    "libgnutls30",
    "libkrb5-3",
    "krb5-libs",
    "dbus",
    "udev",
    "iproute2",
    "iptables",
    "nftables",
    "bind9-libs",
    "libldap-2.5-0",
    "libnghttp2-14",
    "libzstd1",
    "liblzma5",
    "libpcre2-8-0",
    "libgcrypt20",
    "libtasn1-6",
    "libidn2-0",
];

/// The package universe of a family: real names plus generated libraries, ~700 in all.
fn universe() -> Vec<String> {
    let mut names: Vec<String> = REAL_PACKAGES.iter().map(|s| (*s).to_owned()).collect();
    for i in 0..640 {
        names.push(format!(
            "lib{}{}",
            [
                "gtk", "net", "crypt", "xml", "json", "audio", "font", "ssl", "db", "util"
            ][i % 10],
            i
        ));
    }
    names
}

fn version(family: &Family, package: usize, variant: u32) -> String {
    match family.ecosystem {
        "rpm" => format!(
            "{}.{}.{}-{}.el9",
            1 + package % 5,
            package % 17,
            variant,
            1 + variant
        ),
        _ => format!(
            "{}.{}.{}-{}ubuntu{}",
            1 + package % 5,
            package % 17,
            variant,
            1 + package % 3,
            variant
        ),
    }
}

/// Packages every simulated host of a family is offered an update of (when installed on an
/// older variant), besides the shared pool: its kernel, OpenSSL and the SSH server, whose
/// impacts an approver most needs to see.
fn always_offered(family: &Family, name: &str) -> bool {
    let kernel = if family.ecosystem == "rpm" {
        "kernel"
    } else {
        "linux-image-generic"
    };
    [kernel, "openssl", "openssh-server"].contains(&name)
}

/// Packages whose update needs a reboot, as the reference agent decides (decisions §19).
const REBOOTING: &[&str] = &[
    "linux-image-generic",
    "kernel",
    "grub-common",
    "systemd",
    "libsystemd0",
    "libc6",
    "libc-bin",
    "glibc",
    "glibc-common",
    "dbus",
    "udev",
];

/// Whether simulated host `index` reports impacts: all but every `every`-th host (none left out
/// when 0), whose older agent leaves `impact` out (the service counts those as unknown).
fn says_impact(index: usize, every: usize) -> bool {
    every == 0 || index % every != every - 1
}

/// What updating `name` to `to_version` would do on simulated host `index` of `family`, as a
/// real agent reports it (decisions §19, §21): a kernel, boot loader, libc, systemd or dbus
/// update reboots (a kernel pulls in its new image package); OpenSSL and the libraries linked
/// into daemons restart the SSH server and the host's own service (nginx on web hosts,
/// PostgreSQL on database hosts, Redis on cache hosts); on Ubuntu 24.04 OpenSSL moves to
/// `libssl3t64` and removes `libssl3` (the 64-bit time transition).
fn impact_of(name: &str, family: &Family, index: usize, to_version: &str) -> Impact {
    let rpm = family.ecosystem == "rpm";
    let ssh = if rpm { "sshd.service" } else { "ssh.service" };
    let role = match role_of(index).0 {
        "web" => "nginx.service",
        "db" if rpm => "postgresql.service",
        "db" => "postgresql@16-main.service",
        "cache" if rpm => "redis.service",
        "cache" => "redis-server.service",
        _ => "fleet-worker.service",
    };
    let mut impact = Impact {
        reboot: REBOOTING.contains(&name),
        ..Impact::default()
    };
    match name {
        // A new kernel is a new package beside the running one.
        "linux-image-generic" if !rpm => impact.installs.push(ImpactInstall {
            name: "linux-image-6.8.0-51-generic".to_owned(),
            version: "6.8.0-51.52".to_owned(),
        }),
        "kernel" if rpm => impact.installs.push(ImpactInstall {
            name: "kernel-core".to_owned(),
            version: "5.14.0-503.15.1.el9_5".to_owned(),
        }),
        "openssl" | "libssl3" | "libgnutls30" | "libkrb5-3" | "krb5-libs" | "zlib1g"
        | "libnghttp2-14" => {
            impact.restarts = vec![role.to_owned(), ssh.to_owned()];
            if name == "openssl" && family.codename == "noble" {
                impact.installs.push(ImpactInstall {
                    name: "libssl3t64".to_owned(),
                    version: to_version.to_owned(),
                });
                impact.removes.push("libssl3".to_owned());
            }
        }
        "openssh-server" => impact.restarts = vec![ssh.to_owned()],
        "nginx" if role == "nginx.service" => impact.restarts = vec![role.to_owned()],
        "rsyslog" => impact.restarts = vec!["rsyslog.service".to_owned()],
        "cron" => {
            impact.restarts = vec![(if rpm { "crond.service" } else { "cron.service" }).to_owned()]
        }
        "libpq5" => impact.restarts = vec!["fleet-worker.service".to_owned()],
        generated if generated.starts_with("libssl") || generated.starts_with("libcrypt") => {
            impact.restarts = vec![role.to_owned()];
        }
        _ => {}
    }
    impact.restarts.sort();
    impact
}

/// The facts and inventory of simulated host `index`.
/// `count` fixes the number of packages (otherwise 300 to 499).
/// Updates carry their impact (decisions §21) when the host [`says_impact`] (`unknown_every`;
/// `None`: no host does).
fn inventory(
    seed: u64,
    index: usize,
    machine_id: &str,
    hostname: &str,
    universe: &[String],
    count: Option<usize>,
    unknown_every: Option<usize>,
) -> CheckIn {
    let says = unknown_every.is_some_and(|every| says_impact(index, every));
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(index as u64));
    let family = FAMILIES[index % FAMILIES.len()];
    let random_count = rng.random_range(300..500);
    let count = count.unwrap_or(random_count).min(universe.len());
    let mut packages = Vec::with_capacity(count);
    let mut updates = Vec::new();
    let start = rng.random_range(0..universe.len());
    let rpm = family.ecosystem == "rpm";
    for k in 0..count {
        let p = (start + k * 7) % universe.len();
        // Two or three starting versions per package across the fleet.
        let variant = (p as u32 + rng.random_range(0..3)) % 3;
        let installed = version(&family, p, variant);
        packages.push(Package {
            name: universe[p].clone(),
            version: installed.clone(),
            arch: family.arch.to_owned(),
            source_name: Some(universe[p].clone()),
            source_version: None,
        });
        // The shared pool: every host on an older variant of a pooled package is offered it.
        if (p.is_multiple_of(9) || always_offered(&family, &universe[p])) && variant < 2 {
            let security = p.is_multiple_of(2);
            let severity = ["low", "medium", "high", "critical"][p % 4];
            let advisories = if security {
                vec![Advisory {
                    external_id: format!("{}-{}-1", if rpm { "RLSA" } else { "USN" }, 6000 + p),
                    source: (if rpm { "rlsa" } else { "usn" }).to_owned(),
                    severity: Some(severity.to_owned()),
                    title: None,
                    url: None,
                    cves: vec![format!("CVE-2025-{}", 10_000 + p)],
                }]
            } else {
                Vec::new()
            };
            let to_version = version(&family, p, 2);
            let impact = says.then(|| impact_of(&universe[p], &family, index, &to_version));
            updates.push(Update {
                name: universe[p].clone(),
                arch: family.arch.to_owned(),
                from_version: installed,
                to_version,
                ecosystem: family.ecosystem.to_owned(),
                source_name: Some(universe[p].clone()),
                security,
                requires_reboot: universe[p].contains("linux") || universe[p] == "kernel",
                advisories,
                impact,
            });
        }
    }
    let digest = format!("{:016x}", rng.random::<u64>());
    CheckIn {
        facts: Facts {
            hostname: hostname.to_owned(),
            machine_id: machine_id.to_owned(),
            distro: Some(family.distro.to_owned()),
            distro_version: Some(family.version.to_owned()),
            distro_codename: Some(family.codename.to_owned()),
            os_family: Some(family.os_family.to_owned()),
            arch: Some(family.arch.to_owned()),
            kernel_version: Some("6.8.0-45-generic".to_owned()),
            virtualization: Some("kvm".to_owned()),
            agent_version: Some((if says { "1.4.0" } else { "1.2.0" }).to_owned()),
            agent_mode: Some("daemon".to_owned()),
            agent_permissions: Some(
                protocol::wire::permissions::ALL
                    .iter()
                    .map(|p| (*p).to_owned())
                    .collect(),
            ),
            agent_install: Some(AgentInstall {
                method: (if rpm { "dnf" } else { "apt" }).to_owned(),
                channel: Some("stable".to_owned()),
            }),
            ..Facts::default()
        },
        inventory_digest: digest,
        packages: Some(packages),
        updates: Some(updates),
        release_upgrade: None,
        reboot_required: Some(rng.random_bool(0.2)),
        services_need_restart: Some(Vec::new()),
        held_packages: Some(Vec::new()),
    }
}

/// The check-in of a host whose inventory the service has: facts and the digest.
fn unchanged(facts: &Facts, inventory_digest: &str, reboot_required: Option<bool>) -> CheckIn {
    CheckIn {
        facts: facts.clone(),
        inventory_digest: inventory_digest.to_owned(),
        packages: None,
        updates: None,
        release_upgrade: None,
        reboot_required,
        services_need_restart: None,
        held_packages: None,
    }
}

struct Counters {
    enrolled: AtomicU64,
    check_ins: AtomicU64,
    errors: AtomicU64,
    jobs: AtomicU64,
    failed_jobs: AtomicU64,
    reboots: AtomicU64,
    /// Each job id handed out, with its place in the order the fleet was first handed them
    /// (`--fail-jobs`).
    handed: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    /// `--job-log`.
    log: Option<std::sync::Mutex<std::fs::File>>,
}

impl Counters {
    fn new(args: &Args) -> anyhow::Result<Counters> {
        Ok(Counters {
            enrolled: AtomicU64::new(0),
            check_ins: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
            failed_jobs: AtomicU64::new(0),
            reboots: AtomicU64::new(0),
            handed: std::sync::Mutex::default(),
            log: match &args.job_log {
                Some(path) => Some(std::sync::Mutex::new(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .with_context(|| format!("--job-log {}", path.display()))?,
                )),
                None => None,
            },
        })
    }

    /// The place of `job` in the order the fleet was first handed its jobs (1-based).
    fn ordinal(&self, job: &str) -> u64 {
        let Ok(mut handed) = self.handed.lock() else {
            return 0;
        };
        let next = handed.len() as u64 + 1;
        *handed.entry(job.to_owned()).or_insert(next)
    }

    /// One line of `--job-log`.
    fn log(&self, line: &Value) {
        use std::io::Write;
        if let Some(file) = &self.log
            && let Ok(mut file) = file.lock()
        {
            // One write per line, so a reader never sees half of one.
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// Unix milliseconds now (`--job-log`).
fn unix_ms() -> i64 {
    platform::clock::Clock::now(&platform::clock::SystemClock).timestamp_millis()
}

/// Whether a job lets the host reboot (a simulated host has no window to consult: `in_window`
/// counts as allowed).
fn reboot_allowed(job: &Job) -> bool {
    job.kind == "reboot" || job.reboot != "never"
}

/// Does `jobs` as host `index` would and reports each result (module docs); `reboot_required`
/// is what the host says at its next check-in.
#[allow(clippy::too_many_arguments)]
async fn run_jobs(
    client: &reqwest::Client,
    args: &Args,
    authority: &str,
    agent: &TestAgent,
    index: usize,
    jobs: &[Job],
    reboot_required: &mut Option<bool>,
    counters: &Counters,
) -> anyhow::Result<()> {
    let fails = args.fail_every > 0 && index.is_multiple_of(args.fail_every);
    for job in jobs {
        let ordinal = counters.ordinal(&job.id);
        let failed = (fails && job.kind != "reboot") || args.fail_jobs.contains(&ordinal);
        if args.job_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.job_ms)).await;
        }
        let rebooted = !failed && reboot_allowed(job) && *reboot_required == Some(true);
        if rebooted {
            *reboot_required = Some(false);
        }
        let result = JobResult {
            status: if failed {
                JobStatus::Failed
            } else {
                JobStatus::Succeeded
            },
            log: Some(format!(
                "fleet-sim: {} of {} changes {}{}",
                job.kind,
                job.changes.len(),
                if failed { "failed" } else { "applied" },
                if rebooted { ", rebooted" } else { "" }
            )),
            rebooted: Some(rebooted),
            finished_at: platform::clock::Clock::now(&platform::clock::SystemClock),
        };
        let path = format!("/v1/agent/jobs/{}/result", job.id);
        let bytes = serde_json::to_vec(&result)?;
        let now = platform::clock::Clock::now(&platform::clock::SystemClock).timestamp();
        let nonce = uuid::Uuid::now_v7().simple().to_string();
        let (input, signature, digest) = agent.sign(
            authority,
            "POST",
            &path,
            &bytes,
            now,
            agent.key_id.as_deref().unwrap_or_default(),
            &nonce,
        );
        let sent_ms = unix_ms();
        let response = client
            .post(format!("{}{path}", args.url))
            .header("content-type", "application/json")
            .header("content-digest", digest)
            .header("signature-input", input)
            .header("signature", signature)
            .body(bytes)
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("job {} result: {}", job.id, response.status());
        }
        counters.log(&json!({"event": "result", "host": agent.hostname, "job": job.id,
                             "kind": job.kind, "status": if failed { "failed" } else { "succeeded" },
                             "rebooted": rebooted, "sent_ms": sent_ms, "answered_ms": unix_ms()}));
        counters.jobs.fetch_add(1, Ordering::Relaxed);
        if failed {
            counters.failed_jobs.fetch_add(1, Ordering::Relaxed);
        }
        if rebooted {
            counters.reboots.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// The labels of host `index` with --role-labels: (role, env).
fn role_of(index: usize) -> (&'static str, &'static str) {
    (
        ["web", "db", "cache", "worker"][index % 4],
        ["prod", "staging"][(index / 4) % 2],
    )
}

async fn create_enrollment_token(
    client: &reqwest::Client,
    args: &Args,
    labels: Value,
) -> anyhow::Result<String> {
    let (Some(org), Some(api_token)) = (&args.org, &args.api_token) else {
        bail!("give --token enr_…, or --org and --api-token sat_… to have one made");
    };
    let response = client
        .post(format!("{}/v1/orgs/{org}/enrollment-tokens", args.url))
        .bearer_auth(api_token)
        .json(&json!({"name": "fleet-sim", "labels": labels}))
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or_default();
    if !status.is_success() {
        bail!("creating an enrollment token: {status} {body}");
    }
    body["token"]
        .as_str()
        .map(str::to_owned)
        .context("no token in the answer")
}

/// The enrollment tokens to use; host `index` uses `tokens[token_of(index)]`.
async fn enrollment_tokens(client: &reqwest::Client, args: &Args) -> anyhow::Result<Vec<String>> {
    if let Some(token) = &args.token {
        return Ok(vec![token.clone()]);
    }
    if !args.role_labels {
        return Ok(vec![
            create_enrollment_token(client, args, json!({"sim": "true"})).await?,
        ]);
    }
    let mut tokens = Vec::new();
    for index in 0..8 {
        let (role, env) = role_of(index);
        tokens.push(
            create_enrollment_token(
                client,
                args,
                json!({"sim": "true", "role": role, "env": env}),
            )
            .await?,
        );
    }
    Ok(tokens)
}

fn token_of(index: usize, tokens: usize) -> usize {
    if tokens == 8 { index % 8 } else { 0 }
}

/// A per-host client address for --distinct-ips.
fn address_of(index: usize) -> String {
    format!(
        "10.{}.{}.{}",
        (index >> 16) & 0xff,
        (index >> 8) & 0xff,
        index & 0xff
    )
}

/// Enrols `agent`, retrying while the service answers 429; keeps the key id.
async fn enroll(
    client: &reqwest::Client,
    args: &Args,
    token: &str,
    index: usize,
    agent: &mut TestAgent,
    facts: &Facts,
) -> anyhow::Result<()> {
    let body = EnrollRequest {
        token: token.to_owned(),
        csr: agent.csr(),
        facts: facts.clone(),
        labels: None,
    };
    loop {
        let mut request = client
            .post(format!("{}{}", args.url, protocol::wire::paths::ENROLL))
            .json(&body);
        if args.distinct_ips {
            request = request.header("x-forwarded-for", address_of(index));
        }
        let response = request.send().await.context("enrolment failed")?;
        match response.status().as_u16() {
            201 => {
                let enrolled: Enrolled = response.json().await.context("enrolment answer")?;
                agent.key_id = Some(enrolled.key_id);
                agent.host_id = Some(enrolled.host_id);
                return Ok(());
            }
            429 => {
                let wait = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(wait.clamp(1, 30))).await;
            }
            409 => bail!(
                "enrolment refused: a host with this machine id has checked in already \
                 (decommission the simulated hosts, or run with another --seed)"
            ),
            status => bail!("enrolment refused: {status}"),
        }
    }
}

/// A check-in answered with a status other than 2xx.
#[derive(Debug)]
struct Refused(u16);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "check-in: {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// The `--journal` file: one line per check-in, written as it is answered (so that a campaign
/// can follow it while the simulation runs).
type Journal = Arc<std::sync::Mutex<std::fs::File>>;

/// One signed check-in; the agent's inventory only when asked for (or the first time).
async fn check_in(
    client: &reqwest::Client,
    args: &Args,
    authority: &str,
    agent: &TestAgent,
    body: &CheckIn,
) -> anyhow::Result<bool> {
    Ok(check_in_answer(client, args, authority, agent, body)
        .await?
        .send_inventory)
}

/// [`check_in`], the whole answer.
async fn check_in_answer(
    client: &reqwest::Client,
    args: &Args,
    authority: &str,
    agent: &TestAgent,
    body: &CheckIn,
) -> anyhow::Result<CheckInAnswer> {
    let bytes = serde_json::to_vec(body)?;
    // A real agent signs with the real time.
    let now = platform::clock::Clock::now(&platform::clock::SystemClock).timestamp();
    let nonce = uuid::Uuid::now_v7().simple().to_string();
    let (input, signature, digest) = agent.sign(
        authority,
        "POST",
        "/v1/agent/check-in",
        &bytes,
        now,
        agent.key_id.as_deref().unwrap_or_default(),
        &nonce,
    );
    let response = client
        .post(format!("{}/v1/agent/check-in", args.url))
        .header("content-type", "application/json")
        .header("content-digest", digest)
        .header("signature-input", input)
        .header("signature", signature)
        .body(bytes)
        .send()
        .await?;
    if !response.status().is_success() {
        return Err(Refused(response.status().as_u16()).into());
    }
    Ok(response.json().await?)
}

/// The load generator's own allocator, as the service's programs have: it shares the machine
/// with what it measures (BENCHMARKS.md, "Changed check-ins at 200/s").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // reqwest is built without a TLS provider of its own (`rustls-no-provider`).
    platform::outbound::install_crypto_provider();
    let args = Arc::new(Args::parse());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let tokens = Arc::new(enrollment_tokens(&client, &args).await?);
    if !args.phases.is_empty() {
        return phases::run(args, client, tokens).await;
    }
    let authority = authority_of(&args.url);
    let universe = Arc::new(universe());
    let counters = Arc::new(Counters::new(&args)?);
    let permits = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
    let journal: Option<Journal> = match &args.journal {
        Some(path) => Some(Arc::new(std::sync::Mutex::new(
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
        ))),
        None => None,
    };
    let started = Instant::now();

    let reporter = {
        let counters = counters.clone();
        let total = args.hosts;
        tokio::spawn(async move {
            let mut last = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let check_ins = counters.check_ins.load(Ordering::Relaxed);
                println!(
                    "[{:>5.0}s] enrolled {}/{} · check-ins {} ({:.0}/s) · errors {}",
                    started.elapsed().as_secs_f64(),
                    counters.enrolled.load(Ordering::Relaxed),
                    total,
                    check_ins,
                    (check_ins - last) as f64 / 5.0,
                    counters.errors.load(Ordering::Relaxed)
                );
                last = check_ins;
            }
        })
    };

    let mut hosts = Vec::with_capacity(args.hosts);
    for index in 0..args.hosts {
        let (args, client, tokens, authority, universe, counters, permits, journal) = (
            args.clone(),
            client.clone(),
            tokens.clone(),
            authority.clone(),
            universe.clone(),
            counters.clone(),
            permits.clone(),
            journal.clone(),
        );
        hosts.push(tokio::spawn(async move {
            let hostname = format!("{}-{index:05}", ["web", "db", "cache", "worker"][index % 4]);
            let mut agent = TestAgent::new(&hostname);
            agent.machine_id = format!("sim-{:08x}-{index:06}", args.seed);
            let full = inventory(
                args.seed,
                index,
                &agent.machine_id,
                &hostname,
                &universe,
                None,
                args.impacts_of(index),
            );
            let mut reboot_required = if args.need_reboot {
                Some(true)
            } else {
                full.reboot_required
            };
            {
                let _permit = permits.acquire().await.ok();
                let token = &tokens[token_of(index, tokens.len())];
                match enroll(&client, &args, token, index, &mut agent, &full.facts).await {
                    Ok(()) => {
                        counters.enrolled.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("{hostname}: {e:#}");
                        counters.errors.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            }
            // Spread the fleet evenly over the interval: a steady rate, not bursts.
            let offset = Duration::from_millis(
                (index as u64 * args.interval * 1000) / args.hosts.max(1) as u64,
            );
            tokio::time::sleep(offset).await;
            let deadline = Instant::now() + Duration::from_secs(args.duration);
            let mut send_full = true;
            let mut seq: u64 = 0;
            loop {
                seq += 1;
                // When the request went out (after waiting for a permit) and how long its answer
                // took: the journal's times.
                let sent;
                let took;
                let result = {
                    let _permit = permits.acquire().await.ok();
                    sent = platform::clock::Clock::now(&platform::clock::SystemClock);
                    let sent_at = Instant::now();
                    let light = unchanged(&full.facts, &full.inventory_digest, reboot_required);
                    let mut body = if send_full { full.clone() } else { light };
                    body.reboot_required = reboot_required;
                    if args.count_in_facts {
                        body.facts.virtualization = Some(format!("sim-{seq}"));
                    }
                    let sent_ms = unix_ms();
                    let answer = check_in_answer(&client, &args, &authority, &agent, &body).await;
                    took = sent_at.elapsed();
                    if let Ok(answer) = &answer {
                        let jobs: Vec<Value> = answer
                            .jobs
                            .iter()
                            .map(|j| json!({"id": j.id, "kind": j.kind, "reboot": j.reboot}))
                            .collect();
                        counters.log(&json!({"event": "check_in", "host": hostname,
                                             "sent_ms": sent_ms, "answered_ms": unix_ms(),
                                             "jobs": jobs}));
                    }
                    match answer {
                        Ok(answer) => run_jobs(
                            &client,
                            &args,
                            &authority,
                            &agent,
                            index,
                            &answer.jobs,
                            &mut reboot_required,
                            &counters,
                        )
                        .await
                        .map(|()| answer.send_inventory),
                        Err(e) => Err(e),
                    }
                };
                if let Some(journal) = &journal {
                    let status = match &result {
                        Ok(_) => 200,
                        Err(e) => e.downcast_ref::<Refused>().map_or(0, |r| r.0),
                    };
                    let sent_ms = sent.timestamp_millis();
                    let line = format!(
                        "{} {seq} {status} {sent_ms} {}\n",
                        agent.machine_id,
                        took.as_millis()
                    );
                    if let Ok(mut journal) = journal.lock() {
                        use std::io::Write;
                        let _ = journal.write_all(line.as_bytes());
                    }
                }
                match result {
                    Ok(again) => {
                        counters.check_ins.fetch_add(1, Ordering::Relaxed);
                        send_full = again;
                    }
                    Err(e) => {
                        counters.errors.fetch_add(1, Ordering::Relaxed);
                        eprintln!("{hostname}: {e}");
                    }
                }
                if Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(args.interval)).await;
            }
        }));
    }
    for host in hosts {
        let _ = host.await;
    }
    reporter.abort();
    let elapsed = started.elapsed().as_secs_f64();
    let check_ins = counters.check_ins.load(Ordering::Relaxed);
    println!(
        "done in {elapsed:.1}s: {} hosts enrolled, {check_ins} check-ins ({:.0}/s), {} errors; \
         {} jobs done ({} failed), {} reboots",
        counters.enrolled.load(Ordering::Relaxed),
        check_ins as f64 / elapsed.max(0.001),
        counters.errors.load(Ordering::Relaxed),
        counters.jobs.load(Ordering::Relaxed),
        counters.failed_jobs.load(Ordering::Relaxed),
        counters.reboots.load(Ordering::Relaxed)
    );
    if counters.enrolled.load(Ordering::Relaxed) == 0 {
        bail!("no host enrolled");
    }
    Ok(())
}

/// The timed benchmark phases (`--phases`).
mod phases {
    use std::{
        collections::BTreeMap,
        sync::{Arc, Mutex, atomic::AtomicBool},
    };

    use super::*;

    /// One enrolled simulated host.
    struct Host {
        index: usize,
        agent: TestAgent,
        facts: Facts,
        reboot_required: Option<bool>,
        /// The inventory digest the service has for it.
        digest: Mutex<String>,
    }

    /// Latencies (µs) and counts of one kind of request in one phase.
    #[derive(Default)]
    struct Samples {
        micros: Mutex<Vec<u64>>,
        errors: AtomicU64,
        /// Unchanged check-ins the service answered with `send_inventory`.
        asked_inventory: AtomicU64,
    }

    impl Samples {
        fn record(&self, started: Instant) {
            let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            if let Ok(mut v) = self.micros.lock() {
                v.push(micros);
            }
        }

        /// count, p50, p90, p99, max in ms.
        fn summary(&self) -> (usize, [f64; 4]) {
            let mut v = self.micros.lock().map(|v| v.clone()).unwrap_or_default();
            v.sort_unstable();
            if v.is_empty() {
                return (0, [0.0; 4]);
            }
            let at = |permille: usize| v[(v.len() - 1) * permille / 1000] as f64 / 1000.0;
            (
                v.len(),
                [at(500), at(900), at(990), v[v.len() - 1] as f64 / 1000.0],
            )
        }
    }

    /// utime + stime of a process, in clock ticks.
    fn cpu_ticks(pid: u32) -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the command: state is field 3, utime 14, stime 15 (1-based in proc(5)).
        Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
    }

    /// (busy, total) ticks of the whole machine.
    fn machine_ticks() -> (u64, u64) {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let line = stat.lines().next().unwrap_or_default();
        let values: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .filter_map(|v| v.parse().ok())
            .collect();
        let total: u64 = values.iter().sum();
        let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
        (total - idle, total)
    }

    /// The processes a --watch names.
    fn resolve(target: &str) -> Vec<u32> {
        if let Some(text) = target.strip_prefix('~') {
            let own = std::process::id();
            let Ok(entries) = std::fs::read_dir("/proc") else {
                return Vec::new();
            };
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| *pid != own)
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
                        .is_ok_and(|cmdline| cmdline.contains(text))
                })
                .collect()
        } else {
            target.parse().into_iter().collect()
        }
    }

    /// CPU ticks of every watched process (and this one) at one moment.
    struct CpuSnapshot {
        per_label: Vec<(String, BTreeMap<u32, u64>)>,
        machine: (u64, u64),
        at: Instant,
    }

    fn watches(args: &Args) -> Vec<(String, String)> {
        let mut list = vec![("fleet-sim".to_owned(), std::process::id().to_string())];
        for watch in &args.watch {
            if let Some((label, target)) = watch.split_once('=') {
                list.push((label.to_owned(), target.to_owned()));
            }
        }
        list
    }

    fn snapshot(args: &Args) -> CpuSnapshot {
        CpuSnapshot {
            per_label: watches(args)
                .into_iter()
                .map(|(label, target)| {
                    let ticks = resolve(&target)
                        .into_iter()
                        .filter_map(|pid| Some((pid, cpu_ticks(pid)?)))
                        .collect();
                    (label, ticks)
                })
                .collect(),
            machine: machine_ticks(),
            at: Instant::now(),
        }
    }

    /// CPU seconds per label between two snapshots, then `machine busy` and `other`
    /// (busy minus everything watched), all in seconds; and the wall time.
    fn cpu_between(before: &CpuSnapshot, after: &CpuSnapshot) -> (Vec<(String, f64)>, f64) {
        const HZ: f64 = 100.0;
        let mut out = Vec::new();
        let mut watched = 0.0;
        for ((label, start), (_, end)) in before.per_label.iter().zip(&after.per_label) {
            let ticks: u64 = end
                .iter()
                .map(|(pid, t)| t.saturating_sub(start.get(pid).copied().unwrap_or(0)))
                .sum();
            let seconds = ticks as f64 / HZ;
            watched += seconds;
            out.push((label.clone(), seconds));
        }
        let busy = after.machine.0.saturating_sub(before.machine.0) as f64 / HZ;
        let cpus = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        let capacity = after.at.duration_since(before.at).as_secs_f64() * cpus;
        out.push(("machine busy".into(), busy));
        out.push(("other".into(), (busy - watched).max(0.0)));
        out.push(("machine capacity".into(), capacity));
        (out, after.at.duration_since(before.at).as_secs_f64())
    }

    fn vm_kib(pid: u32, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// Samples VmRSS of `pid` every 100 ms until `stop`; the peak in KiB.
    fn rss_sampler(pid: Option<u32>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
        tokio::spawn(async move {
            let mut peak = 0;
            let Some(pid) = pid else { return 0 };
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(vm_kib(pid, "VmRSS:").unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    }

    struct Phase {
        /// As given, e.g. `changed@impact`.
        name: String,
        /// unchanged, changed or list.
        kind: String,
        /// With --impact-split, `@impact` or `@plain`: only the hosts that report impacts
        /// (0) or only those that do not (1) check in.
        half: Option<usize>,
        seconds: u64,
    }

    fn parse_phases(args: &Args) -> anyhow::Result<Vec<Phase>> {
        args.phases
            .iter()
            .map(|p| {
                let (name, seconds) = p.split_once(':').unwrap_or((p.as_str(), "20"));
                let (kind, half) = match name.split_once('@') {
                    Some((kind, "impact")) => (kind, Some(0)),
                    Some((kind, "plain")) => (kind, Some(1)),
                    Some((_, other)) => bail!("phase {name}: @{other} is not @impact or @plain"),
                    None => (name, None),
                };
                if !["unchanged", "changed", "list", "rollout", "direct"].contains(&kind) {
                    bail!("unknown phase {name}: unchanged, changed, list, rollout or direct");
                }
                if half.is_some() && (!args.impact_split || kind == "list") {
                    bail!("phase {name}: @impact and @plain are for check-in phases with --impact-split");
                }
                Ok(Phase {
                    name: name.to_owned(),
                    kind: kind.to_owned(),
                    half,
                    seconds: seconds.parse().context("phase seconds")?,
                })
            })
            .collect()
    }

    fn list_url(args: &Args, selector: &str) -> anyhow::Result<String> {
        let org = args.org.as_deref().context("list phases need --org")?;
        let mut url = url::Url::parse(&format!("{}/v1/orgs/{org}/hosts", args.url))?;
        url.query_pairs_mut().append_pair("selector", selector);
        Ok(url.into())
    }

    async fn list_once(client: &reqwest::Client, args: &Args, url: &str) -> anyhow::Result<Value> {
        let response = client
            .get(url)
            .bearer_auth(args.api_token.as_deref().unwrap_or_default())
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() {
            bail!("list: {status}");
        }
        Ok(response.json().await?)
    }

    /// A check-in of host `host` in a phase; `changed` sends a new full inventory.
    async fn phase_check_in(
        client: &reqwest::Client,
        args: &Args,
        authority: &str,
        universe: &[String],
        host: &Host,
        changed: Option<u64>,
        counters: &Counters,
    ) -> anyhow::Result<bool> {
        let body = match changed {
            Some(n) => {
                let mut full = inventory(
                    args.seed,
                    host.index,
                    &host.agent.machine_id,
                    &host.agent.hostname,
                    universe,
                    Some(args.changed_packages),
                    args.impacts_of(host.index),
                );
                let digest = format!("chg-{n:016x}");
                // One package moves on, as an upgrade would.
                if let Some(packages) = full.packages.as_mut()
                    && !packages.is_empty()
                {
                    let at = usize::try_from(n).unwrap_or(0) % packages.len();
                    packages[at].version = format!("9.{n}");
                }
                full.inventory_digest = digest;
                full
            }
            None => {
                let digest = host.digest.lock().map(|d| d.clone()).unwrap_or_default();
                unchanged(&host.facts, &digest, host.reboot_required)
            }
        };
        let answer = check_in_answer(client, args, authority, &host.agent, &body).await?;
        if changed.is_some()
            && let Ok(mut digest) = host.digest.lock()
        {
            body.inventory_digest.clone_into(&mut digest);
        }
        // Jobs (a `rollout` phase's proposal going out) are done and reported at once.
        if !answer.jobs.is_empty() {
            let mut reboot_required = host.reboot_required;
            run_jobs(
                client,
                args,
                authority,
                &host.agent,
                host.index,
                &answer.jobs,
                &mut reboot_required,
                counters,
            )
            .await?;
        }
        Ok(answer.send_inventory)
    }

    /// Before a `rollout` (or `direct`) phase: creates `--rollout-policy` (named with the phase's
    /// number; for `direct` without its `rollout`), waits for its proposal to open over all
    /// `hosts` hosts, approves it; the proposal's and the policy's ids.
    async fn start_rollout(
        client: &reqwest::Client,
        args: &Args,
        number: usize,
        hosts: usize,
        waves: bool,
    ) -> anyhow::Result<(String, String)> {
        let (Some(org), Some(api_token)) = (&args.org, &args.api_token) else {
            bail!("rollout phases need --org and --api-token");
        };
        let base = format!("{}/v1/orgs/{org}", args.url);
        let mut body: Value =
            serde_json::from_str(&args.rollout_policy).context("--rollout-policy")?;
        let name = format!("{} {number}", body["name"].as_str().unwrap_or("rollout"));
        body["name"] = json!(name);
        if !waves && let Some(policy) = body.as_object_mut() {
            policy.remove("rollout");
        }
        let created = client
            .post(format!("{base}/policies"))
            .bearer_auth(api_token)
            .json(&body)
            .send()
            .await?;
        let status = created.status();
        let policy: Value = created.json().await.unwrap_or_default();
        if status.as_u16() != 201 {
            bail!("creating the rollout policy: {status} {policy}");
        }
        let policy_id = policy["id"].as_str().context("policy id")?.to_owned();
        let began = Instant::now();
        let mut last_hosts = -1;
        let id = loop {
            let list: Value = client
                .get(format!("{base}/proposals?policy={policy_id}&status=open"))
                .bearer_auth(api_token)
                .send()
                .await?
                .json()
                .await?;
            let open = list["items"]
                .as_array()
                .and_then(|items| items.first())
                .cloned();
            if let Some(open) = open {
                let count = open["hosts"].as_i64().unwrap_or(0);
                // A host whose enrolment answer was lost (counted failed here) may still be in.
                if usize::try_from(count).is_ok_and(|c| c >= hosts) {
                    break open["id"].as_str().context("proposal id")?.to_owned();
                }
                if count != last_hosts {
                    println!("  {name}: an open proposal of {count} of {hosts} hosts so far");
                    last_hosts = count;
                }
            }
            if began.elapsed() > Duration::from_secs(900) {
                bail!("{name}: no open proposal of all {hosts} hosts after 900 s");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let approved = client
            .post(format!("{base}/proposals/{id}/approve"))
            .bearer_auth(api_token)
            .send()
            .await?;
        if !approved.status().is_success() {
            bail!("approving {id}: {}", approved.status());
        }
        println!(
            "  {name}: proposal {id} of {hosts} hosts opened and approved in {:.1}s",
            began.elapsed().as_secs_f64()
        );
        Ok((id, policy_id))
    }

    /// Asks for the status of the policy's proposal every 500 ms (its list entry, cheaper than
    /// the detail) until it is final (its rollout done) or `deadline`; the last status and when
    /// it was seen.
    fn watch_rollout(
        client: reqwest::Client,
        args: Arc<Args>,
        policy: String,
        deadline: Instant,
    ) -> tokio::task::JoinHandle<(String, f64)> {
        tokio::spawn(async move {
            let started = Instant::now();
            let url = format!(
                "{}/v1/orgs/{}/proposals?policy={policy}&limit=1",
                args.url,
                args.org.as_deref().unwrap_or_default()
            );
            let mut state = String::new();
            while Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if let Ok(list) = list_once(&client, &args, &url).await {
                    list["items"][0]["status"]
                        .as_str()
                        .unwrap_or_default()
                        .clone_into(&mut state);
                    if ["applied", "partially_applied", "failed"].contains(&state.as_str()) {
                        break;
                    }
                }
            }
            (state, started.elapsed().as_secs_f64())
        })
    }

    /// The 1-, 5- and 15-minute load averages.
    fn load_average() -> Vec<f64> {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .filter_map(|v| v.parse().ok())
            .collect()
    }

    pub async fn run(
        args: Arc<Args>,
        client: reqwest::Client,
        tokens: Arc<Vec<String>>,
    ) -> anyhow::Result<()> {
        let phases = parse_phases(&args)?;
        if phases.iter().any(|p| p.name == "list") && args.selector.is_empty() {
            bail!("list phases need --selector");
        }
        let authority = authority_of(&args.url);
        let universe = Arc::new(universe());
        // With a `changed` phase, hosts start out with the packages it reports (module docs).
        let first_count = phases
            .iter()
            .any(|p| p.name == "changed")
            .then_some(args.changed_packages);

        // Enrol every host, then one full check-in each: the populated fleet.
        let started = Instant::now();
        let next = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let hosts: Arc<Mutex<Vec<Host>>> = Arc::new(Mutex::new(Vec::new()));
        let mut workers = Vec::new();
        for _ in 0..args.concurrency.max(1) {
            let (args, client, tokens, universe, next, failed, hosts, authority) = (
                args.clone(),
                client.clone(),
                tokens.clone(),
                universe.clone(),
                next.clone(),
                failed.clone(),
                hosts.clone(),
                authority.clone(),
            );
            workers.push(tokio::spawn(async move {
                loop {
                    let index =
                        usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(usize::MAX);
                    if index >= args.hosts {
                        break;
                    }
                    let hostname =
                        format!("{}-{index:05}", ["web", "db", "cache", "worker"][index % 4]);
                    let mut agent = TestAgent::new(&hostname);
                    agent.machine_id = format!("sim-{:08x}-{index:06}", args.seed);
                    let full = inventory(
                        args.seed,
                        index,
                        &agent.machine_id,
                        &hostname,
                        &universe,
                        first_count,
                        args.impacts_of(index),
                    );
                    let token = &tokens[token_of(index, tokens.len())];
                    if let Err(e) =
                        enroll(&client, &args, token, index, &mut agent, &full.facts).await
                    {
                        eprintln!("{hostname}: {e:#}");
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if let Err(e) = check_in(&client, &args, &authority, &agent, &full).await {
                        eprintln!("{hostname}: first check-in: {e:#}");
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let host = Host {
                        index,
                        facts: full.facts.clone(),
                        reboot_required: full.reboot_required,
                        digest: Mutex::new(full.inventory_digest.clone()),
                        agent,
                    };
                    if let Ok(mut hosts) = hosts.lock() {
                        hosts.push(host);
                    }
                }
            }));
        }
        for worker in workers {
            worker.await?;
        }
        let mut hosts = std::mem::take(&mut *hosts.lock().map_err(|_| anyhow::anyhow!("lock"))?);
        hosts.sort_by_key(|h| h.index);
        let hosts = Arc::new(hosts);
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "enrolled and checked in (full inventory) {} hosts in {elapsed:.1}s ({:.0} hosts/s), {} failed",
            hosts.len(),
            hosts.len() as f64 / elapsed.max(0.001),
            failed.load(Ordering::Relaxed)
        );
        println!(
            "RESULT {}",
            json!({"phase": "enrol+first", "hosts": hosts.len(), "seconds": elapsed,
                   "failed": failed.load(Ordering::Relaxed)})
        );
        if hosts.is_empty() {
            bail!("no host enrolled");
        }
        if args.impact_split {
            // What carrying impacts adds to a changed check-in's body, for the first host of each
            // half.
            for index in [0, 1] {
                let body = inventory(
                    args.seed,
                    index,
                    "sim",
                    "web-00000",
                    &universe,
                    Some(args.changed_packages),
                    args.impacts_of(index),
                );
                let updates = body.updates.as_ref().map_or(0, Vec::len);
                println!(
                    "changed check-in body of host {index} ({}): {} bytes, {updates} updates",
                    if args.impacts_of(index).is_some() {
                        "with impacts"
                    } else {
                        "without"
                    },
                    serde_json::to_vec(&body).map_or(0, |b| b.len()),
                );
            }
        }
        if let Some(selector) = args.selector.first() {
            let page = list_once(&client, &args, &list_url(&args, selector)?).await?;
            println!(
                "list ?selector={selector}: {} hosts on the first page, next_cursor {}",
                page["items"].as_array().map_or(0, Vec::len),
                if page["next_cursor"].is_null() {
                    "null"
                } else {
                    "set"
                }
            );
        }

        let changes = Arc::new(AtomicU64::new(0));
        let cursor = Arc::new(AtomicU64::new(0));
        let counters = Arc::new(Counters::new(&args)?);
        for (number, phase) in phases.iter().enumerate() {
            let proposal = if ["rollout", "direct"].contains(&phase.kind.as_str()) {
                let waves = phase.kind == "rollout";
                Some(start_rollout(&client, &args, number, hosts.len(), waves).await?)
            } else {
                None
            };
            // Every phase runs for its seconds: a `rollout` and a `direct` phase of the same
            // length carry the same jobs and results (module docs).
            let deadline = Instant::now() + Duration::from_secs(phase.seconds);
            let watcher = proposal
                .clone()
                .map(|(_, policy)| watch_rollout(client.clone(), args.clone(), policy, deadline));
            let results_before = counters.jobs.load(Ordering::Relaxed);
            let samples = Arc::new(Samples::default());
            // With --impact-split: the check-ins of hosts reporting impacts, and of the others.
            let halves = Arc::new([Samples::default(), Samples::default()]);
            let probes = Arc::new(Samples::default());
            let stop = Arc::new(AtomicBool::new(false));
            let rss = rss_sampler(args.rss_pid, stop.clone());
            let before = snapshot(&args);
            let list = phase.kind == "list";
            // The hosts this phase's check-ins go to, round-robin.
            let turn: Arc<Vec<usize>> = Arc::new(
                (0..hosts.len())
                    .filter(|&i| {
                        phase.half.is_none_or(|half| {
                            usize::from(args.impacts_of(hosts[i].index).is_none()) == half
                        })
                    })
                    .collect(),
            );
            if turn.is_empty() {
                bail!("phase {}: no host to check in", phase.name);
            }
            let in_flight = if list {
                args.list_concurrency
            } else {
                args.concurrency
            };
            let mut tasks = Vec::new();
            for _ in 0..in_flight.max(1) {
                let (args, client, hosts, universe, authority, samples, changes, cursor) = (
                    args.clone(),
                    client.clone(),
                    hosts.clone(),
                    universe.clone(),
                    authority.clone(),
                    samples.clone(),
                    changes.clone(),
                    cursor.clone(),
                );
                let (halves, turn, counters) = (halves.clone(), turn.clone(), counters.clone());
                let changed = phase.kind == "changed";
                tasks.push(tokio::spawn(async move {
                    while Instant::now() < deadline {
                        let n = cursor.fetch_add(1, Ordering::Relaxed);
                        let began = Instant::now();
                        let mut half = None;
                        let result = if list {
                            let selectors = &args.selector;
                            let selector =
                                &selectors[usize::try_from(n).unwrap_or(0) % selectors.len()];
                            match list_url(&args, selector) {
                                Ok(url) => list_once(&client, &args, &url).await.map(|_| false),
                                Err(e) => Err(e),
                            }
                        } else {
                            let host = &hosts[turn[usize::try_from(n).unwrap_or(0) % turn.len()]];
                            half = Some(usize::from(args.impacts_of(host.index).is_none()));
                            let change = changed.then(|| changes.fetch_add(1, Ordering::Relaxed));
                            phase_check_in(
                                &client, &args, &authority, &universe, host, change, &counters,
                            )
                            .await
                        };
                        match result {
                            Ok(asked) => {
                                if let Some(half) = half {
                                    halves[half].record(began);
                                }
                                samples.record(began);
                                if asked && !changed {
                                    samples.asked_inventory.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Err(e) => {
                                if samples.errors.fetch_add(1, Ordering::Relaxed) < 5 {
                                    eprintln!("{e:#}");
                                }
                            }
                        }
                    }
                }));
            }
            let prober =
                (!list && args.probe_every_ms > 0 && !args.selector.is_empty()).then(|| {
                    let (args, client, probes) = (args.clone(), client.clone(), probes.clone());
                    tokio::spawn(async move {
                        let Ok(url) = list_url(&args, &args.selector[0]) else {
                            return;
                        };
                        let mut tick =
                            tokio::time::interval(Duration::from_millis(args.probe_every_ms));
                        while Instant::now() < deadline {
                            tick.tick().await;
                            let began = Instant::now();
                            match list_once(&client, &args, &url).await {
                                Ok(_) => probes.record(began),
                                Err(_) => {
                                    probes.errors.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    })
                });
            for task in tasks {
                task.await?;
            }
            if let Some(prober) = prober {
                prober.await?;
            }
            let after = snapshot(&args);
            stop.store(true, Ordering::Relaxed);
            let load = load_average();
            let results = counters.jobs.load(Ordering::Relaxed) - results_before;
            let rollout = match (watcher, &proposal) {
                (Some(watcher), Some((id, _))) => {
                    let (state, seconds) = watcher.await?;
                    json!({"proposal": id, "state": state, "seconds": seconds})
                }
                _ => Value::Null,
            };
            let rss_peak_kib = rss.await?;
            let hwm_kib = args.rss_pid.and_then(|pid| vm_kib(pid, "VmHWM:"));
            let (cpu, wall) = cpu_between(&before, &after);
            let (count, [p50, p90, p99, max]) = samples.summary();
            let rate = count as f64 / wall.max(0.001);
            let errors = samples.errors.load(Ordering::Relaxed);
            let asked = samples.asked_inventory.load(Ordering::Relaxed);
            println!(
                "phase {}: {count} in {wall:.1}s = {rate:.0}/s · p50 {p50:.2} ms · p90 {p90:.2} ms · p99 {p99:.2} ms · max {max:.2} ms · errors {errors} · asked for inventory {asked}",
                phase.name
            );
            let cpu_text: Vec<String> = cpu
                .iter()
                .map(|(label, s)| format!("{label} {s:.1}s ({:.0}%)", 100.0 * s / wall.max(0.001)))
                .collect();
            println!("  cpu: {}", cpu_text.join(" · "));
            println!("  load average {load:?}; job results reported {results}");
            if !rollout.is_null() {
                println!(
                    "  rollout {}: {} after {:.1}s",
                    rollout["proposal"], rollout["state"], rollout["seconds"]
                );
            }
            let mut split_json = Value::Null;
            if args.impact_split && !list && phase.half.is_none() {
                let mut halves_json = serde_json::Map::new();
                for (i, label) in ["with impact", "without impact"].into_iter().enumerate() {
                    let (count, [p50, p90, p99, max]) = halves[i].summary();
                    println!(
                        "  hosts {label}: {count} · p50 {p50:.2} ms · p90 {p90:.2} ms · p99 {p99:.2} ms · max {max:.2} ms"
                    );
                    halves_json.insert(
                        label.replace(' ', "_"),
                        json!({"count": count, "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "max_ms": max}),
                    );
                }
                split_json = Value::Object(halves_json);
            }
            let (probe_count, [pp50, _, pp99, pmax]) = probes.summary();
            if probe_count > 0 {
                println!(
                    "  list probes during the phase: {probe_count}, p50 {pp50:.2} ms, p99 {pp99:.2} ms, max {pmax:.2} ms, errors {}",
                    probes.errors.load(Ordering::Relaxed)
                );
            }
            if args.rss_pid.is_some() {
                println!(
                    "  rss: peak sampled {:.0} MiB, VmHWM {:.0} MiB",
                    rss_peak_kib as f64 / 1024.0,
                    hwm_kib.unwrap_or(0) as f64 / 1024.0
                );
            }
            let cpu_json: serde_json::Map<String, Value> =
                cpu.into_iter().map(|(l, s)| (l, json!(s))).collect();
            println!(
                "RESULT {}",
                json!({"phase": phase.name, "seconds": wall, "count": count, "rate": rate,
                       "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "max_ms": max,
                       "errors": errors, "asked_inventory": asked, "cpu_s": cpu_json,
                       "probe": {"count": probe_count, "p50_ms": pp50, "p99_ms": pp99, "max_ms": pmax},
                       "rss_peak_kib": rss_peak_kib, "hwm_kib": hwm_kib, "impact_split": split_json,
                       "loadavg": load, "results": results, "rollout": rollout})
            );
        }
        Ok(())
    }
}

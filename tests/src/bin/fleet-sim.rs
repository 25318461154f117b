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

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
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

/// The facts and inventory of simulated host `index`.
fn inventory(
    seed: u64,
    index: usize,
    machine_id: &str,
    hostname: &str,
    universe: &[String],
) -> Value {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(index as u64));
    let family = FAMILIES[index % FAMILIES.len()];
    let count = rng.random_range(300..500);
    let mut packages = Vec::with_capacity(count);
    let mut updates = Vec::new();
    let start = rng.random_range(0..universe.len());
    for k in 0..count {
        let p = (start + k * 7) % universe.len();
        // Two or three starting versions per package across the fleet.
        let variant = (p as u32 + rng.random_range(0..3)) % 3;
        let installed = version(&family, p, variant);
        packages.push(json!({"name": universe[p], "version": installed, "arch": family.arch, "source_name": universe[p]}));
        // The shared pool: every host on an older variant of a pooled package is offered it.
        if p.is_multiple_of(9) && variant < 2 {
            let security = p.is_multiple_of(2);
            let severity = ["low", "medium", "high", "critical"][p % 4];
            updates.push(json!({
                "name": universe[p], "arch": family.arch, "from_version": installed,
                "to_version": version(&family, p, 2), "ecosystem": family.ecosystem,
                "source_name": universe[p], "security": security,
                "requires_reboot": universe[p].contains("linux") || universe[p] == "kernel",
                "advisories": if security {
                    json!([{"external_id": format!("{}-{}-1", if family.ecosystem == "rpm" {"RLSA"} else {"USN"}, 6000 + p),
                            "source": if family.ecosystem == "rpm" {"rlsa"} else {"usn"},
                            "severity": severity,
                            "cves": [format!("CVE-2025-{}", 10_000 + p)]}])
                } else { json!([]) }
            }));
        }
    }
    let digest = format!("{:016x}", rng.random::<u64>());
    json!({
        "facts": {
            "hostname": hostname, "machine_id": machine_id, "distro": family.distro,
            "distro_version": family.version, "distro_codename": family.codename,
            "os_family": family.os_family, "arch": family.arch, "kernel_version": "6.8.0-45-generic",
            "virtualization": "kvm", "agent_version": "1.4.0", "agent_mode": "daemon",
            "agent_permissions": ["read_inventory", "apply_updates", "reboot"],
            "agent_install": {"method": if family.ecosystem == "rpm" {"dnf"} else {"apt"}, "channel": "stable"}
        },
        "inventory_digest": digest,
        "packages": packages,
        "updates": updates,
        "reboot_required": rng.random_bool(0.2),
        "services_need_restart": [],
        "held_packages": []
    })
}

struct Counters {
    enrolled: AtomicU64,
    check_ins: AtomicU64,
    errors: AtomicU64,
}

async fn enrollment_token(client: &reqwest::Client, args: &Args) -> anyhow::Result<String> {
    if let Some(token) = &args.token {
        return Ok(token.clone());
    }
    let (Some(org), Some(api_token)) = (&args.org, &args.api_token) else {
        bail!("give --token enr_…, or --org and --api-token sat_… to have one made");
    };
    let response = client
        .post(format!("{}/v1/orgs/{org}/enrollment-tokens", args.url))
        .bearer_auth(api_token)
        .json(&json!({"name": "fleet-sim", "labels": {"sim": "true"}}))
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

/// One signed check-in; the agent's inventory only when asked for (or the first time).
async fn check_in(
    client: &reqwest::Client,
    args: &Args,
    authority: &str,
    agent: &TestAgent,
    body: &Value,
) -> anyhow::Result<bool> {
    let bytes = serde_json::to_vec(body)?;
    let now = chrono::Utc::now().timestamp();
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
        bail!("check-in: {}", response.status());
    }
    let answer: Value = response.json().await?;
    Ok(answer["send_inventory"].as_bool().unwrap_or(false))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let token = enrollment_token(&client, &args).await?;
    let authority = authority_of(&args.url);
    let universe = Arc::new(universe());
    let counters = Arc::new(Counters {
        enrolled: AtomicU64::new(0),
        check_ins: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let permits = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
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
        let (args, client, token, authority, universe, counters, permits) = (
            args.clone(),
            client.clone(),
            token.clone(),
            authority.clone(),
            universe.clone(),
            counters.clone(),
            permits.clone(),
        );
        hosts.push(tokio::spawn(async move {
            let hostname = format!("{}-{index:05}", ["web", "db", "cache", "worker"][index % 4]);
            let mut agent = TestAgent::new(&hostname);
            agent.machine_id = format!("sim-{:08x}-{index:06}", args.seed);
            let full = inventory(args.seed, index, &agent.machine_id, &hostname, &universe);
            let light = json!({"facts": full["facts"], "inventory_digest": full["inventory_digest"],
                               "reboot_required": full["reboot_required"]});
            {
                let _permit = permits.acquire().await.ok();
                let enrolled = client
                    .post(format!("{}/v1/agent/enroll", args.url))
                    .json(&json!({"token": token, "csr": agent.csr(), "facts": full["facts"]}))
                    .send()
                    .await;
                match enrolled {
                    Ok(r) if r.status().as_u16() == 201 => {
                        let body: Value = r.json().await.unwrap_or_default();
                        agent.key_id = body["key_id"].as_str().map(str::to_owned);
                        counters.enrolled.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => {
                        eprintln!("{hostname}: enrolment refused: {}", r.status());
                        counters.errors.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Err(e) => {
                        eprintln!("{hostname}: enrolment failed: {e}");
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
            loop {
                let result = {
                    let _permit = permits.acquire().await.ok();
                    check_in(
                        &client,
                        &args,
                        &authority,
                        &agent,
                        if send_full { &full } else { &light },
                    )
                    .await
                };
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
        "done in {elapsed:.1}s: {} hosts enrolled, {check_ins} check-ins ({:.0}/s), {} errors",
        counters.enrolled.load(Ordering::Relaxed),
        check_ins as f64 / elapsed.max(0.001),
        counters.errors.load(Ordering::Relaxed)
    );
    if counters.enrolled.load(Ordering::Relaxed) == 0 {
        bail!("no host enrolled");
    }
    Ok(())
}

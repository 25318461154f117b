//! `cargo bench -p agent --bench agent`: the agent's own CPU time and peak resident memory for
//! a full inventory and for an unchanged check-in of a Debian host with about 2,000 installed
//! packages (BENCHMARKS.md, "The agent"). The host is a throwaway root (as in the end-to-end
//! tests) with the tests' bulk packages installed by apt, 50 of them with an update in the
//! security suite (so the full inventory works out 50 impacts); the service is the test
//! harness's. The agent measures itself (`/proc/self`, logged at debug as it exits); the
//! package manager's own resolution of the same host (`apt-get -s dist-upgrade`, and `dpkg-query
//! -W` reading the same database), timed in the same run, is the baseline of the ratios.
//!
//! `BENCH_PACKAGES` (default 1,910 besides the root's own) and `BENCH_RUNS` (default 5).

// The end-to-end tests' helpers, of which the benchmark uses a part.
#[allow(dead_code)]
#[path = "../tests/e2e/packages.rs"]
mod packages;
#[allow(dead_code)]
#[path = "../tests/e2e/roots.rs"]
mod roots;
#[allow(dead_code)]
#[path = "../tests/e2e/service.rs"]
mod service;

use std::process::Command;

use packages::{Spec, apt_repo, deb};
use roots::Root;
use service::{Agent, Service};

struct Measured {
    wall_ms: u128,
    /// Microseconds of CPU (the scheduler's count), so a few milliseconds are measured.
    cpu_us: u64,
    children_cpu_ms: u64,
    peak_rss_kib: u64,
}

fn field(line: &str, name: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {line:?}"))
}

async fn measure(agent: &Agent, args: &[&str]) -> Measured {
    let started = std::time::Instant::now();
    let ran = agent.run(args).await;
    let wall_ms = started.elapsed().as_millis();
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let line = ran
        .stderr
        .lines()
        .find(|l| l.contains("resource use"))
        .expect("the agent's resource use (FLEET_AGENT_LOG=debug)");
    Measured {
        wall_ms,
        cpu_us: field(line, "cpu_us"),
        children_cpu_ms: field(line, "children_cpu_ms"),
        peak_rss_kib: field(line, "peak_rss_kib"),
    }
}

/// (user+system ms, peak RSS KiB) of a command in the root, by GNU time.
fn timed(root: &Root, args: &[&str]) -> (u64, u64) {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "TIMED %U %S %M", "chroot"])
        .arg(root.path())
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("GNU time");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("TIMED "))
        .expect("time's line");
    let parts: Vec<f64> = line[6..]
        .split_whitespace()
        .map(|p| p.parse().unwrap_or(0.0))
        .collect();
    (((parts[0] + parts[1]) * 1000.0) as u64, parts[2] as u64)
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let bulk: usize = std::env::var("BENCH_PACKAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_910);
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let root = Root::debian();
    let base = root.file("/srv/repo/base");
    let security = root.file("/srv/repo/security");
    std::fs::create_dir_all(&base).expect("base");
    std::fs::create_dir_all(&security).expect("security");
    let names: Vec<String> = (0..bulk).map(|i| format!("bench-package-{i:04}")).collect();
    eprintln!("building {bulk} packages");
    for (i, name) in names.iter().enumerate() {
        deb(&Spec::new(name, "1.0"), &base);
        if i % (bulk / 50).max(1) == 0 {
            deb(&Spec::new(name, "1.1"), &security);
        }
    }
    apt_repo(&base, "bookworm", "Debian");
    apt_repo(&security, "bookworm-security", "Debian-Security");
    root.write(
        "/etc/apt/sources.list",
        "deb [trusted=yes] file:/srv/repo/base ./\ndeb [trusted=yes] file:/srv/repo/security ./\n",
    );
    root.must("apt-get", &["update", "-q"]);
    eprintln!("installing them");
    for chunk in names.chunks(400) {
        let mut args = vec!["install", "-y", "-q"];
        let pinned: Vec<String> = chunk.iter().map(|n| format!("{n}=1.0")).collect();
        args.extend(pinned.iter().map(String::as_str));
        root.must("apt-get", &args);
    }
    let installed = root.must("dpkg-query", &["-W", "-f", "${Status}\n"]);
    let installed = installed
        .lines()
        .filter(|l| l.ends_with(" installed"))
        .count();

    let service = Service::start().await;
    let agent = Agent::new(
        root.path(),
        "permissions = [\"read_inventory\", \"apply_updates\"]\nrefresh_lists = false\n",
    );
    agent.enroll(&service).await;
    let full = measure(&agent, &["run", "--once"]).await;
    let mut unchanged = Vec::new();
    for _ in 0..runs {
        unchanged.push(measure(&agent, &["run", "--once"]).await);
    }
    let (apt_ms, apt_kib) = timed(
        &root,
        &["apt-get", "-s", "-o", "Debug::NoLocking=1", "dist-upgrade"],
    );
    let (query_ms, query_kib) = timed(&root, &["dpkg-query", "-W"]);

    let cpu = median(unchanged.iter().map(|m| m.cpu_us).collect());
    let rss = median(unchanged.iter().map(|m| m.peak_rss_kib).collect());
    let wall = median(unchanged.iter().map(|m| m.wall_ms as u64).collect());
    println!(
        "installed packages: {installed}; updates offered: 50; runs of the unchanged check-in: {runs}"
    );
    println!(
        "full inventory:     agent cpu {:.1} ms, its package-manager children {} ms, agent peak RSS {:.1} MiB, wall {} ms",
        full.cpu_us as f64 / 1000.0,
        full.children_cpu_ms,
        full.peak_rss_kib as f64 / 1024.0,
        full.wall_ms
    );
    println!(
        "unchanged check-in: agent cpu {:.1} ms (median), peak RSS {:.1} MiB, wall {wall} ms",
        cpu as f64 / 1000.0,
        rss as f64 / 1024.0
    );
    println!(
        "baseline (same run): apt-get -s dist-upgrade {apt_ms} ms, {:.1} MiB; dpkg-query -W {query_ms} ms, {:.1} MiB",
        apt_kib as f64 / 1024.0,
        query_kib as f64 / 1024.0
    );
    println!(
        "ratios: unchanged/full agent cpu {:.3}; full-inventory agent cpu / apt-get -s {:.2}; agent RSS / apt-get RSS {:.2} (full), {:.2} (unchanged)",
        cpu as f64 / full.cpu_us.max(1) as f64,
        full.cpu_us as f64 / 1000.0 / apt_ms.max(1) as f64,
        full.peak_rss_kib as f64 / apt_kib.max(1) as f64,
        rss as f64 / apt_kib.max(1) as f64
    );
    println!(
        "RESULT {}",
        serde_json::json!({"installed": installed, "full": {"cpu_us": full.cpu_us, "children_cpu_ms": full.children_cpu_ms,
            "peak_rss_kib": full.peak_rss_kib, "wall_ms": full.wall_ms}, "unchanged": {"cpu_us": cpu, "peak_rss_kib": rss, "wall_ms": wall},
            "apt_get_s": {"cpu_ms": apt_ms, "peak_rss_kib": apt_kib}, "dpkg_query": {"cpu_ms": query_ms, "peak_rss_kib": query_kib}})
    );
    service.app.stop().await;
}

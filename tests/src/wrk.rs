//! Running `wrk` (Debian package `wrk`) and reading its summary: the load generator of the
//! HTTP benchmarks.

use anyhow::{Context, bail};

#[derive(Clone, Debug, Default)]
pub struct WrkResult {
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub non_2xx: u64,
}

fn millis(text: &str) -> Option<f64> {
    let text = text.trim();
    let (number, factor) = if let Some(v) = text.strip_suffix("us") {
        (v, 0.001)
    } else if let Some(v) = text.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = text.strip_suffix('s') {
        (v, 1000.0)
    } else {
        (text, 1.0)
    };
    number.trim().parse::<f64>().ok().map(|n| n * factor)
}

/// Runs `wrk` against `url` with `connections` connections for `seconds`, extra `headers`.
pub async fn run(
    url: &str,
    connections: usize,
    threads: usize,
    seconds: u64,
    headers: &[String],
) -> anyhow::Result<WrkResult> {
    let mut command = tokio::process::Command::new("wrk");
    command
        .arg(format!("-t{threads}"))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .arg("--latency");
    for header in headers {
        command.arg("-H").arg(header);
    }
    let output = command
        .arg(url)
        .output()
        .await
        .context("running wrk (apt-get install -y wrk)")?;
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    if !output.status.success() {
        bail!(
            "wrk failed: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut result = WrkResult::default();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Requests/sec:") {
            result.requests_per_second = rest.trim().parse().unwrap_or(0.0);
        } else if let Some(rest) = line.strip_prefix("50%") {
            result.p50_ms = millis(rest).unwrap_or(0.0);
        } else if let Some(rest) = line.strip_prefix("99%") {
            result.p99_ms = millis(rest).unwrap_or(0.0);
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            result.non_2xx = rest.trim().parse().unwrap_or(0);
        }
    }
    Ok(result)
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

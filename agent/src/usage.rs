//! The agent's own resource use (CPU time, peak resident memory), from `/proc/self`, logged at
//! `debug` as it exits: what BENCHMARKS.md measures, and what an operator asks when an agent
//! seems heavy.

/// Linux's `USER_HZ`: `/proc` counts CPU time in these ticks on every architecture the agent
/// supports.
const TICKS_PER_SECOND: u64 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// The agent process's own user and system CPU time.
    pub cpu_ms: u64,
    /// The same, to the microsecond, from the scheduler (`/proc/self/schedstat`) when it says.
    pub cpu_us: Option<u64>,
    /// That of the programs it ran and waited for (apt, dnf, …).
    pub children_cpu_ms: u64,
    /// Its peak resident set (`VmHWM`).
    pub peak_rss_kib: u64,
}

/// Reads `stat` (`/proc/self/stat`), `status` (`/proc/self/status`) and `schedstat`
/// (`/proc/self/schedstat`: nanoseconds on a CPU first) text.
pub fn parse(stat: &str, status: &str, schedstat: &str) -> Option<Usage> {
    // Fields after the command name (which may hold spaces and parentheses): field 3 onwards.
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let [utime, stime, cutime, cstime] = fields[..] else {
        return None;
    };
    let ms = |ticks: u64| ticks * 1000 / TICKS_PER_SECOND;
    let peak_rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let cpu_us = schedstat
        .split_whitespace()
        .next()
        .and_then(|ns| ns.parse::<u64>().ok())
        .map(|ns| ns / 1000);
    Some(Usage {
        cpu_ms: ms(utime + stime),
        cpu_us,
        children_cpu_ms: ms(cutime + cstime),
        peak_rss_kib,
    })
}

/// Logs the process's use so far at `debug`.
pub fn log() {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let schedstat = std::fs::read_to_string("/proc/self/schedstat").unwrap_or_default();
    if let Some(usage) = parse(&stat, &status, &schedstat) {
        tracing::debug!(
            cpu_ms = usage.cpu_ms,
            cpu_us = usage.cpu_us.unwrap_or(usage.cpu_ms * 1000),
            children_cpu_ms = usage.children_cpu_ms,
            peak_rss_kib = usage.peak_rss_kib,
            "resource use"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_self_is_read() {
        let stat = "4242 (fleet (agent)) S 1 4242 4242 0 -1 4194560 1201 300 0 0 7 3 25 14 20 0 1 0 1000 15000000 2100 18446744073709551615";
        let status =
            "Name:\tfleet-agent\nVmPeak:\t  20000 kB\nVmHWM:\t    9120 kB\nVmRSS:\t    9000 kB\n";
        assert_eq!(
            parse(stat, status, "123456789 2000 40\n"),
            Some(Usage {
                cpu_ms: 100,
                cpu_us: Some(123_456),
                children_cpu_ms: 390,
                peak_rss_kib: 9120
            })
        );
        assert_eq!(parse(stat, status, "").and_then(|u| u.cpu_us), None);
        assert_eq!(parse("garbage", status, ""), None);
        let own = parse(
            &std::fs::read_to_string("/proc/self/stat").unwrap_or_default(),
            &std::fs::read_to_string("/proc/self/status").unwrap_or_default(),
            &std::fs::read_to_string("/proc/self/schedstat").unwrap_or_default(),
        );
        assert!(own.is_some_and(|u| u.peak_rss_kib > 0));
    }
}

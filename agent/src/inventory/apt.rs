//! apt's simulated transactions (`apt-get -s …`): the `Inst` and `Remv` lines it prints, read
//! as the package manager resolved them.
//!
//! ```text
//! Inst libssl3 [3.0.11-1~deb12u1] (3.0.11-1~deb12u2 Debian-Security:12/stable-security [amd64])
//! Inst fleet-dep-new (1.0 Debian:bookworm, Debian-Security:bookworm-security [all])
//! Remv old-thing [1.2-3]
//! ```
//!
//! The releases in parentheses are `Label:Suite` (or `Label:Version/Suite`) of every source
//! offering that version: the update is a security update when one of them is a security
//! suite (`*-security`, decisions §19).

/// One package the transaction installs or upgrades.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub name: String,
    /// The architecture (`amd64`, `all`).
    pub arch: String,
    /// The installed version, for an upgrade; `None` for a new package.
    pub from: Option<String>,
    pub to: String,
    /// `Label:Suite` of every source offering the version.
    pub releases: Vec<String>,
}

impl Step {
    /// Whether a source of this version is a security suite.
    pub fn security(&self) -> bool {
        self.releases.iter().any(|release| {
            let (label, suite) = release.split_once(':').unwrap_or(("", release));
            let suite = suite.rsplit('/').next().unwrap_or(suite);
            suite.ends_with("-security") || label.ends_with("-Security")
        })
    }
}

/// What a simulated transaction would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Simulated {
    /// Installed packages moving to another version.
    pub upgrades: Vec<Step>,
    /// Packages not installed now.
    pub installs: Vec<Step>,
    pub removes: Vec<String>,
}

/// Reads the `Inst` and `Remv` lines of `apt-get -s` output; other lines are ignored.
pub fn parse_simulation(text: &str) -> Simulated {
    let mut out = Simulated::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Inst ") {
            if let Some(step) = inst(rest) {
                if step.from.is_some() {
                    out.upgrades.push(step);
                } else {
                    out.installs.push(step);
                }
            }
        } else if let Some(rest) = line.strip_prefix("Remv ")
            && let Some(name) = rest.split_whitespace().next()
        {
            out.removes.push(bare_name(name).to_owned());
        }
    }
    out
}

/// `libc6:i386` → `libc6`.
fn bare_name(name: &str) -> &str {
    name.split(':').next().unwrap_or(name)
}

fn inst(rest: &str) -> Option<Step> {
    let (name, mut rest) = rest.split_once(' ')?;
    rest = rest.trim_start();
    let mut from = None;
    if let Some(after) = rest.strip_prefix('[') {
        let (old, after) = after.split_once(']')?;
        from = Some(old.trim().to_owned());
        rest = after.trim_start();
    }
    let inner = rest.strip_prefix('(')?;
    let inner = &inner[..inner.find(')')?];
    let (to, mut releases) = inner.split_once(' ').unwrap_or((inner, ""));
    let mut arch = String::new();
    if let Some(open) = releases.rfind('[') {
        arch = releases[open + 1..].trim_end_matches(']').trim().to_owned();
        releases = &releases[..open];
    }
    let (bare, qualified_arch) = match name.split_once(':') {
        Some((bare, arch)) => (bare, Some(arch)),
        None => (name, None),
    };
    if arch.is_empty() {
        arch = qualified_arch.unwrap_or_default().to_owned();
    }
    Some(Step {
        name: bare.to_owned(),
        arch,
        from,
        to: to.trim().to_owned(),
        releases: releases
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `apt-get -s dist-upgrade` in a Debian 12 root whose security suite offers updates.
    const DIST_UPGRADE: &str = include_str!("../../testdata/debian-12.apt-get-s-dist-upgrade");

    #[test]
    fn a_real_dist_upgrade_simulation() {
        let sim = parse_simulation(DIST_UPGRADE);
        let names: Vec<&str> = sim.upgrades.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["fleet-hello", "fleet-pulls"]);
        let hello = &sim.upgrades[0];
        assert_eq!(hello.from.as_deref(), Some("1.0"));
        assert_eq!(hello.to, "1.1");
        assert_eq!(hello.arch, "all");
        assert_eq!(hello.releases, ["Debian-Security:bookworm-security"]);
        assert!(hello.security());
        assert_eq!(sim.installs.len(), 1);
        assert_eq!(sim.installs[0].name, "fleet-dep-new");
        assert_eq!(
            sim.installs[0].releases,
            ["Debian:bookworm", "Debian-Security:bookworm-security"]
        );
        assert!(sim.removes.is_empty());
    }

    #[test]
    fn debian_and_ubuntu_archive_lines() {
        let text = "\
Inst libssl3 [3.0.11-1~deb12u1] (3.0.11-1~deb12u2 Debian-Security:12/stable-security [amd64])
Inst tzdata [2024a-0+deb12u1] (2024b-0+deb12u1 Debian:12.8/stable [all])
Inst libc6:i386 [2.36-9] (2.36-9+deb12u9 Debian:12.8/stable [i386]) []
Inst openssl [3.0.13-0ubuntu3.1] (3.0.13-0ubuntu3.4 Ubuntu:24.04/noble-updates, Ubuntu:24.04/noble-security [amd64])
Inst linux-image-6.8.0-49-generic (6.8.0-49.49 Ubuntu:24.04/noble-updates [amd64])
Remv linux-image-6.8.0-31-generic [6.8.0-31.31]
Remv oldlib:amd64 [1.0]
Conf libssl3 (3.0.11-1~deb12u2 Debian-Security:12/stable-security [amd64])
";
        let sim = parse_simulation(text);
        assert_eq!(sim.upgrades.len(), 4);
        assert!(sim.upgrades[0].security());
        assert!(!sim.upgrades[1].security());
        assert_eq!(sim.upgrades[2].name, "libc6");
        assert_eq!(sim.upgrades[2].arch, "i386");
        assert_eq!(sim.upgrades[2].to, "2.36-9+deb12u9");
        assert!(sim.upgrades[3].security());
        assert_eq!(sim.installs[0].name, "linux-image-6.8.0-49-generic");
        assert_eq!(sim.installs[0].from, None);
        assert_eq!(sim.removes, ["linux-image-6.8.0-31-generic", "oldlib"]);
    }

    #[test]
    fn a_failed_simulation_has_no_steps_and_junk_never_panics() {
        let text = "E: Unable to correct problems, you have held broken packages.\n";
        assert_eq!(parse_simulation(text), Simulated::default());
        for junk in [
            "Inst",
            "Inst x",
            "Inst x [",
            "Inst x [1] (",
            "Inst x (",
            "Inst  ()",
            "Remv",
        ] {
            let _ = parse_simulation(junk);
        }
    }
}

//! The system the agent looks after: its files and its commands, under a root directory.
//!
//! In production the root is `/`. Tests hand the agent a throwaway root (a Debian tree made by
//! mmdebstrap); then every command runs as `chroot <root> <program> …` and every file is read
//! under the root, so the real apt, dpkg, rpm and dnf work on the root's package database and
//! never on the machine's own.
//!
//! Commands run with a fixed environment: `C` locale (their output is parsed), a standard
//! `PATH`, `DEBIAN_FRONTEND=noninteractive`, and the proxy variables the agent was given; no
//! standard input; killed when their time is up.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::Context;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};

use crate::output::Tail;

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Proxy settings passed on to the package managers.
const PASSED_ON: [&str; 6] = [
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];

/// What a finished command printed.
#[derive(Debug, Clone)]
pub struct Output {
    /// The exit code; `None` when it was killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

#[derive(Debug, Clone)]
pub struct System {
    root: PathBuf,
}

impl System {
    pub fn new(root: PathBuf) -> System {
        System { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this is the machine itself (root `/`), not a root directory inside it.
    pub fn is_host(&self) -> bool {
        self.root == Path::new("/")
    }

    /// Where the system's absolute path `path` is, seen from the agent.
    pub fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// A system path as the agent sees it, back to the system's own view (`None` when it is
    /// not under the root).
    pub fn system_path<'a>(&self, seen: &'a str) -> Option<&'a str> {
        if self.is_host() {
            return Some(seen);
        }
        let root = self.root.to_str()?.trim_end_matches('/');
        let rest = seen.strip_prefix(root)?;
        rest.starts_with('/').then_some(rest)
    }

    pub fn read_to_string(&self, path: &str) -> std::io::Result<String> {
        std::fs::read_to_string(self.path(path))
    }

    pub fn exists(&self, path: &str) -> bool {
        self.path(path).exists()
    }

    fn command(&self, program: &str, args: &[&str]) -> tokio::process::Command {
        let mut command = if self.is_host() {
            tokio::process::Command::new(program)
        } else {
            let mut chroot = tokio::process::Command::new("chroot");
            chroot.arg(&self.root).arg(program);
            chroot
        };
        command
            .args(args)
            .env_clear()
            .env("PATH", PATH)
            .env("LC_ALL", "C")
            .env("LANG", "C")
            .env("HOME", "/root")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("APT_LISTCHANGES_FRONTEND", "none")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for name in PASSED_ON {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
    }

    /// Runs `program` and collects what it printed; an error when it cannot be started or
    /// runs past `limit` (it is killed then).
    pub async fn run(
        &self,
        program: &str,
        args: &[&str],
        limit: Duration,
    ) -> anyhow::Result<Output> {
        let child = self
            .command(program, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        let output = tokio::time::timeout(limit, child.wait_with_output())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "{program} did not finish within {}s: stopped",
                    limit.as_secs()
                )
            })?
            .with_context(|| format!("running {program}"))?;
        Ok(Output {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// Runs `program`, adding what it prints (both streams, line by line as they come) to
    /// `log` after a `$ program args` line; its exit code (`None`: killed by a signal or
    /// stopped at `limit`, which the log says).
    pub async fn run_logged(
        &self,
        program: &str,
        args: &[&str],
        limit: Duration,
        log: &mut Tail,
    ) -> anyhow::Result<Option<i32>> {
        log.line(format!("$ {program} {}", args.join(" ")));
        let mut child = self
            .command(program, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let copying = async {
            let mut out = stdout.map(|s| BufReader::new(s).lines());
            let mut err = stderr.map(|s| BufReader::new(s).lines());
            while out.is_some() || err.is_some() {
                tokio::select! {
                    line = next_line(&mut out), if out.is_some() => match line {
                        Some(line) => log.line(line),
                        None => out = None,
                    },
                    line = next_line(&mut err), if err.is_some() => match line {
                        Some(line) => log.line(line),
                        None => err = None,
                    },
                }
            }
        };
        if tokio::time::timeout(limit, copying).await.is_err() {
            let _ = child.start_kill();
            let _ = child.wait().await;
            log.line(format!(
                "fleet-agent: {program} did not finish within {}s and was stopped",
                limit.as_secs()
            ));
            return Ok(None);
        }
        let status = match tokio::time::timeout(limit, child.wait()).await {
            Ok(status) => status.with_context(|| format!("running {program}"))?,
            Err(_) => {
                let _ = child.start_kill();
                log.line(format!(
                    "fleet-agent: {program} did not exit and was stopped"
                ));
                return Ok(None);
            }
        };
        Ok(status.code())
    }
}

async fn next_line<R: AsyncRead + Unpin>(
    lines: &mut Option<tokio::io::Lines<BufReader<R>>>,
) -> Option<String> {
    match lines {
        Some(lines) => lines.next_line().await.ok().flatten(),
        None => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_under_the_root() {
        let host = System::new(PathBuf::from("/"));
        assert!(host.is_host());
        assert_eq!(host.path("/etc/os-release"), Path::new("/etc/os-release"));
        assert_eq!(host.system_path("/usr/bin/x"), Some("/usr/bin/x"));
        let root = System::new(PathBuf::from("/tmp/r1"));
        assert!(!root.is_host());
        assert_eq!(
            root.path("/etc/os-release"),
            Path::new("/tmp/r1/etc/os-release")
        );
        assert_eq!(root.system_path("/tmp/r1/usr/bin/x"), Some("/usr/bin/x"));
        assert_eq!(root.system_path("/tmp/r10/usr/bin/x"), None);
        assert_eq!(root.system_path("/usr/bin/x"), None);
    }

    #[tokio::test]
    async fn commands_run_in_the_c_locale_and_are_stopped_at_their_limit() {
        let host = System::new(PathBuf::from("/"));
        let out = host
            .run(
                "sh",
                &["-c", "echo $LC_ALL; echo oops >&2; exit 3"],
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout, "C\n");
        assert_eq!(out.stderr, "oops\n");
        let mut log = Tail::new();
        let code = host
            .run_logged(
                "sh",
                &["-c", "echo one; echo two >&2"],
                Duration::from_secs(10),
                &mut log,
            )
            .await
            .unwrap();
        assert_eq!(code, Some(0));
        assert!(log.as_str().starts_with("$ sh -c"));
        assert!(log.as_str().contains("one\n") && log.as_str().contains("two\n"));
        let mut log = Tail::new();
        let code = host
            .run_logged("sleep", &["30"], Duration::from_millis(200), &mut log)
            .await
            .unwrap();
        assert_eq!(code, None);
        assert!(log.as_str().contains("did not finish"), "{}", log.as_str());
        assert!(
            host.run("sleep", &["30"], Duration::from_millis(200))
                .await
                .is_err()
        );
    }
}

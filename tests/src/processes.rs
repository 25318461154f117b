//! The service's own binaries as separate processes, for tests of what crosses a process
//! boundary (several workers, a killed worker, several schedulers).

use std::process::Stdio;

use tokio::process::{Child, Command};

/// Starts the worker program (`worker::cli::main`, built as `fleet-worker` in this package, so
/// integration tests pass `env!("CARGO_BIN_EXE_fleet-worker")`) against `database_url`, delivering email to `smtp_url`.
pub fn spawn_worker(
    program: &str,
    database_url: &str,
    smtp_url: &str,
    concurrency: usize,
) -> Child {
    spawn_worker_with(program, database_url, smtp_url, concurrency, &[])
}

/// [`spawn_worker`] with more environment (`SECRETS_KEY`, `OUTBOUND_CA_FILE`, …).
pub fn spawn_worker_with(
    program: &str,
    database_url: &str,
    smtp_url: &str,
    concurrency: usize,
    env: &[(&str, &str)],
) -> Child {
    Command::new(program)
        .arg("--concurrency")
        .arg(concurrency.to_string())
        .env_clear()
        .envs(env.iter().copied())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", database_url)
        .env("SMTP_URL", smtp_url)
        .env("EMAIL_FROM", "Fleet Test <no-reply@fleet.test>")
        // Warnings (a job attempt that failed, say) reach the test's output; FLEET_WORKER_LOG
        // asks for more while investigating.
        .env(
            "RUST_LOG",
            std::env::var("FLEET_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start the worker process")
}

/// Starts the scheduler program (`fleet-scheduler` in this package) against `database_url`.
/// Several on one Postgres elect one leader; the others stand by.
pub fn spawn_scheduler(program: &str, database_url: &str) -> Child {
    Command::new(program)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", database_url)
        .env(
            "RUST_LOG",
            std::env::var("FLEET_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start the scheduler process")
}

/// Asks a spawned binary to shut down (SIGTERM: it finishes the work in flight) and waits for it
/// to exit, so whatever it was doing has provably ended when this returns.
pub async fn stop_gracefully(child: &mut Child) {
    if let Some(pid) = child.id() {
        let sent = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "SIGTERM to process {pid}");
    }
    let exited = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait()).await;
    assert!(
        matches!(exited, Ok(Ok(_))),
        "the process exited within a minute of SIGTERM"
    );
}

/// A second api replica: the api program (`fleet-api`) as its own process on the test app's
/// database, with no embedded worker, as a scaled-out deployment runs it beside others.
pub struct ApiReplica {
    pub base: String,
    child: Child,
}

impl ApiReplica {
    /// Starts `program` on `database_url` on a free loopback port and waits until it answers.
    pub async fn start(program: &str, database_url: &str, smtp_url: &str) -> ApiReplica {
        Self::start_with(program, database_url, smtp_url, &[]).await
    }

    /// [`ApiReplica::start`] with more environment (`OUTBOUND_CA_FILE`, proxy variables, …).
    pub async fn start_with(
        program: &str,
        database_url: &str,
        smtp_url: &str,
        env: &[(&str, &str)],
    ) -> ApiReplica {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(program)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", database_url)
            .env("SERVICE_BIND", format!("127.0.0.1:{port}"))
            .env("SERVICE_BASE_URL", crate::BASE_URL)
            .env("EMBEDDED_WORKERS", "false")
            .env("SMTP_URL", smtp_url)
            .env("EMAIL_FROM", "Fleet Test <no-reply@fleet.test>")
            .env("SECRETS_KEY", crate::TEST_SECRETS_KEY)
            .env("RATE_LIMIT_BURST", "100000")
            .env("RATE_LIMIT_PER_SECOND", "1000")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the api process");
        let mut replica = ApiReplica {
            base: format!("http://127.0.0.1:{port}"),
            child,
        };
        let client = reqwest::Client::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let ready = client
                .get(format!("{}/readyz", replica.base))
                .send()
                .await
                .is_ok_and(|answer| answer.status().is_success());
            if ready {
                return replica;
            }
            if let Ok(Some(status)) = replica.child.try_wait() {
                panic!("the api replica exited at start: {status}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the api replica answered /readyz within a minute"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    pub async fn stop(mut self) {
        stop_gracefully(&mut self.child).await;
    }
}

/// One of the service's programs as a process of its own, with a clean environment.
pub struct Program {
    pub child: Child,
}

impl Program {
    /// Starts `program` with `args` and exactly `env` (plus `PATH`); its output goes to the
    /// test's.
    pub fn start(program: &str, args: &[&str], env: &[(&str, &str)]) -> Program {
        // The test's own HTTP client (reqwest without a provider of its own) talks to it.
        platform::outbound::install_crypto_provider();
        let child = Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the program");
        Program { child }
    }

    /// Sends SIGTERM and waits (at most a minute) for the process to exit; how long it took.
    pub async fn terminate(&mut self) -> std::time::Duration {
        let started = std::time::Instant::now();
        stop_gracefully(&mut self.child).await;
        started.elapsed()
    }
}

/// Runs `program` with `args` and `env` to its end: its exit status and what it printed
/// (stdout and stderr together).
pub async fn run_to_end(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::ExitStatus, String) {
    let output = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run the program");
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status, text)
}

/// Waits (at most a minute) until `base` answers `/readyz` with 200.
pub async fn wait_ready(base: &str) {
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|answer| answer.status().is_success())
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{base} answered /readyz within a minute"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

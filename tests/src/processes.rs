//! The service's own binaries as separate processes, for tests of what crosses a process
//! boundary (several workers, a killed worker).

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

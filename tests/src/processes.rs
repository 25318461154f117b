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
    Command::new(program)
        .arg("--concurrency")
        .arg(concurrency.to_string())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", database_url)
        .env("SMTP_URL", smtp_url)
        .env("EMAIL_FROM", "Fleet Test <no-reply@fleet.test>")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start the worker process")
}

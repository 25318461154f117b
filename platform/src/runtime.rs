//! Process plumbing every binary shares: logging, the shutdown signal, work repeated in the
//! background, and turning a startup failure into one line on stderr instead of a panic.

use std::process::ExitCode;

use tokio_util::sync::CancellationToken;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::{Config, RawConfig};

/// Installs the tracing subscriber: `RUST_LOG` filter (default `info`), text or JSON lines; and
/// beside it, whatever the filter says, the layer that turns sqlx's connection waits into the
/// pool metrics ([`crate::metrics::AcquireWaits`]).
pub fn init_tracing(config: &Config) {
    use tracing_subscriber::{Layer, filter::Targets};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let waits = crate::metrics::AcquireWaits.with_filter(
        Targets::new().with_target(crate::metrics::ACQUIRE_TARGET, tracing::Level::TRACE),
    );
    let registry = tracing_subscriber::registry().with(waits);
    let result = if config.log_json {
        registry
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_filter(filter),
            )
            .try_init()
    } else {
        registry
            .with(fmt::layer().compact().with_filter(filter))
            .try_init()
    };
    // Already installed (a test that runs several services in one process): keep the first.
    let _ = result;
}

/// A token cancelled on SIGINT or SIGTERM.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = ctrl_c => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = ctrl_c.await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = ctrl_c.await;
        }
        tracing::info!("shutdown signal received: finishing in-flight work");
        cancel.cancel();
    });
    token
}

/// Runs a program's `main` future on a new multi-threaded runtime; a runtime that cannot start
/// is one line on stderr and a failed exit.
pub fn block_on<F: std::future::Future<Output = ExitCode>>(main: F) -> ExitCode {
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(main),
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Validates the configuration, installs logging and runs `body`; any failure becomes one
/// line on stderr and a non-zero exit code.
pub async fn run_main<F, Fut>(raw: RawConfig, body: F) -> ExitCode
where
    F: FnOnce(Config) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let config = match raw.validate() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("{err}");
            return ExitCode::from(2);
        }
    };
    init_tracing(&config);
    match body(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

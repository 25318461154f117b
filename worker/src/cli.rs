//! The `worker` command line; `main.rs` only calls [`main`], so tests can start the very same
//! program as a separate process.

use std::process::ExitCode;

use clap::Parser;
use platform::config::RawConfig;

#[derive(Parser)]
#[command(
    name = "worker",
    version,
    about = "Consumes the job queue (email delivery and the rest)."
)]
struct Args {
    #[command(flatten)]
    config: RawConfig,
    /// Jobs this process runs at once, per queue.
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = 32)]
    concurrency: usize,
    /// List jobs that ended failed, with their last error, and exit.
    #[arg(long)]
    failed: bool,
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    platform::runtime::block_on(platform::runtime::run_main(
        args.config,
        |config| async move {
            if args.failed {
                crate::print_failed(config).await
            } else {
                crate::run_process(config, args.concurrency).await
            }
        },
    ))
}

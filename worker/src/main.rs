//! `worker`: consumes the job queue. Run any number of replicas on Postgres.

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

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    platform::runtime::run_main(args.config, |config| async move {
        if args.failed {
            worker::print_failed(config).await
        } else {
            worker::run_process(config, args.concurrency).await
        }
    })
    .await
}

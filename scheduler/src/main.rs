//! `scheduler`: triggers time-driven work. Replicas on Postgres elect one leader.

use std::process::ExitCode;

use clap::Parser;
use platform::config::RawConfig;

/// mimalloc, not glibc's malloc: BENCHMARKS.md, "Changed check-ins at 200/s".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "scheduler", version, about = "Triggers time-driven work.")]
struct Args {
    #[command(flatten)]
    config: RawConfig,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    platform::runtime::run_main(args.config, scheduler::run_process).await
}

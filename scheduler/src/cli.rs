//! The `scheduler` command line; `main.rs` only calls [`main`], so tests can start the very same
//! program as a separate process.

use std::process::ExitCode;

use clap::Parser;
use platform::config::RawConfig;

#[derive(Parser)]
#[command(name = "scheduler", version, about = "Triggers time-driven work.")]
struct Args {
    #[command(flatten)]
    config: RawConfig,
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    platform::runtime::block_on(platform::runtime::run_main(args.config, crate::run_process))
}

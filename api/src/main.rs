//! `api`: serves the HTTP API. With SQLite (the default) it also runs the worker and the
//! scheduler in-process, so `cargo run --release -p api` is the whole service.

use std::process::ExitCode;

use clap::Parser;
use platform::config::RawConfig;

#[derive(Parser)]
#[command(
    name = "api",
    version,
    about = "Fleet update management service: the HTTP API."
)]
struct Args {
    #[command(flatten)]
    config: RawConfig,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    platform::runtime::run_main(args.config, api::run).await
}

//! The `api` command line; `main.rs` only calls [`main`], so tests can start the very same
//! program as a separate process. Without a subcommand it serves; `api plan set <org> <plan>`
//! sets an organization's plan by hand and exits.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use platform::config::{PLAN_NAMES, RawConfig};

#[derive(Parser)]
#[command(
    name = "api",
    version,
    about = "Fleet update management service: the HTTP API."
)]
struct Args {
    #[command(flatten)]
    config: RawConfig,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Organizations' plans.
    Plan {
        #[command(subcommand)]
        action: PlanAction,
    },
}

#[derive(Subcommand)]
enum PlanAction {
    /// Set an organization's plan by hand (the payment processor's next subscription event
    /// for it sets it again).
    Set {
        /// The organization's slug.
        org: String,
        /// free, team, business or enterprise.
        #[arg(value_parser = PLAN_NAMES)]
        plan: String,
    },
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        match args.command {
            None => platform::runtime::run_main(args.config, crate::run).await,
            Some(Command::Plan {
                action: PlanAction::Set { org, plan },
            }) => {
                platform::runtime::run_main(args.config, |config| async move {
                    crate::billing::operator::set_plan(config, &org, &plan).await
                })
                .await
            }
        }
    })
}

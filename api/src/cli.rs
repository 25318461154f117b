//! The `api` command line; `main.rs` only calls [`main`], so tests can start the very same
//! program as a separate process. Without a subcommand it serves; `api plan set <org> <plan>`
//! sets an organization's plan by hand and exits; `api backup <file>` copies the embedded
//! database while the service runs, `api restore <file>` puts a copy back (decisions §23).

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
    /// Write a consistent copy of the embedded (SQLite) database to FILE, while the service
    /// runs. On Postgres: use pg_dump (this says so and exits non-zero).
    Backup {
        /// Where the copy is written (replaced if it exists).
        file: std::path::PathBuf,
    },
    /// Replace the embedded (SQLite) database with the backup FILE. Refused while an api,
    /// worker or scheduler has the database open. On Postgres: use pg_restore.
    Restore {
        /// A file written by `api backup`.
        file: std::path::PathBuf,
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
    platform::runtime::block_on(async move {
        match args.command {
            None => platform::runtime::run_main(args.config, crate::run).await,
            Some(Command::Backup { file }) => {
                off_the_runtime(args.config, move |config| {
                    platform::backup::backup(&config, &file)?;
                    Ok(format!("backed up to {}", file.display()))
                })
                .await
            }
            Some(Command::Restore { file }) => {
                off_the_runtime(args.config, move |config| {
                    platform::backup::restore(&config, &file)?;
                    Ok(format!("restored from {}", file.display()))
                })
                .await
            }
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

/// Runs `work` (SQLite's blocking backup API) on a thread of its own and prints what it did.
async fn off_the_runtime(
    config: RawConfig,
    work: impl FnOnce(platform::config::Config) -> anyhow::Result<String> + Send + 'static,
) -> ExitCode {
    platform::runtime::run_main(config, |config| async move {
        let done = tokio::task::spawn_blocking(move || work(config)).await??;
        println!("{done}");
        Ok(())
    })
    .await
}

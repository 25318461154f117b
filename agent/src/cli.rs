//! The command line (decisions §19): `enroll`, `run`, `run --once`, `status`.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

use crate::{config::Config, enroll, run, state::StateDir, status, system::System};

/// Where the configuration is read from unless `--config` says otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/fleet-agent/agent.toml";
/// Where the key, certificate and state are kept unless `--state-dir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/fleet-agent";

#[derive(Parser, Debug)]
#[command(
    name = "fleet-agent",
    version,
    about = "Reports this host's packages and updates to the fleet update service and applies \
             the updates its operators approve (within the permissions of agent.toml)."
)]
struct Cli {
    /// The configuration file (TOML). A missing file at the default place means the defaults;
    /// one named here must exist.
    #[arg(long, global = true, env = "FLEET_AGENT_CONFIG")]
    config: Option<PathBuf>,
    /// Where the agent keeps its key, certificate and state (created 0700; the key 0600).
    #[arg(long, global = true, env = "FLEET_AGENT_STATE_DIR", default_value = DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// The root of the system to look after, `/` unless the configuration's `root` says
    /// otherwise. Another directory (a throwaway root in tests) makes every package-manager
    /// command run through `chroot <root>` and every file be read under it.
    #[arg(long, global = true, env = "FLEET_AGENT_ROOT")]
    root: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Enrol this host with an enrollment token: makes a key, asks the service for a
    /// certificate and keeps both in the state directory.
    Enroll {
        /// The service's address, e.g. https://fleet.example.com.
        #[arg(long)]
        server: String,
        /// The enrollment token (`enr_…`), from the service's enrollment tokens page.
        #[arg(long, env = "FLEET_AGENT_TOKEN", hide_env_values = true)]
        token: String,
        /// A label for the host, `key=value` (repeatable); the token's own labels win.
        #[arg(long = "label", value_parser = parse_label)]
        labels: Vec<(String, String)>,
    },
    /// Check in every `next_check_in_s` (±10 %), report the inventory when it changed, apply
    /// the jobs handed out, report their results, renew the certificate in its last 30 days.
    Run {
        /// One check-in, the jobs it was given and their results, then exit: 0 when every
        /// step succeeded, 1 when one failed.
        #[arg(long)]
        once: bool,
    },
    /// Print (JSON) the host id, the server, the last check-in and what the agent would report.
    Status,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not key=value"))?;
    if key.is_empty() {
        return Err(format!("{text:?} has an empty key"));
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// Runs the command line; the process's exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    // reqwest is built without a TLS provider of its own: the process installs ring's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!("cannot start: {err}");
            return ExitCode::from(2);
        }
    };
    let code = match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    };
    crate::usage::log();
    code
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::load_or_default(std::path::Path::new(DEFAULT_CONFIG))?,
    };
    let root = cli
        .root
        .clone()
        .or_else(|| config.root.clone())
        .unwrap_or_else(|| PathBuf::from("/"));
    let system = System::new(root);
    let state_dir = StateDir::open(&cli.state_dir)?;
    match cli.command {
        Command::Enroll {
            server,
            token,
            labels,
        } => {
            enroll::enroll(&config, &system, &state_dir, &server, &token, labels).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { once } => run::run(&config, &system, &state_dir, once).await,
        Command::Status => {
            status::print(&config, &system, &state_dir).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLEET_AGENT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .try_init();
}

//! `fleet-agent`: wires the command line to the library and exits with its status.

fn main() -> std::process::ExitCode {
    agent::cli::main()
}

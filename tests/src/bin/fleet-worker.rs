//! The `worker` program, built inside this package so that integration tests can start it as
//! a separate process (`CARGO_BIN_EXE_fleet-worker`) from the same build.

fn main() -> std::process::ExitCode {
    worker::cli::main()
}

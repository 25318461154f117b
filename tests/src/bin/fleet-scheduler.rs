//! The `scheduler` program, built inside this package so that integration tests can start it as
//! a separate process (`CARGO_BIN_EXE_fleet-scheduler`) from the same build.

/// mimalloc, not glibc's malloc: BENCHMARKS.md, "Changed check-ins at 200/s".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    scheduler::cli::main()
}

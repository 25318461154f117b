//! The `api` program, built inside this package so that integration tests can run it as a
//! separate process (`CARGO_BIN_EXE_fleet-api`), e.g. `api plan set`.

/// mimalloc, not glibc's malloc: BENCHMARKS.md, "Changed check-ins at 200/s".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    api::cli::main()
}

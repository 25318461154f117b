//! `scheduler`: triggers time-driven work. Replicas on Postgres elect one leader.

/// mimalloc, not glibc's malloc: BENCHMARKS.md, "Changed check-ins at 200/s".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    scheduler::cli::main()
}

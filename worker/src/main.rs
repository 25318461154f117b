//! `worker`: consumes the job queue. Run any number of replicas on Postgres.

/// mimalloc, not glibc's malloc: BENCHMARKS.md, "Changed check-ins at 200/s".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    worker::cli::main()
}

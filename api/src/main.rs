//! `api`: serves the HTTP API. With SQLite (the default) it also runs the worker and the
//! scheduler in-process, so `cargo run --release -p api` is the whole service.
//! `api plan set <org> <plan>` sets an organization's plan by hand.

/// mimalloc, not glibc's malloc: BENCHMARKS.md, "Changed check-ins at 200/s".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    api::cli::main()
}

//! `api`: serves the HTTP API. With SQLite (the default) it also runs the worker and the
//! scheduler in-process, so `cargo run --release -p api` is the whole service.
//! `api plan set <org> <plan>` sets an organization's plan by hand.

fn main() -> std::process::ExitCode {
    api::cli::main()
}

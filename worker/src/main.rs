//! `worker`: consumes the job queue. Run any number of replicas on Postgres.

fn main() -> std::process::ExitCode {
    worker::cli::main()
}

//! `fleet-processor`: the tests' payment processor (`tests::processor::TestProcessor`: HTTPS on
//! loopback, signed by the test CA, Stripe-compatible answers) as a program, for running the
//! api against it by hand or in the fuzz run. Prints one JSON line
//! `{"url", "ca_file", "api_key"}` (the values for `PAYMENTS_API_URL`, `OUTBOUND_CA_FILE`
//! and `PAYMENTS_API_KEY`; `OUTBOUND_ALLOW_PRIVATE=true` too) and serves until SIGTERM/SIGINT.

use std::io::Write;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    platform::outbound::install_crypto_provider();
    let processor = tests::processor::TestProcessor::start().await;
    let ca = tests::receiver::TestCa::get();
    let line = serde_json::json!({
        "url": processor.url(),
        "ca_file": ca.file.display().to_string(),
        "api_key": tests::PAYMENTS_API_KEY,
    });
    let mut out = std::io::stdout();
    writeln!(out, "{line}")?;
    out.flush()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let _ = std::fs::remove_file(&ca.file);
    Ok(())
}

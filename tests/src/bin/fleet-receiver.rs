//! `fleet-receiver`: an HTTPS receiver on loopback (`tests::receiver::Receiver`, signed by the
//! test CA) that answers 200 to every request, as a program: the webhook channel the console's
//! browser tests make sends to it. Prints one JSON line `{"url", "ca_file"}` (the address to
//! give the channel, and the value for `OUTBOUND_CA_FILE`; `OUTBOUND_ALLOW_PRIVATE=true` too),
//! then a line on stderr for each request it receives, and serves until SIGTERM/SIGINT.

use std::{io::Write, time::Duration};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    platform::outbound::install_crypto_provider();
    let receiver = tests::receiver::Receiver::start().await;
    let ca = tests::receiver::TestCa::get();
    let line = serde_json::json!({
        "url": receiver.url("/hooks"),
        "ca_file": ca.file.display().to_string(),
    });
    let mut out = std::io::stdout();
    writeln!(out, "{line}")?;
    out.flush()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut seen = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {
                let received = receiver.received();
                for request in received.iter().skip(seen) {
                    eprintln!(
                        "{} {} webhook-id={}",
                        request.method,
                        request.path,
                        request.header("webhook-id").unwrap_or("-")
                    );
                }
                seen = received.len();
            }
        }
    }
    let _ = std::fs::remove_file(&ca.file);
    Ok(())
}

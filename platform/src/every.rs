//! Work repeated in the background.

use tokio_util::sync::CancellationToken;

/// Runs `step` every `period`, the first time at once, until `stop` is cancelled or `step`
/// answers `false`. A step that overruns the period delays the next one rather than running
/// several at once to catch up.
pub async fn every<F, Fut>(period: std::time::Duration, stop: &CancellationToken, mut step: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if !step().await {
            return;
        }
    }
}

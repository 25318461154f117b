//! Runs a job's attempts: each one timed and counted in the metrics, a failed one tried again
//! after an exponential backoff (1 s to 60 s) while attempts are left, and a stop never leaves
//! a job behind.
//!
//! apalis' own retry layer sits outside its task tracking: while a job waited for its backoff
//! the worker counted no task in flight, and on a stop its next attempt waited for a worker that
//! no longer took tasks, until the shutdown timeout cut it off; its row stayed `Running`,
//! locked by a worker that was gone, until another worker's heartbeat found it orphaned. Here a
//! stop during the wait ends the job's run at once with its last error: apalis records the
//! attempts made (`Failed` with attempts left), and the queue hands it out again (to this
//! process's next start or another worker) with its attempt count.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use apalis::{
    layers::retry::backoff::{Backoff, ExponentialBackoff},
    prelude::{AbortError, BoxDynError, Status, Task},
};
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service, ServiceExt};

/// The layer of one queue's worker.
#[derive(Clone)]
pub struct Attempts {
    queue: &'static str,
    retries: usize,
    stop: CancellationToken,
    backoff: fn() -> ExponentialBackoff,
}

impl Attempts {
    /// `retries` attempts after the first, waiting `backoff` between them, until `stop`.
    pub fn new(
        queue: &'static str,
        retries: usize,
        stop: CancellationToken,
        backoff: fn() -> ExponentialBackoff,
    ) -> Attempts {
        platform::metrics::metrics().job_queue_known(queue);
        Attempts {
            queue,
            retries,
            stop,
            backoff,
        }
    }
}

impl<S> Layer<S> for Attempts {
    type Service = AttemptsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AttemptsService {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct AttemptsService<S> {
    inner: S,
    layer: Attempts,
}

/// What to do after an attempt that failed.
#[derive(Debug, PartialEq, Eq)]
enum AfterFailure {
    Retry,
    GiveUp,
}

/// Whether a failed attempt is tried again: not when the job asked to abort, was killed, or has
/// used its retries (`attempt` counts the attempts made, this one included).
fn after_failure(
    err: &BoxDynError,
    status: Status,
    attempt: usize,
    retries: usize,
) -> AfterFailure {
    let aborted = err.downcast_ref::<AbortError>().is_some();
    if aborted || status == Status::Killed || attempt > retries {
        AfterFailure::GiveUp
    } else {
        AfterFailure::Retry
    }
}

impl<S, Args> Service<Task<Args>> for AttemptsService<S>
where
    S: Service<Task<Args>, Error = BoxDynError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    Args: Clone + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxDynError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxDynError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, task: Task<Args>) -> Self::Future {
        // The ready service takes the first attempt; a clone takes the retries.
        let first = self.inner.call(task.clone());
        let mut inner = self.inner.clone();
        let layer = self.layer.clone();
        Box::pin(async move {
            let metrics = platform::metrics::metrics();
            let mut backoff = (layer.backoff)();
            let mut attempt_future = Some(first);
            loop {
                let started = Instant::now();
                let result = match attempt_future.take() {
                    Some(first) => first.await,
                    None => {
                        // The worker stops taking tasks once stopping: never wait for it then.
                        let ready = tokio::select! {
                            ready = inner.ready() => ready.map(|_| ()),
                            () = layer.stop.cancelled() => Err("stopped".into()),
                        };
                        match ready {
                            Ok(()) => inner.call(task.clone()).await,
                            Err(err) => return Err(err),
                        }
                    }
                };
                let took = started.elapsed();
                let err = match result {
                    Ok(response) => {
                        metrics.job_attempt(layer.queue, "done", took);
                        return Ok(response);
                    }
                    Err(err) => err,
                };
                let decision = if layer.stop.is_cancelled() {
                    AfterFailure::GiveUp
                } else {
                    after_failure(&err, task.status(), task.attempt(), layer.retries)
                };
                if decision == AfterFailure::GiveUp {
                    metrics.job_attempt(layer.queue, "failed", took);
                    return Err(err);
                }
                metrics.job_attempt(layer.queue, "retry", took);
                let wait = backoff.next_backoff();
                tokio::select! {
                    () = wait => {}
                    () = layer.stop.cancelled() => {
                        tracing::info!(
                            queue = layer.queue,
                            attempts = task.attempt(),
                            "stopping: the job's retry goes back to the queue"
                        );
                        return Err(err);
                    }
                }
            }
        })
    }
}

/// The backoff between attempts: 1 s doubling to 60 s, with jitter.
pub fn backoff() -> ExponentialBackoff {
    use apalis::layers::retry::{
        HasherRng,
        backoff::{ExponentialBackoffMaker, MakeBackoff},
    };
    match ExponentialBackoffMaker::new(
        Duration::from_secs(1),
        Duration::from_secs(60),
        0.5,
        HasherRng::default(),
    ) {
        Ok(mut maker) => maker.make_backoff(),
        // The bounds above are constants with min < max.
        Err(e) => unreachable!("invalid backoff bounds: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_retried_until_the_retries_are_used_and_never_an_abort() {
        let failed: BoxDynError = "the database failed".into();
        assert_eq!(
            after_failure(&failed, Status::Running, 1, 3),
            AfterFailure::Retry
        );
        assert_eq!(
            after_failure(&failed, Status::Running, 3, 3),
            AfterFailure::Retry
        );
        assert_eq!(
            after_failure(&failed, Status::Running, 4, 3),
            AfterFailure::GiveUp
        );
        assert_eq!(
            after_failure(&failed, Status::Killed, 1, 3),
            AfterFailure::GiveUp
        );
        let aborted: BoxDynError = Box::new(AbortError::new("not worth trying again"));
        assert_eq!(
            after_failure(&aborted, Status::Running, 1, 3),
            AfterFailure::GiveUp
        );
    }
}

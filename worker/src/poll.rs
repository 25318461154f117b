//! When a queue's worker looks for jobs again.
//!
//! apalis 1.0's `poll_with_interval` loses its wake-up: when its delay fires it puts a new
//! delay in its place without polling it, so nothing is registered to wake the worker at the
//! next interval. The worker is then woken only by its other sources: a job finishing, a fetch
//! answering, or its heartbeat timer, which it polls only between fetches. A worker whose
//! heartbeat timer fired during a slow fetch, and whose interval fired in the same poll as that
//! fetch came back empty, had nothing left to wake it: it stopped fetching, beating its heartbeat
//! and acknowledging the jobs it had finished, until the process restarted (the queue stall
//! BENCHMARKS.md records, seen on SQLite when fetches waited for the write lock). [`Every`]
//! registers each next wake-up as it arms it, and can also be woken when this process pushes a
//! job ([`Every::or_when_notified`]), so that on SQLite the queues need not be polled often.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use apalis::prelude::{PollSnapshot, PollStrategy};
use tokio::{
    sync::{Notify, futures::OwnedNotified},
    time::{Instant, Sleep},
};

/// Wakes a worker every `interval`, whatever it is doing, and whenever its [`Notify`] is
/// notified if it has one.
#[derive(Debug)]
pub struct Every {
    interval: Duration,
    /// Made at the first poll, on the worker's runtime.
    sleep: Option<Pin<Box<Sleep>>>,
    notified: Option<Notified>,
}

#[derive(Debug)]
struct Notified {
    notify: Arc<Notify>,
    next: Pin<Box<OwnedNotified>>,
}

impl Every {
    pub fn new(interval: Duration) -> Every {
        Every {
            interval,
            sleep: None,
            notified: None,
        }
    }

    /// Also wakes the worker when `notify` is notified. A notification given while the worker
    /// is busy (`notify_one`) is kept and wakes it at its next poll.
    pub fn or_when_notified(self, notify: Arc<Notify>) -> Every {
        let next = Box::pin(notify.clone().notified_owned());
        Every {
            notified: Some(Notified { notify, next }),
            ..self
        }
    }
}

impl PollStrategy for Every {
    fn poll_drive(&mut self, cx: &mut Context<'_>, _: &PollSnapshot) -> Poll<Option<()>> {
        let mut woken = false;
        if let Some(notified) = &mut self.notified {
            // Each one that fired is replaced and polled, so that the next notification wakes
            // this task (or is kept for it); a kept one fires at once, and there is at most one.
            while notified.next.as_mut().poll(cx).is_ready() {
                woken = true;
                notified.next = Box::pin(notified.notify.clone().notified_owned());
            }
        }
        let interval = self.interval;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(interval)));
        if sleep.as_mut().poll(cx).is_ready() {
            woken = true;
            sleep.as_mut().reset(Instant::now() + interval);
            // Polled now so that the next deadline wakes this task even if nothing polls it
            // before.
            let _ = sleep.as_mut().poll(cx);
        }
        if woken {
            Poll::Ready(Some(()))
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use futures::task::{ArcWake, waker};

    use super::*;

    /// Counts its wake-ups.
    struct Wakes(AtomicUsize);

    impl ArcWake for Wakes {
        fn wake_by_ref(arc: &Arc<Self>) {
            arc.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    async fn until_woken(wakes: &Wakes, times: usize) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while wakes.0.load(Ordering::SeqCst) < times {
            if std::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// The task is woken at every interval even when the poll that saw one fire is its last:
    /// apalis' `IntervalStrategy` fails this at the second wake-up.
    #[tokio::test]
    async fn each_interval_wakes_the_worker_without_another_poll() {
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        let waker = waker(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut every = Every::new(Duration::from_millis(20));
        let snapshot = PollSnapshot::new();

        assert!(every.poll_drive(&mut cx, &snapshot).is_pending());
        assert!(
            until_woken(&wakes, 1).await,
            "the first interval woke nobody"
        );
        assert_eq!(every.poll_drive(&mut cx, &snapshot), Poll::Ready(Some(())));
        // Not polled again: the next interval must wake the task by itself.
        assert!(
            until_woken(&wakes, 2).await,
            "the interval after a fired one woke nobody"
        );
        assert_eq!(every.poll_drive(&mut cx, &snapshot), Poll::Ready(Some(())));
        assert!(until_woken(&wakes, 3).await);
    }

    /// A notification wakes the worker without waiting for the interval, and one given while
    /// the worker was not waiting is kept for its next poll.
    #[tokio::test]
    async fn a_notification_wakes_the_worker_at_once_and_is_kept_until_it_polls() {
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        let waker = waker(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let notify = Arc::new(Notify::new());
        let mut every = Every::new(Duration::from_secs(3_600)).or_when_notified(notify.clone());
        let snapshot = PollSnapshot::new();

        // Given before the first poll: kept.
        notify.notify_one();
        assert_eq!(every.poll_drive(&mut cx, &snapshot), Poll::Ready(Some(())));
        assert!(every.poll_drive(&mut cx, &snapshot).is_pending());

        notify.notify_one();
        assert!(until_woken(&wakes, 1).await, "the notification woke nobody");
        assert_eq!(every.poll_drive(&mut cx, &snapshot), Poll::Ready(Some(())));
        // Not polled since: the next notification wakes the task by itself.
        notify.notify_one();
        assert!(
            until_woken(&wakes, 2).await,
            "the second notification woke nobody"
        );
        assert_eq!(every.poll_drive(&mut cx, &snapshot), Poll::Ready(Some(())));
        assert!(every.poll_drive(&mut cx, &snapshot).is_pending());
    }
}

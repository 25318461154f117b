//! The api's client connections, so that a stop never waits on a client.
//!
//! poem drains a stopping server by asking every connection to finish gracefully and waiting for
//! all of them (up to its drain timeout). hyper finishes a connection gracefully only once the
//! request it is reading is complete: a client that sent half a request head, or a request
//! whose body it stalls in, held the stop for the whole drain timeout (30 s then), however idle
//! the rest of the service was. Here each connection knows whether one of its requests is being
//! answered ([`answering`], from the edge); once the stop is signalled, a connection with none
//! reads end-of-file at once, so hyper closes it, and one being answered is left to finish within
//! the drain timeout (`crate::http::server::DRAIN_TIMEOUT`).

use std::{
    collections::HashMap,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, LazyLock, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
};

use poem::{
    listener::Acceptor,
    web::{LocalAddr, RemoteAddr},
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// A connection's count of requests being answered.
#[derive(Debug, Default)]
struct Answering(AtomicUsize);

type Key = (SocketAddr, SocketAddr);

/// Every open connection of every server in this process, by (local, remote) address.
static OPEN: LazyLock<Mutex<HashMap<Key, Arc<Answering>>>> = LazyLock::new(Default::default);

fn key(local: &LocalAddr, remote: &RemoteAddr) -> Option<Key> {
    Some((*local.as_socket_addr()?, *remote.as_socket_addr()?))
}

/// Marks a request of the connection (`local`, `remote`) as being answered until it is dropped.
pub struct AnsweringGuard(Arc<Answering>);

impl Drop for AnsweringGuard {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The request on the connection from `remote` to `local` is being answered (none when the
/// connection is not one of a [`StopAware`] acceptor's, as in tests that call the app directly).
pub fn answering(local: &LocalAddr, remote: &RemoteAddr) -> Option<AnsweringGuard> {
    let key = key(local, remote)?;
    let open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    let answering = open.get(&key)?.clone();
    answering.0.fetch_add(1, Ordering::AcqRel);
    Some(AnsweringGuard(answering))
}

/// An acceptor whose connections end at the stop unless a request of theirs is being answered.
pub struct StopAware<A> {
    inner: A,
    stop: CancellationToken,
}

impl<A> StopAware<A> {
    pub fn new(inner: A, stop: CancellationToken) -> Self {
        StopAware { inner, stop }
    }
}

impl<A: Acceptor> Acceptor for StopAware<A> {
    type Io = Watched<A::Io>;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.inner.local_addr()
    }

    async fn accept(
        &mut self,
    ) -> io::Result<(Self::Io, LocalAddr, RemoteAddr, poem::http::uri::Scheme)> {
        let (io, local, remote, scheme) = self.inner.accept().await?;
        let answering = Arc::new(Answering::default());
        let key = key(&local, &remote);
        if let Some(key) = key {
            OPEN.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key, answering.clone());
        }
        let watched = Watched {
            inner: io,
            answering,
            key,
            stopped: Box::pin(self.stop.clone().cancelled_owned()),
            stop: self.stop.clone(),
        };
        Ok((watched, local, remote, scheme))
    }
}

/// A connection that reads end-of-file once the stop is signalled and no request of it is
/// being answered.
pub struct Watched<Io> {
    inner: Io,
    answering: Arc<Answering>,
    key: Option<Key>,
    stop: CancellationToken,
    stopped: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl<Io> Watched<Io> {
    /// Whether to end the connection now: stopping, and nothing of it being answered. Registers
    /// `cx` to be woken at the stop.
    fn ends(&mut self, cx: &mut Context<'_>) -> bool {
        if self.answering.0.load(Ordering::Acquire) > 0 {
            return false;
        }
        self.stop.is_cancelled() || self.stopped.as_mut().poll(cx).is_ready()
    }
}

impl<Io> Drop for Watched<Io> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
            if open
                .get(&key)
                .is_some_and(|a| Arc::ptr_eq(a, &self.answering))
            {
                open.remove(&key);
            }
        }
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Watched<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.ends(cx) {
            // End-of-file: hyper closes the connection (an unfinished request with it).
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Watched<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

//! Running the api: bind, serve until told to stop, drain in-flight requests.

use std::{net::SocketAddr, time::Duration};

use platform::db::Pool;
use poem::{
    Server,
    listener::{Acceptor, Listener, TcpListener},
};
use tokio_util::sync::CancellationToken;

use crate::{AppState, app};

/// How long requests being answered may take to finish after a shutdown signal; connections
/// with no request being answered close at once (`crate::http::connections`).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A bound listener, so callers (tests) can learn the port before serving.
pub struct Bound {
    acceptor: poem::listener::TcpAcceptor,
    pub local_addr: SocketAddr,
}

pub async fn bind(addr: SocketAddr) -> anyhow::Result<Bound> {
    let acceptor = TcpListener::bind(addr).into_acceptor().await?;
    let local_addr = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .ok_or_else(|| anyhow::anyhow!("the listener has no socket address"))?;
    Ok(Bound {
        acceptor,
        local_addr,
    })
}

/// Serves until `shutdown` is cancelled, then stops accepting and drains.
pub async fn serve(
    state: AppState,
    bound: Bound,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // Other replicas' (and workers') changes to who may do what reach this one's caches.
    let db = state.db.clone();
    let watcher = match &state.db.pool {
        Pool::Postgres(pool) => Some(state.db.identity.watch_postgres(pool.clone())),
        Pool::Sqlite(_) => None,
    };
    let acceptor = crate::http::connections::StopAware::new(bound.acceptor, shutdown.clone());
    let served = Server::new_with_acceptor(acceptor)
        .run_with_graceful_shutdown(
            app(state),
            async move { shutdown.cancelled().await },
            Some(DRAIN_TIMEOUT),
        )
        .await;
    if let Some(watcher) = watcher {
        watcher.abort();
        // Nobody waits for this replica to hear of changes any more.
        if let Pool::Postgres(pool) = &db.pool {
            db.identity.leave(pool).await;
        }
    }
    served?;
    Ok(())
}

//! A node's liveness and readiness as `watch` channels: alive while its supervisor runs,
//! ready once every pool's peer sync has its starting snapshots and a worker is known.

use crate::peer_sync::PeerSyncHandle;
use router_core::PoolRole;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// True until the supervisor's task ends (escalation or stop).
pub(crate) fn watch_alive(supervisor_done: JoinHandle<()>) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(true);
    tokio::spawn(async move {
        let _ = supervisor_done.await;
        tx.send_replace(false);
    });
    rx
}

pub(crate) fn readiness(
    peers: &[(PoolRole, PeerSyncHandle)],
    mut workers: watch::Receiver<usize>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    let mut peers: Vec<watch::Receiver<bool>> = peers.iter().map(|(_, p)| p.ready()).collect();
    tasks.push(tokio::spawn(async move {
        loop {
            let ok = *workers.borrow() > 0 && peers.iter().all(|p| *p.borrow());
            tx.send_replace(ok);
            let changed = {
                let peer_change = async {
                    if peers.is_empty() {
                        futures::future::pending::<()>().await;
                    }
                    futures::future::select_all(peers.iter_mut().map(|p| Box::pin(p.changed())))
                        .await
                        .0
                };
                tokio::select! {
                    c = workers.changed() => c,
                    c = peer_change => c,
                }
            };
            if changed.is_err() {
                break;
            }
        }
    }));
    rx
}

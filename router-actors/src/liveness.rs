//! A node's liveness and readiness as `watch` channels. Alive while its supervisor runs and
//! every required part is there: each child of the supervisor running or about to be
//! restarted, each required task of the node (the room and credit couriers) still running.
//! Ready once every pool's peer sync has its starting snapshots and a worker is known.
//!
//! A child counts as gone for good when it has had no running actor for longer than
//! `grace` past its restart's due time (or, with no restart scheduled, for `grace`): the
//! supervisor is stuck in a start that never ends, or never heard of the stop. A required task
//! that ended is never restarted, so it is gone at once.

use crate::peer_sync::PeerSyncHandle;
use crate::supervisor::ChildBoard;
use router_core::PoolRole;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

/// How often the liveness watcher looks at the children and tasks.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Whether a node can still route, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Liveness {
    Alive,
    /// `reason` names what is gone.
    Failed {
        reason: String,
    },
}

impl Liveness {
    pub fn is_alive(&self) -> bool {
        matches!(self, Self::Alive)
    }

    /// Why the node is not alive (`None` while it is).
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Alive => None,
            Self::Failed { reason } => Some(reason),
        }
    }
}

/// What the watcher looks at.
pub(crate) struct Watched {
    pub supervisor_done: JoinHandle<()>,
    pub board: ChildBoard,
    /// Tasks the node cannot route without, by name.
    pub tasks: Vec<(String, AbortHandle)>,
    pub grace: Duration,
}

/// `Alive` until the supervisor's task ends (then `Failed` with the reason it gave up, if
/// any), a child has been gone past its grace, or a required task ended.
pub(crate) fn watch_alive(watched: Watched) -> watch::Receiver<Liveness> {
    let (tx, rx) = watch::channel(Liveness::Alive);
    let Watched {
        mut supervisor_done,
        board,
        tasks,
        grace,
    } = watched;
    tokio::spawn(async move {
        let mut gone_since: HashMap<String, Instant> = HashMap::new();
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut supervisor_done => break,
                _ = tick.tick() => {}
            }
            let now = Instant::now();
            let missing = board.missing();
            gone_since.retain(|name, _| missing.iter().any(|m| &m.name == name));
            let mut gone: Vec<String> = missing
                .into_iter()
                .filter_map(|m| {
                    let since = *gone_since.entry(m.name.clone()).or_insert(now);
                    let from = m.restart_due.map_or(since, |due| due.max(since));
                    (now.saturating_duration_since(from) > grace).then(|| {
                        let secs = now.saturating_duration_since(since).as_secs_f64();
                        format!("actor {} gone for {secs:.1} s, not restarted", m.name)
                    })
                })
                .collect();
            gone.extend(
                tasks
                    .iter()
                    .filter(|(_, task)| task.is_finished())
                    .map(|(name, _)| format!("task {name} ended")),
            );
            let liveness = if gone.is_empty() {
                Liveness::Alive
            } else {
                Liveness::Failed {
                    reason: format!("a required part of the node is gone: {}", gone.join("; ")),
                }
            };
            tx.send_if_modified(|current| {
                let changed = *current != liveness;
                if changed {
                    if let Liveness::Failed { reason } = &liveness {
                        tracing::error!(%reason, "the node is no longer alive");
                    }
                    *current = liveness;
                }
                changed
            });
        }
        let reason = match board.gave_up_reason() {
            Some(why) => format!("the node's supervisor gave up: {why}"),
            None => "the node's supervisor stopped".to_owned(),
        };
        tx.send_replace(Liveness::Failed { reason });
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

//! What the supervisor says about its children, for a watcher outside it: each child's
//! current actor (none between a failure and its restart), when its restart is due, and why
//! the supervisor gave up, if it did. The supervisor writes it; the node's liveness watcher
//! (`crate::liveness`) reads it to tell a child being restarted from one that is gone for good
//! (the supervisor stuck in a start that never ends, or a child stopped without the
//! supervisor hearing of it).

use ractor::{ActorCell, ActorStatus};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::time::Instant;

/// One child as the supervisor last saw it.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    cell: Option<ActorCell>,
    /// When the supervisor will start it again (set while it is down).
    restart_due: Option<Instant>,
}

#[derive(Debug, Default)]
struct Board {
    children: Vec<Entry>,
    gave_up: Option<String>,
}

/// A child that is not running now, as [`ChildBoard::missing`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub name: String,
    /// When its restart is due, if the supervisor scheduled one.
    pub restart_due: Option<Instant>,
}

/// The shared board; clones see the same children.
#[derive(Debug, Clone, Default)]
pub struct ChildBoard(Arc<Mutex<Board>>);

impl ChildBoard {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut Board) -> R) -> R {
        let mut board = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut board)
    }

    /// Child `i` (in the supervisor's order) runs as `cell`.
    pub(crate) fn running(&self, i: usize, name: &str, cell: ActorCell) {
        self.with(|b| {
            while b.children.len() <= i {
                b.children.push(Entry {
                    name: String::new(),
                    cell: None,
                    restart_due: None,
                });
            }
            b.children[i] = Entry {
                name: name.to_owned(),
                cell: Some(cell),
                restart_due: None,
            };
        });
    }

    /// Child `i` is down; its restart is due at `due`.
    pub(crate) fn down(&self, i: usize, due: Instant) {
        self.with(|b| {
            if let Some(entry) = b.children.get_mut(i) {
                entry.cell = None;
                entry.restart_due = Some(due);
            }
        });
    }

    /// The supervisor gave up (a child failed past its restart budget).
    pub(crate) fn gave_up(&self, reason: String) {
        self.with(|b| b.gave_up = Some(reason));
    }

    /// Why the supervisor gave up, if it did.
    pub fn gave_up_reason(&self) -> Option<String> {
        self.with(|b| b.gave_up.clone())
    }

    /// Children without a running actor now: down (their restart due or overdue), or whose
    /// actor stopped without the supervisor having handled it yet.
    pub fn missing(&self) -> Vec<Missing> {
        self.with(|b| {
            b.children
                .iter()
                .filter(|e| {
                    !e.cell.as_ref().is_some_and(|c| {
                        matches!(
                            c.get_status(),
                            ActorStatus::Starting | ActorStatus::Running | ActorStatus::Upgrading
                        )
                    })
                })
                .map(|e| Missing {
                    name: e.name.clone(),
                    restart_due: e.restart_due,
                })
                .collect()
        })
    }
}

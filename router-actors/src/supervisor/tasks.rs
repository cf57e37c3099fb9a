//! Tasks an actor owns (bus forwarders, listeners), aborted when the actor's state is dropped.
//! ractor runs `post_stop` only after a clean stop, not after a handler error or a panic; the
//! state is dropped either way, so tasks held here never outlive a failed incarnation (a
//! restarted actor would otherwise share its subscriptions with a dead one's forwarders).

use tokio::task::JoinHandle;

#[derive(Debug, Default)]
pub struct OwnedTasks(Vec<JoinHandle<()>>);

impl OwnedTasks {
    pub fn new(tasks: Vec<JoinHandle<()>>) -> Self {
        Self(tasks)
    }

    pub fn push(&mut self, task: JoinHandle<()>) {
        self.0.push(task);
    }

    /// Aborts every task now.
    pub fn abort_all(&mut self) {
        for task in self.0.drain(..) {
            task.abort();
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Drop for OwnedTasks {
    fn drop(&mut self) {
        self.abort_all();
    }
}

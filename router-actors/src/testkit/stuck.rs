//! [`StuckChild`]: a supervisor child for liveness tests. Its first start spawns an idle
//! actor linked to the supervisor; every later start never finishes, so once the child is
//! stopped the supervisor is stuck restarting it: the child is gone and not restarted, and
//! any other child that fails meanwhile is not restarted either.

use crate::supervisor::ChildSpec;
use futures::FutureExt as _;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// An actor that does nothing.
struct Idle;

impl Actor for Idle {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _myself: ActorRef<()>, _args: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

/// The handle of a [`StuckChild`]'s running actor.
#[derive(Debug, Clone, Default)]
pub struct StuckChild {
    actor: Arc<Mutex<Option<ActorCell>>>,
}

impl StuckChild {
    /// The child's spec (named `name`) and its handle.
    pub fn spec(name: &str) -> (ChildSpec, Self) {
        let handle = Self::default();
        let started = Arc::new(AtomicBool::new(false));
        let actor = Arc::clone(&handle.actor);
        let spec = ChildSpec::new(name, move |supervisor: ActorCell| {
            let (started, actor) = (Arc::clone(&started), Arc::clone(&actor));
            async move {
                if started.swap(true, Ordering::SeqCst) {
                    // A restart: never done.
                    futures::future::pending::<()>().await;
                }
                let (idle, _) = Actor::spawn_linked(None, Idle, (), supervisor).await?;
                let cell = idle.get_cell();
                *actor.lock().unwrap_or_else(PoisonError::into_inner) = Some(cell.clone());
                Ok(cell)
            }
            .boxed()
        });
        (spec, handle)
    }

    /// Stops the running actor (the supervisor then tries to restart it, and hangs).
    pub fn stop(&self) {
        let cell = self
            .actor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(cell) = cell {
            cell.stop(Some("stopped by the test".into()));
        }
    }
}

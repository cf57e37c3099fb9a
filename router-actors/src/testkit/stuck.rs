//! [`StuckChild`]: a supervisor child for liveness tests. Its first start spawns an idle
//! actor linked to the supervisor; every later start never finishes, so once the child is
//! stopped the supervisor is stuck restarting it: the child is gone and not restarted, and
//! any other child that fails meanwhile is not restarted either. The first start is the
//! supervisor's usual one ([`start_linked`]); only the pending restarts are its own.

use crate::supervisor::{ActorSlot, ChildSpec, start_linked};
use futures::FutureExt as _;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    actor: ActorSlot<()>,
}

impl StuckChild {
    /// The child's spec (named `name`) and its handle.
    pub fn spec(name: &str) -> (ChildSpec, Self) {
        let handle = Self::default();
        let started = Arc::new(AtomicBool::new(false));
        let actor = handle.actor.clone();
        let spec = ChildSpec::new(name, move |supervisor: ActorCell| {
            let (started, actor) = (Arc::clone(&started), actor.clone());
            async move {
                if started.swap(true, Ordering::SeqCst) {
                    // A restart: never done.
                    futures::future::pending::<()>().await;
                }
                start_linked(Idle, (), supervisor, &actor).await
            }
            .boxed()
        });
        (spec, handle)
    }

    /// Stops the running actor (the supervisor then tries to restart it, and hangs).
    pub fn stop(&self) {
        if let Some(actor) = self.actor.take() {
            actor.stop(Some("stopped by the test".into()));
        }
    }
}

//! NodeSupervisor: spawns the node's actors linked to itself, restarts a child that fails
//! (with backoff, at most `max_restarts` per window) and escalates past the cap by stopping
//! itself with the reason. A child is described by a [`ChildSpec`]: a name and a start
//! function that spawns it linked to the supervisor and points the child's [`ActorSlot`] at the
//! new actor, so every handle follows the restart; [`linked_child`] (`child.rs`) makes that
//! spec for every actor child of a node. The supervisor also keeps a [`ChildBoard`] up to date
//! (each child's actor, its restart when due, why it gave up) for the node's liveness
//! watcher. The rules are written down in `docs/runtime-semantics.md`.

mod board;
mod child;
mod inflight;
mod policy;
mod slot;
mod tasks;

#[cfg(test)]
mod tests;

pub use board::{ChildBoard, Missing};
pub use child::{linked_child, start_linked};
pub use inflight::InflightRegistry;
pub use policy::{RestartBudget, RestartDecision, RestartPolicy};
pub use slot::{ActorSlot, CallError, DEFAULT_CALL_TIMEOUT, ask};
pub use tasks::OwnedTasks;

use futures::future::BoxFuture;
use ractor::{
    Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr, SupervisionEvent,
};
use serde::Serialize;
use std::sync::Arc;

type StartFn =
    Arc<dyn Fn(ActorCell) -> BoxFuture<'static, Result<ActorCell, SpawnErr>> + Send + Sync>;

/// How to (re)start one child.
#[derive(Clone)]
pub struct ChildSpec {
    pub name: String,
    start: StartFn,
}

impl std::fmt::Debug for ChildSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildSpec")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ChildSpec {
    /// `start` spawns the child linked to the given supervisor cell and returns its cell.
    pub fn new<F>(name: impl Into<String>, start: F) -> Self
    where
        F: Fn(ActorCell) -> BoxFuture<'static, Result<ActorCell, SpawnErr>> + Send + Sync + 'static,
    {
        Self {
            name: name.into(),
            start: Arc::new(start),
        }
    }
}

#[derive(Debug)]
pub struct SupervisorArgs {
    pub children: Vec<ChildSpec>,
    pub policy: RestartPolicy,
    /// Where the supervisor says what its children are doing (`ChildBoard::default()` when
    /// nobody watches).
    pub board: ChildBoard,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChildSnapshot {
    pub name: String,
    pub alive: bool,
    pub restarts: u64,
}

#[derive(Debug)]
pub enum SupervisorMsg {
    /// Start child `i` again (sent after its backoff).
    Restart(usize),
    Observe(RpcReplyPort<Vec<ChildSnapshot>>),
}

#[derive(Debug)]
struct Child {
    spec: ChildSpec,
    cell: Option<ActorCell>,
    budget: RestartBudget,
}

#[derive(Debug)]
pub struct SupervisorState {
    children: Vec<Child>,
    stopping: bool,
    board: ChildBoard,
}

#[derive(Debug)]
pub struct NodeSupervisor;

impl Actor for NodeSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let mut children = Vec::with_capacity(args.children.len());
        for (i, spec) in args.children.into_iter().enumerate() {
            let cell = (spec.start)(myself.get_cell()).await?;
            args.board.running(i, &spec.name, cell.clone());
            children.push(Child {
                spec,
                cell: Some(cell),
                budget: RestartBudget::new(args.policy),
            });
        }
        Ok(SupervisorState {
            children,
            stopping: false,
            board: args.board,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Restart(i) => {
                let Some(child) = state.children.get_mut(i) else {
                    return Ok(());
                };
                match (child.spec.start)(myself.get_cell()).await {
                    Ok(cell) => {
                        tracing::info!(child = %child.spec.name, restarts = child.budget.restarts, "child restarted");
                        state.board.running(i, &child.spec.name, cell.clone());
                        child.cell = Some(cell);
                    }
                    Err(error) => {
                        tracing::error!(child = %child.spec.name, %error, "restart failed");
                        schedule_restart(&myself, state, i, &error.to_string());
                    }
                }
            }
            SupervisorMsg::Observe(reply) => {
                let snapshot = state
                    .children
                    .iter()
                    .map(|c| ChildSnapshot {
                        name: c.spec.name.clone(),
                        alive: c.cell.is_some(),
                        restarts: c.budget.restarts,
                    })
                    .collect();
                let _ = reply.send(snapshot);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, reason) = match event {
            SupervisionEvent::ActorFailed(cell, error) => (cell, error.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.unwrap_or_else(|| "stopped".into()))
            }
            _ => return Ok(()),
        };
        if state.stopping {
            return Ok(());
        }
        let Some(i) = state
            .children
            .iter()
            .position(|c| c.cell.as_ref().is_some_and(|k| k.get_id() == cell.get_id()))
        else {
            return Ok(());
        };
        state.children[i].cell = None;
        tracing::warn!(child = %state.children[i].spec.name, %reason, "child failed");
        schedule_restart(&myself, state, i, &reason);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        state.stopping = true;
        for child in state.children.iter_mut().rev() {
            if let Some(cell) = child.cell.take() {
                cell.stop(Some("supervisor stopped".into()));
            }
        }
        Ok(())
    }
}

fn schedule_restart(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    i: usize,
    reason: &str,
) {
    match state.children[i]
        .budget
        .on_failure(tokio::time::Instant::now())
    {
        RestartDecision::Restart { after } => {
            state.board.down(i, tokio::time::Instant::now() + after);
            myself.send_after(after, move || SupervisorMsg::Restart(i));
        }
        RestartDecision::Escalate => {
            let name = &state.children[i].spec.name;
            tracing::error!(child = %name, %reason, "restart budget spent: escalating");
            state.stopping = true;
            let why = format!("child {name} failed too often: {reason}");
            state.board.gave_up(why.clone());
            myself.stop(Some(why));
        }
    }
}

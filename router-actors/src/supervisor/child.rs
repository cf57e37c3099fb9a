//! The one way an actor becomes a restartable child of the
//! [`NodeSupervisor`](super::NodeSupervisor): [`linked_child`] makes the [`ChildSpec`] whose
//! every start (the supervisor's first, and one after each failure) spawns the actor linked
//! to the supervisor from a clone of the same arguments and points the child's [`ActorSlot`]
//! at it, so every handle follows the restart. [`start_linked`] is that one start, for a
//! spec that decides for itself when to make it (a test's stuck child).
//!
//! Children are not registered under a global ractor name: several nodes may share one
//! process (tests).

use super::{ActorSlot, ChildSpec};
use ractor::{Actor, ActorCell, SpawnErr};

/// A child that (re)starts `actor` from a clone of `args`, linked to the supervisor, and
/// points `slot` at every new incarnation. What an incarnation must carry over (in-flight
/// bookings, a delta queue, leases, an index) lives behind `args`, which every start shares.
pub fn linked_child<A>(
    name: impl Into<String>,
    actor: A,
    args: A::Arguments,
    slot: ActorSlot<A::Msg>,
) -> ChildSpec
where
    A: Actor + Clone,
    A::Arguments: Clone + Sync,
{
    ChildSpec::new(name, move |supervisor| {
        let (actor, args, slot) = (actor.clone(), args.clone(), slot.clone());
        Box::pin(async move { start_linked(actor, args, supervisor, &slot).await })
    })
}

/// Spawns `actor` from `args`, unnamed and linked to `supervisor`, and points `slot` at it;
/// returns its cell for the supervisor to watch.
pub async fn start_linked<A: Actor>(
    actor: A,
    args: A::Arguments,
    supervisor: ActorCell,
    slot: &ActorSlot<A::Msg>,
) -> Result<ActorCell, SpawnErr> {
    let (actor, _) = Actor::spawn_linked(None, actor, args, supervisor).await?;
    slot.set(actor.clone());
    Ok(actor.get_cell())
}

//! Switchyard's actor layer: one ractor actor per file around the pure `router-core`
//! scheduler, and the bus (NATS or in-process) at one edge. Not built yet: see the open
//! issue "Actors and the bus".

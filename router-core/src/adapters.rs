//! Where a LoRA adapter is loaded: an engine holds a few adapters in its slots at once
//! (vLLM's `--max-loras`); a request for an adapter already running there starts at once,
//! one for an adapter with a free slot pays a load, and one for an adapter that must wait
//! for a slot to empty waits behind the engine's other adapters' requests.
//!
//! [`AdapterResidency`] is what an engine says of its slots (vLLM's `vllm:lora_requests_info`:
//! the adapters running, the slots); [`AdapterFit`] is what a request for one adapter finds
//! there, and its placement cost in KV blocks (the selector's unit), so that an engine where
//! the adapter runs is preferred over one with a free slot, over one where it waits, unless
//! its load outweighs that.

use serde::{Deserialize, Serialize};

/// The cost of loading an adapter into a free slot, in the selector's unit (blocks of
/// prefill work): about what prefilling 32 blocks costs.
pub const LOAD_BLOCKS: f64 = 32.0;

/// The cost of waiting for a slot to empty: several loads' worth.
pub const WAIT_BLOCKS: f64 = 4.0 * LOAD_BLOCKS;

/// An engine's adapter slots as it reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterResidency {
    /// Adapters loaded and running requests now.
    pub running: Vec<String>,
    /// Adapters it holds at once (`None`: not reported).
    pub slots: Option<u32>,
}

/// What a request for an adapter finds on an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdapterFit {
    Running,
    FreeSlot,
    MustWait,
    /// The engine said nothing of its slots.
    Unknown,
}

impl AdapterResidency {
    pub fn fit(&self, adapter: &str) -> AdapterFit {
        if self.running.iter().any(|a| a == adapter) {
            return AdapterFit::Running;
        }
        match self.slots {
            None => AdapterFit::Unknown,
            Some(slots) if (self.running.len() as u64) < u64::from(slots) => AdapterFit::FreeSlot,
            Some(_) => AdapterFit::MustWait,
        }
    }
}

impl AdapterFit {
    /// Its placement cost, in blocks.
    pub fn cost(self) -> f64 {
        match self {
            Self::Running | Self::Unknown => 0.0,
            Self::FreeSlot => LOAD_BLOCKS,
            Self::MustWait => WAIT_BLOCKS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_beats_a_free_slot_beats_waiting() {
        let engine = AdapterResidency {
            running: vec!["sql".into()],
            slots: Some(2),
        };
        assert_eq!(engine.fit("sql"), AdapterFit::Running);
        assert_eq!(engine.fit("chat"), AdapterFit::FreeSlot);
        let full = AdapterResidency {
            running: vec!["sql".into(), "chat".into()],
            slots: Some(2),
        };
        assert_eq!(full.fit("code"), AdapterFit::MustWait);
        assert_eq!(AdapterResidency::default().fit("sql"), AdapterFit::Unknown);
        let costs = [
            AdapterFit::Running,
            AdapterFit::FreeSlot,
            AdapterFit::MustWait,
        ]
        .map(AdapterFit::cost);
        assert!(costs[0] < costs[1] && costs[1] < costs[2]);
    }
}

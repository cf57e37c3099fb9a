//! The simulated engine's KV block pool: a fixed number of blocks of `block_size` tokens.
//!
//! A full prompt block is *registered* under its chained [`SequenceHash`] (the same value the
//! router computes), which doubles as the engine's [`ExternalHash`] in events. Registered
//! blocks are refcounted by the sequences using them; a block nobody references stays cached
//! (inactive) for prefix reuse until room is needed. Blocks that are still filling, and blocks
//! holding generated tokens, are *private*: they count against capacity but are never cached.
//!
//! Eviction is LRU over inactive blocks, leaf first: only an inactive block with no cached
//! child can go, oldest release first and, among blocks released together, deepest first. A
//! sequence always holds its whole prefix, so an inactive block's descendants are all inactive
//! and every inactive block can eventually be evicted: capacity accounting is exact.
//!
//! Every change the router must know about becomes a [`KvEvent`] with per-rank consecutive
//! event ids: `Stored` (parent = the block before the run) only for newly registered blocks,
//! `Removed` for evictions, `Cleared` when the whole cache is dropped. Misuse (releasing a
//! block that is not held, committing without a private block) never panics: it is counted
//! in [`BlockPool::anomalies`], which tests require to stay zero.

use router_core::{
    ExternalHash, KvEvent, KvEventData, LocalBlockHash, SequenceHash, StoredBlock, WorkerId,
};
use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

/// One registered block.
#[derive(Debug, Clone)]
struct Block {
    local: LocalBlockHash,
    parent: Option<SequenceHash>,
    /// Position in its sequence (0: first block); used to evict deeper blocks first.
    depth: u32,
    refcount: u32,
    /// Cached blocks whose parent this is.
    children: u32,
    /// Logical time of the last release (meaningful while inactive).
    released_at: u64,
}

/// Eviction order: oldest release first, then deepest first.
type EvictKey = (u64, Reverse<u32>, SequenceHash);

/// The KV block pool of one data-parallel rank.
#[derive(Debug)]
pub struct BlockPool {
    worker: WorkerId,
    dp_rank: u32,
    capacity: usize,
    blocks: HashMap<SequenceHash, Block>,
    /// Registered blocks with refcount > 0.
    active: usize,
    /// Unregistered blocks owned by sequences.
    private: usize,
    /// Inactive blocks without cached children: the eviction candidates.
    evictable: BTreeSet<EvictKey>,
    tick: u64,
    next_event_id: u64,
    pending: Vec<KvEvent>,
    anomalies: u64,
}

impl BlockPool {
    pub fn new(worker: WorkerId, dp_rank: u32, capacity: usize) -> Self {
        Self {
            worker,
            dp_rank,
            capacity,
            blocks: HashMap::new(),
            active: 0,
            private: 0,
            evictable: BTreeSet::new(),
            tick: 0,
            next_event_id: 0,
            pending: Vec::new(),
            anomalies: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Blocks in use by sequences: active registered blocks plus private ones.
    pub fn active_blocks(&self) -> usize {
        self.active + self.private
    }

    /// Registered blocks, active or not.
    pub fn cached_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Every occupied block: registered (active or inactive) plus private.
    pub fn used_blocks(&self) -> usize {
        self.blocks.len() + self.private
    }

    /// Blocks that could be handed out now, evicting inactive ones if needed.
    pub fn free_blocks(&self) -> usize {
        self.capacity.saturating_sub(self.active_blocks())
    }

    /// Times the pool was misused; always zero when the engine is correct.
    pub fn anomalies(&self) -> u64 {
        self.anomalies
    }

    /// Whether `seq` is registered (cached, active or not).
    pub fn contains(&self, seq: SequenceHash) -> bool {
        self.blocks.contains_key(&seq)
    }

    /// Refcount of a registered block (`None`: not cached).
    pub fn refcount(&self, seq: SequenceHash) -> Option<u32> {
        self.blocks.get(&seq).map(|b| b.refcount)
    }

    /// The local (token) hash a registered block was stored with.
    pub fn local_of(&self, seq: SequenceHash) -> Option<LocalBlockHash> {
        self.blocks.get(&seq).map(|b| b.local)
    }

    /// All registered block hashes, sorted.
    pub fn cached_hashes(&self) -> Vec<SequenceHash> {
        let mut v: Vec<_> = self.blocks.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// How many leading blocks of `hashes` are cached.
    pub fn match_prefix(&self, hashes: &[SequenceHash]) -> usize {
        hashes
            .iter()
            .take_while(|h| self.blocks.contains_key(h))
            .count()
    }

    /// Whether a sequence can take references to `reuse` (cached blocks) and `new_private`
    /// fresh blocks: re-activating an inactive cached block consumes capacity too.
    pub fn can_take(&self, reuse: &[SequenceHash], new_private: usize) -> bool {
        let reactivated = reuse
            .iter()
            .filter(|h| self.blocks.get(h).is_some_and(|b| b.refcount == 0))
            .count();
        reactivated + new_private <= self.free_blocks()
    }

    /// Takes a reference to each cached block of `hashes` (a prefix hit).
    pub fn acquire(&mut self, hashes: &[SequenceHash]) {
        for h in hashes {
            self.add_ref(*h);
        }
    }

    fn add_ref(&mut self, h: SequenceHash) -> bool {
        let Some(b) = self.blocks.get_mut(&h) else {
            self.anomalies += 1;
            return false;
        };
        if b.refcount == 0 {
            self.evictable.remove(&(b.released_at, Reverse(b.depth), h));
            self.active += 1;
        }
        b.refcount += 1;
        true
    }

    /// Hands out `n` private blocks, evicting inactive blocks as needed. False (and nothing
    /// changed) when even full eviction would not make room.
    pub fn allocate(&mut self, n: usize) -> bool {
        if n > self.free_blocks() {
            return false;
        }
        let mut evicted = Vec::new();
        while self.used_blocks() + n > self.capacity {
            let Some(key) = self.evictable.pop_first() else {
                // Unreachable while the accounting holds; refuse rather than overcommit.
                self.anomalies += 1;
                self.emit_removed(evicted);
                return false;
            };
            self.evict(key.2);
            evicted.push(ExternalHash(key.2.0));
        }
        self.emit_removed(evicted);
        self.private += n;
        true
    }

    fn evict(&mut self, h: SequenceHash) {
        let Some(b) = self.blocks.remove(&h) else {
            self.anomalies += 1;
            return;
        };
        if let Some(p) = b.parent
            && let Some(pb) = self.blocks.get_mut(&p)
        {
            pb.children = pb.children.saturating_sub(1);
            if pb.children == 0 && pb.refcount == 0 {
                self.evictable
                    .insert((pb.released_at, Reverse(pb.depth), p));
            }
        }
    }

    /// Returns `n` private blocks (a finished, cancelled or preempted sequence's tail).
    pub fn free_private(&mut self, n: usize) {
        if n > self.private {
            self.anomalies += 1;
        }
        self.private = self.private.saturating_sub(n);
    }

    /// Turns one private block per entry of `run` into the registered block of that hash, the
    /// first a child of `parent` (which the caller must hold). A hash already cached is reused
    /// (its private block is given back); new ones are announced in `Stored` events.
    pub fn commit(&mut self, parent: Option<SequenceHash>, run: &[(SequenceHash, LocalBlockHash)]) {
        let mut prev = parent;
        let base = parent
            .and_then(|p| self.blocks.get(&p))
            .map_or(0, |b| b.depth + 1);
        let mut stored: Vec<StoredBlock> = Vec::new();
        let mut stored_parent = parent;
        for (i, &(h, local)) in run.iter().enumerate() {
            let depth = base.saturating_add(u32::try_from(i).unwrap_or(u32::MAX));
            if self.private == 0 {
                self.anomalies += 1;
                break;
            }
            self.private -= 1;
            if self.blocks.contains_key(&h) {
                self.add_ref(h);
                self.emit_stored(stored_parent, std::mem::take(&mut stored));
                stored_parent = Some(h);
            } else {
                if let Some(p) = prev {
                    match self.blocks.get_mut(&p) {
                        Some(pb) => pb.children += 1,
                        None => self.anomalies += 1,
                    }
                }
                let block = Block {
                    local,
                    parent: prev,
                    depth,
                    refcount: 1,
                    children: 0,
                    released_at: 0,
                };
                self.blocks.insert(h, block);
                self.active += 1;
                stored.push(StoredBlock {
                    hash: ExternalHash(h.0),
                    local,
                });
            }
            prev = Some(h);
        }
        self.emit_stored(stored_parent, stored);
    }

    /// Drops one reference to each block of `hashes`, deepest first, so that blocks released
    /// together are evicted tail first.
    pub fn release(&mut self, hashes: &[SequenceHash]) {
        self.tick += 1;
        let tick = self.tick;
        for &h in hashes.iter().rev() {
            let Some(b) = self.blocks.get_mut(&h) else {
                self.anomalies += 1;
                continue;
            };
            if b.refcount == 0 {
                self.anomalies += 1;
                continue;
            }
            b.refcount -= 1;
            if b.refcount == 0 {
                b.released_at = tick;
                self.active -= 1;
                if b.children == 0 {
                    self.evictable.insert((tick, Reverse(b.depth), h));
                }
            }
        }
    }

    /// Drops every inactive block. With nothing active this is one `Cleared` event; otherwise
    /// the dropped blocks are announced as `Removed` (a `Cleared` would make the router forget
    /// blocks that are still held).
    pub fn clear_inactive(&mut self) {
        if self.active == 0 {
            let had = !self.blocks.is_empty();
            self.blocks.clear();
            self.evictable.clear();
            if had {
                self.push(KvEventData::Cleared);
            }
            return;
        }
        let mut evicted = Vec::new();
        while let Some(key) = self.evictable.pop_first() {
            self.evict(key.2);
            evicted.push(ExternalHash(key.2.0));
        }
        self.emit_removed(evicted);
    }

    /// Events produced since the last call, in order.
    pub fn drain_events(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.pending)
    }

    fn emit_stored(&mut self, parent: Option<SequenceHash>, blocks: Vec<StoredBlock>) {
        if !blocks.is_empty() {
            self.push(KvEventData::Stored {
                parent: parent.map(|p| ExternalHash(p.0)),
                blocks,
            });
        }
    }

    fn emit_removed(&mut self, hashes: Vec<ExternalHash>) {
        if !hashes.is_empty() {
            self.push(KvEventData::Removed { hashes });
        }
    }

    fn push(&mut self, data: KvEventData) {
        self.pending.push(KvEvent {
            worker: self.worker,
            dp_rank: self.dp_rank,
            event_id: self.next_event_id,
            data,
        });
        self.next_event_id += 1;
    }

    /// Recomputes the derived counts from scratch; `Err` names the first inconsistency.
    pub fn check_invariants(&self) -> Result<(), String> {
        let active = self.blocks.values().filter(|b| b.refcount > 0).count();
        if active != self.active {
            return Err(format!("active count {} != {}", self.active, active));
        }
        if self.used_blocks() > self.capacity {
            return Err(format!(
                "used {} > capacity {}",
                self.used_blocks(),
                self.capacity
            ));
        }
        let mut children: HashMap<SequenceHash, u32> = HashMap::new();
        for (h, b) in &self.blocks {
            if let Some(p) = b.parent {
                if !self.blocks.contains_key(&p) {
                    return Err(format!("{h} cached without its parent {p}"));
                }
                *children.entry(p).or_default() += 1;
            }
        }
        let mut evictable = BTreeSet::new();
        for (h, b) in &self.blocks {
            if children.get(h).copied().unwrap_or(0) != b.children {
                return Err(format!("{h}: child count {} is stale", b.children));
            }
            if b.refcount == 0 && b.children == 0 {
                evictable.insert((b.released_at, Reverse(b.depth), *h));
            }
            if b.refcount > 0 && b.parent.and_then(|p| self.refcount(p)) == Some(0) {
                return Err(format!("{h} is active but its parent is not"));
            }
        }
        if evictable != self.evictable {
            return Err("evictable set is stale".into());
        }
        Ok(())
    }
}

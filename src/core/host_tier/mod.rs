//! The host-memory KV tier (vLLM's CPU offloading, `--kv-offloading-size`): full, hashed
//! blocks leaving the GPU pool are copied to host slots, and a later admission loads them
//! back into fresh GPU blocks instead of recomputing their tokens, when the measured copy
//! cost beats the measured prefill cost.
//!
//! The tier plans copies; the executor moves the bytes, stores before loads and both before
//! the step's forward pass, so a GPU block reused this step is saved before it is
//! overwritten, and a host slot read this step is never overwritten in it (loads pin it).

pub mod cost;
pub mod memory;
pub mod store;

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

pub use self::cost::{StepTiming, TransferCost};
pub use self::store::{HostBlockStore, HostSlot};
use crate::core::events::{CacheEvent, EventLog};
use crate::ids::{BlockHash, BlockId};

/// One block copied between the GPU pool and a host slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockCopy {
    /// The GPU block.
    pub block_id: BlockId,
    /// The host slot.
    pub slot: HostSlot,
}

/// A step's host copies: `stores` (GPU -> host) run first, then `loads` (host -> GPU), then
/// the forward pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvTransfers {
    /// Blocks saved to host slots before their GPU blocks are reused.
    pub stores: Vec<BlockCopy>,
    /// Host slots copied into fresh GPU blocks.
    pub loads: Vec<BlockCopy>,
}

impl KvTransfers {
    /// True when nothing is to be copied.
    pub fn is_empty(&self) -> bool {
        self.stores.is_empty() && self.loads.is_empty()
    }
}

/// A host tier that cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostTierError {
    /// The size is negative or not a number (as given).
    #[error("--kv-offloading-size must be a non-negative number of GiB, got {0}")]
    InvalidSize(String),
    /// Nobody said how large a block is.
    #[error("the host KV tier needs the KV bytes per block (the executor sets it)")]
    UnknownBlockBytes,
    /// The size holds less than one block.
    #[error("--kv-offloading-size of {size_bytes} bytes holds no KV block of {block_bytes} bytes")]
    TooSmall {
        /// The size asked for, in bytes.
        size_bytes: u64,
        /// Bytes per block.
        block_bytes: u64,
    },
    /// Blocks are found by hash: no prefix caching, nothing to find.
    #[error("the host KV tier (--kv-offloading-size) needs prefix caching on")]
    NeedsPrefixCaching,
    /// Sliding-window pools free blocks by position, which the tier does not follow yet.
    #[error("the host KV tier (--kv-offloading-size) does not support sliding-window models yet")]
    SlidingWindow,
    /// More than the machine has free.
    #[error(
        "--kv-offloading-size asks for {} GiB but the host has {} GiB free; lower it",
        gib(*.size_bytes), gib(*.available_bytes)
    )]
    ExceedsFreeMemory {
        /// The size asked for, in bytes.
        size_bytes: u64,
        /// Free memory now, in bytes.
        available_bytes: u64,
    },
}

/// Bytes as GiB with two decimals, for messages.
fn gib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / GIB)
}

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// Counters of the host tier since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostTierStats {
    /// Host slots.
    pub num_blocks: usize,
    /// Host slots holding a block.
    pub num_used_blocks: usize,
    /// Blocks looked up at admission (after the GPU prefix cache missed them).
    pub num_queried_blocks: u64,
    /// Blocks found in the host store at admission.
    pub num_hit_blocks: u64,
    /// Blocks loaded back into the GPU pool.
    pub num_loaded_blocks: u64,
    /// Blocks found but recomputed because recomputing was cheaper.
    pub num_recompute_chosen_blocks: u64,
    /// Blocks stored into host slots.
    pub num_stored_blocks: u64,
    /// Blocks evicted from the host store (LRU).
    pub num_evicted_blocks: u64,
    /// Bytes copied host -> GPU.
    pub load_bytes: u64,
    /// Bytes copied GPU -> host.
    pub store_bytes: u64,
    /// Seconds the executor spent on host copies.
    pub copy_seconds: f64,
    /// Copies the executor could not make (stores and loads); their blocks are recomputed.
    pub num_failed_copies: u64,
}

impl HostTierStats {
    /// Fraction of host slots in use, 0..=1.
    pub fn usage(&self) -> f64 {
        if self.num_blocks == 0 { 0.0 } else { self.num_used_blocks as f64 / self.num_blocks as f64 }
    }
}

/// What admission would load from the host store for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadPlan {
    /// Blocks looked up (those after the GPU prefix cache's hits).
    pub num_queried: usize,
    /// The leading blocks among them the store holds.
    pub num_hits: usize,
    /// The slots to load, in table order: the hits when loading wins, else none.
    pub slots: Vec<HostSlot>,
}

/// The host tier: the store, the load-or-recompute cost, this step's copies and counters.
#[derive(Debug)]
pub struct HostTier {
    store: HostBlockStore,
    cost: TransferCost,
    block_bytes: u64,
    pinned: HashSet<HostSlot>,
    transfers: KvTransfers,
    stats: HostTierStats,
    /// Where its changes go (the prefix cache's log: one stream of KV events).
    events: EventLog<CacheEvent>,
}

impl HostTier {
    /// A tier of `size_gib` GiB of `block_bytes`-byte blocks; `None` when the size is 0.
    pub fn new(size_gib: f64, block_bytes: u64) -> Result<Option<Self>, HostTierError> {
        if !size_gib.is_finite() || size_gib < 0.0 {
            return Err(HostTierError::InvalidSize(size_gib.to_string()));
        }
        if size_gib == 0.0 {
            return Ok(None);
        }
        if block_bytes == 0 {
            return Err(HostTierError::UnknownBlockBytes);
        }
        let size_bytes = (size_gib * GIB) as u64;
        let num_blocks = (size_bytes / block_bytes) as usize;
        if num_blocks == 0 {
            return Err(HostTierError::TooSmall { size_bytes, block_bytes });
        }
        memory::check_free(size_bytes)?;
        Ok(Some(Self {
            store: HostBlockStore::new(num_blocks),
            cost: TransferCost::new(block_bytes),
            block_bytes,
            pinned: HashSet::new(),
            transfers: KvTransfers::default(),
            stats: HostTierStats { num_blocks, ..HostTierStats::default() },
            events: EventLog::default(),
        }))
    }

    /// What admission would load: the leading run of `hashes` (the blocks after the GPU
    /// prefix cache's hits) found in the store, and whether loading them beats recomputing
    /// their `block_size` tokens each. Changes nothing.
    pub fn plan_load(&self, hashes: &[BlockHash], block_size: usize) -> LoadPlan {
        let hits: Vec<HostSlot> = hashes.iter().map_while(|&hash| self.store.slot_of(hash)).collect();
        let num_queried = hashes.len();
        if self.cost.prefers_load(hits.len(), block_size) {
            LoadPlan { num_queried, num_hits: hits.len(), slots: hits }
        } else {
            LoadPlan { num_queried, num_hits: hits.len(), slots: Vec::new() }
        }
    }

    /// Commits an admitted request's plan: `hashes[i]` (in `plan.slots[i]`) goes into GPU
    /// block `block_ids[i]` this step; the slots stay pinned until the step's copies are
    /// taken.
    pub fn commit_load(&mut self, plan: &LoadPlan, hashes: &[BlockHash], block_ids: &[BlockId]) {
        self.stats.num_queried_blocks += plan.num_queried as u64;
        self.stats.num_hit_blocks += plan.num_hits as u64;
        self.stats.num_recompute_chosen_blocks += (plan.num_hits - plan.slots.len()) as u64;
        for ((&hash, &slot), &block_id) in hashes.iter().zip(&plan.slots).zip(block_ids) {
            self.store.touch(hash);
            self.pinned.insert(slot);
            self.transfers.loads.push(BlockCopy { block_id, slot });
            self.stats.num_loaded_blocks += 1;
            self.stats.load_bytes += self.block_bytes;
        }
    }

    /// Stores GPU blocks whose hashes the pool is reusing now (each `(block, hash)`), unless
    /// the store holds the hash already; a full store evicts its least recently used block.
    pub fn store_reclaimed(&mut self, reclaimed: impl IntoIterator<Item = (BlockId, BlockHash)>) {
        for (block_id, hash) in reclaimed {
            let Some(inserted) = self.store.insert(hash, &self.pinned) else {
                continue;
            };
            if let Some(old) = inserted.evicted {
                self.stats.num_evicted_blocks += 1;
                self.events.emit(|| CacheEvent::HostRemoved { block_hashes: vec![old] });
            }
            self.events.emit(|| CacheEvent::HostStored { block_hashes: vec![hash] });
            self.pinned.insert(inserted.slot);
            self.transfers.stores.push(BlockCopy { block_id, slot: inserted.slot });
            self.stats.num_stored_blocks += 1;
            self.stats.store_bytes += self.block_bytes;
        }
        self.stats.num_used_blocks = self.store.len();
    }

    /// This step's copies (stores, then loads); unpins every slot.
    pub fn take_transfers(&mut self) -> KvTransfers {
        self.pinned.clear();
        std::mem::take(&mut self.transfers)
    }

    /// Forgets what `slot` holds (its store failed or never ran), so nobody loads it.
    pub fn forget_slot(&mut self, slot: HostSlot) {
        if let Some(hash) = self.store.hash_in(slot)
            && self.store.remove(hash)
        {
            self.events.emit(|| CacheEvent::HostRemoved { block_hashes: vec![hash] });
            self.stats.num_used_blocks = self.store.len();
        }
    }

    /// A copy to or from `slot` failed: the slot is forgotten and the failure counted.
    pub fn copy_failed(&mut self, slot: HostSlot) {
        self.stats.num_failed_copies += 1;
        self.forget_slot(slot);
    }

    /// The slot holding `hash`, if any.
    pub fn slot_of(&self, hash: BlockHash) -> Option<HostSlot> {
        self.store.slot_of(hash)
    }

    /// Folds the executor's measurements of one step into the cost estimates.
    pub fn observe(&mut self, timing: &StepTiming) {
        self.stats.copy_seconds += timing.copy_s;
        self.cost.observe(timing);
    }

    /// The counters.
    pub fn stats(&self) -> HostTierStats {
        self.stats
    }

    /// The cost estimates.
    pub fn cost(&self) -> &TransferCost {
        &self.cost
    }

    /// Sends its changes ([`CacheEvent::HostStored`], [`CacheEvent::HostRemoved`]) to
    /// `log`, from now on.
    pub fn set_event_log(&mut self, log: EventLog<CacheEvent>) {
        self.events = log;
    }

    /// The hashes the store holds, in no order.
    pub fn hashes(&self) -> Vec<BlockHash> {
        self.store.hashes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(num_blocks: usize) -> HostTier {
        let gib = num_blocks as f64 * 1024.0 / (1u64 << 30) as f64;
        HostTier::new(gib, 1024).unwrap().unwrap()
    }

    #[test]
    fn sizes_in_blocks_and_refuses_bad_sizes() {
        assert!(HostTier::new(0.0, 1024).unwrap().is_none());
        assert_eq!(tier(5).stats().num_blocks, 5);
        assert_eq!(HostTier::new(-1.0, 1024).unwrap_err(), HostTierError::InvalidSize("-1".into()));
        assert_eq!(HostTier::new(1.0, 0).unwrap_err(), HostTierError::UnknownBlockBytes);
        assert!(matches!(HostTier::new(1e-9, 1 << 20).unwrap_err(), HostTierError::TooSmall { .. }));
        assert!(matches!(HostTier::new(1e9, 1024).unwrap_err(), HostTierError::ExceedsFreeMemory { .. }));
    }

    #[test]
    fn stores_once_loads_the_leading_run_and_never_overwrites_a_slot_loaded_this_step() {
        let mut tier = tier(2);
        let log = EventLog::default();
        log.start();
        tier.set_event_log(log.clone());
        tier.store_reclaimed([(7, 100), (8, 101), (9, 100)]);
        let stored = tier.take_transfers();
        assert_eq!(
            stored.stores,
            vec![BlockCopy { block_id: 7, slot: 0 }, BlockCopy { block_id: 8, slot: 1 }]
        );
        let plan = tier.plan_load(&[100, 102, 101], 16);
        assert_eq!(plan, LoadPlan { num_queried: 3, num_hits: 1, slots: vec![0] });
        tier.commit_load(&plan, &[100], &[3]);
        tier.store_reclaimed([(4, 103), (5, 104)]);
        let step = tier.take_transfers();
        assert_eq!(step.loads, vec![BlockCopy { block_id: 3, slot: 0 }]);
        assert_eq!(step.stores, vec![BlockCopy { block_id: 4, slot: 1 }], "slot 0 is pinned by the load");
        assert_eq!(tier.slot_of(101), None);
        let stored = |hash| CacheEvent::HostStored { block_hashes: vec![hash] };
        let removed = |hash| CacheEvent::HostRemoved { block_hashes: vec![hash] };
        assert_eq!(log.take(), vec![stored(100), stored(101), removed(101), stored(103)]);
        let stats = tier.stats();
        assert_eq!((stats.num_stored_blocks, stats.num_loaded_blocks, stats.num_evicted_blocks), (3, 1, 1));
        assert_eq!((stats.num_queried_blocks, stats.num_hit_blocks), (3, 1));
        assert_eq!((stats.store_bytes, stats.load_bytes), (3 * 1024, 1024));
        tier.forget_slot(0);
        assert_eq!(tier.slot_of(100), None);
        assert_eq!(log.take(), vec![removed(100)]);
        assert_eq!(tier.hashes(), vec![103]);
        assert_eq!(tier.stats().num_used_blocks, 1);
    }
}

//! The host block store's bookkeeping: which block hash sits in which host slot, in LRU
//! order. The bytes live with the executor (the store names slots; it never holds KV).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::ids::BlockHash;

/// A host slot: the index of one block-sized buffer in host memory.
pub type HostSlot = u32;

/// Where a new hash went, and the hash it pushed out of the store (LRU), if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    /// The slot that now holds the hash.
    pub slot: HostSlot,
    /// The least recently used hash evicted to make room.
    pub evicted: Option<BlockHash>,
}

/// Block hashes held in a fixed number of host slots, evicted least recently used first.
#[derive(Debug)]
pub struct HostBlockStore {
    capacity: usize,
    entries: HashMap<BlockHash, (HostSlot, u64)>,
    lru: BTreeMap<u64, BlockHash>,
    free_slots: Vec<HostSlot>,
    slot_hashes: Vec<Option<BlockHash>>,
    clock: u64,
}

impl HostBlockStore {
    /// An empty store of `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        let free_slots = (0..capacity as HostSlot).rev().collect();
        let slot_hashes = vec![None; capacity];
        Self { capacity, entries: HashMap::new(), lru: BTreeMap::new(), free_slots, slot_hashes, clock: 0 }
    }

    /// Slots in the store.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slots holding a hash.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no slot holds a hash.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The slot holding `hash`, if any; changes nothing.
    pub fn slot_of(&self, hash: BlockHash) -> Option<HostSlot> {
        self.entries.get(&hash).map(|&(slot, _)| slot)
    }

    /// Marks `hash` most recently used; false when the store does not hold it.
    pub fn touch(&mut self, hash: BlockHash) -> bool {
        let Some(entry) = self.entries.get_mut(&hash) else {
            return false;
        };
        self.lru.remove(&entry.1);
        self.clock += 1;
        entry.1 = self.clock;
        self.lru.insert(self.clock, hash);
        true
    }

    /// Puts `hash` into a free slot, or into the least recently used slot not in `pinned`
    /// (evicting its hash). `None` when the store already holds `hash` (never stored twice)
    /// or every slot is pinned.
    pub fn insert(&mut self, hash: BlockHash, pinned: &HashSet<HostSlot>) -> Option<Inserted> {
        if self.entries.contains_key(&hash) {
            return None;
        }
        let (slot, evicted) = match self.free_slots.pop() {
            Some(slot) => (slot, None),
            None => {
                let (&tick, &old) =
                    self.lru.iter().find(|(_, old)| !pinned.contains(&self.entries[*old].0))?;
                self.lru.remove(&tick);
                let (slot, _) = self.entries.remove(&old).expect("lru entries are stored");
                (slot, Some(old))
            }
        };
        self.clock += 1;
        self.slot_hashes[slot as usize] = Some(hash);
        self.entries.insert(hash, (slot, self.clock));
        self.lru.insert(self.clock, hash);
        Some(Inserted { slot, evicted })
    }

    /// Forgets `hash` (its copy failed); its slot becomes free. False when not held.
    pub fn remove(&mut self, hash: BlockHash) -> bool {
        let Some((slot, tick)) = self.entries.remove(&hash) else {
            return false;
        };
        self.lru.remove(&tick);
        self.slot_hashes[slot as usize] = None;
        self.free_slots.push(slot);
        true
    }

    /// The hashes it holds, in no order.
    pub fn hashes(&self) -> Vec<BlockHash> {
        self.entries.keys().copied().collect()
    }

    /// The hash `slot` holds, if any.
    pub fn hash_in(&self, slot: HostSlot) -> Option<BlockHash> {
        self.slot_hashes.get(slot as usize).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_free_slots_then_evicts_least_recently_used_skipping_pinned() {
        let mut store = HostBlockStore::new(3);
        let none = HashSet::new();
        assert_eq!(store.insert(10, &none), Some(Inserted { slot: 0, evicted: None }));
        assert_eq!(store.insert(11, &none), Some(Inserted { slot: 1, evicted: None }));
        assert_eq!(store.insert(12, &none), Some(Inserted { slot: 2, evicted: None }));
        assert_eq!(store.insert(11, &none), None, "a hash is never stored twice");
        assert!(store.touch(10));
        assert_eq!(store.insert(13, &none), Some(Inserted { slot: 1, evicted: Some(11) }));
        let pinned: HashSet<HostSlot> = [2].into();
        assert_eq!(store.insert(14, &pinned), Some(Inserted { slot: 0, evicted: Some(10) }));
        assert_eq!(store.slot_of(12), Some(2));
        assert_eq!(store.slot_of(10), None);
        let all: HashSet<HostSlot> = [0, 1, 2].into();
        assert_eq!(store.insert(15, &all), None);
        assert_eq!(store.len(), 3);
        assert_eq!(store.hash_in(1), Some(13));
        assert!(store.remove(13));
        assert_eq!(store.hash_in(1), None);
        assert_eq!(store.insert(15, &all), Some(Inserted { slot: 1, evicted: None }));
    }
}

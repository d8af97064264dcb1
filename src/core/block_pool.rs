//! The KV block pool: blocks, the free queue (eviction order) and the prefix cache map.

use std::collections::HashMap;

use crate::core::events::{CacheEvent, EventLog, KvEvent};
use crate::ids::{BlockHash, BlockId};

/// The null block: block-table padding points at it; it is never allocated, freed or cached.
pub const NULL_BLOCK_ID: BlockId = 0;

const NO_LINK: BlockId = BlockId::MAX;

/// One KV block's bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvBlock {
    /// Its index in the pool.
    pub block_id: BlockId,
    /// Requests holding it.
    pub ref_cnt: u32,
    /// Its hash while it is in the prefix cache.
    pub block_hash: Option<BlockHash>,
}

/// An intrusive doubly linked list over block ids with O(1) `popleft`, `remove`, `append`
/// and `prepend`. The links live in arrays indexed by block id.
#[derive(Debug, Clone)]
pub struct FreeBlockQueue {
    prev: Vec<BlockId>,
    next: Vec<BlockId>,
    queued: Vec<bool>,
    head: BlockId,
    tail: BlockId,
    len: usize,
}

impl FreeBlockQueue {
    /// A queue over ids `0..capacity` holding `initial` in that order.
    pub fn new(capacity: usize, initial: impl IntoIterator<Item = BlockId>) -> Self {
        let mut queue = Self {
            prev: vec![NO_LINK; capacity],
            next: vec![NO_LINK; capacity],
            queued: vec![false; capacity],
            head: NO_LINK,
            tail: NO_LINK,
            len: 0,
        };
        for id in initial {
            queue.append(id);
        }
        queue
    }

    /// Blocks in the queue.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no block is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when `id` is queued.
    pub fn contains(&self, id: BlockId) -> bool {
        self.queued.get(id as usize).copied().unwrap_or(false)
    }

    /// The block evicted next, without removing it.
    pub fn front(&self) -> Option<BlockId> {
        (self.head != NO_LINK).then_some(self.head)
    }

    /// Removes and returns the head.
    pub fn popleft(&mut self) -> Option<BlockId> {
        let head = self.front()?;
        self.remove(head);
        Some(head)
    }

    /// Unlinks `id`; returns false when it was not queued.
    pub fn remove(&mut self, id: BlockId) -> bool {
        if !self.contains(id) {
            return false;
        }
        let index = id as usize;
        let (prev, next) = (self.prev[index], self.next[index]);
        if prev == NO_LINK {
            self.head = next
        } else {
            self.next[prev as usize] = next
        }
        if next == NO_LINK {
            self.tail = prev
        } else {
            self.prev[next as usize] = prev
        }
        self.prev[index] = NO_LINK;
        self.next[index] = NO_LINK;
        self.queued[index] = false;
        self.len -= 1;
        true
    }

    /// Links `id` at the tail (evicted last); returns false when it was queued already or
    /// is out of range.
    pub fn append(&mut self, id: BlockId) -> bool {
        if !self.can_link(id) {
            return false;
        }
        let index = id as usize;
        self.prev[index] = self.tail;
        if self.tail == NO_LINK {
            self.head = id
        } else {
            self.next[self.tail as usize] = id
        }
        self.tail = id;
        self.queued[index] = true;
        self.len += 1;
        true
    }

    /// Links `id` at the head (evicted first); returns false when it was queued already or
    /// is out of range.
    pub fn prepend(&mut self, id: BlockId) -> bool {
        if !self.can_link(id) {
            return false;
        }
        let index = id as usize;
        self.next[index] = self.head;
        if self.head == NO_LINK {
            self.tail = id
        } else {
            self.prev[self.head as usize] = id
        }
        self.head = id;
        self.queued[index] = true;
        self.len += 1;
        true
    }

    /// The queued ids, head to tail.
    pub fn iter(&self) -> impl Iterator<Item = BlockId> + '_ {
        std::iter::successors(self.front(), |&id| {
            let next = self.next[id as usize];
            (next != NO_LINK).then_some(next)
        })
    }

    fn can_link(&self, id: BlockId) -> bool {
        (id as usize) < self.queued.len() && !self.queued[id as usize]
    }
}

/// The blocks, the free queue, and the prefix cache map `hash -> blocks`.
///
/// Freed blocks keep their hash and stay hittable until they are popped from the free
/// queue for reuse (lazy eviction).
#[derive(Debug)]
pub struct BlockPool {
    blocks: Vec<KvBlock>,
    free_queue: FreeBlockQueue,
    cached: HashMap<BlockHash, Vec<BlockId>>,
    enable_caching: bool,
    events: EventLog,
    cache_events: EventLog<CacheEvent>,
    /// Hashed blocks reused since the last [`BlockPool::take_reclaimed`], when a host tier
    /// wants them.
    reclaimed: Option<Vec<(BlockId, BlockHash)>>,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks, block 0 the null block, the rest free in id order.
    pub fn new(num_blocks: usize, enable_caching: bool, events: EventLog) -> Self {
        let blocks = (0..num_blocks)
            .map(|id| KvBlock { block_id: id as BlockId, ref_cnt: 0, block_hash: None })
            .collect();
        let free_queue = FreeBlockQueue::new(num_blocks, (1..num_blocks).map(|id| id as BlockId));
        let cache_events = EventLog::default();
        Self {
            blocks,
            free_queue,
            cached: HashMap::new(),
            enable_caching,
            events,
            cache_events,
            reclaimed: None,
        }
    }

    /// The log of changes to the set of cached hashes (off until started). The pool records
    /// removals and resets; whoever enters blocks records what it stored (it knows their
    /// tokens).
    pub fn cache_event_log(&self) -> &EventLog<CacheEvent> {
        &self.cache_events
    }

    /// Blocks in the pool, the null block included.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks that can ever be allocated: all but the null block.
    pub fn num_usable_blocks(&self) -> usize {
        self.blocks.len().saturating_sub(1)
    }

    /// Blocks in the free queue (cached-free ones included).
    pub fn num_free_blocks(&self) -> usize {
        self.free_queue.len()
    }

    /// Fraction of usable blocks in use, 0..=1.
    pub fn usage(&self) -> f64 {
        let usable = self.num_usable_blocks();
        if usable == 0 { 0.0 } else { 1.0 - self.num_free_blocks() as f64 / usable as f64 }
    }

    /// One block's bookkeeping.
    pub fn block(&self, id: BlockId) -> Option<&KvBlock> {
        self.blocks.get(id as usize)
    }

    /// Every block, by id.
    pub fn blocks(&self) -> &[KvBlock] {
        &self.blocks
    }

    /// The free queue, head (evicted first) to tail.
    pub fn free_queue(&self) -> &FreeBlockQueue {
        &self.free_queue
    }

    /// The prefix cache map.
    pub fn cached_blocks(&self) -> &HashMap<BlockHash, Vec<BlockId>> {
        &self.cached
    }

    /// A block holding `hash`, if any.
    pub fn get_cached_block(&self, hash: BlockHash) -> Option<BlockId> {
        self.cached.get(&hash).and_then(|ids| ids.first().copied())
    }

    /// Takes a reference on each block (a cache hit): ref_cnt += 1, and a block whose
    /// ref_cnt was 0 leaves the free queue. The null block (a sliding-window hit's stand-in
    /// for blocks behind the window) is skipped.
    pub fn touch(&mut self, block_ids: &[BlockId]) {
        for &id in block_ids.iter().filter(|&&id| id != NULL_BLOCK_ID) {
            if self.blocks[id as usize].ref_cnt == 0 {
                self.free_queue.remove(id);
            }
            self.blocks[id as usize].ref_cnt += 1;
        }
    }

    /// Pops `count` blocks from the head of the free queue with ref_cnt 1, evicting their
    /// hashes; `None` (and nothing changed) when fewer are free.
    pub fn get_new_blocks(&mut self, count: usize) -> Option<Vec<BlockId>> {
        if count > self.free_queue.len() {
            return None;
        }
        let mut taken = Vec::with_capacity(count);
        for _ in 0..count {
            let id = self.free_queue.popleft()?;
            if let (Some(reclaimed), Some(hash)) = (&mut self.reclaimed, self.blocks[id as usize].block_hash)
            {
                reclaimed.push((id, hash));
            }
            self.evict_hash(id);
            self.blocks[id as usize].ref_cnt = 1;
            taken.push(id);
        }
        Some(taken)
    }

    /// Starts keeping the hashed blocks [`BlockPool::get_new_blocks`] reuses (their KV is
    /// still intact until this step runs), for a host tier to save.
    pub fn keep_reclaimed(&mut self) {
        self.reclaimed.get_or_insert_with(Vec::new);
    }

    /// The hashed blocks reused since the last call, `(block, hash it held)`, in order.
    pub fn take_reclaimed(&mut self) -> Vec<(BlockId, BlockHash)> {
        self.reclaimed.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Drops one reference from each block, in the order given; blocks reaching 0 return
    /// to the free queue: hashed ones at the tail, unhashed ones at the head.
    pub fn free_blocks(&mut self, block_ids: impl IntoIterator<Item = BlockId>) {
        for id in block_ids {
            let block = &mut self.blocks[id as usize];
            if id == NULL_BLOCK_ID || block.ref_cnt == 0 {
                continue;
            }
            block.ref_cnt -= 1;
            if block.ref_cnt == 0 {
                if block.block_hash.is_some() {
                    self.free_queue.append(id);
                } else {
                    self.free_queue.prepend(id);
                }
            }
        }
    }

    /// Enters `(block, hash)` pairs into the prefix cache; blocks already hashed are skipped.
    pub fn cache_blocks(&mut self, pairs: impl IntoIterator<Item = (BlockId, BlockHash)>) {
        if !self.enable_caching {
            return;
        }
        for (id, hash) in pairs {
            let block = &mut self.blocks[id as usize];
            if id == NULL_BLOCK_ID || block.block_hash.is_some() {
                continue;
            }
            block.block_hash = Some(hash);
            self.cached.entry(hash).or_default().push(id);
        }
    }

    /// Removes a block's hash from the prefix cache; returns true when it had one.
    pub fn evict_hash(&mut self, id: BlockId) -> bool {
        let Some((hash, last)) = self.take_hash(id) else {
            return false;
        };
        if last {
            self.cache_events.emit(|| CacheEvent::Removed { block_hashes: vec![hash] });
        }
        true
    }

    /// Takes a block's hash out of the prefix cache: the hash, and whether no other block
    /// holds it any more.
    fn take_hash(&mut self, id: BlockId) -> Option<(BlockHash, bool)> {
        let hash = self.blocks[id as usize].block_hash.take()?;
        let mut last = false;
        if let Some(ids) = self.cached.get_mut(&hash) {
            ids.retain(|&other| other != id);
            if ids.is_empty() {
                self.cached.remove(&hash);
                last = true;
            }
        }
        self.events.emit(|| KvEvent::Evict { block_id: id, block_hash: hash });
        Some((hash, last))
    }

    /// Moves a free block to the head of the free queue (it holds nothing worth keeping).
    pub fn demote_free_block(&mut self, id: BlockId) {
        if self.free_queue.remove(id) {
            self.free_queue.prepend(id);
        }
    }

    /// Forgets every cached hash; refused (false) while any block is in use.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if self.free_queue.len() != self.num_usable_blocks() {
            return false;
        }
        let hashed: Vec<BlockId> = self
            .blocks
            .iter()
            .filter(|block| block.block_hash.is_some())
            .map(|block| block.block_id)
            .collect();
        for id in hashed {
            self.take_hash(id);
        }
        self.cached.clear();
        self.cache_events.emit(|| CacheEvent::Cleared);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(queue: &FreeBlockQueue) -> Vec<BlockId> {
        queue.iter().collect()
    }

    #[test]
    fn queue_starts_in_order_and_supports_o1_edits() {
        let mut queue = FreeBlockQueue::new(6, 1..6);
        assert_eq!(ids(&queue), vec![1, 2, 3, 4, 5]);
        assert!(queue.remove(3));
        assert!(!queue.remove(3));
        assert_eq!(ids(&queue), vec![1, 2, 4, 5]);
        assert_eq!(queue.popleft(), Some(1));
        assert!(queue.append(3));
        assert!(queue.prepend(1));
        assert!(!queue.append(1));
        assert!(!queue.append(6));
        assert_eq!(ids(&queue), vec![1, 2, 4, 5, 3]);
        assert!(queue.remove(3));
        assert!(queue.remove(1));
        assert_eq!(ids(&queue), vec![2, 4, 5]);
        assert_eq!(queue.len(), 3);
        while queue.popleft().is_some() {}
        assert!(queue.is_empty());
        assert_eq!(queue.front(), None);
        assert!(queue.prepend(4));
        assert_eq!(ids(&queue), vec![4]);
    }

    #[test]
    fn pool_keeps_null_block_out_and_evicts_lazily() {
        let mut pool = BlockPool::new(4, true, EventLog::default());
        assert_eq!(pool.num_usable_blocks(), 3);
        assert_eq!(ids(pool.free_queue()), vec![1, 2, 3]);
        let got = pool.get_new_blocks(2).unwrap();
        assert_eq!(got, vec![1, 2]);
        pool.cache_blocks([(1, 11)]);
        pool.free_blocks([2, 1]);
        assert_eq!(ids(pool.free_queue()), vec![2, 3, 1]);
        assert_eq!(pool.get_cached_block(11), Some(1));
        assert_eq!(pool.get_new_blocks(4), None);
        assert_eq!(pool.get_new_blocks(3).unwrap(), vec![2, 3, 1]);
        assert_eq!(pool.get_cached_block(11), None);
        assert_eq!(pool.block(1).unwrap().block_hash, None);
    }

    #[test]
    fn records_a_removal_when_the_last_block_of_a_hash_loses_it_and_one_clear_on_reset() {
        let mut pool = BlockPool::new(5, true, EventLog::default());
        pool.cache_event_log().start();
        let got = pool.get_new_blocks(3).unwrap();
        pool.cache_blocks([(got[0], 7), (got[1], 7), (got[2], 9)]);
        pool.free_blocks(got.clone());
        assert!(pool.evict_hash(got[0]));
        assert!(pool.cache_event_log().take().is_empty());
        assert!(pool.evict_hash(got[1]));
        assert_eq!(pool.cache_event_log().take(), vec![CacheEvent::Removed { block_hashes: vec![7] }]);
        assert!(pool.reset_prefix_cache());
        assert_eq!(pool.cache_event_log().take(), vec![CacheEvent::Cleared]);
        assert!(pool.cached_blocks().is_empty());
    }

    #[test]
    fn reset_refused_while_in_use() {
        let mut pool = BlockPool::new(3, true, EventLog::default());
        let got = pool.get_new_blocks(1).unwrap();
        pool.cache_blocks([(got[0], 5)]);
        assert!(!pool.reset_prefix_cache());
        pool.free_blocks(got);
        assert!(pool.reset_prefix_cache());
        assert!(pool.cached_blocks().is_empty());
    }
}

//! The KV cache manager: each request's block table, prefix-cache lookups and allocation.

use crate::core::block_pool::{BlockPool, NULL_BLOCK_ID};
use crate::core::cache_config::CacheConfig;
use crate::core::events::{CacheEvent, EventLog, KvEvent};
use crate::core::id_map::IdMap;
use crate::core::request::Request;
use crate::ids::{BlockHash, BlockId, RequestId};

/// A cache configuration the manager cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheConfigError {
    /// `block_size` is 0.
    #[error("block_size must be at least 1")]
    ZeroBlockSize,
    /// Fewer than two blocks: block 0 is the null block, so nothing could be allocated.
    #[error("num_gpu_blocks is {0}; it must be at least 2 (block 0 is the null block)")]
    TooFewBlocks(usize),
    /// More blocks than a block id can name.
    #[error("num_gpu_blocks is {0}; at most {max} blocks are supported", max = u32::MAX - 1)]
    TooManyBlocks(usize),
}

/// The leading blocks of a request found in the prefix cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComputedBlocks {
    /// The hit blocks, in table order.
    pub block_ids: Vec<BlockId>,
    /// Tokens they hold (`block_ids.len() * block_size`).
    pub num_computed_tokens: usize,
}

#[derive(Debug, Default)]
struct RequestBlocks {
    block_ids: Vec<BlockId>,
    num_cached_blocks: usize,
}

/// Owns the block pool and every request's block table.
#[derive(Debug)]
pub struct KvCacheManager {
    block_size: usize,
    enable_caching: bool,
    sliding_window: Option<usize>,
    full_layers_beside_sliding: bool,
    pool: BlockPool,
    tables: IdMap<RequestBlocks>,
    events: EventLog,
}

impl KvCacheManager {
    /// A manager over a fresh pool; events go to `events`.
    pub fn new(config: &CacheConfig, events: EventLog) -> Result<Self, CacheConfigError> {
        if config.block_size == 0 {
            return Err(CacheConfigError::ZeroBlockSize);
        }
        if config.num_gpu_blocks < 2 {
            return Err(CacheConfigError::TooFewBlocks(config.num_gpu_blocks));
        }
        if config.num_gpu_blocks >= u32::MAX as usize {
            return Err(CacheConfigError::TooManyBlocks(config.num_gpu_blocks));
        }
        Ok(Self {
            block_size: config.block_size,
            enable_caching: config.enable_prefix_caching,
            sliding_window: config.sliding_window.filter(|&w| w > 0),
            full_layers_beside_sliding: config.full_layers_beside_sliding,
            pool: BlockPool::new(config.num_gpu_blocks, config.enable_prefix_caching, events.clone()),
            tables: IdMap::default(),
            events,
        })
    }

    /// Starts keeping the hashed blocks reused for new allocations, for a host tier.
    pub fn keep_reclaimed(&mut self) {
        self.pool.keep_reclaimed();
    }

    /// The hashed blocks reused since the last call, `(block, hash it held)`.
    pub fn take_reclaimed(&mut self) -> Vec<(BlockId, BlockHash)> {
        self.pool.take_reclaimed()
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// True when full blocks are shared by prefix.
    pub fn enable_caching(&self) -> bool {
        self.enable_caching
    }

    /// The block pool.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// The log of changes to the set of cached hashes (off until started; the caller
    /// drains it): blocks stored with their tokens, hashes removed, resets.
    pub fn cache_event_log(&self) -> EventLog<CacheEvent> {
        self.pool.cache_event_log().clone()
    }

    /// Blocks in the free queue.
    pub fn num_free_blocks(&self) -> usize {
        self.pool.num_free_blocks()
    }

    /// Fraction of usable blocks in use, 0..=1.
    pub fn usage(&self) -> f64 {
        self.pool.usage()
    }

    /// A request's block table (empty when it holds none).
    pub fn get_block_ids(&self, request_id: RequestId) -> &[BlockId] {
        self.tables.get(&request_id).map_or(&[], |table| &table.block_ids)
    }

    /// Every request holding blocks, with its table.
    pub fn block_tables(&self) -> impl Iterator<Item = (RequestId, &[BlockId])> {
        self.tables.iter().map(|(&id, table)| (id, table.block_ids.as_slice()))
    }

    /// Blocks needed to hold `num_tokens` tokens.
    pub fn blocks_for_tokens(&self, num_tokens: usize) -> usize {
        num_tokens.div_ceil(self.block_size)
    }

    /// The window every layer slides, if any.
    pub fn sliding_window(&self) -> Option<usize> {
        self.sliding_window
    }

    /// Why a sequence needs all its blocks at once, for the refusals of a pool too small:
    /// said where the model's other layers slide a window (a user may expect its blocks to be
    /// freed), empty otherwise.
    pub fn why_every_block_stays(&self) -> &'static str {
        if self.full_layers_beside_sliding {
            " (the model's full-attention layers need every block, though its other layers slide a window)"
        } else {
            ""
        }
    }

    /// The most blocks a request of `num_tokens` tokens holds at once when computed
    /// `chunk_tokens` at a time: all of them, or under a sliding window only those its
    /// window and one chunk span.
    pub fn max_blocks_held(&self, num_tokens: usize, chunk_tokens: usize) -> usize {
        let all = self.blocks_for_tokens(num_tokens);
        match self.sliding_window {
            Some(window) => all.min((window - 1 + chunk_tokens.max(1)).div_ceil(self.block_size) + 1),
            None => all,
        }
    }

    /// The longest run of leading full blocks of `request` in the prefix cache, capped so
    /// at most `num_tokens - 1` tokens count as computed (the last token is always computed
    /// to produce logits). Under a sliding window only the blocks the next token's window
    /// reaches must be cached; those before it are the null block. A request that asks for
    /// prompt logprobs takes no hits (as in vLLM): its prefill computes every position, so its
    /// prompt logprobs never depend on the cache. Changes nothing.
    pub fn get_computed_blocks(&self, request: &Request) -> ComputedBlocks {
        let skips_cache = request.sampling_params.prompt_logprobs.is_some();
        if !self.enable_caching || skips_cache || request.num_tokens() == 0 {
            return ComputedBlocks::default();
        }
        let max_hit_blocks = (request.num_tokens() - 1) / self.block_size;
        if let Some(window) = self.sliding_window {
            return self.sliding_window_hit(request, max_hit_blocks, window);
        }
        let block_ids: Vec<BlockId> = request
            .block_hashes
            .iter()
            .take(max_hit_blocks)
            .map_while(|&hash| self.pool.get_cached_block(hash))
            .collect();
        let num_computed_tokens = block_ids.len() * self.block_size;
        ComputedBlocks { block_ids, num_computed_tokens }
    }

    /// The longest hit of at most `max_hit_blocks` blocks whose last
    /// `ceil((window - 1) / block_size)` blocks are all cached (what the first token after
    /// the hit attends to), the blocks before them standing in as the null block — as vLLM's
    /// sliding-window manager finds it, scanning from the longest candidate down.
    fn sliding_window_hit(&self, request: &Request, max_hit_blocks: usize, window: usize) -> ComputedBlocks {
        let needed = (window - 1).div_ceil(self.block_size);
        let cached =
            |i: usize| request.block_hashes.get(i).and_then(|&hash| self.pool.get_cached_block(hash));
        let mut run = Vec::new();
        for end in (1..=max_hit_blocks.min(request.block_hashes.len())).rev() {
            run.clear();
            let start = end.saturating_sub(needed);
            run.extend((start..end).map_while(cached));
            if run.len() == end - start {
                let mut block_ids = vec![NULL_BLOCK_ID; start];
                block_ids.append(&mut run);
                return ComputedBlocks { num_computed_tokens: end * self.block_size, block_ids };
            }
        }
        ComputedBlocks::default()
    }

    /// Frees the blocks of `request_id` that no query from token `num_computed_tokens` on can
    /// reach through the sliding window (all of `0..num_computed_tokens + 1 - window`): they
    /// go back to the pool (their hashes stay cached) and the null block takes their place in
    /// the table, so block indices keep meaning token positions. Nothing without a window.
    pub fn remove_skipped_blocks(&mut self, request_id: RequestId, num_computed_tokens: usize) {
        let Some(window) = self.sliding_window else { return };
        let first_useful_block = (num_computed_tokens + 1).saturating_sub(window) / self.block_size;
        let Some(table) = self.tables.get_mut(&request_id) else { return };
        let end = first_useful_block.min(table.block_ids.len());
        let skipped: Vec<BlockId> =
            table.block_ids[..end].iter().copied().filter(|&id| id != NULL_BLOCK_ID).collect();
        if skipped.is_empty() {
            return;
        }
        table.block_ids[..end].fill(NULL_BLOCK_ID);
        self.pool.free_blocks(skipped.iter().rev().copied());
        self.events.emit(|| KvEvent::Free { request_id, block_ids: skipped });
    }

    /// True when blocks for `num_total_tokens` tokens of `request` (beyond what it holds and
    /// the hits in `computed`) could be allocated now.
    pub fn can_fit(&self, request: &Request, num_total_tokens: usize, computed: &ComputedBlocks) -> bool {
        self.num_new_blocks_needed(request, num_total_tokens, computed).is_some()
    }

    /// Gives `request` the hit blocks `computed` and enough new blocks for `num_new_tokens`
    /// more tokens after `request.num_computed_tokens + computed.num_computed_tokens`, then
    /// caches its newly full blocks. Returns the new blocks, or `None` with nothing changed
    /// when the free queue (minus hit blocks that are themselves free) cannot cover them.
    ///
    /// The token ranges of the request (as vLLM's `allocate_slots` draws them):
    ///
    /// ```text
    /// |<--- computed --->|<-- new computed -->|<--- new tokens --->|
    /// | in its blocks    | prefix-cache hits  | computed this step |
    /// |<---------- the blocks it holds after the call ----------->|
    /// ```
    ///
    /// `computed` is `request.num_computed_tokens` (already in its blocks), `new computed`
    /// are `computed.num_computed_tokens` prefix-cache hits (blocks shared from the cache,
    /// touched so they leave the free queue), `new tokens` are the `num_new_tokens` this
    /// step computes. Blocks are allocated so that all three fit; afterwards every block
    /// that is full of known tokens gets its hash cached.
    pub fn allocate_slots(
        &mut self,
        request: &Request,
        num_new_tokens: usize,
        computed: &ComputedBlocks,
    ) -> Option<Vec<BlockId>> {
        self.allocate_slots_with_lookahead(request, num_new_tokens, 0, computed)
    }

    /// [`Self::allocate_slots`], with blocks for `num_lookahead_tokens` slots past the new
    /// tokens too (vLLM's `num_lookahead_tokens`: where a draft model writes the KV of its
    /// proposals in the same step); those slots are never cached.
    pub fn allocate_slots_with_lookahead(
        &mut self,
        request: &Request,
        num_new_tokens: usize,
        num_lookahead_tokens: usize,
        computed: &ComputedBlocks,
    ) -> Option<Vec<BlockId>> {
        let num_total_tokens = request.num_computed_tokens + computed.num_computed_tokens + num_new_tokens;
        self.remove_skipped_blocks(request.request_id, request.num_computed_tokens);
        let num_new_blocks =
            self.num_new_blocks_needed(request, num_total_tokens + num_lookahead_tokens, computed)?;
        let request_id = request.request_id;
        if !computed.block_ids.is_empty() {
            self.pool.touch(&computed.block_ids);
            self.events.emit(|| KvEvent::CacheHit {
                request_id,
                block_ids: computed.block_ids.clone(),
                num_tokens: computed.num_computed_tokens,
            });
        }
        let new_blocks = self.pool.get_new_blocks(num_new_blocks)?;
        if !new_blocks.is_empty() {
            self.events.emit(|| KvEvent::Allocate { request_id, block_ids: new_blocks.clone() });
        }
        let table = self.tables.entry(request_id).or_default();
        if !computed.block_ids.is_empty() && table.block_ids.is_empty() {
            table.num_cached_blocks = computed.block_ids.len();
        }
        table.block_ids.extend_from_slice(&computed.block_ids);
        table.block_ids.extend_from_slice(&new_blocks);
        if self.enable_caching {
            self.cache_blocks(request, num_total_tokens);
        }
        Some(new_blocks)
    }

    /// Enters into the prefix cache every full block of `request` within its first
    /// `num_computed_tokens` tokens that has a hash and is not cached yet.
    pub fn cache_blocks(&mut self, request: &Request, num_computed_tokens: usize) {
        let Some(table) = self.tables.get_mut(&request.request_id) else {
            return;
        };
        let num_full_blocks = (num_computed_tokens / self.block_size)
            .min(request.block_hashes.len())
            .min(table.block_ids.len());
        if num_full_blocks <= table.num_cached_blocks {
            return;
        }
        let range = table.num_cached_blocks..num_full_blocks;
        if self.pool.cache_event_log().is_recording() {
            record_stored(&self.pool, request, range.clone(), self.block_size);
        }
        let pairs = range.clone().map(|i| (table.block_ids[i], request.block_hashes[i]));
        self.pool.cache_blocks(pairs);
        table.num_cached_blocks = num_full_blocks;
        let request_id = request.request_id;
        self.events.emit(|| KvEvent::Cache { request_id, block_ids: table.block_ids[range].to_vec() });
    }

    /// Releases a request's blocks: ref_cnt -= 1 each, last block first, so that its
    /// hashed blocks reach the free queue's tail in reverse order.
    pub fn free(&mut self, request_id: RequestId) {
        let Some(table) = self.tables.remove(&request_id) else {
            return;
        };
        self.pool.free_blocks(table.block_ids.iter().rev().copied());
        self.events.emit(|| KvEvent::Free { request_id, block_ids: table.block_ids });
    }

    /// Frees the blocks of `request_id` past those its first `num_tokens` tokens fill (what
    /// rejected speculative tokens were given): they hold nothing worth keeping and were
    /// never cached, so they go to the head of the free queue. Returns how many it freed.
    pub fn free_blocks_past(&mut self, request_id: RequestId, num_tokens: usize) -> usize {
        let keep = self.blocks_for_tokens(num_tokens);
        let Some(table) = self.tables.get_mut(&request_id) else {
            return 0;
        };
        if table.block_ids.len() <= keep {
            return 0;
        }
        let freed = table.block_ids.split_off(keep);
        table.num_cached_blocks = table.num_cached_blocks.min(keep);
        self.pool.free_blocks(freed.iter().rev().copied());
        let num_freed = freed.len();
        self.events.emit(|| KvEvent::Free { request_id, block_ids: freed });
        num_freed
    }

    /// Forgets every cached hash; refused (false) while any block is in use.
    pub fn reset_prefix_cache(&mut self) -> bool {
        self.pool.reset_prefix_cache()
    }

    // Taking blocks back out of the prefix cache is two primitives and one composite:
    // `uncache_from` lowers a request's mark of how many of its blocks it has cached (so those
    // blocks are hashed and cached again once recomputed), `evict_block` takes one block's hash
    // out of the cache (so nobody hits it), and `discard_uncomputed` does both for blocks whose
    // contents were never computed. They stay apart because their callers need different
    // halves: invalid KV blocks evict exactly the bad blocks but un-mark the whole tail of each
    // affected request (`Scheduler::handle_invalid_blocks`), a failed or undone step discards
    // exactly the blocks it was to fill (`Scheduler::discard_step`, the victim undo).

    /// Lowers `request_id`'s cached-block mark to `block_index`, so its blocks from there on
    /// are cached again once recomputed; returns the blocks it un-marked (their hashes stay in
    /// the cache until evicted).
    pub fn uncache_from(&mut self, request_id: RequestId, block_index: usize) -> Vec<BlockId> {
        let Some(table) = self.tables.get_mut(&request_id) else {
            return Vec::new();
        };
        let first = block_index.min(table.num_cached_blocks);
        let unmarked = table.block_ids[first..table.num_cached_blocks].to_vec();
        table.num_cached_blocks = first;
        unmarked
    }

    /// Takes a request's blocks past its first `num_computed_tokens` tokens out of the prefix
    /// cache: they were cached when allocated for a step that will not run for it (it was
    /// unscheduled, or the step failed), so their contents will never be computed.
    pub fn discard_uncomputed(&mut self, request_id: RequestId, num_computed_tokens: usize) {
        for block_id in self.uncache_from(request_id, num_computed_tokens / self.block_size) {
            self.evict_block(block_id);
        }
    }

    /// Removes a block's hash from the prefix cache so nobody hits it; a free block moves to
    /// the head of the free queue.
    pub fn evict_block(&mut self, block_id: BlockId) {
        if self.pool.evict_hash(block_id) {
            self.pool.demote_free_block(block_id);
        }
    }

    fn num_new_blocks_needed(
        &self,
        request: &Request,
        num_total_tokens: usize,
        computed: &ComputedBlocks,
    ) -> Option<usize> {
        let held = self.get_block_ids(request.request_id).len() + computed.block_ids.len();
        let num_new_blocks = self.blocks_for_tokens(num_total_tokens).saturating_sub(held);
        let free_hits = computed
            .block_ids
            .iter()
            .filter(|&&id| id != NULL_BLOCK_ID && self.pool.block(id).is_some_and(|block| block.ref_cnt == 0))
            .count();
        (num_new_blocks + free_hits <= self.pool.num_free_blocks()).then_some(num_new_blocks)
    }
}

/// Records, before blocks `range` of `request` are entered into `pool`, one
/// [`CacheEvent::Stored`] per run of consecutive blocks whose hash the cache does not hold
/// yet, with the hash before the run as parent and the run's tokens.
fn record_stored(pool: &BlockPool, request: &Request, range: std::ops::Range<usize>, block_size: usize) {
    let is_new = |i: usize| !pool.cached_blocks().contains_key(&request.block_hashes[i]);
    let mut start = range.start;
    while start < range.end {
        if !is_new(start) {
            start += 1;
            continue;
        }
        let end = (start..range.end).find(|&i| !is_new(i)).unwrap_or(range.end);
        pool.cache_event_log().emit(|| CacheEvent::Stored {
            block_hashes: request.block_hashes[start..end].to_vec(),
            parent_block_hash: start.checked_sub(1).map(|parent| request.block_hashes[parent]),
            token_ids: request.tokens(start * block_size..end * block_size),
            lora_id: request.lora.as_ref().map(|l| l.id),
        });
        start = end;
    }
}

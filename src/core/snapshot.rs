//! The whole state of the KV cache and the queues at one moment, as plain data (serde): what
//! the visualizer draws and its traces record, alongside the stream of
//! [`crate::core::events`].

use serde::{Deserialize, Serialize};

use crate::core::block_pool::KvBlock;
use crate::core::kv_cache_manager::KvCacheManager;
use crate::core::metrics::SchedulerStats;
use crate::core::request::{Request, RequestStatus};
use crate::ids::{BlockHash, BlockId, RequestId};

/// What a block is doing right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Block 0: padding target, never allocated.
    Null,
    /// In the free queue, holding nothing reusable.
    Free,
    /// In the free queue, still holding a hash that later requests can hit.
    CachedFree,
    /// Owned by at least one request.
    Used,
}

/// One block in a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockSnapshot {
    /// The block.
    pub block_id: BlockId,
    /// What it is doing.
    pub state: BlockState,
    /// Requests holding it.
    pub ref_cnt: u32,
    /// Its hash, when it is in the prefix cache.
    #[serde(with = "crate::ids::hex_hash::option")]
    pub block_hash: Option<BlockHash>,
    /// Requests whose block tables contain it, in ascending id order.
    pub owners: Vec<RequestId>,
}

/// One live request in a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestSnapshot {
    /// The request.
    pub request_id: RequestId,
    /// Its state.
    pub status: RequestStatus,
    /// Its block table.
    pub block_ids: Vec<BlockId>,
    /// Prompt length.
    pub num_prompt_tokens: usize,
    /// Tokens generated so far.
    pub num_output_tokens: usize,
    /// Tokens whose K/V are in the cache.
    pub num_computed_tokens: usize,
    /// Prompt tokens served by the prefix cache when it was first admitted.
    pub num_cached_tokens: usize,
    /// Times it was preempted.
    pub num_preemptions: usize,
    /// Its priority (lower runs first under PRIORITY).
    pub priority: i32,
    /// Proposed tokens waiting for verification (speculative decoding): the slots its next
    /// step computes past its known tokens.
    pub num_spec_tokens: usize,
    /// Proposed tokens its latest verification rejected.
    pub num_rejected_tokens: usize,
}

/// A hash in the prefix cache and the blocks that hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedEntry {
    /// The hash.
    #[serde(with = "crate::ids::hex_hash")]
    pub block_hash: BlockHash,
    /// Blocks holding that content, in ascending id order.
    pub block_ids: Vec<BlockId>,
}

/// The whole state of the KV cache and the queues at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvSnapshot {
    /// Steps scheduled so far.
    pub step: u64,
    /// Tokens per block.
    pub block_size: usize,
    /// Every block, by id (block 0 is the null block).
    pub blocks: Vec<BlockSnapshot>,
    /// The free queue, head (evicted first) to tail.
    pub free_queue: Vec<BlockId>,
    /// The prefix cache, in ascending hash order.
    pub cached: Vec<CachedEntry>,
    /// Every live request, in ascending id order.
    pub requests: Vec<RequestSnapshot>,
    /// The waiting queue, next to be admitted first.
    pub waiting: Vec<RequestId>,
    /// The running queue, in scheduling order.
    pub running: Vec<RequestId>,
    /// Counters and gauges.
    pub stats: SchedulerStats,
}

impl KvSnapshot {
    /// Captures the blocks, block tables and prefix cache of `kv`, the live `requests`, the
    /// queues and the counters (O(blocks + requests)).
    pub fn capture<'a>(
        kv: &KvCacheManager,
        requests: impl Iterator<Item = &'a Request>,
        waiting: Vec<RequestId>,
        running: Vec<RequestId>,
        stats: SchedulerStats,
    ) -> Self {
        let mut requests: Vec<RequestSnapshot> = requests
            .map(|request| RequestSnapshot::of(request, kv.get_block_ids(request.request_id)))
            .collect();
        requests.sort_unstable_by_key(|request| request.request_id);
        Self {
            step: stats.num_steps,
            block_size: kv.block_size(),
            blocks: block_snapshots(kv),
            free_queue: kv.pool().free_queue().iter().collect(),
            cached: cached_entries(kv),
            requests,
            waiting,
            running,
            stats,
        }
    }
}

impl BlockState {
    /// What `block` is doing: the null block, held, free with a hash, or free.
    fn of(block: &KvBlock) -> Self {
        if block.block_id == 0 {
            Self::Null
        } else if block.ref_cnt > 0 {
            Self::Used
        } else if block.block_hash.is_some() {
            Self::CachedFree
        } else {
            Self::Free
        }
    }
}

impl RequestSnapshot {
    /// `request` with its block table.
    fn of(request: &Request, block_ids: &[BlockId]) -> Self {
        Self {
            request_id: request.request_id,
            status: request.status,
            block_ids: block_ids.to_vec(),
            num_prompt_tokens: request.prompt_token_ids.len(),
            num_output_tokens: request.output_token_ids.len(),
            num_computed_tokens: request.num_computed_tokens,
            num_cached_tokens: request.num_cached_tokens,
            num_preemptions: request.num_preemptions,
            priority: request.priority,
            num_spec_tokens: request.spec_token_ids.len(),
            num_rejected_tokens: request.num_rejected_tokens,
        }
    }
}

/// Every block of the pool with its state and the requests whose tables hold it.
fn block_snapshots(kv: &KvCacheManager) -> Vec<BlockSnapshot> {
    let pool = kv.pool();
    let mut owners: Vec<Vec<RequestId>> = vec![Vec::new(); pool.num_blocks()];
    for (request_id, block_ids) in kv.block_tables() {
        for &block_id in block_ids {
            owners[block_id as usize].push(request_id);
        }
    }
    let blocks = pool.blocks().iter().zip(owners);
    blocks
        .map(|(block, mut owners)| {
            owners.sort_unstable();
            BlockSnapshot {
                block_id: block.block_id,
                state: BlockState::of(block),
                ref_cnt: block.ref_cnt,
                block_hash: block.block_hash,
                owners,
            }
        })
        .collect()
}

/// The prefix cache, in ascending hash order, each hash's blocks in ascending id order.
fn cached_entries(kv: &KvCacheManager) -> Vec<CachedEntry> {
    let mut cached: Vec<CachedEntry> = kv
        .pool()
        .cached_blocks()
        .iter()
        .map(|(&block_hash, ids)| {
            let mut block_ids = ids.clone();
            block_ids.sort_unstable();
            CachedEntry { block_hash, block_ids }
        })
        .collect();
    cached.sort_unstable_by_key(|entry| entry.block_hash);
    cached
}

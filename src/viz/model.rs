//! The plain data the visualizer draws: one step's view of the KV cache, its counters and its
//! events. These are also the lines of a recorded trace (`--record` / `--replay`).

use serde::{Deserialize, Serialize};

use crate::ids::{BlockId, RequestId};

use crate::core::snapshot::BlockState;

/// One block of the pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockView {
    /// Block id; its index in [`KvView::blocks`].
    pub id: BlockId,
    /// Null, free, cached-free or used.
    pub state: BlockState,
    /// Requests referencing it.
    pub ref_cnt: u32,
    /// Its chained hash when it is full and cached.
    #[serde(with = "hex_hash_opt")]
    pub hash: Option<u128>,
    /// Requests whose block table holds it, in no particular order.
    pub owners: Vec<RequestId>,
}

/// Where a request is, as the visualizer shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestPhase {
    /// Queued, never scheduled.
    Waiting,
    /// Holding blocks and being computed.
    Running,
    /// Preempted: its blocks were released, it waits to re-prefill.
    Preempted,
}

/// One unfinished request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestView {
    /// Request id.
    pub id: RequestId,
    /// Waiting, running or preempted.
    pub phase: RequestPhase,
    /// Its block table, in token order.
    pub block_ids: Vec<BlockId>,
    /// Prompt length.
    pub num_prompt_tokens: usize,
    /// Prompt plus generated tokens.
    pub num_tokens: usize,
    /// Tokens whose K/V are in the cache.
    pub num_computed_tokens: usize,
    /// Prompt tokens served by the prefix cache when it was (last) scheduled.
    pub num_cached_tokens: usize,
    /// Times it was preempted.
    pub num_preemptions: usize,
    /// Proposed tokens waiting for verification: slots past `num_tokens` (speculative
    /// decoding).
    #[serde(default)]
    pub num_spec_tokens: usize,
    /// Proposed tokens its latest verification rejected (their slots rolled back).
    #[serde(default)]
    pub num_rejected_tokens: usize,
}

/// The whole KV cache at the end of one step.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KvView {
    /// Tokens per block.
    pub block_size: usize,
    /// Every block, indexed by id (block 0 is the null block).
    pub blocks: Vec<BlockView>,
    /// Unfinished requests, keyed by nothing: look up by id with [`KvView::request`].
    pub requests: Vec<RequestView>,
    /// Running queue, in order.
    pub running: Vec<RequestId>,
    /// Waiting queue, in order (preempted requests at its front).
    pub waiting: Vec<RequestId>,
}

impl KvView {
    /// The request with this id, if it is unfinished.
    pub fn request(&self, id: RequestId) -> Option<&RequestView> {
        self.requests.iter().find(|r| r.id == id)
    }
}

/// Cumulative counters and gauges after one step.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Counters {
    /// Fraction of usable blocks in use, 0..=1.
    pub kv_usage: f64,
    /// Prompt tokens looked up in the prefix cache, cumulative.
    pub prefix_queries: u64,
    /// Prompt tokens found in the prefix cache, cumulative.
    pub prefix_hits: u64,
    /// Preemptions, cumulative.
    pub preemptions: u64,
    /// Tokens computed a second time after preemption, cumulative.
    pub recomputed_tokens: u64,
    /// Tokens computed (scheduled), cumulative.
    pub computed_tokens: u64,
    /// Tokens generated, cumulative.
    pub generated_tokens: u64,
    /// Requests running now.
    pub num_running: usize,
    /// Requests waiting now.
    pub num_waiting: usize,
    /// Requests finished, cumulative.
    pub num_finished: u64,
    /// Proposed tokens verified (speculative decoding), cumulative.
    #[serde(default)]
    pub spec_draft_tokens: u64,
    /// Proposed tokens accepted, cumulative.
    #[serde(default)]
    pub spec_accepted_tokens: u64,
    /// The host KV tier, when it is on.
    #[serde(default)]
    pub host: Option<HostTierView>,
    /// True when the engine scheduled each step while the one before it ran (async
    /// scheduling).
    #[serde(default)]
    pub async_scheduling: bool,
    /// Steps whose outputs the engine took, cumulative.
    #[serde(default)]
    pub host_steps: u64,
    /// Seconds of the engine's host work (scheduling, output processing) while a step ran
    /// on the executor, cumulative.
    #[serde(default)]
    pub host_hidden_s: f64,
    /// Seconds of the engine's host work while no step ran (the executor idle), cumulative.
    #[serde(default)]
    pub host_exposed_s: f64,
}

/// The host KV tier after one step: its slots and what moved, cumulative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostTierView {
    /// Host slots.
    pub num_blocks: usize,
    /// Slots holding a block.
    pub num_used_blocks: usize,
    /// Blocks loaded back into the pool.
    pub num_loaded_blocks: u64,
    /// Blocks stored from the pool.
    pub num_stored_blocks: u64,
    /// Blocks evicted from the tier.
    pub num_evicted_blocks: u64,
}

impl Counters {
    /// Prefix cache hit rate over the whole run, 0 when nothing was looked up.
    pub fn prefix_hit_rate(&self) -> f64 {
        if self.prefix_queries == 0 { 0.0 } else { self.prefix_hits as f64 / self.prefix_queries as f64 }
    }

    /// Host microseconds per step hidden behind a running step and exposed, means over the
    /// run (0 before any step).
    pub fn host_us_per_step(&self) -> (f64, f64) {
        let steps = self.host_steps.max(1) as f64;
        (self.host_hidden_s * 1e6 / steps, self.host_exposed_s * 1e6 / steps)
    }
}

/// Something that happened to the KV cache during a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VizEvent {
    /// Fresh blocks were given to a request.
    Allocate {
        /// The request.
        request: RequestId,
        /// The new blocks.
        blocks: Vec<BlockId>,
    },
    /// A request's leading blocks came from the prefix cache.
    CacheHit {
        /// The request.
        request: RequestId,
        /// The hit blocks.
        blocks: Vec<BlockId>,
        /// Tokens they cover.
        num_tokens: usize,
    },
    /// A cached-free block was reallocated and lost its hash.
    Evict {
        /// The block.
        block: BlockId,
        /// The hash it held.
        #[serde(with = "hex_hash")]
        hash: u128,
    },
    /// A request released its blocks.
    Free {
        /// The request.
        request: RequestId,
        /// The blocks it released.
        blocks: Vec<BlockId>,
    },
    /// A running request was preempted and its blocks released.
    Preempt {
        /// The victim.
        request: RequestId,
        /// The request that needed blocks.
        needed_by: RequestId,
        /// The blocks it released.
        blocks: Vec<BlockId>,
    },
    /// A preempted request was scheduled again.
    Resume {
        /// The request.
        request: RequestId,
        /// Its blocks re-hit in the prefix cache.
        hit_blocks: Vec<BlockId>,
        /// Tokens those blocks gave back.
        num_cached_tokens: usize,
    },
    /// A request finished.
    Finish {
        /// The request.
        request: RequestId,
    },
    /// Blocks were reported invalid and will be recomputed.
    InvalidBlocks {
        /// The blocks.
        blocks: Vec<BlockId>,
    },
}

impl VizEvent {
    /// The request the event is about, if any.
    pub fn request(&self) -> Option<RequestId> {
        match self {
            Self::Allocate { request, .. }
            | Self::CacheHit { request, .. }
            | Self::Free { request, .. }
            | Self::Preempt { request, .. }
            | Self::Resume { request, .. }
            | Self::Finish { request } => Some(*request),
            Self::Evict { .. } | Self::InvalidBlocks { .. } => None,
        }
    }
}

/// Everything the engine reports at one step; one line of a trace. A live record covers
/// every step since the previous one when the engine runs faster than the window draws:
/// its events are then those of all of them, shown at its step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Step number, from 1.
    pub step: u64,
    /// Engine time after the step, seconds (simulated time for the sim executor).
    pub time_s: f64,
    /// Counters after the step.
    pub counters: Counters,
    /// Events since the previous record, in order.
    pub events: Vec<VizEvent>,
    /// The KV cache after the step, when one was taken (the live feed takes them only as
    /// often as the window draws; a recorded trace has one every step).
    pub kv: Option<KvView>,
}

/// Hashes travel as 32 hex digits: JSON numbers cannot hold 128 bits.
mod hex_hash {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(hash: &u128, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{hash:032x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u128, D::Error> {
        let text = String::deserialize(deserializer)?;
        u128::from_str_radix(&text, 16).map_err(D::Error::custom)
    }
}

/// [`hex_hash`] for an optional hash (`null` when absent).
mod hex_hash_opt {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(hash: &Option<u128>, serializer: S) -> Result<S::Ok, S::Error> {
        match hash {
            Some(hash) => serializer.serialize_some(&format!("{hash:032x}")),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u128>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| u128::from_str_radix(&text, 16).map_err(D::Error::custom))
            .transpose()
    }
}

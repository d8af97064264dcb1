//! Observability: a stream of KV-cache events (the whole state at one moment is
//! [`crate::core::snapshot`]).
//!
//! Events are plain data (serde) so a visualizer can draw them live or replay a recorded
//! JSON-lines trace. The stream costs one relaxed atomic load per would-be event while
//! nobody records it: events are built only when recording.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::core::request::FinishReason;
use crate::ids::{BlockHash, BlockId, RequestId, TokenId};

/// One change to the KV cache or the queues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KvEvent {
    /// A step was scheduled.
    Step {
        /// Step number, from 1.
        step: u64,
        /// Tokens scheduled in this step.
        num_scheduled_tokens: usize,
        /// Running requests after scheduling.
        num_running: usize,
        /// Waiting requests after scheduling.
        num_waiting: usize,
    },
    /// Fresh blocks were appended to a request's block table.
    Allocate {
        /// The owner.
        request_id: RequestId,
        /// The new blocks, in table order.
        block_ids: Vec<BlockId>,
    },
    /// A request took cached blocks as its prefix.
    CacheHit {
        /// The request.
        request_id: RequestId,
        /// The hit blocks, in table order.
        block_ids: Vec<BlockId>,
        /// Tokens served by them.
        num_tokens: usize,
    },
    /// Full blocks were entered into the prefix cache.
    Cache {
        /// The request that filled them.
        request_id: RequestId,
        /// The blocks, in table order.
        block_ids: Vec<BlockId>,
    },
    /// A cached block lost its hash (reallocated, invalidated or reset).
    Evict {
        /// The block.
        block_id: BlockId,
        /// The hash it held.
        #[serde(with = "crate::ids::hex_hash")]
        block_hash: BlockHash,
    },
    /// A request released its blocks.
    Free {
        /// The former owner.
        request_id: RequestId,
        /// Its blocks, in table order.
        block_ids: Vec<BlockId>,
    },
    /// A running request was preempted (RECOMPUTE) and went back to the waiting queue.
    Preempt {
        /// The victim.
        request_id: RequestId,
        /// The request that needed blocks.
        needed_by: RequestId,
    },
    /// A preempted request was admitted again.
    Resume {
        /// The request.
        request_id: RequestId,
        /// Tokens it got back from the prefix cache.
        num_cached_tokens: usize,
    },
    /// A request finished.
    Finish {
        /// The request.
        request_id: RequestId,
        /// Why.
        reason: FinishReason,
    },
    /// KV blocks were reported invalid.
    InvalidBlocks {
        /// The invalid blocks.
        block_ids: Vec<BlockId>,
        /// Requests whose computed tokens reached into them.
        affected_request_ids: Vec<RequestId>,
    },
}

/// A change to the set of block hashes in the prefix cache, as a KV-cache-aware router
/// tracks it (vLLM's `BlockStored`, `BlockRemoved` and `AllBlocksCleared`).
///
/// A hash is stored when it enters the cache (no block held it) and removed when its last
/// block loses it, so replaying the events rebuilds exactly the set of cached hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheEvent {
    /// Consecutive full blocks of one request entered the prefix cache.
    Stored {
        /// Their hashes, in table order.
        block_hashes: Vec<BlockHash>,
        /// The hash of the block before the first one; `None` for a request's first block.
        parent_block_hash: Option<BlockHash>,
        /// Their tokens, `block_size` per block, in order.
        token_ids: Vec<TokenId>,
        /// The id of the LoRA adapter they were computed with (vLLM's `lora_id`).
        lora_id: Option<u32>,
    },
    /// These hashes left the prefix cache.
    Removed {
        /// The hashes.
        block_hashes: Vec<BlockHash>,
    },
    /// The whole prefix cache was reset.
    Cleared,
    /// Blocks entered the host KV tier (vLLM's `BlockStored` with medium `CPU`, no tokens).
    HostStored {
        /// Their hashes.
        block_hashes: Vec<BlockHash>,
    },
    /// Blocks left the host KV tier (vLLM's `BlockRemoved` with medium `CPU`).
    HostRemoved {
        /// Their hashes.
        block_hashes: Vec<BlockHash>,
    },
}

/// Where the core records its events: nowhere by default, at the cost of one relaxed atomic
/// load per would-be event, or, once started, into a log that the scheduler's owner drains
/// whenever it likes (through `Scheduler::event_log` for [`KvEvent`]s and
/// `Scheduler::cache_event_log` for [`CacheEvent`]s). Recording is a push under an
/// uncontended lock, so a watched engine pays next to nothing per event and nothing per step.
#[derive(Clone)]
pub struct EventLog<E = KvEvent> {
    inner: Arc<LogInner<E>>,
}

struct LogInner<E> {
    recording: AtomicBool,
    events: Mutex<Vec<E>>,
}

impl<E> Default for EventLog<E> {
    fn default() -> Self {
        Self {
            inner: Arc::new(LogInner { recording: AtomicBool::new(false), events: Mutex::new(Vec::new()) }),
        }
    }
}

impl<E> std::fmt::Debug for EventLog<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog").field("recording", &self.is_recording()).finish()
    }
}

impl<E> EventLog<E> {
    /// Records every event from now on.
    pub fn start(&self) {
        self.inner.recording.store(true, Ordering::Relaxed);
    }

    /// Stops recording and drops what was not taken.
    pub fn stop(&self) {
        self.inner.recording.store(false, Ordering::Relaxed);
        self.events().clear();
    }

    /// True while recording.
    pub fn is_recording(&self) -> bool {
        self.inner.recording.load(Ordering::Relaxed)
    }

    /// Records the event built by `make`; builds nothing when not recording.
    pub fn emit(&self, make: impl FnOnce() -> E) {
        if self.is_recording() {
            let event = make();
            self.events().push(event);
        }
    }

    /// Every event recorded since the last call, in order.
    pub fn take(&self) -> Vec<E> {
        let mut events = self.events();
        if events.is_empty() {
            return Vec::new();
        }
        let capacity = events.capacity();
        std::mem::replace(&mut *events, Vec::with_capacity(capacity))
    }

    fn events(&self) -> std::sync::MutexGuard<'_, Vec<E>> {
        self.inner.events.lock().unwrap_or_else(|poison| poison.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_nothing_while_not_recording() {
        let log = EventLog::default();
        let mut built = false;
        log.emit(|| {
            built = true;
            KvEvent::Evict { block_id: 1, block_hash: 2 }
        });
        assert!(!built);
        assert!(log.take().is_empty());
    }

    #[test]
    fn takes_what_clones_of_the_log_recorded_in_order_and_stop_drops_the_rest() {
        let log = EventLog::default();
        let clone = log.clone();
        log.start();
        log.emit(|| KvEvent::Evict { block_id: 1, block_hash: 2 });
        clone.emit(|| KvEvent::Evict { block_id: 3, block_hash: 4 });
        assert_eq!(
            log.take(),
            vec![
                KvEvent::Evict { block_id: 1, block_hash: 2 },
                KvEvent::Evict { block_id: 3, block_hash: 4 }
            ]
        );
        assert!(log.take().is_empty());
        clone.emit(|| KvEvent::Evict { block_id: 5, block_hash: 6 });
        log.stop();
        assert!(!clone.is_recording());
        clone.emit(|| KvEvent::Evict { block_id: 7, block_hash: 8 });
        assert!(log.take().is_empty());
    }

    #[test]
    fn events_round_trip_through_json() {
        let event = KvEvent::CacheHit { request_id: 7, block_ids: vec![1, 2], num_tokens: 32 };
        let line = serde_json::to_string(&event).unwrap();
        assert_eq!(serde_json::from_str::<KvEvent>(&line).unwrap(), event);
        let evict = KvEvent::Evict { block_id: 3, block_hash: u128::MAX };
        let line = serde_json::to_string(&evict).unwrap();
        assert_eq!(serde_json::from_str::<KvEvent>(&line).unwrap(), evict);
    }
}

//! The prefix cache's change log: replaying its events after every step rebuilds exactly
//! the pool's set of cached hashes, through evictions, preemptions, aborts and a reset, and
//! every stored block's hash follows from its tokens chained through its parent.

mod core_support;

use std::collections::{HashMap, HashSet};

use core_support::{request, scheduler, sim, sim_step, tokens};
use pagoda::core::block_hash::{ROOT_BLOCK_HASH, hash_block};
use pagoda::core::events::CacheEvent;
use pagoda::core::scheduler::Scheduler;
use pagoda::ids::BlockHash;
use pagoda::{RequestId, RequestStatus, TokenId};

const BLOCK_SIZE: usize = 16;

/// What a router rebuilds from the events: the set of cached hashes, each with its tokens.
#[derive(Default)]
struct Replica {
    cached: HashMap<BlockHash, Vec<TokenId>>,
    num_stored: usize,
    num_removed: usize,
    num_cleared: usize,
}

impl Replica {
    fn apply(&mut self, events: Vec<CacheEvent>) {
        for event in events {
            match event {
                CacheEvent::Stored { block_hashes, parent_block_hash, token_ids, .. } => {
                    assert_eq!(token_ids.len(), block_hashes.len() * BLOCK_SIZE);
                    let mut parent = parent_block_hash.unwrap_or(ROOT_BLOCK_HASH);
                    if let Some(hash) = parent_block_hash {
                        assert!(self.cached.contains_key(&hash), "parent {hash:x} is not cached");
                    }
                    for (hash, block) in block_hashes.iter().zip(token_ids.chunks(BLOCK_SIZE)) {
                        assert_eq!(*hash, hash_block(parent, block.iter().copied(), None));
                        assert!(self.cached.insert(*hash, block.to_vec()).is_none(), "stored twice");
                        parent = *hash;
                    }
                    self.num_stored += block_hashes.len();
                }
                CacheEvent::Removed { block_hashes } => {
                    for hash in block_hashes {
                        assert!(self.cached.remove(&hash).is_some(), "removed {hash:x} it never stored");
                        self.num_removed += 1;
                    }
                }
                CacheEvent::Cleared => {
                    self.cached.clear();
                    self.num_cleared += 1;
                }
                CacheEvent::HostStored { .. } | CacheEvent::HostRemoved { .. } => {
                    panic!("no host tier here: {event:?}")
                }
            }
        }
    }

    fn check(&self, scheduler: &Scheduler) {
        let pool: HashSet<BlockHash> =
            scheduler.kv_cache_manager().pool().cached_blocks().keys().copied().collect();
        let rebuilt: HashSet<BlockHash> = self.cached.keys().copied().collect();
        assert_eq!(rebuilt, pool);
    }
}

#[test]
fn replayed_events_equal_the_cached_set_after_every_step() {
    // 40 blocks for 6 requests at a time sharing prefixes of 3 groups: evictions and
    // preemptions.
    let mut s = scheduler(256, 40);
    let log = s.cache_event_log();
    log.start();
    let (_, mut executor) = sim();
    let mut generated = HashMap::new();
    let mut replica = Replica::default();
    let mut id: RequestId = 0;
    let mut add = |s: &mut Scheduler, group: u32, len: usize| {
        let mut prompt = tokens(group * 1000, 48);
        prompt.extend(tokens(50_000 + id as u32 * 100, len));
        s.add_request(request(id, prompt, 40)).unwrap();
        id += 1;
    };
    for round in 0..4u32 {
        for index in 0..6 {
            add(&mut s, index % 3, 20 + 7 * round as usize + index as usize);
        }
        let mut steps = 0;
        while s.has_unfinished_requests() {
            sim_step(&mut s, &mut executor, &mut generated);
            replica.apply(log.take());
            replica.check(&s);
            steps += 1;
            if round == 2 && steps == 5 {
                let victim = s.running_ids()[0];
                s.finish_requests([victim], RequestStatus::FinishedAborted).unwrap();
                replica.apply(log.take());
                replica.check(&s);
            }
        }
        if round == 1 {
            assert!(s.reset_prefix_cache());
            replica.apply(log.take());
            replica.check(&s);
            assert!(replica.cached.is_empty());
        }
    }
    let stats = s.stats();
    assert!(stats.num_preemptions > 0, "the workload must preempt");
    assert!(replica.num_removed > 0, "the workload must evict");
    assert_eq!(replica.num_cleared, 1);
    assert!(replica.num_stored > replica.cached.len());
}

#[test]
fn a_shared_prefix_is_announced_once_with_its_tokens_and_no_parent() {
    let mut s = scheduler(512, 64);
    let log = s.cache_event_log();
    log.start();
    let (_, mut executor) = sim();
    let mut generated = HashMap::new();
    s.add_request(request(0, tokens(0, 40), 1)).unwrap();
    s.add_request(request(1, tokens(0, 40), 1)).unwrap();
    sim_step(&mut s, &mut executor, &mut generated);
    let events = log.take();
    // The second prompt hits the first one's blocks, cached as they were allocated.
    let stored: Vec<usize> = events
        .iter()
        .map(|event| match event {
            CacheEvent::Stored { block_hashes, parent_block_hash: None, token_ids, .. } => {
                assert_eq!(token_ids, &tokens(0, 32));
                block_hashes.len()
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(stored, vec![2]);
}

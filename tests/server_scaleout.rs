//! The scale-out study: 4 replicas of `pagoda serve --executor sim --sim-realtime` on
//! loopback ports behind a router written here, on a shared-prefix workload, under three
//! policies: round-robin, least `vllm:kv_cache_usage_perc` (from `/metrics`), and
//! prefix-aware (from the replicas' KV-cache events, keys recomputed from the token ids
//! chained through the parent hashes, as llm-d's indexer does: the replica holding the
//! longest cached prefix, the least loaded among equals; a first block no replica holds
//! sticks to the replica that was given the fewest such blocks). It reports prefix-cache hit rate, preemptions and TTFT p50/p99 per
//! policy.
//!
//! CI runs a reduced workload; `PAGODA_SCALEOUT_REQUESTS=3000 cargo test --release --test
//! server_scaleout -- --nocapture` runs the full study and prints the table.
#![cfg(feature = "server")]

mod replica_support;
mod server_support;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use replica_support::{Replica, write_tiny_model};
use serde_json::{Value, json};
use server_support::send_request;
use zeromq::{Socket, SocketRecv, SubSocket};

const REPLICAS: usize = 4;
const BLOCK_SIZE: usize = 16;
const GROUPS: usize = 8;
const PREFIX_LEN: usize = 768;
const SUFFIX_LEN: usize = 64;
const OUTPUT_LEN: usize = 16;
const CONCURRENCY: usize = 64;
const NUM_GPU_BLOCKS: usize = 320;

/// How the router picks a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    RoundRobin,
    LeastKvUsage,
    PrefixAware,
}

/// A router's key for a block: its own hash of the parent's key and the block's tokens.
fn router_key(parent: u64, tokens: &[u32]) -> u64 {
    tokens
        .iter()
        .fold(parent ^ 0x9e37_79b9_7f4a_7c15, |h, &t| (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3))
}

/// What the router knows of each replica from its KV-cache events.
#[derive(Default)]
struct CacheIndex {
    /// Per replica: the replica's block hash -> the router's key.
    keys: Vec<HashMap<Vec<u8>, u64>>,
    /// Per replica: the keys of its cached blocks.
    cached: Vec<HashSet<u64>>,
    batches: usize,
}

impl CacheIndex {
    fn new() -> Self {
        Self { keys: vec![HashMap::new(); REPLICAS], cached: vec![HashSet::new(); REPLICAS], batches: 0 }
    }

    fn apply(&mut self, replica: usize, payload: &[u8]) {
        self.batches += 1;
        let mut reader = payload;
        for event in decode_batch(&mut reader) {
            match event {
                WireEvent::Stored { hashes, parent, tokens } => {
                    let mut key = match parent {
                        None => 0,
                        Some(parent) => match self.keys[replica].get(&parent) {
                            Some(&key) => key,
                            None => continue,
                        },
                    };
                    for (hash, block) in hashes.into_iter().zip(tokens.chunks(BLOCK_SIZE)) {
                        key = router_key(key, block);
                        self.keys[replica].insert(hash, key);
                        self.cached[replica].insert(key);
                    }
                }
                WireEvent::Removed { hashes } => {
                    for hash in hashes {
                        if let Some(key) = self.keys[replica].remove(&hash) {
                            self.cached[replica].remove(&key);
                        }
                    }
                }
                WireEvent::Cleared => {
                    self.keys[replica].clear();
                    self.cached[replica].clear();
                }
            }
        }
    }

    /// Leading full blocks of `prompt` cached on `replica`.
    fn hits(&self, replica: usize, prompt: &[u32]) -> usize {
        let mut key = 0;
        prompt
            .chunks_exact(BLOCK_SIZE)
            .take_while(|block| {
                key = router_key(key, block);
                self.cached[replica].contains(&key)
            })
            .count()
    }
}

enum WireEvent {
    Stored { hashes: Vec<Vec<u8>>, parent: Option<Vec<u8>>, tokens: Vec<u32> },
    Removed { hashes: Vec<Vec<u8>> },
    Cleared,
}

fn read_bin(reader: &mut &[u8]) -> Vec<u8> {
    let len = rmp::decode::read_bin_len(reader).unwrap() as usize;
    let (bytes, rest) = reader.split_at(len);
    *reader = rest;
    bytes.to_vec()
}

fn read_str(reader: &mut &[u8]) -> String {
    let len = rmp::decode::read_str_len(reader).unwrap() as usize;
    let (bytes, rest) = reader.split_at(len);
    *reader = rest;
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn read_hashes(reader: &mut &[u8]) -> Vec<Vec<u8>> {
    let len = rmp::decode::read_array_len(reader).unwrap();
    (0..len).map(|_| read_bin(reader)).collect()
}

/// Decodes vLLM's `[ts, [events], dp_rank]` msgpack batch.
fn decode_batch(reader: &mut &[u8]) -> Vec<WireEvent> {
    assert_eq!(rmp::decode::read_array_len(reader).unwrap(), 3);
    rmp::decode::read_f64(reader).unwrap();
    let num_events = rmp::decode::read_array_len(reader).unwrap();
    let events = (0..num_events)
        .map(|_| {
            let fields = rmp::decode::read_array_len(reader).unwrap();
            match read_str(reader).as_str() {
                "BlockStored" => {
                    assert_eq!(fields, 7);
                    let hashes = read_hashes(reader);
                    let parent = if reader.first() == Some(&0xc0) {
                        rmp::decode::read_nil(reader).unwrap();
                        None
                    } else {
                        Some(read_bin(reader))
                    };
                    let num_tokens = rmp::decode::read_array_len(reader).unwrap();
                    let tokens = (0..num_tokens).map(|_| rmp::decode::read_int(reader).unwrap()).collect();
                    assert_eq!(rmp::decode::read_int::<usize, _>(reader).unwrap(), BLOCK_SIZE);
                    rmp::decode::read_nil(reader).unwrap();
                    assert_eq!(read_str(reader), "GPU");
                    WireEvent::Stored { hashes, parent, tokens }
                }
                "BlockRemoved" => {
                    let hashes = read_hashes(reader);
                    assert_eq!(read_str(reader), "GPU");
                    WireEvent::Removed { hashes }
                }
                "AllBlocksCleared" => WireEvent::Cleared,
                other => panic!("unknown event {other}"),
            }
        })
        .collect();
    rmp::decode::read_nil(reader).unwrap();
    events
}

/// One policy's results.
struct Outcome {
    hit_rate: f64,
    preemptions: f64,
    ttft_p50: f64,
    ttft_p99: f64,
    wall_s: f64,
    per_replica: Vec<usize>,
    event_batches: usize,
}

/// The workload: (prompt token ids) per request, groups drawn at random.
fn workload(num_requests: usize) -> Vec<Vec<u32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let prefixes: Vec<Vec<u32>> =
        (0..GROUPS).map(|_| (0..PREFIX_LEN).map(|_| rng.random_range(3..259)).collect()).collect();
    (0..num_requests)
        .map(|_| {
            let mut prompt = prefixes[rng.random_range(0..GROUPS)].clone();
            prompt.extend((0..SUFFIX_LEN).map(|_| rng.random_range(3..259u32)));
            prompt
        })
        .collect()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Streams one completion; returns seconds to the first token.
fn stream_completion(replica: &Replica, prompt: &[u32]) -> f64 {
    let body = json!({
        "model": "tiny", "prompt": prompt, "max_tokens": OUTPUT_LEN, "ignore_eos": true,
        "stream": true, "logprobs": 0,
    });
    let start = Instant::now();
    let stream = send_request(replica.addr, "POST", "/v1/completions", Some(&body.to_string()), &[]);
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut ttft = None;
    let mut last = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(data) = line.trim_end().strip_prefix("data: ") {
            ttft.get_or_insert_with(|| start.elapsed().as_secs_f64());
            if data != "[DONE]" {
                last = data.to_owned();
            }
        }
    }
    let last: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length", "{last}");
    ttft.unwrap()
}

fn run_policy(policy: Policy, prompts: &[Vec<u32>], model_dir: &std::path::Path) -> Outcome {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let mut sub = SubSocket::new();
    let endpoint = runtime.block_on(sub.bind("tcp://127.0.0.1:0")).unwrap();
    runtime.block_on(sub.subscribe("")).unwrap();
    let index = Arc::new(Mutex::new(CacheIndex::new()));
    {
        let index = Arc::clone(&index);
        runtime.spawn(async move {
            while let Ok(message) = sub.recv().await {
                let frames = message.into_vec();
                let replica: usize = std::str::from_utf8(&frames[0]).unwrap()[1..].parse().unwrap();
                index.lock().unwrap().apply(replica, &frames[2]);
            }
        });
    }
    let replicas: Vec<Replica> = (0..REPLICAS)
        .map(|i| {
            let events = json!({
                "enable_kv_cache_events": true, "publisher": "zmq",
                "endpoint": endpoint.to_string(), "topic": format!("r{i}"),
            });
            Replica::start(
                model_dir,
                &[
                    "--sim-realtime",
                    "--metrics-prefix",
                    "vllm",
                    "--num-gpu-blocks",
                    &NUM_GPU_BLOCKS.to_string(),
                    "--kv-events-config",
                    &events.to_string(),
                ],
            )
        })
        .collect();

    let usage: Arc<Vec<Mutex<f64>>> = Arc::new((0..REPLICAS).map(|_| Mutex::new(0.0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let in_flight: Vec<AtomicUsize> = (0..REPLICAS).map(|_| AtomicUsize::new(0)).collect();
    let per_replica: Vec<AtomicUsize> = (0..REPLICAS).map(|_| AtomicUsize::new(0)).collect();
    let next = AtomicUsize::new(0);
    let ttfts = Mutex::new(Vec::with_capacity(prompts.len()));
    let router = Mutex::new(0usize);
    let cold: Mutex<HashMap<u64, usize>> = Mutex::new(HashMap::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        if policy == Policy::LeastKvUsage {
            let (usage, stop, replicas) = (Arc::clone(&usage), Arc::clone(&stop), &replicas);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for (i, replica) in replicas.iter().enumerate() {
                        let value =
                            replica.metric("vllm:kv_cache_usage_perc{model_name=\"tiny\",engine=\"0\"}");
                        *usage[i].lock().unwrap() = value;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
        }
        let workers: Vec<_> = (0..CONCURRENCY)
            .map(|_| {
                scope.spawn(|| {
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        let Some(prompt) = prompts.get(n) else { break };
                        let choice = {
                            let mut turn = router.lock().unwrap();
                            let load = |i: usize| in_flight[i].load(Ordering::Relaxed);
                            let choice = match policy {
                                Policy::RoundRobin => *turn % REPLICAS,
                                Policy::LeastKvUsage => (0..REPLICAS)
                                    .min_by(|&a, &b| {
                                        let (ua, ub) = (*usage[a].lock().unwrap(), *usage[b].lock().unwrap());
                                        ua.total_cmp(&ub).then(load(a).cmp(&load(b)))
                                    })
                                    .unwrap(),
                                Policy::PrefixAware => {
                                    let index = index.lock().unwrap();
                                    let hits: Vec<usize> =
                                        (0..REPLICAS).map(|i| index.hits(i, prompt)).collect();
                                    if hits.iter().all(|&h| h == 0) {
                                        // Nothing cached anywhere yet: a first block seen for
                                        // the first time goes to the replica with the fewest
                                        // such blocks, and its later requests follow it.
                                        let mut cold = cold.lock().unwrap();
                                        let count = |i: usize| cold.values().filter(|&&r| r == i).count();
                                        let fewest =
                                            (0..REPLICAS).min_by_key(|&i| (count(i), load(i))).unwrap();
                                        *cold.entry(router_key(0, &prompt[..BLOCK_SIZE])).or_insert(fewest)
                                    } else {
                                        (0..REPLICAS)
                                            .max_by_key(|&i| (hits[i], std::cmp::Reverse(load(i))))
                                            .unwrap()
                                    }
                                }
                            };
                            *turn += 1;
                            in_flight[choice].fetch_add(1, Ordering::Relaxed);
                            choice
                        };
                        per_replica[choice].fetch_add(1, Ordering::Relaxed);
                        let ttft = stream_completion(&replicas[choice], prompt);
                        in_flight[choice].fetch_sub(1, Ordering::Relaxed);
                        ttfts.lock().unwrap().push(ttft);
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let wall_s = started.elapsed().as_secs_f64();
    let sum = |name: &str| -> f64 {
        replicas.iter().map(|r| r.metric(&format!("vllm:{name}{{model_name=\"tiny\",engine=\"0\"}}"))).sum()
    };
    let (hits, queries) = (sum("prefix_cache_hits_total"), sum("prefix_cache_queries_total"));
    let preemptions = sum("num_preemptions_total");
    let mut ttfts = ttfts.into_inner().unwrap();
    assert_eq!(ttfts.len(), prompts.len());
    ttfts.sort_by(f64::total_cmp);
    let event_batches = index.lock().unwrap().batches;
    drop(replicas);
    Outcome {
        hit_rate: hits / queries,
        preemptions,
        ttft_p50: percentile(&ttfts, 0.5),
        ttft_p99: percentile(&ttfts, 0.99),
        wall_s,
        per_replica: per_replica.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
        event_batches,
    }
}

#[test]
fn prefix_aware_routing_from_kv_events_beats_round_robin_on_hit_rate() {
    let num_requests = std::env::var("PAGODA_SCALEOUT_REQUESTS").ok().map_or(192, |n| n.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    write_tiny_model(dir.path());
    let prompts = workload(num_requests);
    let mut outcomes = Vec::new();
    for policy in [Policy::RoundRobin, Policy::LeastKvUsage, Policy::PrefixAware] {
        let outcome = run_policy(policy, &prompts, dir.path());
        eprintln!(
            "scale-out {num_requests} requests, {policy:?}: prefix hit rate {:.3}, preemptions {}, TTFT p50 {:.3} s p99 {:.3} s, wall {:.1} s, per replica {:?}, event batches {}",
            outcome.hit_rate,
            outcome.preemptions,
            outcome.ttft_p50,
            outcome.ttft_p99,
            outcome.wall_s,
            outcome.per_replica,
            outcome.event_batches
        );
        assert_eq!(outcome.per_replica.iter().sum::<usize>(), num_requests);
        outcomes.push((policy, outcome));
    }
    let hit_rate = |policy: Policy| outcomes.iter().find(|(p, _)| *p == policy).unwrap().1.hit_rate;
    let prefix = &outcomes[2].1;
    assert!(prefix.event_batches > 0, "the router must have followed the replicas' KV events");
    assert!(
        hit_rate(Policy::PrefixAware) > hit_rate(Policy::RoundRobin),
        "prefix-aware {} vs round-robin {}",
        hit_rate(Policy::PrefixAware),
        hit_rate(Policy::RoundRobin)
    );
}

//! KV-cache events on the wire: a Python subscriber (pyzmq + msgpack, as a router writes
//! one) follows a server through a workload with evictions, preemptions and a prefix-cache
//! reset; the set of cached hashes it rebuilds equals the pool's exactly, each with a token
//! chain whose chained hash is that hash; sequence numbers have no gap, and a replay from
//! the first batch the subscriber lacks returns what it missed.
//!
//! Skipped (with a message) when `python3` lacks `zmq` or `msgpack`, unless
//! `PAGODA_REQUIRE_PYTHON=1` (as `scripts/test.sh` sets it).
#![cfg(feature = "server")]

mod engine_support;
mod server_support;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

use engine_support::{random_logits, slow_engine};
use pagoda::core::block_hash::{ROOT_BLOCK_HASH, hash_block};
use pagoda::ids::BlockHash;
use pagoda::server::ServerOptions;
use pagoda::server::kv_events::KvEventsConfig;
use pagoda::{CacheConfig, EngineConfig, TokenId};
use serde_json::{Value, json};
use server_support::{MODEL, TestServer, series};

/// True when the Python side can run; panics when it must and cannot.
fn python_ready() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import zmq, msgpack"])
        .status()
        .is_ok_and(|status| status.success());
    if !ok {
        assert!(
            std::env::var("PAGODA_REQUIRE_PYTHON").as_deref() != Ok("1"),
            "python3 with pyzmq and msgpack is required (pip install pyzmq msgpack)"
        );
        eprintln!("skipped: python3 lacks pyzmq or msgpack");
    }
    ok
}

/// The Python subscriber on topic `kv`, its output lines (after its port) and the server's
/// events configuration that publishes to it.
fn subscriber() -> (Child, Lines<BufReader<ChildStdout>>, KvEventsConfig) {
    let mut subscriber = Command::new("python3")
        .args([concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kv_events_subscriber.py"), "kv"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(subscriber.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let port: u16 = first.strip_prefix("PORT ").unwrap().parse().unwrap();
    let kv_events = KvEventsConfig::parse(&format!(
        r#"{{"enable_kv_cache_events": true, "publisher": "zmq", "topic": "kv",
            "endpoint": "tcp://127.0.0.1:{port}", "replay_endpoint": "tcp://127.0.0.1:0"}}"#
    ))
    .unwrap();
    (subscriber, lines, kv_events)
}

fn run_round(server: &TestServer, round: usize) {
    std::thread::scope(|scope| {
        for index in 0..12 {
            scope.spawn(move || {
                let prefix = ["the quick brown fox jumps over the lazy dog ", "a wise cat sat on the mat "][index % 2];
                let prompt = format!("{}{}: round {round} request {index}", prefix.repeat(2), index * 7 + round);
                let body =
                    json!({"model": MODEL, "prompt": prompt, "max_tokens": 40, "ignore_eos": true, "seed": index});
                let (status, _) = server.post_json("/v1/completions", &body);
                assert_eq!(status, 200);
            });
        }
    });
}

#[test]
fn a_python_subscriber_rebuilds_exactly_the_cached_set_through_evictions_preemptions_and_a_reset() {
    if !python_ready() {
        return;
    }
    let (mut subscriber, mut lines, kv_events) = subscriber();
    // 24 blocks of 16 tokens for 12 requests of ~100 tokens: evictions and preemptions.
    let config = EngineConfig {
        seed: 1,
        cache: CacheConfig { num_gpu_blocks: 24, ..CacheConfig::default() },
        ..EngineConfig::default()
    };
    let options = ServerOptions { kv_events, ..ServerOptions::default() };
    let server =
        TestServer::start_with(slow_engine(config, Box::new(random_logits), Default::default()), options);
    let replay = server.state.kv_events_replay_endpoint().unwrap();

    run_round(&server, 0);
    run_round(&server, 1);
    assert!(server.block_on(server.state.engine().call(|engine| engine.reset_prefix_cache())).unwrap());
    run_round(&server, 2);
    assert!(server.metric(&series("num_preemptions_total", "")) > 0.0, "the workload must preempt");

    let pool: HashSet<BlockHash> = server
        .block_on(server.state.engine().call(|engine| {
            engine.scheduler().kv_cache_manager().pool().cached_blocks().keys().copied().collect()
        }))
        .unwrap();
    server.block_on(server.state.flush_kv_events());
    let mut stdin = subscriber.stdin.take().unwrap();
    writeln!(stdin, "DONE {replay}").unwrap();
    let report: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(subscriber.wait().unwrap().success());

    eprintln!(
        "subscriber: {} batches, {} received live, {} replayed from the first one it lacked; events {}",
        report["num_batches"], report["num_live"], report["num_replayed"], report["events"]
    );
    let events = &report["events"];
    assert!(events["BlockStored"].as_u64().unwrap() > 0);
    assert!(events["BlockRemoved"].as_u64().unwrap() > 0, "the workload must evict: {events}");
    assert_eq!(events["AllBlocksCleared"], 1);
    let cached: HashMap<BlockHash, Vec<TokenId>> = report["cached"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(hex, chain)| {
            let chain = chain.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as TokenId).collect();
            (BlockHash::from_str_radix(hex, 16).unwrap(), chain)
        })
        .collect();
    assert_eq!(cached.keys().copied().collect::<HashSet<_>>(), pool);
    assert!(!pool.is_empty());
    for (hash, chain) in &cached {
        let chained = chain
            .chunks(16)
            .fold(ROOT_BLOCK_HASH, |parent, block| hash_block(parent, block.iter().copied(), None));
        assert_eq!(chained, *hash, "the token chain of {hash:x} does not hash to it");
    }
}

#[test]
fn host_tier_blocks_reach_the_subscriber_on_the_cpu_medium() {
    if !python_ready() {
        return;
    }
    let (mut subscriber, mut lines, kv_events) = subscriber();
    // 24 GPU blocks and a host tier of 16 blocks of 64 KiB: stores, loads and host evictions.
    let block_bytes = 1u64 << 16;
    let cache = CacheConfig {
        num_gpu_blocks: 24,
        kv_offloading_size: (16 * block_bytes) as f64 / (1u64 << 30) as f64,
        kv_block_bytes: block_bytes,
        ..CacheConfig::default()
    };
    let config = EngineConfig { seed: 1, cache, ..EngineConfig::default() };
    let options = ServerOptions { kv_events, ..ServerOptions::default() };
    let server =
        TestServer::start_with(slow_engine(config, Box::new(random_logits), Default::default()), options);
    let replay = server.state.kv_events_replay_endpoint().unwrap();
    run_round(&server, 0);
    run_round(&server, 1);
    let (pool, host, stats) = server
        .block_on(server.state.engine().call(|engine| {
            let scheduler = engine.scheduler();
            let pool: HashSet<BlockHash> =
                scheduler.kv_cache_manager().pool().cached_blocks().keys().copied().collect();
            let tier = scheduler.host_tier().unwrap();
            let host: HashSet<BlockHash> = tier.hashes().into_iter().collect();
            (pool, host, tier.stats())
        }))
        .unwrap();
    assert!(stats.num_loaded_blocks > 0 && stats.num_evicted_blocks > 0, "{stats:?}");
    server.block_on(server.state.flush_kv_events());
    let mut stdin = subscriber.stdin.take().unwrap();
    writeln!(stdin, "DONE {replay}").unwrap();
    let report: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(subscriber.wait().unwrap().success());
    let hashes = |value: &Value| -> HashSet<BlockHash> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|hex| BlockHash::from_str_radix(hex.as_str().unwrap(), 16).unwrap())
            .collect()
    };
    let cached: HashSet<BlockHash> = report["cached"]
        .as_object()
        .unwrap()
        .keys()
        .map(|hex| BlockHash::from_str_radix(hex, 16).unwrap())
        .collect();
    assert_eq!(cached, pool, "the GPU medium's set");
    assert_eq!(hashes(&report["host"]), host, "the CPU medium's set");
    assert_eq!(host.len(), 16, "the full host tier");
}

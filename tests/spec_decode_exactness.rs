//! Speculative decoding changes no bit beyond SmolLM2's own tests (tests/smollm2_spec_decode.rs):
//! every family's tiny model with f32 and f16 KV, n-gram and draft-model speculation (each model
//! drafting for itself accepts every proposal), and every weight type of the SmolLM2 mixes, each
//! batched, chunked and preempted on a tiny pool, give the tokens plain decode gives each prompt
//! alone (with prefix caching, on a roomy pool). CI runs three families and three mixes;
//! `PAGODA_SPEC_EXACTNESS=all` runs them all. Under sampling, the distribution of the first speculated
//! position over many seeds is plain sampling's: a chi-square test that a verifier accepting
//! every proposal fails.

use std::path::PathBuf;

use pagoda::core::cache_config::{CacheConfig, KvCacheDtype};
use pagoda::core::metrics::SchedulerStats;
use pagoda::core::request::Request;
use pagoda::core::scheduler::Scheduler;
use pagoda::core::scheduler_config::SchedulerConfig;
use pagoda::core::spec_decode::{NgramIndex, NgramProposer, SpeculativeConfig};
use pagoda::dtype::DType;
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::gpu::{GpuContext, GpuOptions};
use pagoda::model::ModelFiles;
use pagoda::model::testing::TinyLlama;
use pagoda::sampling::SamplingParams;
use serde_json::Value;

const BLOCK: usize = 4;
const POOL: usize = 96;

fn ctx() -> GpuContext {
    GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
        .expect("a wgpu adapter (lavapipe in CI)")
}

fn env_dir(name: &str) -> PathBuf {
    std::env::var_os(name).map(PathBuf::from).unwrap_or_else(|| panic!("{name} (source /tmp/env.sh)"))
}

fn sched(budget: usize, max_model_len: usize, spec: Option<SpeculativeConfig>) -> SchedulerConfig {
    SchedulerConfig {
        max_num_batched_tokens: budget,
        max_num_seqs: 8,
        max_model_len,
        speculative_config: spec,
        ..SchedulerConfig::default()
    }
}

/// `num_gpu_blocks` blocks of [`BLOCK`] tokens; prefix caching on for a roomy pool, off for a
/// small one (whose requests must preempt each other rather than share their prompts).
fn cache(num_gpu_blocks: usize, kv_cache_dtype: KvCacheDtype, files: &ModelFiles) -> CacheConfig {
    CacheConfig {
        block_size: BLOCK,
        num_gpu_blocks,
        kv_cache_dtype,
        enable_prefix_caching: num_gpu_blocks >= POOL,
        sliding_window: files.config.uniform_sliding_window(),
        ..CacheConfig::default()
    }
}

/// Runs `requests` to completion through a fresh scheduler on `exec`; each request's tokens
/// and the scheduler's stats.
fn run(
    exec: &mut WgpuExecutor,
    sched: SchedulerConfig,
    cache: CacheConfig,
    requests: &[(Vec<u32>, SamplingParams)],
) -> (Vec<Vec<u32>>, SchedulerStats) {
    let mut scheduler = Scheduler::new(sched, cache).unwrap();
    for (id, (prompt, params)) in requests.iter().enumerate() {
        let request = Request::new(id as u64, prompt.clone(), params.clone(), None, id as f64);
        scheduler.add_request(request).unwrap();
    }
    let mut tokens = vec![Vec::new(); requests.len()];
    while scheduler.has_unfinished_requests() {
        let plan = scheduler.schedule();
        let result = if plan.is_empty() {
            Default::default()
        } else {
            exec.execute(&plan, &mut StepMasks::none()).unwrap()
        };
        for out in scheduler.update_from_output(&plan, &result) {
            tokens[out.request_id as usize].extend(out.new_token_ids);
        }
    }
    (tokens, scheduler.stats())
}

/// Greedy past EOS, `max_tokens` tokens for each prompt.
fn greedy(prompts: &[Vec<u32>], max_tokens: usize) -> Vec<(Vec<u32>, SamplingParams)> {
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(max_tokens) };
    prompts.iter().map(|p| (p.clone(), params.clone())).collect()
}

/// Each of `prompts` alone through plain greedy decode on a roomy pool with prefix caching.
fn alone(
    exec: &mut WgpuExecutor,
    files: &ModelFiles,
    dtype: KvCacheDtype,
    prompts: &[Vec<u32>],
    max_tokens: usize,
) -> Vec<Vec<u32>> {
    let len = files.config.cap_model_len(128);
    prompts
        .iter()
        .map(|p| {
            run(
                exec,
                sched(512, len, None),
                cache(POOL, dtype, files),
                &greedy(std::slice::from_ref(p), max_tokens),
            )
            .0
        })
        .map(|mut tokens| tokens.remove(0))
        .collect()
}

/// Checks on `exec` (built for `spec`) that `prompts` batched in 7-token steps on a pool of
/// `small_pool` blocks give with `spec` the tokens `alone` holds (plain decode, each alone);
/// returns the speculative run's stats.
fn check_exact(
    what: &str,
    exec: &mut WgpuExecutor,
    files: &ModelFiles,
    dtype: KvCacheDtype,
    (prompts, alone, small_pool): (&[Vec<u32>], &[Vec<u32>], usize),
    spec: SpeculativeConfig,
) -> SchedulerStats {
    let len = files.config.cap_model_len(128);
    let max_tokens = alone[0].len();
    let requests = greedy(prompts, max_tokens);
    let (together, stats) = run(exec, sched(7, len, Some(spec)), cache(small_pool, dtype, files), &requests);
    eprintln!(
        "{what}: {:?}, {} preemptions, prompts {:?}, peak usage {:.2}, {} steps, outputs {:?}",
        stats.spec_decoding,
        stats.num_preemptions,
        prompts.iter().map(Vec::len).collect::<Vec<_>>(),
        stats.peak_kv_cache_usage,
        stats.num_steps,
        together.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert_eq!(together, alone, "{what}");
    assert!(stats.num_preemptions > 0, "{what}: the small pool preempted nothing");
    stats
}

/// A family's fixture prompts, the first one twice over (so that n-grams recur), the others
/// cut to 12 tokens, and the second's reversed (so that four grow side by side in the small
/// pool).
fn family_prompts(name: &str) -> Vec<Vec<u32>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/families/{name}.json"));
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids =
        |v: &Value| v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect::<Vec<u32>>();
    let mut prompts: Vec<Vec<u32>> =
        fixture["prompts"].as_array().unwrap().iter().map(|p| ids(&p["ids"])).collect();
    prompts[0] = prompts[0].repeat(2);
    for prompt in &mut prompts[1..] {
        prompt.truncate(12);
    }
    let reversed = prompts[1].iter().rev().copied().collect();
    prompts.push(reversed);
    prompts
}

/// The whole sets (every family, every mix) with `PAGODA_SPEC_EXACTNESS=all`; CI's run takes
/// `quick` (minutes of lavapipe less).
fn chosen<'a>(all: &[&'a str], quick: &[&'a str]) -> Vec<&'a str> {
    match std::env::var("PAGODA_SPEC_EXACTNESS").as_deref() {
        Ok("all") => all.to_vec(),
        _ => quick.to_vec(),
    }
}

#[test]
fn every_family_speculating_returns_plain_decodes_tokens_with_f32_and_f16_kv() {
    let all = ["llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "phi3-longrope"];
    // Quick: a plain Llama, a sliding window, and local and global layers with softcaps.
    for name in chosen(&all, &["llama", "mistral", "gemma3"]) {
        let path = env_dir("PAGODA_FAMILIES_DIR").join(name);
        let files = ModelFiles::open(&path).unwrap();
        let draft = SpeculativeConfig::draft_model(&path, 3);
        let prompts = family_prompts(name);
        for dtype in [KvCacheDtype::F32, KvCacheDtype::F16] {
            let len = files.config.cap_model_len(128);
            let config = sched(512, len, Some(draft.clone()));
            let mut exec =
                WgpuExecutor::new(ctx(), &files, &cache(POOL, dtype, &files), &config, false).unwrap();
            let alone = alone(&mut exec, &files, dtype, &prompts, 12);
            let case = (prompts.as_slice(), alone.as_slice(), 9);
            // A tiny model's output may repeat nothing (no proposal): the draft always proposes.
            let ngram = SpeculativeConfig::ngram(3, 1, 3);
            check_exact(&format!("{name} {dtype:?} ngram"), &mut exec, &files, dtype, case, ngram);
            let what = format!("{name} {dtype:?} draft");
            let spec = check_exact(&what, &mut exec, &files, dtype, case, draft.clone()).spec_decoding;
            assert!(spec.num_draft_tokens > 0, "{what}: nothing was proposed");
            assert_eq!(spec.num_accepted_tokens, spec.num_draft_tokens, "{what}: drafting for itself");
        }
    }
}

#[test]
fn every_weight_type_of_the_mixes_speculating_returns_plain_decodes_tokens() {
    let mut mixes: Vec<PathBuf> = std::fs::read_dir(env_dir("PAGODA_MIX_DIR"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "gguf"))
        .collect();
    mixes.sort();
    // Quick: a k-quant mix, the 6-bit one and an i-quant.
    let quick = ["Q4_K_M", "Q6_K", "IQ4_XS"];
    if std::env::var("PAGODA_SPEC_EXACTNESS").as_deref() != Ok("all") {
        mixes.retain(|path| quick.iter().any(|name| path.to_string_lossy().contains(&format!(".{name}."))));
    }
    assert!(!mixes.is_empty(), "no GGUF in PAGODA_MIX_DIR");
    let text = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog";
    for path in mixes {
        let files = ModelFiles::open(&path).unwrap();
        let repetitive = files.tokenizer.encode(text, false).unwrap();
        let prompts = [repetitive.clone(), repetitive[..12].to_vec()];
        let spec = SpeculativeConfig::ngram(3, 1, 3);
        let config = sched(512, 128, Some(spec.clone()));
        let dtype = KvCacheDtype::F16;
        let mut exec = WgpuExecutor::new(ctx(), &files, &cache(POOL, dtype, &files), &config, false).unwrap();
        let what = path.file_name().unwrap().to_string_lossy().into_owned();
        let alone = alone(&mut exec, &files, dtype, &prompts, 8);
        let stats = check_exact(&what, &mut exec, &files, dtype, (&prompts, &alone, 10), spec);
        assert!(stats.spec_decoding.num_accepted_tokens > 0, "{what}: {:?}", stats.spec_decoding);
    }
}

/// Two samples' chi-square statistic over the categories either saw, and the statistic's
/// 0.999 quantile for their degrees of freedom (Wilson and Hilferty's approximation).
fn chi_square(a: &[u32], b: &[u32]) -> (f64, f64) {
    let mut categories: Vec<u32> = a.iter().chain(b).copied().collect();
    categories.sort_unstable();
    categories.dedup();
    let count = |sample: &[u32], c: u32| sample.iter().filter(|&&t| t == c).count() as f64;
    let statistic = categories
        .iter()
        .map(|&c| {
            let (x, y) = (count(a, c), count(b, c));
            (x - y).powi(2) / (x + y)
        })
        .sum();
    let df = (categories.len().max(2) - 1) as f64;
    let z = 3.09;
    let quantile = df * (1.0 - 2.0 / (9.0 * df) + z * (2.0 / (9.0 * df)).sqrt()).powi(3);
    (statistic, quantile)
}

/// On a model with a small vocabulary (270 tokens), 300 seeded requests sample with top-k 4:
/// the token at the first speculated position (the second output token, verified against an
/// n-gram proposal) has plain sampling's distribution, while accepting every proposal there
/// — the mutation a verifier without its rejection step makes — is caught.
#[test]
fn the_first_speculated_positions_distribution_is_plain_samplings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    TinyLlama::new(5).write_gguf(&path, DType::F32).unwrap();
    let files = ModelFiles::open(&path).unwrap();
    let vocab = files.config.vocab_size as u32;
    // Every token but the special ones once, so any first token has an n-gram match.
    let prompt: Vec<u32> = (3..vocab).collect();
    let seeds = 300;
    let requests: Vec<(Vec<u32>, SamplingParams)> = (0..seeds)
        .map(|seed| {
            let params = SamplingParams {
                temperature: 1.0,
                top_k: 4,
                seed: Some(seed),
                ignore_eos: true,
                ..SamplingParams::greedy(3)
            };
            (prompt.clone(), params)
        })
        .collect();
    let spec = SpeculativeConfig::ngram(1, 1, 1);
    let config = |spec| SchedulerConfig {
        max_num_batched_tokens: 1024,
        max_num_seqs: 64,
        max_model_len: 512,
        speculative_config: spec,
        ..SchedulerConfig::default()
    };
    let pool = CacheConfig {
        block_size: 16,
        num_gpu_blocks: 256,
        enable_prefix_caching: true,
        kv_cache_dtype: KvCacheDtype::F32,
        ..CacheConfig::default()
    };
    let mut exec = WgpuExecutor::new(ctx(), &files, &pool, &config(Some(spec.clone())), false).unwrap();
    let (plain, _) = run(&mut exec, config(None), pool.clone(), &requests);
    let (speculated, stats) = run(&mut exec, config(Some(spec)), pool, &requests);
    assert!(stats.spec_decoding.num_drafts >= seeds / 2, "{:?}", stats.spec_decoding);
    let second = |outputs: &[Vec<u32>]| outputs.iter().map(|tokens| tokens[1]).collect::<Vec<u32>>();
    let (statistic, quantile) = chi_square(&second(&speculated), &second(&plain));
    eprintln!("speculated vs plain: chi-square {statistic:.1}, 0.999 quantile {quantile:.1}");
    assert!(statistic < quantile, "speculation skews the distribution: {statistic} >= {quantile}");
    // The mutation: every proposal accepted at that position.
    let proposer = NgramProposer { k: 1, min_n: 1, max_n: 1 };
    let accept_all: Vec<u32> = plain
        .iter()
        .map(|tokens| {
            let proposal = proposer.propose(&mut NgramIndex::default(), &prompt, &tokens[..1], 1);
            proposal.first().copied().unwrap_or(tokens[1])
        })
        .collect();
    let (statistic, quantile) = chi_square(&accept_all, &second(&plain));
    eprintln!("accept-all vs plain: chi-square {statistic:.1}, 0.999 quantile {quantile:.1}");
    assert!(statistic >= quantile, "the test cannot tell a skewed verifier: {statistic} < {quantile}");
}

//! The Llama forward pass on the GPU (lavapipe in CI) with the tiny random model: against a
//! plain-Rust CPU reference, safetensors against GGUF, and the executor's greedy tokens
//! unchanged by batching and chunking.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use pagoda::core::cache_config::{CacheConfig, KvCacheDtype};
use pagoda::core::output::{CachedRequestData, NewRequestData, SchedulerOutput};
use pagoda::core::scheduler_config::SchedulerConfig;
use pagoda::dtype::DType;
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::executor::gpu_runner::WgpuExecutor;
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::gpu::{Fusion, GemmRows, GpuContext, GpuError, GpuOptions, LinearStrategy, SubmitStrategy};
use pagoda::model::llama::{LlamaError, LlamaModel};
use pagoda::model::testing::{TinyDims, TinyLlama, prefill_logits};
use pagoda::model::{ModelFiles, RopeVariant};
use pagoda::sampling::SamplingParams;

const BLOCK: usize = 4;

fn ctx() -> GpuContext {
    ctx_with(GpuOptions::default())
}

fn ctx_with(options: GpuOptions) -> GpuContext {
    GpuContext::new(&gpu_options_from_env(&options).unwrap()).expect("a wgpu adapter (lavapipe in CI)")
}

/// Plain f64 Llama over the dequantized weights of `files`; logits of every position.
fn cpu_logits(files: &ModelFiles, tokens: &[u32]) -> Vec<Vec<f64>> {
    let c = &files.config;
    let w = files.llama_weights().unwrap();
    let f = |t: &pagoda::model::TensorView<'_>| t.to_f32().into_iter().map(f64::from).collect::<Vec<f64>>();
    let matvec = |m: &[f64], x: &[f64]| -> Vec<f64> {
        m.chunks(x.len()).map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum()).collect()
    };
    let norm = |x: &[f64], g: &[f64]| -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let s = 1.0 / (ms + f64::from(c.rms_norm_eps)).sqrt();
        x.iter().zip(g).map(|(v, g)| v * s * g).collect()
    };
    let hd = c.head_dim;
    let rope = |x: &mut [f64], pos: usize| {
        for head in x.chunks_mut(hd) {
            for i in 0..hd / 2 {
                let theta = pos as f64 * f64::from(c.rope_theta).powf(-2.0 * i as f64 / hd as f64);
                let (a, b) = match c.rope_variant {
                    RopeVariant::Interleaved => (2 * i, 2 * i + 1),
                    RopeVariant::HalfSplit => (i, i + hd / 2),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * theta.cos() - x1 * theta.sin();
                head[b] = x0 * theta.sin() + x1 * theta.cos();
            }
        }
    };
    let embed = f(&w.embed_tokens);
    let mut xs: Vec<Vec<f64>> =
        tokens.iter().map(|&t| embed[t as usize * c.hidden_size..][..c.hidden_size].to_vec()).collect();
    for l in &w.layers {
        let (wq, wk, wv, wo) = (f(&l.q_proj), f(&l.k_proj), f(&l.v_proj), f(&l.o_proj));
        let (g1, g2) = (f(&l.attn_norm), f(&l.ffn_norm));
        let mlp = l.dense_mlp().unwrap();
        let (wg, wu, wd) = (f(&mlp.gate_proj), f(&mlp.up_proj), f(&mlp.down_proj));
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (pos, x) in xs.iter_mut().enumerate() {
            let h = norm(x, &g1);
            let mut q = matvec(&wq, &h);
            let mut k = matvec(&wk, &h);
            let mut v = matvec(&wv, &h);
            if let Some([bq, bk, bv]) = &l.qkv_bias {
                for (out, b) in [(&mut q, bq), (&mut k, bk), (&mut v, bv)] {
                    out.iter_mut().zip(f(b)).for_each(|(o, b)| *o += b);
                }
            }
            rope(&mut q, pos);
            rope(&mut k, pos);
            ks.push(k);
            vs.push(v);
            let mut att = vec![0.0; c.q_size()];
            for head in 0..c.num_attention_heads {
                let kvh = head / c.gqa_group_size();
                let qh = &q[head * hd..][..hd];
                let scores: Vec<f64> = ks
                    .iter()
                    .map(|k| {
                        qh.iter().zip(&k[kvh * hd..][..hd]).map(|(a, b)| a * b).sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = e.iter().sum();
                for (p, v) in e.iter().zip(&vs) {
                    for d in 0..hd {
                        att[head * hd + d] += p / total * v[kvh * hd + d];
                    }
                }
            }
            x.iter_mut().zip(matvec(&wo, &att)).for_each(|(a, b)| *a += b);
            let h = norm(x, &g2);
            let act: Vec<f64> = matvec(&wg, &h)
                .iter()
                .zip(matvec(&wu, &h))
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            x.iter_mut().zip(matvec(&wd, &act)).for_each(|(a, b)| *a += b);
        }
    }
    let (gn, head) = (f(&w.norm), f(&w.lm_head));
    xs.iter().map(|x| matvec(&head, &norm(x, &gn))).collect()
}

/// GPU logits of every position of one sequence run as a single prefill.
fn gpu_logits(ctx: &GpuContext, files: &ModelFiles, tokens: &[u32]) -> Vec<Vec<f32>> {
    let model = LlamaModel::load(ctx, files, false).unwrap();
    let out = prefill_logits(ctx, &model, tokens, BLOCK, 3).unwrap();
    let logits = out.logits.unwrap();
    let v = model.config().vocab_size;
    for r in 0..tokens.len() {
        let row = &logits[r * v..(r + 1) * v];
        let best = row.iter().enumerate().fold(0, |b, (i, &l)| if l > row[b] { i } else { b });
        assert_eq!(out.top_ids[r * 3], best as u32, "GPU argmax of row {r}");
        assert_eq!(out.top_values[r * 3], row[best]);
    }
    logits.chunks(v).map(<[f32]>::to_vec).collect()
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f64>]) -> f64 {
    a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (f64::from(*x) - y).abs()).fold(0.0, f64::max)
}

const PROMPT: [u32; 11] = [1, 40, 70, 260, 3, 200, 268, 99, 12, 140, 7];

#[test]
fn tiny_forward_matches_the_cpu_reference_for_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = TinyLlama::new(21);
    tiny.write_hf_dir(&dir.path().join("hf")).unwrap();
    let ctx = ctx();
    let hf = ModelFiles::open(dir.path().join("hf")).unwrap();
    let reference = cpu_logits(&hf, &PROMPT);
    let hf_logits = gpu_logits(&ctx, &hf, &PROMPT);
    assert!(max_diff(&hf_logits, &reference) < 1e-4, "safetensors: {}", max_diff(&hf_logits, &reference));
    for dtype in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::MXFP4] {
        let path = dir.path().join(format!("tiny-{}.gguf", dtype.name()));
        tiny.write_gguf(&path, dtype).unwrap();
        let gguf = ModelFiles::open(&path).unwrap();
        let logits = gpu_logits(&ctx, &gguf, &PROMPT);
        let err = max_diff(&logits, &cpu_logits(&gguf, &PROMPT));
        assert!(err < 1e-4, "{dtype:?} GGUF vs its CPU reference: {err}");
        if dtype == DType::F32 {
            let err = max_diff(&logits, &reference);
            assert!(err < 1e-4, "F32 GGUF vs safetensors: {err}");
        }
    }
}

#[test]
fn qkv_biases_are_applied_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let dims = TinyDims { attention_bias: true, ..Default::default() };
    let tiny = TinyLlama::with_dims(9, dims);
    tiny.write_hf_dir(dir.path()).unwrap();
    tiny.write_gguf(&dir.path().join("bias.gguf"), DType::F32).unwrap();
    let ctx = ctx();
    let hf = ModelFiles::open(dir.path()).unwrap();
    let gguf = ModelFiles::open(dir.path().join("bias.gguf")).unwrap();
    assert!(hf.config.attention_bias && gguf.config.attention_bias);
    let reference = cpu_logits(&hf, &PROMPT);
    let unbiased = cpu_logits(
        &ModelFiles {
            config: pagoda::model::ModelConfig { attention_bias: false, ..hf.config.clone() },
            ..ModelFiles::open(dir.path()).unwrap()
        },
        &PROMPT,
    );
    assert!(max_diff(&gpu_logits(&ctx, &hf, &PROMPT), &unbiased) > 1e-2, "the biases change the logits");
    for files in [&hf, &gguf] {
        let err = max_diff(&gpu_logits(&ctx, files, &PROMPT), &reference);
        assert!(err < 1e-4, "{}: {err}", files.path.display());
    }
}

/// A half-split model (safetensors) loads with its Q/K rows (and biases) interleaved as
/// llama.cpp's converter stores them, so RoPE and the cache write run in the Q/K/V projection's
/// epilogue as for a GGUF Llama: the same dispatches as its F32 GGUF, one a layer fewer than
/// with RoPE forced apart (where the fused kernel's up to 10 storage buffers fit), with Q/K/V
/// biases or without, and the same logits bit for bit. (The test's GGUF writer reorders with
/// the loader's function; `tiny_forward_matches_the_cpu_reference_for_every_format` checks
/// both against a CPU reference that rotates half-split pairs itself.)
#[test]
fn half_split_models_load_interleaved_and_run_as_their_gguf_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let fused = ctx();
    let apart = ctx_with(GpuOptions { rope_strategy: Some(Fusion::Separate), ..GpuOptions::default() });
    let run = |ctx: &GpuContext, files: &ModelFiles| {
        let before = ctx.counters();
        let logits = gpu_logits(ctx, files, &PROMPT);
        (logits, ctx.counters().since(&before).dispatches)
    };
    let caps = fused.capabilities();
    let fuses = caps.fuses_rope() && caps.limits.max_storage_buffers_per_shader_stage >= 10;
    for attention_bias in [false, true] {
        let tiny = TinyLlama::with_dims(5, TinyDims { attention_bias, ..Default::default() });
        let (hf_dir, gguf) = (dir.path().join(format!("hf-{attention_bias}")), dir.path().join("tiny.gguf"));
        tiny.write_hf_dir(&hf_dir).unwrap();
        tiny.write_gguf(&gguf, DType::F32).unwrap();
        let [hf, gguf] = [hf_dir, gguf].map(|path| ModelFiles::open(path).unwrap());
        assert_eq!(hf.config.rope_variant, RopeVariant::HalfSplit);
        let ((hf_logits, hf_dispatches), (gguf_logits, gguf_dispatches)) =
            (run(&fused, &hf), run(&fused, &gguf));
        let (hf_logits, gguf_logits) = (hf_logits.iter().flatten(), gguf_logits.iter().flatten());
        let differing = hf_logits.zip(gguf_logits).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differing, 0, "biases {attention_bias}: safetensors vs GGUF logits");
        assert_eq!(hf_dispatches, gguf_dispatches, "biases {attention_bias}");
        if fuses {
            let layers = hf.config.num_hidden_layers as u64;
            assert_eq!(hf_dispatches + layers, run(&apart, &hf).1, "biases {attention_bias}: RoPE fused");
        }
    }
}

/// Drives a `WgpuExecutor` with hand-built scheduler outputs: every request admitted at
/// once, prefills cut into chunks of `chunk` tokens, blocks handed out in order. With
/// `preempt_after`, each request is preempted once when it has generated that many tokens:
/// it sits out one step, then re-prefills prompt and output into fresh blocks.
fn run_greedy(
    exec: &mut WgpuExecutor,
    prompts: &[Vec<u32>],
    max_tokens: usize,
    chunk: usize,
    preempt_after: Option<usize>,
) -> Vec<Vec<u32>> {
    struct Req {
        tokens: Vec<u32>,
        prompt_len: usize,
        computed: usize,
        blocks: Vec<u32>,
        seen: bool,
        resumed: bool,
        preempted: bool,
        done: bool,
    }
    let mut reqs: Vec<Req> = prompts
        .iter()
        .map(|p| Req {
            tokens: p.clone(),
            prompt_len: p.len(),
            computed: 0,
            blocks: vec![],
            seen: false,
            resumed: false,
            preempted: false,
            done: false,
        })
        .collect();
    let mut next_block = 1u32;
    let mut finished = HashSet::new();
    while reqs.iter().any(|r| !r.done) {
        let mut out =
            SchedulerOutput { finished_req_ids: std::mem::take(&mut finished), ..Default::default() };
        for (id, r) in reqs.iter_mut().enumerate().filter(|(_, r)| !r.done) {
            let id = id as u64;
            let generated = r.tokens.len() - r.prompt_len;
            if preempt_after == Some(generated) && !r.preempted && r.computed == r.tokens.len() - 1 {
                r.preempted = true;
                r.resumed = true;
                r.computed = 0;
                r.blocks.clear();
                out.preempted_req_ids.insert(id);
                continue;
            }
            let n = (r.tokens.len() - r.computed).min(chunk);
            let need = (r.computed + n).div_ceil(BLOCK);
            let new_blocks: Vec<u32> =
                (r.blocks.len()..need).map(|_| (next_block, next_block += 1).0).collect();
            r.blocks.extend(&new_blocks);
            out.num_scheduled_tokens.insert(id, n);
            out.total_num_scheduled_tokens += n;
            if r.seen {
                out.scheduled_cached_reqs.push(CachedRequestData {
                    req_id: id,
                    num_freed_blocks: 0,
                    resumed_from_preemption: r.resumed,
                    new_token_ids: r.tokens[r.computed..r.computed + n].to_vec(),
                    new_block_ids: if r.resumed { r.blocks.clone() } else { new_blocks },
                    num_computed_tokens: r.computed,
                });
                r.resumed = false;
            } else {
                r.seen = true;
                out.scheduled_new_reqs.push(NewRequestData {
                    req_id: id,
                    prompt_token_ids: r.tokens.clone(),
                    sampling_params: SamplingParams::greedy(max_tokens),
                    block_ids: r.blocks.clone(),
                    num_computed_tokens: 0,
                    lora_id: None,
                });
            }
        }
        let result = exec.execute(&out, &mut StepMasks::none()).unwrap();
        let sampled: HashMap<u64, Vec<u32>> = result.sampled_token_ids;
        for (id, r) in reqs.iter_mut().enumerate().filter(|(_, r)| !r.done) {
            r.computed += out.num_scheduled_tokens.get(&(id as u64)).copied().unwrap_or(0);
            if let Some(t) = sampled.get(&(id as u64)) {
                assert_eq!(r.computed, r.tokens.len(), "sampled before the prefill ended");
                r.tokens.extend(t);
                if r.tokens.len() - r.prompt_len == max_tokens {
                    r.done = true;
                    finished.insert(id as u64);
                }
            }
        }
    }
    reqs.into_iter().map(|r| r.tokens[r.prompt_len..].to_vec()).collect()
}

fn tiny_executor(dir: &Path, num_blocks: usize) -> WgpuExecutor {
    tiny_executor_on(ctx(), dir, num_blocks)
}

fn tiny_executor_on(ctx: GpuContext, dir: &Path, num_blocks: usize) -> WgpuExecutor {
    tiny_executor_of(&TinyLlama::new(33), ctx, dir, num_blocks)
}

/// An executor on `tiny`, written to `dir` in Q8_0, with a cache of `num_blocks` blocks.
fn tiny_executor_of(tiny: &TinyLlama, ctx: GpuContext, dir: &Path, num_blocks: usize) -> WgpuExecutor {
    tiny.write_gguf(&dir.join("tiny.gguf"), DType::Q8_0).unwrap();
    let files = ModelFiles::open(dir.join("tiny.gguf")).unwrap();
    let cache = CacheConfig {
        block_size: BLOCK,
        num_gpu_blocks: num_blocks,
        kv_cache_dtype: KvCacheDtype::F32,
        ..Default::default()
    };
    let sched = SchedulerConfig {
        max_num_batched_tokens: 64,
        max_num_seqs: 4,
        max_model_len: 64,
        ..Default::default()
    };
    WgpuExecutor::new(ctx, &files, &cache, &sched, false).unwrap()
}

#[test]
fn greedy_tokens_do_not_depend_on_batching_or_chunking() {
    let dir = tempfile::tempdir().unwrap();
    let prompts: Vec<Vec<u32>> = vec![
        PROMPT.to_vec(),
        vec![5, 6, 7],
        vec![100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113],
    ];
    let mut exec = tiny_executor(dir.path(), 64);
    let together = run_greedy(&mut exec, &prompts, 6, 64, None);
    let chunked = run_greedy(&mut exec, &prompts, 6, 3, None);
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| run_greedy(&mut exec, std::slice::from_ref(p), 6, 5, None).remove(0))
        .collect();
    assert_eq!(together, alone);
    assert_eq!(chunked, alone);
    assert_eq!(run_greedy(&mut exec, &prompts, 6, 64, Some(2)), alone, "preempted and re-prefilled at once");
    assert_eq!(run_greedy(&mut exec, &prompts, 6, 4, Some(3)), alone, "preempted and re-prefilled in chunks");
    assert!(alone.iter().all(|t| t.len() == 6));
}

#[test]
fn kv_pool_of_one_block_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = TinyLlama::new(1);
    tiny.write_gguf(&dir.path().join("t.gguf"), DType::F32).unwrap();
    let files = ModelFiles::open(dir.path().join("t.gguf")).unwrap();
    let cache = CacheConfig { num_gpu_blocks: 1, ..Default::default() };
    let err = WgpuExecutor::new(ctx(), &files, &cache, &SchedulerConfig::default(), false).unwrap_err();
    assert!(err.to_string().contains("--num-gpu-blocks"), "{err}");
}

#[test]
fn executor_can_move_to_the_engine_thread() {
    fn is_send<T: Send>() {}
    is_send::<WgpuExecutor>();
}

/// Every step of the tiny model (Q8_0: Q/K/V and gate/up share a type) is the embedding, 8
/// dispatches per layer (norm, Q/K/V, RoPE + cache, attention, o_proj + residual, norm,
/// gate/up + SiLU, down + residual) and 4 for the head (gather, norm, LM head, top-k); 7 a
/// layer with RoPE + cache in the Q/K/V projection's epilogue; 5 and 3 with the norms fused
/// into the linears they feed as well; the same tokens each way; and once every shape has been
/// seen, a step creates no buffer and no bind group.
#[test]
fn steady_state_steps_create_no_buffers_or_bind_groups() {
    let prompts: Vec<Vec<u32>> = vec![PROMPT.to_vec(), vec![5, 6, 7], (100..114).collect()];
    let mut tokens = Vec::new();
    for (norms, rope, per_layer, head) in [
        (Fusion::Separate, Fusion::Separate, 8, 4),
        (Fusion::Separate, Fusion::Fused, 7, 4),
        (Fusion::Fused, Fusion::Fused, 5, 3),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let options =
            GpuOptions { norm_strategy: Some(norms), rope_strategy: Some(rope), ..GpuOptions::default() };
        let ctx = ctx_with(options);
        let mut exec = tiny_executor_on(ctx, dir.path(), 64);
        let first = run_greedy(&mut exec, &prompts, 6, 4, None);
        let before = exec.context().counters();
        let again = run_greedy(&mut exec, &prompts, 6, 4, None);
        let steady = exec.context().counters().since(&before);
        assert_eq!(again, first);
        assert!(steady.steps >= 8, "{steady:?}");
        let what = format!("{norms:?} norms, {rope:?} rope: {steady:?}");
        assert_eq!((steady.buffers_created, steady.bind_groups_created), (0, 0), "{what}");
        let layers = exec.model().config().num_hidden_layers as u64;
        assert_eq!(steady.dispatches, steady.steps * (1 + per_layer * layers + head), "{what}");
        tokens.push(first);
    }
    assert_eq!(tokens[0], tokens[1], "the fused RoPE changes the greedy tokens");
    assert_eq!(tokens[0], tokens[2], "fused norms change the greedy tokens");
}

/// A step submitted in chunks as it is recorded (GPUs' default: 8, 16, 32, then 64 dispatches
/// a command buffer) computes what one command buffer does. An 8-layer model (57 or 61
/// dispatches a step: four command buffers) gives the same prefill logits bit for bit and the same greedy
/// tokens through chunked prefills, batched decodes and preemption, with the same dispatches;
/// once every shape has been seen its steps create no buffer and no bind group. An invalid
/// command buffer, first or later, fails its step and the next step computes as before; a
/// step's input written after its first dispatch is an error, not a silently late copy.
#[test]
fn chunked_submission_computes_what_one_command_buffer_does() {
    let tiny = TinyLlama::with_dims(21, TinyDims { num_hidden_layers: 8, ..Default::default() });
    let prompts: Vec<Vec<u32>> = vec![PROMPT.to_vec(), vec![5, 6, 7], (100..114).collect()];
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for submit in [SubmitStrategy::Whole, SubmitStrategy::Chunked] {
        let ctx = ctx_with(GpuOptions {
            submit_strategy: Some(submit),
            norm_strategy: Some(Fusion::Separate),
            rope_strategy: Some(Fusion::Fused),
            ..GpuOptions::default()
        });
        let mut exec = tiny_executor_of(&tiny, ctx, dir.path(), 64);
        let files = ModelFiles::open(dir.path().join("tiny.gguf")).unwrap();
        let logits: Vec<u32> =
            gpu_logits(exec.context(), &files, &PROMPT).iter().flatten().map(|l| l.to_bits()).collect();
        let tokens = run_greedy(&mut exec, &prompts, 6, 4, Some(3));
        let before = exec.context().counters();
        assert_eq!(run_greedy(&mut exec, &prompts, 6, 4, Some(3)), tokens, "{submit:?}");
        let steady = exec.context().counters().since(&before);
        assert_eq!((steady.buffers_created, steady.bind_groups_created), (0, 0), "{submit:?}: {steady:?}");
        runs.push((logits, tokens, steady.dispatches, steady.steps, steady.command_buffers));
    }
    let (whole, chunked) = (&runs[0], &runs[1]);
    assert!(whole.0 == chunked.0, "chunked submission changes the logits");
    assert_eq!(whole.1, chunked.1, "chunked submission changes the greedy tokens");
    assert_eq!((whole.2, whole.3), (chunked.2, chunked.3), "dispatches and steps");
    // 61 dispatches a step that samples, 57 without the head: 8 + 16 + 32 and the rest.
    assert!((57 * whole.3..=61 * whole.3).contains(&whole.2), "{} dispatches in {} steps", whole.2, whole.3);
    assert_eq!(whole.4, whole.3, "one command buffer a step");
    assert_eq!(chunked.4, 4 * chunked.3, "four command buffers a step");

    let ctx = ctx_with(GpuOptions {
        submit_strategy: Some(SubmitStrategy::Chunked),
        norm_strategy: Some(Fusion::Separate),
        rope_strategy: Some(Fusion::Fused),
        ..GpuOptions::default()
    });
    let files = ModelFiles::open(dir.path().join("tiny.gguf")).unwrap();
    let model = LlamaModel::load(&ctx, &files, false).unwrap();
    ctx.fail_next_submit();
    let failed = prefill_logits(&ctx, &model, &PROMPT, BLOCK, 3);
    assert!(
        matches!(failed, Err(LlamaError::Gpu(GpuError::Device(_)))),
        "an invalid first command buffer: {failed:?}"
    );
    let logits = prefill_logits(&ctx, &model, &PROMPT, BLOCK, 3).unwrap().logits.unwrap();
    assert!(logits.iter().map(|l| l.to_bits()).eq(whole.0.iter().copied()), "the step after a failed one");
    let t = ctx.upload_u32(&[4], &[0; 4]).unwrap();
    let mut step = ctx.step();
    step.write_u32(&t, &[1, 2, 3, 4]).unwrap();
    step.scale(&ctx.upload_f32(&[4], &[1.0; 4]).unwrap(), 2.0).unwrap();
    assert!(matches!(step.write_u32(&t, &[5, 6, 7, 8]), Err(GpuError::Order(_))));

    // A step of one whole chunk: its last command buffer holds only the readback.
    let x = ctx.upload_f32(&[4], &[1.0; 4]).unwrap();
    let read = |scales: usize, factor: f32| {
        let mut step = ctx.step();
        (0..scales).for_each(|_| step.scale(&x, factor).unwrap());
        let id = step.read(&x);
        step.submit().unwrap().f32s(id)
    };
    assert_eq!(read(8, 2.0), [256.0; 4]);
    // A command buffer failing after the first fails the dispatch that filled it and every later
    // call of its step; what the first command buffer did stays done, and the next step works.
    let mut step = ctx.step();
    (0..8).for_each(|_| step.scale(&x, 0.5).unwrap());
    ctx.fail_next_submit();
    let second: Vec<_> = (0..16).map(|_| step.scale(&x, 2.0)).collect();
    assert!(second[..15].iter().all(Result::is_ok), "{second:?}");
    assert!(matches!(second[15], Err(GpuError::Device(_))), "{:?}", second[15]);
    assert!(matches!(step.submit(), Err(GpuError::Order(_))));
    assert_eq!(
        read(0, 1.0),
        [1.0; 4],
        "the first command buffer's halvings and none of the second's doublings"
    );
}

/// The executor's warm-up builds every pipeline a step takes, on the sequential path and on
/// the K-split path with every GEMM tile: prefills of 3 to 50 tokens at once or in chunks
/// and batched decodes build nothing more, so no request's first token waits on a shader
/// compile.
#[test]
fn the_warm_up_builds_every_pipeline_a_step_uses() {
    let prompts: Vec<Vec<u32>> = vec![PROMPT.to_vec(), vec![5, 6, 7], (100..150).collect()];
    let ksplit = GpuOptions {
        linear_strategy: Some(LinearStrategy::KSplit),
        gemm_rows: Some(GemmRows::new(32).unwrap()),
        ..GpuOptions::default()
    };
    for options in [GpuOptions::default(), ksplit] {
        let dir = tempfile::tempdir().unwrap();
        let mut exec = tiny_executor_on(ctx_with(options.clone()), dir.path(), 64);
        let warmed = exec.context().counters();
        assert!(warmed.pipelines_created > 0);
        run_greedy(&mut exec, &prompts, 4, 64, None);
        run_greedy(&mut exec, &prompts, 4, 7, None);
        let later = exec.context().counters().since(&warmed);
        assert_eq!(later.pipelines_created, 0, "{options:?}: {later:?}");
    }
}

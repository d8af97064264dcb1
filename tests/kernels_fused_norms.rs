//! Flash attention with the Q/K norms and RoPE of its token (`Step::flash_rope_attention`,
//! `shaders/flash_qk_rope.wgsl`: the decode step of Qwen3 and Gemma 3 on GPUs) against the two
//! dispatches it replaces, the rope_cache kernel then flash attention: the same bits in its
//! outputs and in the keys and values it writes (read back by a second decode step), f32 and
//! f16 caches, half-split and interleaved RoPE, one and several workgroups a KV head. Gemma's
//! sandwich norms in one dispatch (`Step::rms_norm_sandwich`) against `rms_norm_add` then
//! `rms_norm`, and in the next linear's prologue (`LinearInput::Sandwich`) against
//! `rms_norm_add` then the linear with the norm fused. And the tiny Qwen3, Gemma 2 and Gemma 3
//! models on flash attention: a token decoded after its prompt's prefill has the logits' bits of
//! the same token prefilled with the prompt.

mod kernels_support;

use std::path::PathBuf;

use kernels_support::{Rng, bits};

use pagoda::dtype::{DType, quantize};
use pagoda::gpu::*;
use pagoda::model::ModelFiles;
use pagoda::model::llama::{ForwardBatch, LlamaModel, Workspace, WorkspaceLimits};
use pagoda::model::testing::prefill_logits;

/// Lavapipe's flash attention (forced: it is no CPU adapter's default).
fn ctx() -> &'static GpuContext {
    static CTX: std::sync::OnceLock<GpuContext> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        let options =
            GpuOptions { attention_strategy: Some(AttentionStrategy::Flash), ..GpuOptions::default() };
        GpuContext::new(&options).expect("a wgpu adapter (lavapipe in CI)")
    })
}

#[derive(Clone, Copy, Debug)]
struct Case {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    kv: KvPrecision,
    mode: RopeMode,
}

const BLOCK: usize = 4;
/// Each sequence's prefix before the two decode steps (one past a block's end, one mid-block).
const PREFIX: [usize; 3] = [9, 4, 1];

/// How the decode steps turn their token's heads.
#[derive(Clone, Copy, PartialEq)]
enum Decode {
    /// rope_cache then flash attention.
    Apart,
    /// flash_rope_attention.
    Fused,
}

/// Prefills the sequences of `PREFIX` (rope_cache, flash attention), then decodes two tokens of
/// each as `decode` says; returns the two decode steps' outputs.
fn run(case: Case, decode: Decode) -> Vec<Vec<f32>> {
    let c = ctx();
    let (h, kvh, hd) = (case.heads, case.kv_heads, case.head_dim);
    let width = (h + 2 * kvh) * hd;
    let max_blocks = (PREFIX[0] + 2).div_ceil(BLOCK);
    let seqs = PREFIX.len();
    let shape = KvCacheShape {
        num_layers: 1,
        num_blocks: 1 + seqs * max_blocks,
        block_size: BLOCK,
        num_kv_heads: kvh,
        head_dim: hd,
    };
    let cache = c.kv_cache(shape, case.kv).unwrap();
    // Sequence s's blocks interleaved with the others'.
    let table: Vec<u32> =
        (0..seqs).flat_map(|s| (0..max_blocks).map(move |b| (1 + b * seqs + s) as u32)).collect();
    let slot = |s: usize, p: usize| table[s * max_blocks + p / BLOCK] * BLOCK as u32 + (p % BLOCK) as u32;
    let mut rng = Rng::new(hd as u64 + h as u64);
    // Norm weights around 1, as trained ones are.
    let norm: Vec<f32> = rng.vec(2 * hd).iter().map(|x| 1.0 + 0.5 * x).collect();
    let norm = c.upload_f32(&[2, hd], &norm).unwrap();
    let inv_freq = c.upload_f32(&[hd / 2], &rope_inv_freq(hd, 10_000.0, None)).unwrap();
    let spec = AttentionSpec::causal(h, hd);
    let mut outs = Vec::new();
    // Step 0 prefills every prefix; steps 1 and 2 decode one token a sequence.
    for step_no in 0..3 {
        let ranges: Vec<(usize, usize)> =
            (0..seqs)
                .map(|s| {
                    if step_no == 0 { (0, PREFIX[s]) } else { (PREFIX[s] + step_no - 1, PREFIX[s] + step_no) }
                })
                .collect();
        let (mut positions, mut slots, mut qsl, mut lens) = (Vec::new(), Vec::new(), vec![0u32], Vec::new());
        for (s, &(a, b)) in ranges.iter().enumerate() {
            positions.extend((a..b).map(|p| p as u32));
            slots.extend((a..b).map(|p| slot(s, p)));
            qsl.push(qsl.last().unwrap() + (b - a) as u32);
            lens.push(b as u32);
        }
        let t = positions.len();
        // Projected rows of a scale that makes the norms matter.
        let rows: Vec<f32> = rng.vec(t * width).iter().map(|x| 3.0 * x).collect();
        let qkv = c.upload_f32(&[t, width], &rows).unwrap();
        let positions = c.upload_u32(&[t], &positions).unwrap();
        let slot_mapping = c.upload_u32(&[t], &slots).unwrap();
        let batch = AttentionBatch {
            query_start_loc: c.upload_u32(&[seqs + 1], &qsl).unwrap(),
            seq_lens: c.upload_u32(&[seqs], &lens).unwrap(),
            block_table: c.upload_u32(&[seqs, max_blocks], &table).unwrap(),
        };
        let rope = RopeCacheArgs {
            positions: &positions,
            inv_freq: &inv_freq,
            qk_norm: Some((&norm, 1e-6)),
            slot_mapping: &slot_mapping,
            cache: &cache,
            layer: 0,
            heads: h,
            mode: case.mode,
        };
        let out = c.tensor(Elem::F32, &[t, h * hd]).unwrap();
        let mut step = c.step();
        if step_no > 0 && decode == Decode::Fused {
            assert!(step.fuses_rope_attention(&rope, &batch, &spec, t), "{case:?}");
            step.flash_rope_attention(&qkv, &rope, &batch, &spec, &out).unwrap();
        } else {
            if step_no == 0 {
                assert!(!step.fuses_rope_attention(&rope, &batch, &spec, t), "{case:?}: a prefill");
            }
            step.rope_cache(&qkv, &rope).unwrap();
            step.flash_attention(&qkv, &cache, 0, &batch, &spec, None, &out).unwrap();
        }
        let id = step.read(&out);
        let o = step.submit().unwrap().f32s(id);
        if step_no > 0 {
            outs.push(o);
        }
    }
    outs
}

/// GQA 4 with one workgroup a KV head (64-dimension heads: groups of 4) and two (256: groups of
/// 2, both writing the KV head's key), no GQA, both RoPE modes, f32 and f16 caches.
#[test]
fn flash_attention_with_rope_has_the_bits_of_rope_cache_then_flash_attention() {
    let half = RopeMode::HalfSplit;
    let cases = [
        Case { heads: 8, kv_heads: 2, head_dim: 64, kv: KvPrecision::F32, mode: half },
        Case { heads: 8, kv_heads: 2, head_dim: 256, kv: KvPrecision::F16, mode: half },
        Case { heads: 2, kv_heads: 2, head_dim: 128, kv: KvPrecision::F32, mode: RopeMode::Interleaved },
        Case { heads: 6, kv_heads: 2, head_dim: 128, kv: KvPrecision::Auto, mode: half },
    ];
    for case in cases {
        let apart = run(case, Decode::Apart);
        let fused = run(case, Decode::Fused);
        for (step, (a, f)) in apart.iter().zip(&fused).enumerate() {
            assert!(a.iter().all(|x| x.is_finite()) && a.iter().any(|&x| x != 0.0), "{case:?}");
            assert_eq!(bits(f), bits(a), "{case:?}: decode step {}", step + 1);
        }
    }
}

/// A step of several tokens of one sequence is refused: its keys are other workgroups'.
#[test]
fn flash_attention_with_rope_refuses_a_sequence_of_several_tokens() {
    let c = ctx();
    let (h, hd) = (2, 64);
    let shape =
        KvCacheShape { num_layers: 1, num_blocks: 2, block_size: BLOCK, num_kv_heads: 1, head_dim: hd };
    let cache = c.kv_cache(shape, KvPrecision::F32).unwrap();
    let qkv = c.tensor(Elem::F32, &[2, 4 * hd]).unwrap();
    let two = c.upload_u32(&[2], &[0, 1]).unwrap();
    let norm = c.upload_f32(&[2, hd], &vec![1.0; 2 * hd]).unwrap();
    let inv_freq = c.upload_f32(&[hd / 2], &vec![0.0; hd / 2]).unwrap();
    let batch = AttentionBatch {
        query_start_loc: c.upload_u32(&[2], &[0, 2]).unwrap(),
        seq_lens: c.upload_u32(&[1], &[2]).unwrap(),
        block_table: c.upload_u32(&[1, 1], &[1]).unwrap(),
    };
    let rope = RopeCacheArgs {
        positions: &two,
        inv_freq: &inv_freq,
        qk_norm: Some((&norm, 1e-6)),
        slot_mapping: &two,
        cache: &cache,
        layer: 0,
        heads: h,
        mode: RopeMode::HalfSplit,
    };
    let spec = AttentionSpec::causal(h, hd);
    let out = c.tensor(Elem::F32, &[2, h * hd]).unwrap();
    let mut step = c.step();
    assert!(!step.fuses_rope_attention(&rope, &batch, &spec, 2));
    let err = step.flash_rope_attention(&qkv, &rope, &batch, &spec, &out).unwrap_err();
    assert!(matches!(err, GpuError::Shape(_)), "{err}");
}

/// One dispatch of the sandwich has the bits of its two: rows of widths that fill the
/// workgroup's lanes and that do not, a residual far larger than the normed output.
#[test]
fn the_sandwich_norms_in_one_dispatch_have_the_bits_of_two() {
    let c = ctx();
    for (rows, d) in [(1, 576), (5, 100), (3, 2304)] {
        let mut rng = Rng::new(d as u64);
        let o: Vec<f32> = rng.vec(rows * d).iter().map(|v| 40.0 * v).collect();
        let x: Vec<f32> = rng.vec(rows * d).iter().map(|v| 300.0 * v).collect();
        let post: Vec<f32> = rng.vec(d).iter().map(|v| 1.0 + v).collect();
        let pre: Vec<f32> = rng.vec(d).iter().map(|v| 1.0 + 0.5 * v).collect();
        let (post, pre) = (c.upload_f32(&[d], &post).unwrap(), c.upload_f32(&[d], &pre).unwrap());
        let o = c.upload_f32(&[rows, d], &o).unwrap();
        let run = |fused: bool| {
            let x = c.upload_f32(&[rows, d], &x).unwrap();
            let h = c.tensor(Elem::F32, &[rows, d]).unwrap();
            let mut step = c.step();
            if fused {
                step.rms_norm_sandwich(&o, &post, &x, &pre, 1e-6, &h).unwrap();
            } else {
                step.rms_norm_add(&o, &post, 1e-6, &x).unwrap();
                step.rms_norm(&x, &pre, 1e-6, &h).unwrap();
            }
            let (xi, hi) = (step.read(&x), step.read(&h));
            let mut out = step.submit().unwrap();
            (out.f32s(xi), out.f32s(hi))
        };
        let (apart, fused) = (run(false), run(true));
        assert!(apart.1.iter().all(|v| v.is_finite()) && apart.1.iter().any(|&v| v != 0.0));
        assert_eq!(bits(&fused.0), bits(&apart.0), "x, {rows} rows of {d}");
        assert_eq!(bits(&fused.1), bits(&apart.1), "h, {rows} rows of {d}");
    }
}

/// A context whose linears take `strategy`'s kernels with the norms fused into every tile.
fn fused_norm_ctx(strategy: LinearStrategy) -> GpuContext {
    let options = GpuOptions {
        linear_strategy: Some(strategy),
        norm_strategy: Some(Fusion::Fused),
        ..GpuOptions::default()
    };
    GpuContext::new(&options).expect("a wgpu adapter (lavapipe in CI)")
}

/// Rows `m` of the residual `x` and projection `o` through `w`, the sandwich before it as
/// today's two kernels (`fused` false: rms_norm_add, then the linear normed on the way in) or
/// in the linear's prologue (into a second residual buffer); returns (new residual, outputs).
#[allow(clippy::too_many_arguments)]
fn sandwich_linear(
    c: &GpuContext,
    w: &Weight,
    x: &[f32],
    o: &[f32],
    post: &Tensor,
    pre: &Tensor,
    m: usize,
    fused: bool,
) -> (Vec<f32>, Vec<f32>) {
    let k = w.cols();
    let x = c.upload_f32(&[m, k], &x[..m * k]).unwrap();
    let o = c.upload_f32(&[m, k], &o[..m * k]).unwrap();
    let x_out = c.tensor(Elem::F32, &[m, k]).unwrap();
    let y = c.tensor(Elem::F32, &[m, w.rows()]).unwrap();
    let mut step = c.step();
    let residual = if fused {
        let input = SandwichInput { x: &x, o: &o, post, pre, eps: 1e-6, x_out: &x_out };
        step.linear(LinearInput::Sandwich(input), w, &y).unwrap();
        &x_out
    } else {
        step.rms_norm_add(&o, post, 1e-6, &x).unwrap();
        step.linear(LinearInput::rms_normed(&x, pre, 1e-6), w, &y).unwrap();
        &x
    };
    let (xi, yi) = (step.read(residual), step.read(&y));
    let mut out = step.submit().unwrap();
    (out.f32s(xi), out.f32s(yi))
}

/// The sandwich in the linear's prologue (`LinearInput::Sandwich`: Gemma's decode step) has the
/// bits of rms_norm_add and then the linear with its input norm fused, in the new residual it
/// writes to the other buffer and in the outputs: on the K-split path (Q4_K through the GEMV of
/// 1, 4 and 8 rows, two workgroups of 8 with the second ragged, and the GEMM of 40 rows; f16 in
/// rows of words, 302 columns, with single weights past the lanes' runs), the sequential one
/// (its subgroups' norm on lavapipe) and the emulated cooperative one, each with 37 outputs:
/// several column tiles, of which only the first writes the residual.
#[test]
fn the_sandwich_in_the_linears_prologue_has_the_bits_of_the_add_then_the_normed_linear() {
    let n = 37;
    let ksplit = fused_norm_ctx(LinearStrategy::KSplit);
    let sequential = fused_norm_ctx(LinearStrategy::Sequential);
    let coop = fused_norm_ctx(LinearStrategy::CoopEmulated(CoopShape::F16_16));
    let cases: [(&GpuContext, DType, usize, &[usize]); 4] = [
        (&ksplit, DType::Q4K, 512, &[1, 3, 13, 40]),
        (&ksplit, DType::F16, 302, &[2]),
        (&sequential, DType::Q6K, 256, &[1, 5]),
        (&coop, DType::Q8_0, 256, &[5]),
    ];
    for (c, dtype, k, batches) in cases {
        let what = format!("{:?} {dtype:?} k {k}", c.capabilities().linear_path());
        let mut rng = Rng::new(k as u64);
        let w = c.upload_weight("w", dtype, n, k, &quantize(dtype, &rng.vec(n * k))).unwrap();
        let m_max = batches[batches.len() - 1];
        let x: Vec<f32> = rng.vec(m_max * k).iter().map(|v| 300.0 * v).collect();
        let o: Vec<f32> = rng.vec(m_max * k).iter().map(|v| 40.0 * v).collect();
        let post: Vec<f32> = rng.vec(k).iter().map(|v| 1.0 + v).collect();
        let pre: Vec<f32> = rng.vec(k).iter().map(|v| 1.0 + 0.5 * v).collect();
        let (post, pre) = (c.upload_f32(&[k], &post).unwrap(), c.upload_f32(&[k], &pre).unwrap());
        for &m in batches {
            let apart = sandwich_linear(c, &w, &x, &o, &post, &pre, m, false);
            let fused = sandwich_linear(c, &w, &x, &o, &post, &pre, m, true);
            assert!(apart.1.iter().all(|v| v.is_finite()) && apart.1.iter().any(|&v| v != 0.0));
            assert_eq!(bits(&fused.0), bits(&apart.0), "{what}: residual of {m} rows");
            assert_eq!(bits(&fused.1), bits(&apart.1), "{what}: outputs of {m} rows");
        }
    }
}

/// The sandwich's new residual must go to another buffer than the residual it reads: one that
/// shares it is refused, not raced on.
#[test]
fn the_sandwich_prologue_refuses_to_write_the_residual_it_reads() {
    let c = fused_norm_ctx(LinearStrategy::KSplit);
    let (m, k, n) = (1, 64, 4);
    let w = c.upload_weight("w", DType::F32, n, k, &quantize(DType::F32, &vec![0.5; n * k])).unwrap();
    let x = c.tensor(Elem::F32, &[m, k]).unwrap();
    let o = c.tensor(Elem::F32, &[m, k]).unwrap();
    let g = c.upload_f32(&[k], &vec![1.0; k]).unwrap();
    let y = c.tensor(Elem::F32, &[m, n]).unwrap();
    let mut step = c.step();
    let input = SandwichInput { x: &x, o: &o, post: &g, pre: &g, eps: 1e-6, x_out: &x };
    let err = step.linear(LinearInput::Sandwich(input), &w, &y).unwrap_err();
    assert!(matches!(err, GpuError::Shape(_)), "{err}");
}

fn families_dir() -> PathBuf {
    std::env::var_os("PAGODA_FAMILIES_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_FAMILIES_DIR names the directory scripts/tiny-families.py prints")
}

/// The logits of `tokens`' last token decoded alone after the others were prefilled (an f32
/// cache of `BLOCK`-token blocks).
fn decoded_logits(model: &LlamaModel, tokens: &[u32]) -> Vec<f32> {
    let c = ctx();
    let cfg = model.config();
    let t = tokens.len();
    let blocks = t.div_ceil(BLOCK);
    let limits =
        WorkspaceLimits { max_tokens: t, max_seqs: 1, max_logits_rows: t, max_blocks_per_seq: blocks };
    let ws = Workspace::new(c, model, limits).unwrap();
    let shape = KvCacheShape {
        num_layers: cfg.num_hidden_layers,
        num_blocks: blocks + 1,
        block_size: BLOCK,
        num_kv_heads: cfg.num_key_value_heads,
        head_dim: cfg.head_dim,
    };
    let cache = c.kv_cache(shape, KvPrecision::F32).unwrap();
    let block_table: Vec<u32> = (1..=blocks as u32).collect();
    let step = |range: std::ops::Range<usize>| ForwardBatch {
        input_ids: tokens[range.clone()].to_vec(),
        positions: range.clone().map(|p| p as u32).collect(),
        slot_mapping: range.clone().map(|p| (p + BLOCK) as u32).collect(),
        query_start_loc: vec![0, range.len() as u32],
        seq_lens: vec![range.end as u32],
        block_table: block_table.clone(),
        logits_indices: vec![range.len() as u32 - 1],
    };
    model.forward(c, &ws, &cache, &step(0..t - 1), 1, false).unwrap();
    model.forward(c, &ws, &cache, &step(t - 1..t), 1, true).unwrap().logits.unwrap()
}

/// Qwen3 and Gemma 3 (Q/K norms: flash attention with RoPE in decode, rope_cache in prefill)
/// and Gemma 2 and 3 (sandwich norms: one dispatch for a post-norm's add and the next norm in
/// prefill, the add then the norm fused into the linears in decode).
#[test]
fn qk_norm_and_sandwich_families_decode_a_token_with_the_bits_of_its_prefill() {
    let c = ctx();
    for name in ["qwen3", "gemma3", "gemma2"] {
        let files = ModelFiles::open(families_dir().join(name)).unwrap();
        let model = LlamaModel::load(c, &files, false).unwrap();
        let tokens: Vec<u32> = (0..11).map(|i| 3 + 7 * i).collect();
        let prefilled = prefill_logits(c, &model, &tokens, BLOCK, 1).unwrap();
        let vocab = model.config().vocab_size;
        let last = &prefilled.logits.unwrap()[(tokens.len() - 1) * vocab..];
        let decoded = decoded_logits(&model, &tokens);
        assert_eq!(bits(&decoded), bits(last), "{name}");
    }
}

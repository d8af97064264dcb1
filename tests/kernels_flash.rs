//! The flash attention kernel (`shaders/attention_flash.wgsl`) on whatever adapter `PAGODA_*`
//! selects (lavapipe in CI), called directly whatever the adapter's default: against a
//! plain-Rust f64 reference (f32 and f16 K/V, sliding windows, soft caps, GQA ratios 1, 3, 4 and
//! 8, head dimensions 64 to 256, attention sinks), and bitwise invariance of a token's output
//! alone, batched, in chunks of any size, decoded, and with its K/V rewritten into other blocks
//! (after a preemption).

mod kernels_support;

use kernels_support::{Rng, bits};

use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::*;

fn ctx() -> &'static GpuContext {
    static CTX: std::sync::OnceLock<GpuContext> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
            .expect("a wgpu adapter (lavapipe in CI)")
    })
}

/// One sequence: `cached` tokens written first, `new` tokens attended after.
struct Seq {
    cached: usize,
    new: usize,
}

#[derive(Clone, Copy)]
struct Case {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    kv: KvPrecision,
    window: Option<usize>,
    softcap: Option<f32>,
    sinks: bool,
}

const BASE: Case = Case {
    heads: 8,
    kv_heads: 2,
    head_dim: 64,
    block_size: 16,
    kv: KvPrecision::F32,
    window: None,
    softcap: None,
    sinks: false,
};

impl Case {
    fn spec(&self) -> AttentionSpec {
        AttentionSpec {
            window: self.window,
            softcap: self.softcap,
            ..AttentionSpec::causal(self.heads, self.head_dim)
        }
    }

    /// One sink logit per query head, around the scores' size.
    fn sinks(&self) -> Option<Vec<f32>> {
        self.sinks.then(|| Rng::new(7).vec(self.heads).iter().map(|x| 4.0 * x).collect())
    }
}

/// Random q, k, v for every position of one sequence.
struct Data {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn data(case: &Case, total: usize, seed: u64) -> Data {
    let mut rng = Rng::new(seed);
    Data {
        q: rng.vec(total * case.heads * case.head_dim),
        k: rng.vec(total * case.kv_heads * case.head_dim),
        v: rng.vec(total * case.kv_heads * case.head_dim),
    }
}

/// The f64 reference of query head `head` at `pos`: softmax over the keys it sees (and the
/// head's sink, which joins the maximum and the denominator) of the scaled, soft-capped scores.
fn reference(case: &Case, d: &Data, sinks: Option<&[f32]>, pos: usize, head: usize) -> Vec<f64> {
    let (hd, kvh) = (case.head_dim, case.kv_heads);
    let g = head / (case.heads / kvh);
    let q = &d.q[(pos * case.heads + head) * hd..][..hd];
    let scale = 1.0 / (hd as f64).sqrt();
    let keys = case.window.map_or(0, |w| (pos + 1).saturating_sub(w))..=pos;
    let scores: Vec<f64> = keys
        .clone()
        .map(|j| {
            let k = &d.k[(j * kvh + g) * hd..][..hd];
            let s = q.iter().zip(k).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>() * scale;
            case.softcap.map_or(s, |cap| f64::from(cap) * (s / f64::from(cap)).tanh())
        })
        .collect();
    let sink = sinks.map(|s| f64::from(s[head]));
    let max = scores.iter().copied().chain(sink).fold(f64::MIN, f64::max);
    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let total = weights.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
    (0..hd)
        .map(|e| {
            keys.clone().zip(&weights).map(|(j, w)| w * f64::from(d.v[(j * kvh + g) * hd + e])).sum::<f64>()
                / total
        })
        .collect()
}

/// Runs steps over `seqs`: each step writes the next chunk of every sequence (lengths from
/// `schedule(seq, step)`) into the cache, then attends with the flash kernel. Sequence s's
/// blocks are scrambled by `layout` (another layout: its K/V written into other blocks, as after
/// a preemption). Returns each sequence's outputs for its new tokens, in position order.
fn run(
    case: &Case,
    seqs: &[Seq],
    data: &[Data],
    layout: usize,
    schedule: &dyn Fn(usize, usize) -> usize,
) -> Vec<Vec<f32>> {
    let c = ctx();
    let (hd, h, kvh, bs) = (case.head_dim, case.heads, case.kv_heads, case.block_size);
    let max_blocks = seqs.iter().map(|s| s.cached + s.new).max().unwrap().div_ceil(bs);
    let num_blocks = 1 + seqs.len() * max_blocks;
    let shape = KvCacheShape { num_layers: 1, num_blocks, block_size: bs, num_kv_heads: kvh, head_dim: hd };
    let cache = c.kv_cache(shape, case.kv).unwrap();
    let tables: Vec<Vec<u32>> = (0..seqs.len())
        .map(|s| {
            (0..max_blocks)
                .map(|b| (1 + ((b * seqs.len() + s) * (7 + 4 * layout) + layout) % (num_blocks - 1)) as u32)
                .collect()
        })
        .collect();
    let sinks = case.sinks();
    let sinks_t = sinks.as_ref().map(|s| c.upload_f32(&[h], s).unwrap());
    let mut done = vec![0; seqs.len()];
    let mut outs = vec![Vec::new(); seqs.len()];
    let mut step_no = 0;
    while seqs.iter().zip(&done).any(|(s, &d)| d < s.cached + s.new) {
        let (mut rows, mut slots, mut ids) = (Vec::new(), Vec::new(), Vec::new());
        let (mut qsl, mut lens, mut table) = (vec![0u32], Vec::new(), Vec::new());
        for (s, seq) in seqs.iter().enumerate() {
            let n = schedule(s, step_no).min(seq.cached + seq.new - done[s]);
            if n == 0 {
                continue;
            }
            for p in done[s]..done[s] + n {
                // One fused [q | k | v] row per token; RoPE at angle 0 leaves it as it is.
                rows.extend_from_slice(&data[s].q[p * h * hd..][..h * hd]);
                rows.extend_from_slice(&data[s].k[p * kvh * hd..][..kvh * hd]);
                rows.extend_from_slice(&data[s].v[p * kvh * hd..][..kvh * hd]);
                slots.push(tables[s][p / bs] * bs as u32 + (p % bs) as u32);
            }
            ids.push((s, done[s], n));
            qsl.push(qsl.last().unwrap() + n as u32);
            lens.push((done[s] + n) as u32);
            table.extend_from_slice(&tables[s]);
            done[s] += n;
        }
        let (t, b) = (slots.len(), lens.len());
        let qkv = c.upload_f32(&[t, (h + 2 * kvh) * hd], &rows).unwrap();
        let slot_t = c.upload_u32(&[t], &slots).unwrap();
        let positions = c.upload_u32(&[t], &vec![0; t]).unwrap();
        let no_rotation = c.upload_f32(&[hd / 2], &vec![0.0; hd / 2]).unwrap();
        let batch = AttentionBatch {
            query_start_loc: c.upload_u32(&[b + 1], &qsl).unwrap(),
            seq_lens: c.upload_u32(&[b], &lens).unwrap(),
            block_table: c.upload_u32(&[b, max_blocks], &table).unwrap(),
        };
        let out = c.tensor(Elem::F32, &[t, h * hd]).unwrap();
        let mut step = c.step();
        let rope = RopeCacheArgs {
            positions: &positions,
            inv_freq: &no_rotation,
            qk_norm: None,
            slot_mapping: &slot_t,
            cache: &cache,
            layer: 0,
            heads: h,
            mode: RopeMode::Interleaved,
        };
        step.rope_cache(&qkv, &rope).unwrap();
        step.flash_attention(&qkv, &cache, 0, &batch, &case.spec(), sinks_t.as_ref(), &out).unwrap();
        let id = step.read(&out);
        let o = step.submit().unwrap().f32s(id);
        step_no += 1;
        let mut row = 0;
        for (s, start, n) in ids {
            let first = start.max(seqs[s].cached);
            if start + n > first {
                outs[s].extend_from_slice(&o[(row + first - start) * h * hd..(row + n) * h * hd]);
            }
            row += n;
        }
    }
    outs
}

/// Each sequence's cached prefix in the first step, the rest in the second.
fn after_prefix(seqs: &[Seq]) -> impl Fn(usize, usize) -> usize + '_ {
    |s, step| if step == 0 { seqs[s].cached } else { usize::MAX }
}

fn assert_near(case: &Case, seqs: &[Seq], data: &[Data], outs: &[Vec<f32>]) {
    let f16 = matches!(ctx().capabilities().kv_format(case.kv), KvFormat::F16Native | KvFormat::F16Packed);
    let tol = if f16 { 1e-2 } else { 1e-5 };
    let sinks = case.sinks();
    let (h, hd) = (case.heads, case.head_dim);
    for (s, seq) in seqs.iter().enumerate() {
        for (i, pos) in (seq.cached..seq.cached + seq.new).enumerate() {
            for head in 0..h {
                let want = reference(case, &data[s], sinks.as_deref(), pos, head);
                let got = &outs[s][(i * h + head) * hd..][..hd];
                for (e, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(g) - w).abs() <= tol,
                        "{h}/{} heads of {hd}, {:?}, window {:?}, softcap {:?}, sinks {}: seq {s} pos {pos} head {head} dim {e}: {g} vs {w}",
                        case.kv_heads,
                        case.kv,
                        case.window,
                        case.softcap,
                        case.sinks
                    );
                }
            }
        }
    }
}

/// GQA ratios 1, 3 (SmolLM2), 4 and 8 (gpt-oss, with sinks), head dimensions 64, 72 (pairs
/// not filling the lanes alike), 128 and 256 (Gemma, window and soft-cap), f32, f16 and the
/// adapter's K/V, windows starting mid-block.
fn cases() -> Vec<Case> {
    vec![
        Case { heads: 4, kv_heads: 4, head_dim: 128, block_size: 32, ..BASE },
        Case { heads: 9, kv_heads: 3, kv: KvPrecision::F16, ..BASE },
        Case { heads: 8, kv_heads: 2, head_dim: 72, window: Some(20), ..BASE },
        Case { heads: 16, kv_heads: 2, sinks: true, window: Some(37), ..BASE },
        Case { heads: 8, kv_heads: 1, kv: KvPrecision::F16, sinks: true, ..BASE },
        Case {
            heads: 8,
            kv_heads: 2,
            head_dim: 256,
            window: Some(29),
            softcap: Some(0.5),
            kv: KvPrecision::Auto,
            ..BASE
        },
    ]
}

#[test]
fn flash_attention_matches_the_reference_over_a_varlen_batch() {
    let seqs = [
        Seq { cached: 20, new: 13 },
        Seq { cached: 0, new: 70 },
        Seq { cached: 45, new: 1 },
        Seq { cached: 0, new: 1 },
    ];
    for case in cases() {
        let data: Vec<Data> =
            seqs.iter().enumerate().map(|(s, q)| data(&case, q.cached + q.new, 50 + s as u64)).collect();
        let outs = run(&case, &seqs, &data, 0, &after_prefix(&seqs));
        assert_near(&case, &seqs, &data, &outs);
    }
}

/// A token's bits alone, beside another sequence, in chunks of 1, 6 and 16 tokens, decoded
/// after a prefix, and with its K/V in other blocks.
#[test]
fn flash_attention_is_bitwise_the_same_however_the_tokens_are_batched() {
    for case in cases() {
        let seqs = [Seq { cached: 0, new: 50 }, Seq { cached: 0, new: 20 }];
        let data: Vec<Data> =
            seqs.iter().enumerate().map(|(s, q)| data(&case, q.cached + q.new, 70 + s as u64)).collect();
        let one_shot = run(&case, &seqs[..1], &data[..1], 0, &|_, _| usize::MAX).remove(0);
        for chunk in [1, 6, 16] {
            let chunked = run(&case, &seqs, &data, 0, &|s, _| if s == 0 { chunk } else { 3 });
            assert_eq!(
                bits(&chunked[0]),
                bits(&one_shot),
                "{} heads of {}: chunks of {chunk}",
                case.heads,
                case.head_dim
            );
        }
        let decoded =
            run(&case, &seqs[..1], &data[..1], 0, &|_, step| if step == 0 { 21 } else { 1 }).remove(0);
        assert_eq!(bits(&decoded), bits(&one_shot), "decoded after a prefix of 21");
        let moved = run(&case, &seqs, &data, 1, &|s, _| if s == 0 { 7 } else { 20 }).remove(0);
        assert_eq!(bits(&moved), bits(&one_shot), "K/V in other blocks");
    }
}

/// Contexts of 1 to 3,000 keys, ending on and off a key lane's turn and a block's end.
#[test]
fn flash_attention_walks_long_contexts_right() {
    let case = Case { heads: 4, kv_heads: 1, ..BASE };
    let lens = [1usize, 7, 8, 9, 511, 3000];
    let seqs: Vec<Seq> = lens.iter().map(|&n| Seq { cached: n - 3.min(n), new: 3.min(n) }).collect();
    let data: Vec<Data> =
        seqs.iter().enumerate().map(|(s, q)| data(&case, q.cached + q.new, 90 + s as u64)).collect();
    let outs = run(&case, &seqs, &data, 0, &after_prefix(&seqs));
    assert_near(&case, &seqs, &data, &outs);
}

/// Sinks of the wrong length are a shape error, not a panic.
#[test]
fn flash_attention_rejects_sinks_of_the_wrong_length() {
    let c = ctx();
    let case = BASE;
    let shape = KvCacheShape { num_layers: 1, num_blocks: 2, block_size: 16, num_kv_heads: 2, head_dim: 64 };
    let cache = c.kv_cache(shape, KvPrecision::F32).unwrap();
    let q = c.upload_f32(&[1, 12 * 64], &vec![0.0; 12 * 64]).unwrap();
    let batch = AttentionBatch {
        query_start_loc: c.upload_u32(&[2], &[0, 1]).unwrap(),
        seq_lens: c.upload_u32(&[1], &[1]).unwrap(),
        block_table: c.upload_u32(&[1, 1], &[1]).unwrap(),
    };
    let out = c.tensor(Elem::F32, &[1, 8 * 64]).unwrap();
    let sinks = c.upload_f32(&[7], &[0.0; 7]).unwrap();
    let mut step = c.step();
    let err = step.flash_attention(&q, &cache, 0, &batch, &case.spec(), Some(&sinks), &out).unwrap_err();
    assert!(matches!(err, GpuError::Shape(_)), "{err}");
}

//! Each kernel against a plain-Rust f64 reference on random data with awkward sizes, and the
//! batch-invariance guarantees (bitwise). Runs on whatever adapter `PAGODA_*` selects
//! (lavapipe in CI), so it can be repeated per forced configuration.

mod kernels_support;

use std::sync::OnceLock;

use kernels_support::{Rng, bits};

use pagoda::dtype::{DType, dequantize, quantize};
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::KvPrecision;
use pagoda::gpu::*;

fn ctx() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| {
        GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
            .expect("a wgpu adapter (lavapipe in CI)")
    })
}

const WEIGHT_TYPES: &[DType] = &pagoda::gpu::shader::WEIGHT_DTYPES;

fn weight(dtype: DType, rows: usize, cols: usize, seed: u64) -> (Weight, Vec<f32>) {
    let bytes = quantize(dtype, &Rng::new(seed).vec(rows * cols));
    let w = ctx().upload_weight("w", dtype, rows, cols, &bytes).unwrap();
    (w, dequantize(dtype, &bytes))
}

fn linear_gpu(x: &[f32], m: usize, w: &Weight) -> Vec<f32> {
    let c = ctx();
    let xt = c.upload_f32(&[m, w.cols()], x).unwrap();
    let out = c.tensor(Elem::F32, &[m, w.rows()]).unwrap();
    let mut step = c.step();
    step.linear(&xt, w, &out).unwrap();
    let id = step.read(&out);
    step.submit().unwrap().f32s(id)
}

/// Sequential f32 summation of K terms errs by at most K * 2^-24 * sum |x * w|; on the
/// cooperative-matrix path with f16 matrices each product's inputs are rounded to f16 first
/// (2^-11 each).
fn assert_dot_close(got: f32, x: &[f32], w: &[f32], what: &str) {
    let exact: f64 = x.iter().zip(w).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
    let magnitude: f64 = x.iter().zip(w).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
    let inputs = match ctx().capabilities().linear_path() {
        LinearPath::Coop { shape, .. } if shape.elem == CoopElem::F16 => 2.0 * 2f64.powi(-11) * 1.01,
        _ => 0.0,
    };
    let tol = (inputs + x.len() as f64 * 6e-8) * magnitude + 1e-30;
    assert!((f64::from(got) - exact).abs() <= tol, "{what}: got {got}, exact {exact}, tol {tol}");
}

#[test]
fn linear_matches_dequantized_f64_reference() {
    for &dtype in WEIGHT_TYPES {
        let b = dtype.block_len();
        let shapes: &[(usize, usize, usize)] = if b == 256 {
            &[(1, 256, 1), (3, 768, 5), (5, 512, 70), (1, 1280, 33), (5, 2304, 3)]
        } else if dtype.is_quantized() {
            &[(1, 32, 1), (3, 96, 5), (5, 160, 70), (9, 64, 33), (1, 256 * 2 + 32, 1), (5, 2080, 3)]
        } else {
            &[(1, 1, 1), (1, 37, 5), (3, 13, 1), (5, 150, 70), (9, 8, 33), (4, 7, 3), (5, 2091, 3)]
        };
        for (i, &(m, k, n)) in shapes.iter().enumerate() {
            let (w, wf) = weight(dtype, n, k, 10 + i as u64);
            let x = Rng::new(100 + i as u64).vec(m * k);
            let y = linear_gpu(&x, m, &w);
            for r in 0..m {
                for c in 0..n {
                    let what = format!("{dtype:?} m{m} k{k} n{n} at ({r}, {c})");
                    assert_dot_close(y[r * n + c], &x[r * k..(r + 1) * k], &wf[c * k..(c + 1) * k], &what);
                }
            }
        }
    }
}

/// K of the invariance tests: whole blocks for a block format; for the others 6 runs of 16 and
/// eleven single weights, so the K-split lanes' runs and lane 0's last weights are in it
/// (kernels_gemm_tiles takes rows long enough for every lane to sum several runs).
fn invariance_k(dtype: DType) -> usize {
    match dtype.block_len() {
        256 => 512,
        32 => 96,
        _ => 107,
    }
}

#[test]
fn linear_rows_are_bitwise_independent_of_the_batch() {
    for &dtype in WEIGHT_TYPES {
        let (k, n) = (invariance_k(dtype), 45);
        let (w, _) = weight(dtype, n, k, 7);
        let batch = Rng::new(8).vec(64 * k);
        let row = 11;
        let alone = linear_gpu(&batch[row * k..(row + 1) * k], 1, &w);
        for m in [3usize, 5, 17, 64] {
            // Put the row at a different position in each batch.
            let at = (row * 7 + m) % m;
            let mut x = batch[..m * k].to_vec();
            x[at * k..(at + 1) * k].copy_from_slice(&batch[row * k..(row + 1) * k]);
            let y = linear_gpu(&x, m, &w);
            assert_eq!(
                bits(&y[at * n..(at + 1) * n]),
                bits(&alone),
                "{dtype:?}: row alone vs in a batch of {m}"
            );
        }
    }
}

/// The fused epilogues give the bits of the separate kernels for every weight type, in batches
/// of 1, 3, 5, 17 and 64 rows (every row tile): `linear_add` is `linear` then `add_in_place`, `linear_into`
/// with a bias is `linear` into its columns then the bias, `linear_gated` is two `linear`s then
/// `gated_mul`. Each of them over [`LinearInput::rms_normed`] rows is `rms_norm` then the same
/// kernel over its output, for the weight types that cover every activation load site of the
/// kernels (blocks of 32 read whole, or as groups, super-blocks of 256). A fused row alone
/// equals the same row in batches of 3, 17 and 64.
#[test]
fn fused_epilogues_and_norms_equal_the_separate_kernels_bit_for_bit() {
    let c = ctx();
    let eps = 1e-5;
    for &dtype in WEIGHT_TYPES {
        let (k, n) = (invariance_k(dtype), 37);
        let gate_bytes = quantize(dtype, &Rng::new(21).vec(n * k));
        let up_bytes = quantize(dtype, &Rng::new(22).vec(n * k));
        let gate = c.upload_weight("gate", dtype, n, k, &gate_bytes).unwrap();
        let up = c.upload_weight("up", dtype, n, k, &up_bytes).unwrap();
        let gated = c.upload_gated_weight("gate_up", dtype, n, k, &gate_bytes, &up_bytes).unwrap();
        let bias = Rng::new(23).vec(n);
        let bias_t = c.upload_f32(&[n], &bias).unwrap();
        let norm_t = c.upload_f32(&[k], &Rng::new(26).vec(k)).unwrap();
        let batch = Rng::new(24).vec(64 * k);
        let residual = Rng::new(25).vec(64 * n);
        // linear_add, linear_into with the bias (its columns of the wider row) and linear_gated
        // over the first `m` rows of `rows`, normed on the way in with `normed`.
        let fused = |rows: &[f32], m: usize, normed: bool| -> [Vec<f32>; 3] {
            let x = c.upload_f32(&[m, k], &rows[..m * k]).unwrap();
            let input =
                if normed { LinearInput::rms_normed(&x, &norm_t, eps) } else { LinearInput::Plain(&x) };
            let acc = c.upload_f32(&[m, n], &residual[..m * n]).unwrap();
            let wide = c.tensor(Elem::F32, &[m, n + 5]).unwrap();
            let act = c.tensor(Elem::F32, &[m, n]).unwrap();
            let mut step = c.step();
            step.linear_add(input, &gate, &acc).unwrap();
            step.linear_into(input, &gate, Some(&bias_t), &wide, 5).unwrap();
            step.linear_gated(input, &gated, GateActivation::Silu, &act).unwrap();
            let ids = [step.read(&acc), step.read(&wide), step.read(&act)];
            let mut out = step.submit().unwrap();
            let wide = out.f32s(ids[1]);
            let into: Vec<f32> = wide.chunks(n + 5).flat_map(|row| row[5..].to_vec()).collect();
            [out.f32s(ids[0]), into, out.f32s(ids[2])]
        };
        for m in [1usize, 3, 5, 17, 64] {
            let x = &batch[..m * k];
            let g = linear_gpu(x, m, &gate);
            let u = linear_gpu(x, m, &up);
            let (gt, ut) = (c.upload_f32(&[m, n], &g).unwrap(), c.upload_f32(&[m, n], &u).unwrap());
            let (res_t, act_t) =
                (c.upload_f32(&[m, n], &residual[..m * n]).unwrap(), c.tensor(Elem::F32, &[m, n]).unwrap());
            let mut step = c.step();
            step.add_in_place(&res_t, &gt).unwrap();
            step.gated_mul(GateActivation::Silu, &gt, &ut, &act_t).unwrap();
            let ids = (step.read(&res_t), step.read(&act_t));
            let mut out = step.submit().unwrap();
            let biased: Vec<f32> = g.iter().enumerate().map(|(i, v)| v + bias[i % n]).collect();
            let [added, into, act] = fused(&batch, m, false);
            assert_eq!(bits(&added), bits(&out.f32s(ids.0)), "{dtype:?} m{m}: linear_add");
            assert_eq!(bits(&into), bits(&biased), "{dtype:?} m{m}: linear_into with bias");
            assert_eq!(bits(&act), bits(&out.f32s(ids.1)), "{dtype:?} m{m}: linear_gated");
            if !NORMED_TYPES.contains(&dtype) {
                continue;
            }
            let normed = rms_norm_gpu(&batch[..m * k], m, &norm_t, eps);
            let separate = fused(&normed, m, false);
            for (what, (a, b)) in
                ["add", "into", "gated"].iter().zip(fused(&batch, m, true).iter().zip(&separate))
            {
                assert_eq!(bits(a), bits(b), "{dtype:?} m{m}: normed {what} vs rms_norm then {what}");
            }
        }
        for normed in [false, NORMED_TYPES.contains(&dtype)] {
            let alone = fused(&batch, 1, normed);
            for m in [3usize, 17, 64] {
                let in_batch = fused(&batch, m, normed);
                for (what, (a, b)) in ["add", "into", "gated"].iter().zip(alone.iter().zip(&in_batch)) {
                    assert_eq!(
                        bits(&b[..n]),
                        bits(a),
                        "{dtype:?} normed {normed}: {what} row alone vs in {m}"
                    );
                }
            }
        }
    }
}

/// A Q/K/V row of `heads` query and `kv_heads` key/value heads of `hd`, with its tokens'
/// positions and cache slots (`u32::MAX`: none), over a one-layer pool of 8 blocks of 16.
struct QkvRow<'a> {
    heads: usize,
    kv_heads: usize,
    hd: usize,
    positions: &'a [u32],
    slots: &'a [u32],
    precision: KvPrecision,
}

impl QkvRow<'_> {
    fn width(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.hd
    }

    /// The Q/K/V row and both pools after projecting `input` through `layout` (each weight at
    /// its column, with its bias) with RoPE and the K/V write in the projection's epilogue
    /// (`fused`) or as `linear_into` then `rope_cache`; `None` when a fused projection does not
    /// fit the device's storage-buffer limit (past WebGPU's default 8, PAGODA_WEBGPU_LIMITS=1).
    fn project(
        &self,
        c: &GpuContext,
        input: LinearInput<'_>,
        layout: &[(&Weight, usize, Option<&Tensor>)],
        fused: bool,
    ) -> Option<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        let m = self.positions.len();
        let shape = KvCacheShape {
            num_layers: 1,
            num_blocks: 8,
            block_size: 16,
            num_kv_heads: self.kv_heads,
            head_dim: self.hd,
        };
        let cache = c.kv_cache(shape, self.precision).unwrap();
        let inv = c.upload_f32(&[self.hd / 2], &rope_inv_freq(self.hd, 10000.0, None)).unwrap();
        let qkv = c.tensor(Elem::F32, &[m, self.width()]).unwrap();
        let (pt, st) = (c.upload_u32(&[m], self.positions).unwrap(), c.upload_u32(&[m], self.slots).unwrap());
        let rope = RopeCacheArgs {
            positions: &pt,
            inv_freq: &inv,
            qk_norm: None,
            slot_mapping: &st,
            cache: &cache,
            layer: 0,
            heads: self.heads,
            mode: RopeMode::Interleaved,
        };
        let mut step = c.step();
        for &(w, col0, bias) in layout {
            if !step.can_fuse_rope_cache(input, w, bias, col0, &rope) {
                return None;
            }
            if fused {
                step.linear_rope_cache(input, w, bias, &qkv, col0, &rope).unwrap();
            } else {
                step.linear_into(input, w, bias, &qkv, col0).unwrap();
            }
        }
        if !fused {
            step.rope_cache(&qkv, &rope).unwrap();
        }
        let id = step.read(&qkv);
        let row = step.submit().unwrap().f32s(id);
        let (kc, vc) = c.read_kv_layer(&cache, 0).unwrap();
        Some((row, kc, vc))
    }

    /// Runs [`Self::project`] both ways and asserts the same bits in the row and both pools;
    /// the fused row, or `None` where it does not fit.
    fn assert_fused_equals_separate(
        &self,
        c: &GpuContext,
        input: LinearInput<'_>,
        layout: &[(&Weight, usize, Option<&Tensor>)],
        what: &str,
    ) -> Option<Vec<f32>> {
        let (fused, separate) =
            self.project(c, input, layout, true).zip(self.project(c, input, layout, false))?;
        assert_eq!(bits(&fused.0), bits(&separate.0), "{what}: the Q/K/V row");
        assert_eq!(bits(&fused.1), bits(&separate.1), "{what}: the K pool");
        assert_eq!(bits(&fused.2), bits(&separate.2), "{what}: the V pool");
        assert!(fused.1.iter().any(|&v| v != 0.0), "{what}: nothing cached");
        Some(fused.0)
    }
}

/// RoPE and the K/V write in the Q/K/V projection's epilogue (`linear_rope_cache`) give the
/// bits of `linear_into` then `rope_cache`, in the Q/K/V row and in both pools, for the weight
/// types of the fused-norm test and the default model's Q4_1 (the epilogue never sees the
/// weight type) on the adapter's own kernels and on the K-split ones (GEMV and GEMM), with f32
/// and f16 pools, at a decode row and prefill batches, a concatenated weight or one weight a
/// head kind at its own columns, normed inputs and biases (added before the rotation); tokens
/// with no slot write no cache. A fused row alone equals the same row in a batch of 64.
#[test]
fn fused_rope_cache_equals_linear_then_rope_cache_bit_for_bit() {
    let (heads, kv_heads, hd) = (4, 2, 16);
    let width = (heads + 2 * kv_heads) * hd;
    let eps = 1e-5;
    for c in [ctx(), gpu_class_ctx()] {
        for dtype in NORMED_TYPES {
            let k = if dtype.block_len() == 256 { 512 } else { 96 };
            let bytes = quantize(dtype, &Rng::new(31).vec(width * k));
            let fused_w = c.upload_weight("qkv", dtype, width, k, &bytes).unwrap();
            let row_bytes = bytes.len() / width;
            let per_kind: Vec<(Weight, usize)> =
                [(0, heads * hd), (heads * hd, kv_heads * hd), ((heads + kv_heads) * hd, kv_heads * hd)]
                    .into_iter()
                    .map(|(col0, rows)| {
                        let part = &bytes[col0 * row_bytes..(col0 + rows) * row_bytes];
                        (c.upload_weight("part", dtype, rows, k, part).unwrap(), col0)
                    })
                    .collect();
            let weights: [Vec<(Weight, usize)>; 2] = [vec![(fused_w, 0)], per_kind];
            let bias = Rng::new(34).vec(width);
            let biases: [Vec<Tensor>; 2] = [0, 1].map(|layout| {
                let ws = &weights[layout];
                ws.iter()
                    .map(|(w, col0)| c.upload_f32(&[w.rows()], &bias[*col0..][..w.rows()]).unwrap())
                    .collect()
            });
            let norm_t = c.upload_f32(&[k], &Rng::new(32).vec(k)).unwrap();
            let batch = Rng::new(33).vec(64 * k);
            let normed_too = dtype != DType::Q4_1;
            let mut alone = None;
            for (m, precision, layout, normed, biased) in [
                (1, KvPrecision::F32, 0, false, false),
                (64, KvPrecision::F32, 0, false, false),
                (17, KvPrecision::F16, 0, false, true),
                (3, KvPrecision::F16, 1, normed_too, true),
                (64, KvPrecision::F32, 1, normed_too, false),
            ] {
                let positions: Vec<u32> = (0..m as u32).map(|i| 7 * i + 3).collect();
                // Every fifth token has no slot; the others fill the pool backwards.
                let slots: Vec<u32> =
                    (0..m as u32).map(|i| if i % 5 == 4 { u32::MAX } else { 127 - i }).collect();
                let row = QkvRow { heads, kv_heads, hd, positions: &positions, slots: &slots, precision };
                let x = c.upload_f32(&[m, k], &batch[..m * k]).unwrap();
                let input =
                    if normed { LinearInput::rms_normed(&x, &norm_t, eps) } else { LinearInput::Plain(&x) };
                let projections: Vec<(&Weight, usize, Option<&Tensor>)> = weights[layout]
                    .iter()
                    .zip(&biases[layout])
                    .map(|((w, col0), b)| (w, *col0, biased.then_some(b)))
                    .collect();
                let what = format!(
                    "{:?} {dtype:?} m{m} {precision:?} layout {layout} normed {normed} biased {biased}",
                    c.capabilities().linear_path()
                );
                let Some(fused) = row.assert_fused_equals_separate(c, input, &projections, &what) else {
                    // A normed or biased fused projection binds 9 storage buffers (10 with both).
                    assert!(normed || biased, "{what}: a plain projection always fuses");
                    continue;
                };
                match (m, &alone) {
                    (1, _) => alone = Some(fused),
                    (64, Some(row)) if layout == 0 => {
                        assert_eq!(bits(&fused[..width]), bits(row), "{what}: row alone vs in 64")
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A Q/K/V weight past the binding limit (192 MiB of f32 against lavapipe's 128 MiB) is split
/// into parts at even rows, and the rotary epilogue reads each part's biases from its first row
/// on: the fused projection with biases still equals `linear_into` then `rope_cache` bit for bit.
#[test]
fn fused_rope_cache_with_biases_holds_across_the_parts_of_a_split_weight() {
    let c = ctx();
    let (heads, kv_heads, hd, k) = (640, 64, 64, 1024);
    let row = QkvRow {
        heads,
        kv_heads,
        hd,
        positions: &[3, 900, 4095],
        slots: &[5, u32::MAX, 127],
        precision: KvPrecision::F32,
    };
    let width = row.width();
    let w = c
        .upload_weight("qkv", DType::F32, width, k, bytemuck::cast_slice(&Rng::new(41).vec(width * k)))
        .unwrap();
    assert!(width * k * 4 <= c.max_binding_bytes() as usize || w.num_parts() >= 2);
    let bias = c.upload_f32(&[width], &Rng::new(42).vec(width)).unwrap();
    let x = c.upload_f32(&[3, k], &Rng::new(43).vec(3 * k)).unwrap();
    let what = format!("{} parts", w.num_parts());
    let fused = row.assert_fused_equals_separate(c, LinearInput::Plain(&x), &[(&w, 0, Some(&bias))], &what);
    assert!(fused.is_some() || c.capabilities().limits.max_storage_buffers_per_shader_stage < 9, "{what}");
}

/// The weight types the fused norm is checked with: F16 (blocks of 32 as four groups, as every
/// format without a lane run of its own), and every format whose K-split lanes run their own
/// arithmetic (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K): a normed activation is a product, and only
/// ever meets a weight in one.
const NORMED_TYPES: [DType; 6] = [DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4K, DType::Q6K];

/// `rms_norm` of the `m` rows of `x` with `weight`, through the GPU kernel.
fn rms_norm_gpu(x: &[f32], m: usize, weight: &Tensor, eps: f32) -> Vec<f32> {
    let c = ctx();
    let k = weight.len();
    let (xt, out) = (c.upload_f32(&[m, k], x).unwrap(), c.tensor(Elem::F32, &[m, k]).unwrap());
    let mut step = c.step();
    step.rms_norm(&xt, weight, eps, &out).unwrap();
    let id = step.read(&out);
    step.submit().unwrap().f32s(id)
}

#[test]
fn weight_above_the_binding_limit_is_split_and_still_correct() {
    let c = ctx();
    let (rows, cols) = (49152usize, 1024usize);
    let limit = c.max_binding_bytes() as usize;
    let data: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 512.0).collect();
    let w = c.upload_weight("big", DType::F32, rows, cols, bytemuck::cast_slice(&data)).unwrap();
    assert_eq!(w.num_parts(), (rows * cols * 4).div_ceil(limit / (cols * 4) * cols * 4));
    assert!(rows * cols * 4 <= limit || w.num_parts() >= 2);
    let x = Rng::new(3).vec(cols);
    let y = linear_gpu(&x, 1, &w);
    for r in [0, 1, rows / 2 - 1, rows / 2, rows / 2 + 1, rows - 1].into_iter().chain((0..rows).step_by(977))
    {
        assert_dot_close(y[r], &x, &data[r * cols..(r + 1) * cols], &format!("big row {r}"));
    }
    let ids = c.upload_u32(&[3], &[0, rows as u32 - 1, rows as u32 / 2]).unwrap();
    let out = c.tensor(Elem::F32, &[3, cols]).unwrap();
    let mut step = c.step();
    step.embed(&ids, &w, &out).unwrap();
    let id = step.read(&out);
    let e = step.submit().unwrap().f32s(id);
    for (i, r) in [0, rows - 1, rows / 2].into_iter().enumerate() {
        assert_eq!(bits(&e[i * cols..(i + 1) * cols]), bits(&data[r * cols..(r + 1) * cols]));
    }
}

#[test]
fn embedding_gathers_dequantized_rows() {
    let c = ctx();
    for &dtype in WEIGHT_TYPES {
        let (vocab, d) = match dtype.block_len() {
            256 => (40, 512),
            32 => (40, 96),
            _ => (40, 37),
        };
        let (w, wf) = weight(dtype, vocab, d, 21);
        let ids = [3u32, 0, 39, 3, 17];
        let idt = c.upload_u32(&[ids.len()], &ids).unwrap();
        let out = c.tensor(Elem::F32, &[ids.len(), d]).unwrap();
        let mut step = c.step();
        step.embed(&idt, &w, &out).unwrap();
        let id = step.read(&out);
        let y = step.submit().unwrap().f32s(id);
        for (t, &tok) in ids.iter().enumerate() {
            for k in 0..d {
                let want = wf[tok as usize * d + k];
                let got = y[t * d + k];
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                    "{dtype:?} token {tok} col {k}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn rms_norm_matches_reference_and_is_row_independent() {
    let c = ctx();
    for d in [37usize, 576] {
        let rows = 17;
        let x = Rng::new(5).vec(rows * d);
        let g = Rng::new(6).vec(d);
        let run = |x: &[f32], rows: usize| {
            let xt = c.upload_f32(&[rows, d], x).unwrap();
            let gt = c.upload_f32(&[d], &g).unwrap();
            let out = c.tensor(Elem::F32, &[rows, d]).unwrap();
            let mut step = c.step();
            step.rms_norm(&xt, &gt, 1e-5, &out).unwrap();
            let id = step.read(&out);
            step.submit().unwrap().f32s(id)
        };
        let y = run(&x, rows);
        for r in 0..rows {
            let row = &x[r * d..(r + 1) * d];
            let ms: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / d as f64;
            let scale = 1.0 / (ms + 1e-5).sqrt();
            for k in 0..d {
                let want = f64::from(row[k]) * scale * f64::from(g[k]);
                let got = f64::from(y[r * d + k]);
                assert!(
                    (got - want).abs() <= 1e-5 * want.abs().max(1e-2),
                    "d{d} row {r} col {k}: {got} vs {want}"
                );
            }
        }
        let alone = run(&x[5 * d..6 * d], 1);
        assert_eq!(bits(&alone), bits(&y[5 * d..6 * d]));
    }
}

/// Gemma's sandwich: `rms_norm_add` (a projection's output normed and added to the residual in
/// one dispatch) gives bit for bit `rms_norm` into a scratch tensor then `add_in_place`, and
/// refuses the wrong shapes.
#[test]
fn rms_norm_add_equals_rms_norm_then_add_bit_for_bit() {
    let c = ctx();
    for (rows, d) in [(1usize, 37usize), (17, 576), (3, 2304)] {
        let (o, g) = (Rng::new(7).vec(rows * d), Rng::new(8).vec(d));
        let residual: Vec<f32> = Rng::new(9).vec(rows * d).iter().map(|v| v * 30.0).collect();
        let (ot, gt) = (c.upload_f32(&[rows, d], &o).unwrap(), c.upload_f32(&[d], &g).unwrap());
        let fused = c.upload_f32(&[rows, d], &residual).unwrap();
        let apart = c.upload_f32(&[rows, d], &residual).unwrap();
        let h = c.tensor(Elem::F32, &[rows, d]).unwrap();
        let mut step = c.step();
        step.rms_norm_add(&ot, &gt, 1e-6, &fused).unwrap();
        step.rms_norm(&ot, &gt, 1e-6, &h).unwrap();
        step.add_in_place(&apart, &h).unwrap();
        let wrong = c.tensor(Elem::F32, &[rows, d + 1]).unwrap();
        assert!(matches!(step.rms_norm_add(&ot, &gt, 1e-6, &wrong), Err(GpuError::Shape(_))));
        let (f, a) = (step.read(&fused), step.read(&apart));
        let mut out = step.submit().unwrap();
        let (f, a) = (out.f32s(f), out.f32s(a));
        assert_eq!(bits(&f), bits(&a), "rows {rows} d {d}");
        assert_ne!(bits(&f), bits(&residual), "rows {rows} d {d}: nothing added");
    }
}

/// `x` RMS-normed with `w` (f64), or `x` itself without weights.
fn head_normed(x: &[f32], w: Option<&[f32]>, eps: f64) -> Vec<f64> {
    let x: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let Some(w) = w else { return x };
    let s = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps).sqrt();
    x.iter().zip(w).map(|(v, &g)| v * s * f64::from(g)).collect()
}

/// `head` rotated to `pos` in f64 (the angle as the kernel rounds it).
fn rotated_head(head: &[f64], pos: u32, inv: &[f32], mode: RopeMode) -> Vec<f64> {
    let hd = head.len();
    let mut out = head.to_vec();
    for (p, &inv_p) in inv.iter().enumerate() {
        let (i0, i1) = match mode {
            RopeMode::Interleaved => (2 * p, 2 * p + 1),
            RopeMode::HalfSplit => (p, p + hd / 2),
        };
        let (s, co) = f64::from(pos as f32 * inv_p).sin_cos();
        out[i0] = head[i0] * co - head[i1] * s;
        out[i1] = head[i0] * s + head[i1] * co;
    }
    out
}

#[test]
fn rope_cache_rotates_normalises_and_caches_heads() {
    let c = ctx();
    let (heads, kv_heads, hd, block) = (4usize, 2usize, 64usize, 4usize);
    // Far positions too: GPUs' sin and cos of 4095 or 131071 radians are off by 1e-4 unless
    // the angle is reduced first.
    let positions = [0u32, 1, 7, 100, 4095, 131071];
    let slots = [5u32, 9, u32::MAX, 2, 11, 14];
    let t = positions.len();
    let width = (heads + 2 * kv_heads) * hd;
    let scaling = Llama3RopeScaling {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192.0,
    };
    let factors = llama3_freq_factors(hd, 500000.0, &scaling);
    let norm_w: Vec<f32> = Rng::new(4).vec(2 * hd).iter().map(|v| 1.0 + v).collect();
    let cases = [(100000.0, None, false), (500000.0, Some(factors.as_slice()), true)];
    for (theta, freq_factors, qk_norm) in cases {
        let inv = rope_inv_freq(hd, theta, freq_factors);
        for mode in [RopeMode::Interleaved, RopeMode::HalfSplit] {
            let x = Rng::new(9).vec(t * width);
            let shape = KvCacheShape {
                num_layers: 1,
                num_blocks: 4,
                block_size: block,
                num_kv_heads: kv_heads,
                head_dim: hd,
            };
            let cache = c.kv_cache(shape, KvPrecision::F32).unwrap();
            let xt = c.upload_f32(&[t, width], &x).unwrap();
            let pt = c.upload_u32(&[t], &positions).unwrap();
            let st = c.upload_u32(&[t], &slots).unwrap();
            let it = c.upload_f32(&[hd / 2], &inv).unwrap();
            let wt = c.upload_f32(&[2, hd], &norm_w).unwrap();
            let eps = 1e-6;
            let mut step = c.step();
            let norm = qk_norm.then_some((&wt, eps));
            let rope = RopeCacheArgs {
                positions: &pt,
                inv_freq: &it,
                qk_norm: norm,
                slot_mapping: &st,
                cache: &cache,
                layer: 0,
                heads,
                mode,
            };
            step.rope_cache(&xt, &rope).unwrap();
            let id = step.read(&xt);
            let y = step.submit().unwrap().f32s(id);
            let (kc, vc) = c.read_kv_layer(&cache, 0).unwrap();
            let close = |got: f32, want: f64, what: &str| {
                assert!(
                    (f64::from(got) - want).abs() <= 2e-5 * (1.0 + want.abs()),
                    "{what}: {got} vs {want}"
                );
            };
            for (ti, &pos) in positions.iter().enumerate() {
                let head = |h: usize| &x[ti * width + h * hd..][..hd];
                for h in 0..heads {
                    let want = rotated_head(
                        &head_normed(head(h), qk_norm.then_some(&norm_w[..hd]), 1e-6),
                        pos,
                        &inv,
                        mode,
                    );
                    for (e, &w) in want.iter().enumerate() {
                        close(
                            y[ti * width + h * hd + e],
                            w,
                            &format!("{mode:?} q pos {pos} head {h} elem {e}"),
                        );
                    }
                }
                if slots[ti] == u32::MAX {
                    continue;
                }
                for g in 0..kv_heads {
                    let k = rotated_head(
                        &head_normed(head(heads + g), qk_norm.then_some(&norm_w[hd..]), 1e-6),
                        pos,
                        &inv,
                        mode,
                    );
                    let at = (slots[ti] as usize * kv_heads + g) * hd;
                    for e in 0..hd {
                        close(kc[at + e], k[e], &format!("{mode:?} k pos {pos} head {g} elem {e}"));
                        assert_eq!(
                            vc[at + e],
                            head(heads + kv_heads + g)[e],
                            "v pos {pos} head {g} elem {e}"
                        );
                    }
                }
            }
            let written: std::collections::HashSet<usize> =
                slots.iter().filter(|&&s| s != u32::MAX).map(|&s| s as usize).collect();
            let untouched = (0..4 * block).filter(|s| !written.contains(s));
            assert!(untouched.flat_map(|s| &kc[s * kv_heads * hd..][..kv_heads * hd]).all(|&v| v == 0.0));
        }
    }
}

#[test]
fn elementwise_kernels_match() {
    let c = ctx();
    let n = 1000;
    let a = Rng::new(1).vec(n);
    let b = Rng::new(2).vec(n);
    let at = c.upload_f32(&[10, 100], &a).unwrap();
    let bt = c.upload_f32(&[10, 100], &b).unwrap();
    let out = c.tensor(Elem::F32, &[10, 100]).unwrap();
    let idx = c.upload_u32(&[4], &[9, 0, 9, 4]).unwrap();
    let gathered = c.tensor(Elem::F32, &[4, 100]).unwrap();
    // The same gate and up values side by side in each row, as a stacked projection writes them.
    let side_by_side: Vec<f32> =
        a.chunks(100).zip(b.chunks(100)).flat_map(|(g, u)| [g, u].concat()).collect();
    let both = c.upload_f32(&[10, 200], &side_by_side).unwrap();
    let halves = c.tensor(Elem::F32, &[10, 100]).unwrap();
    let mut step = c.step();
    step.gated_mul(GateActivation::Silu, &at, &bt, &out).unwrap();
    step.gated_mul_halves(GateActivation::Silu, &both, &halves).unwrap();
    step.gather_rows(&bt, &idx, &gathered).unwrap();
    step.add_in_place(&at, &bt).unwrap();
    let (o, s, g, h) = (step.read(&out), step.read(&at), step.read(&gathered), step.read(&halves));
    let mut res = step.submit().unwrap();
    let (o, s, g, h) = (res.f32s(o), res.f32s(s), res.f32s(g), res.f32s(h));
    assert_eq!(bits(&h), bits(&o), "gated_mul over the halves of rows differs from two tensors");
    for i in 0..n {
        let (x, y) = (f64::from(a[i]), f64::from(b[i]));
        let silu = x / (1.0 + (-x).exp()) * y;
        assert!((f64::from(o[i]) - silu).abs() <= 1e-6, "silu_mul {i}: {} vs {silu}", o[i]);
        assert_eq!(s[i], a[i] + b[i]);
    }
    for (r, src) in [9usize, 0, 9, 4].into_iter().enumerate() {
        assert_eq!(bits(&g[r * 100..(r + 1) * 100]), bits(&b[src * 100..(src + 1) * 100]));
    }
}

/// A mixture of experts' two kernels: an expert's rows, weighted, scattered to their slots
/// (rows no index names keep their values), and each token's slots added in slot order.
#[test]
fn scatter_rows_and_moe_combine_match() {
    let c = ctx();
    let d = 100;
    let src = Rng::new(5).vec(3 * d);
    let x0 = Rng::new(6).vec(2 * d);
    let y0 = Rng::new(7).vec(4 * d);
    let (targets, scales) = ([3u32, 0, 2], [0.5f32, -2.0, 1.25]);
    let src_t = c.upload_f32(&[3, d], &src).unwrap();
    let x = c.upload_f32(&[2, d], &x0).unwrap();
    let y = c.upload_f32(&[4, d], &y0).unwrap();
    let indices = c.upload_u32(&[3], &targets).unwrap();
    let scale_bits = c.upload_u32(&[3], &scales.map(f32::to_bits)).unwrap();
    let mut step = c.step();
    step.scatter_rows(&src_t, &indices, &scale_bits, &y).unwrap();
    step.moe_combine(&x, &y, 2).unwrap();
    let (xr, yr) = (step.read(&x), step.read(&y));
    let mut res = step.submit().unwrap();
    let (xs, ys) = (res.f32s(xr), res.f32s(yr));
    let mut expected_y = y0.clone();
    for (r, (&target, &scale)) in targets.iter().zip(&scales).enumerate() {
        for i in 0..d {
            expected_y[target as usize * d + i] = src[r * d + i] * scale;
        }
    }
    assert_eq!(bits(&ys), bits(&expected_y));
    let expected_x: Vec<f32> = (0..2 * d).map(|i| x0[i] + (expected_y[i] + expected_y[2 * d + i])).collect();
    assert_eq!(bits(&xs), bits(&expected_x));
}

#[test]
fn gemma_elementwise_kernels_match() {
    let c = ctx();
    let n = 1000;
    // Values up to ±40 reach the clamp of every tanh.
    let a: Vec<f32> = Rng::new(4).vec(n).iter().map(|v| v * 40.0).collect();
    let b = Rng::new(5).vec(n);
    let (at, bt) = (c.upload_f32(&[n], &a).unwrap(), c.upload_f32(&[n], &b).unwrap());
    let (scaled, capped) = (c.upload_f32(&[n], &a).unwrap(), c.upload_f32(&[n], &a).unwrap());
    let out = c.tensor(Elem::F32, &[n]).unwrap();
    let mut step = c.step();
    step.gated_mul(GateActivation::GeluTanh, &at, &bt, &out).unwrap();
    step.scale(&scaled, 8.0).unwrap();
    step.softcap(&capped, 30.0).unwrap();
    assert!(matches!(step.softcap(&capped, 0.0), Err(GpuError::Shape(_))));
    let (o, sc, cp) = (step.read(&out), step.read(&scaled), step.read(&capped));
    let mut res = step.submit().unwrap();
    let (o, sc, cp) = (res.f32s(o), res.f32s(sc), res.f32s(cp));
    for i in 0..n {
        let (x, y) = (f64::from(a[i]), f64::from(b[i]));
        let gelu =
            0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh()) * y;
        assert!(
            (f64::from(o[i]) - gelu).abs() <= 1e-5 * (1.0 + gelu.abs()),
            "gelu_tanh_mul {i}: {} vs {gelu}",
            o[i]
        );
        assert_eq!(sc[i], a[i] * 8.0);
        let cap = 30.0 * (x / 30.0).tanh();
        assert!((f64::from(cp[i]) - cap).abs() <= 1e-5 * 30.0, "softcap {i}: {} vs {cap}", cp[i]);
    }
}

fn sorted_top_k(row: &[f32], k: usize) -> Vec<(f32, u32)> {
    let mut all: Vec<(f32, u32)> =
        row.iter().enumerate().filter(|(_, v)| !v.is_nan()).map(|(i, &v)| (v, i as u32)).collect();
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    all.truncate(k);
    all
}

#[test]
fn top_k_and_argmax_match_a_stable_sort() {
    let (rows, v, k) = (3usize, 49152usize, 8usize);
    let mut logits = Rng::new(4).vec(rows * v);
    // Ties across the row, a NaN, and an all-equal stretch.
    logits[5] = 3.0;
    logits[v - 1] = 3.0;
    logits[1000] = 3.0;
    logits[7] = f32::NAN;
    logits[v + 17] = 2.5;
    logits[v + 18] = 2.5;
    for x in &mut logits[2 * v..3 * v] {
        *x = 0.25;
    }
    assert_top_k_sorts(&logits, rows, v, k);
}

/// Gemma 3's vocabulary (262,144) and 80 candidates: 80 rounds over the row, which as one loop
/// over a lane's share of the row (1,024 iterations a round) would pass lavapipe's 65,535 loop
/// iterations an invocation and come out wrong.
#[test]
fn top_k_over_a_wide_vocabulary_takes_many_candidates() {
    let (v, k) = (262_144usize, 80usize);
    let mut logits = Rng::new(5).vec(v);
    logits[v - 3] = 4.0;
    logits[11] = 4.0;
    assert_top_k_sorts(&logits, 1, v, k);
}

/// Asserts `top_k` and `argmax` of `rows` rows of `v` logits equal a stable sort's.
fn assert_top_k_sorts(logits: &[f32], rows: usize, v: usize, k: usize) {
    let c = ctx();
    let lt = c.upload_f32(&[rows, v], logits).unwrap();
    let vals = c.tensor(Elem::F32, &[rows, k]).unwrap();
    let ids = c.tensor(Elem::U32, &[rows, k]).unwrap();
    let amv = c.tensor(Elem::F32, &[rows, 1]).unwrap();
    let ami = c.tensor(Elem::U32, &[rows, 1]).unwrap();
    let mut step = c.step();
    step.top_k(&lt, k, &vals, &ids).unwrap();
    step.argmax(&lt, &amv, &ami).unwrap();
    let (a, b, am) = (step.read(&vals), step.read(&ids), step.read(&ami));
    let mut res = step.submit().unwrap();
    let (got_v, got_i, got_am) = (res.f32s(a), res.u32s(b), res.u32s(am));
    for r in 0..rows {
        let want = sorted_top_k(&logits[r * v..(r + 1) * v], k);
        let got: Vec<(f32, u32)> = (0..k).map(|j| (got_v[r * k + j], got_i[r * k + j])).collect();
        assert_eq!(got, want, "row {r}");
        assert_eq!(got_am[r], want[0].1);
    }
}

/// One sequence of the attention scenario: `cached` tokens already in the cache, `new` tokens
/// computed this step.
struct Seq {
    cached: usize,
    new: usize,
}

struct AttnCase {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    kv: KvPrecision,
    window: Option<usize>,
    softcap: Option<f32>,
    /// Each head's attention sink logit (gpt-oss), `[heads]`.
    sinks: Option<&'static [f32]>,
}

impl AttnCase {
    fn spec(&self) -> AttentionSpec {
        AttentionSpec {
            window: self.window,
            softcap: self.softcap,
            ..AttentionSpec::causal(self.heads, self.head_dim)
        }
    }
}

/// Per-position random q, k, v for `total` positions of one sequence.
struct SeqData {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn seq_data(case: &AttnCase, total: usize, seed: u64) -> SeqData {
    let mut rng = Rng::new(seed);
    SeqData {
        q: rng.vec(total * case.heads * case.head_dim),
        k: rng.vec(total * case.kv_heads * case.head_dim),
        v: rng.vec(total * case.kv_heads * case.head_dim),
    }
}

fn attention_reference(case: &AttnCase, d: &SeqData, pos: usize, head: usize) -> Vec<f64> {
    let (hd, kvh) = (case.head_dim, case.kv_heads);
    let g = head / (case.heads / kvh);
    let q = &d.q[(pos * case.heads + head) * hd..][..hd];
    let scale = 1.0 / (hd as f64).sqrt();
    let first = case.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    let keys = first..=pos;
    let scores: Vec<f64> = keys
        .clone()
        .map(|j| {
            let k = &d.k[(j * kvh + g) * hd..][..hd];
            let score = q.iter().zip(k).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>() * scale;
            case.softcap.map_or(score, |cap| f64::from(cap) * (score / f64::from(cap)).tanh())
        })
        .collect();
    // a sink joins the max and the denominator, with no value (transformers' GptOssAttention)
    let sink = case.sinks.map(|s| f64::from(s[head]));
    let max = scores.iter().copied().chain(sink).fold(f64::MIN, f64::max);
    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f64 = weights.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
    (0..hd)
        .map(|e| {
            keys.clone().zip(&weights).map(|(j, w)| w * f64::from(d.v[(j * kvh + g) * hd + e])).sum::<f64>()
                / total
        })
        .collect()
}

/// Runs steps over several sequences: each step computes the next chunk of every sequence
/// (chunk lengths from `chunks(seq index, step)`), writing K/V then attending (a step of
/// cached-prefix tokens only writes K/V). Returns each
/// sequence's attention output for every position it computed, in position order.
fn run_attention(
    case: &AttnCase,
    seqs: &[Seq],
    data: &[SeqData],
    schedule: &dyn Fn(usize, usize, usize) -> usize,
) -> Vec<Vec<f32>> {
    run_attention_on(ctx(), case, seqs, data, schedule)
}

/// [`run_attention`] on context `c`.
fn run_attention_on(
    c: &GpuContext,
    case: &AttnCase,
    seqs: &[Seq],
    data: &[SeqData],
    schedule: &dyn Fn(usize, usize, usize) -> usize,
) -> Vec<Vec<f32>> {
    let (hd, h, kvh, bs) = (case.head_dim, case.heads, case.kv_heads, case.block_size);
    let max_len = seqs.iter().map(|s| s.cached + s.new).max().unwrap();
    let max_blocks = max_len.div_ceil(bs);
    let num_blocks = 1 + seqs.len() * max_blocks;
    let shape = KvCacheShape { num_layers: 1, num_blocks, block_size: bs, num_kv_heads: kvh, head_dim: hd };
    let cache = c.kv_cache(shape, case.kv).unwrap();
    // Sequence s owns blocks in a scrambled order so block tables are not contiguous.
    let tables: Vec<Vec<u32>> = (0..seqs.len())
        .map(|s| (0..max_blocks).map(|b| (1 + (b * seqs.len() + s) * 7 % (num_blocks - 1)) as u32).collect())
        .collect();
    let mut done: Vec<usize> = vec![0; seqs.len()];
    let mut outs: Vec<Vec<f32>> = vec![Vec::new(); seqs.len()];
    let mut step_no = 0;
    while seqs.iter().zip(&done).any(|(s, &d)| d < s.cached + s.new) {
        let mut ids = Vec::new();
        let (mut q, mut k, mut v, mut slots) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut qsl, mut lens, mut table) = (vec![0u32], Vec::new(), Vec::new());
        for (s, seq) in seqs.iter().enumerate() {
            let end = seq.cached + seq.new;
            let n = schedule(s, step_no, done[s]).min(end - done[s]);
            if n == 0 {
                continue;
            }
            for p in done[s]..done[s] + n {
                q.extend_from_slice(&data[s].q[p * h * hd..][..h * hd]);
                k.extend_from_slice(&data[s].k[p * kvh * hd..][..kvh * hd]);
                v.extend_from_slice(&data[s].v[p * kvh * hd..][..kvh * hd]);
                slots.push(tables[s][p / bs] * bs as u32 + (p % bs) as u32);
            }
            ids.push((s, done[s], n));
            qsl.push(qsl.last().unwrap() + n as u32);
            lens.push((done[s] + n) as u32);
            table.extend_from_slice(&tables[s]);
            done[s] += n;
        }
        let t = slots.len();
        let b = lens.len();
        // One fused row per token, [q | k | v], as the model's projection writes it; RoPE at
        // angle 0 leaves it as it is, so rope_cache only writes K and V.
        let qkv: Vec<f32> = (0..t)
            .flat_map(|i| {
                [&q[i * h * hd..][..h * hd], &k[i * kvh * hd..][..kvh * hd], &v[i * kvh * hd..][..kvh * hd]]
            })
            .flatten()
            .copied()
            .collect();
        let qkv_t = c.upload_f32(&[t, (h + 2 * kvh) * hd], &qkv).unwrap();
        let st = c.upload_u32(&[t], &slots).unwrap();
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
            slot_mapping: &st,
            cache: &cache,
            layer: 0,
            heads: h,
            mode: RopeMode::Interleaved,
        };
        step.rope_cache(&qkv_t, &rope).unwrap();
        step_no += 1;
        // A step of cached-prefix tokens only just fills the cache: nothing reads its outputs.
        if ids.iter().all(|&(s, start, n)| start + n <= seqs[s].cached) {
            step.submit().unwrap();
            continue;
        }
        let sinks = case.sinks.map(|s| c.upload_f32(&[h], s).unwrap());
        step.paged_attention_sinks(&qkv_t, &cache, 0, &batch, &case.spec(), sinks.as_ref(), &out).unwrap();
        let id = step.read(&out);
        let o = step.submit().unwrap().f32s(id);
        let mut row = 0;
        for (s, start, n) in ids {
            if start + n > seqs[s].cached {
                let first = start.max(seqs[s].cached);
                outs[s].extend_from_slice(&o[(row + first - start) * h * hd..(row + n) * h * hd]);
            }
            row += n;
        }
    }
    outs
}

/// Full causal attention, 6 heads on 2 KV heads of 64, blocks of 16, f32 K/V.
const FULL: AttnCase = AttnCase {
    heads: 6,
    kv_heads: 2,
    head_dim: 64,
    block_size: 16,
    kv: KvPrecision::F32,
    window: None,
    softcap: None,
    sinks: None,
};

fn attention_cases() -> Vec<AttnCase> {
    vec![
        AttnCase { heads: 6, kv_heads: 2, head_dim: 64, block_size: 16, kv: KvPrecision::F32, ..FULL },
        AttnCase { heads: 4, kv_heads: 4, head_dim: 128, block_size: 32, kv: KvPrecision::F32, ..FULL },
        AttnCase { heads: 9, kv_heads: 3, head_dim: 64, block_size: 16, kv: KvPrecision::F16, ..FULL },
        AttnCase { heads: 2, kv_heads: 1, head_dim: 128, block_size: 32, kv: KvPrecision::Auto, ..FULL },
        // Sliding windows that start mid-block, one of them soft-capped (Gemma 2).
        AttnCase { window: Some(20), ..FULL },
        AttnCase { heads: 4, kv_heads: 2, block_size: 32, window: Some(37), softcap: Some(0.5), ..FULL },
    ]
}

#[test]
fn paged_attention_matches_reference_over_a_varlen_batch() {
    for case in attention_cases() {
        // A cached prefix then a prefill chunk; a long context over many blocks ending mid-block;
        // a decode; a one-token sequence.
        let seqs = [
            Seq { cached: 20, new: 13 },
            Seq { cached: 0, new: 150 },
            Seq { cached: 45, new: 1 },
            Seq { cached: 0, new: 1 },
        ];
        let data: Vec<SeqData> =
            seqs.iter().enumerate().map(|(s, q)| seq_data(&case, q.cached + q.new, 50 + s as u64)).collect();
        // Step 0 writes the cached prefixes; step 1 computes the new tokens.
        let outs = run_attention(&case, &seqs, &data, &|s, step, _| {
            if step == 0 { seqs[s].cached } else { usize::MAX }
        });
        let f16 =
            matches!(ctx().capabilities().kv_format(case.kv), KvFormat::F16Native | KvFormat::F16Packed);
        let tol = if f16 { 1e-2 } else { 1e-5 };
        for (s, seq) in seqs.iter().enumerate() {
            let (h, hd) = (case.heads, case.head_dim);
            for (i, pos) in (seq.cached..seq.cached + seq.new).enumerate() {
                for head in 0..h {
                    let want = attention_reference(&case, &data[s], pos, head);
                    let got = &outs[s][(i * h + head) * hd..][..hd];
                    for e in 0..hd {
                        assert!(
                            (f64::from(got[e]) - want[e]).abs() <= tol,
                            "hd{hd} bs{} {:?} seq {s} pos {pos} head {head} dim {e}: {} vs {}",
                            case.block_size,
                            case.kv,
                            got[e],
                            want[e]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn attention_is_bitwise_the_same_however_the_prompt_is_chunked() {
    for case in attention_cases() {
        let len = 90;
        let seqs = [Seq { cached: 0, new: len }, Seq { cached: 0, new: 40 }];
        let data: Vec<SeqData> =
            seqs.iter().enumerate().map(|(s, q)| seq_data(&case, q.cached + q.new, 70 + s as u64)).collect();
        let one_shot = run_attention(&case, &seqs[..1], &data[..1], &|_, _, _| usize::MAX);
        for chunk in [5usize, 16, 37, 1] {
            // The other sequence runs alongside with a different chunking.
            let chunked = run_attention(&case, &seqs, &data, &|s, _, _| if s == 0 { chunk } else { 3 });
            assert_eq!(
                bits(&chunked[0]),
                bits(&one_shot[0]),
                "hd{} {:?}: chunks of {chunk}",
                case.head_dim,
                case.kv
            );
        }
        // A prefix written by a prefill, then the rest decoded token by token.
        let prefix_then_decode =
            run_attention(&case, &seqs[..1], &data[..1], &|_, step, _| if step == 0 { 33 } else { 1 });
        assert_eq!(bits(&prefix_then_decode[0]), bits(&one_shot[0]));
    }
}

/// A context with the kernels discrete GPUs get (K-split linear, split-KV attention), forced on
/// whatever adapter runs the tests.
fn gpu_class_ctx() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| {
        let options = GpuOptions {
            linear_strategy: Some(LinearStrategy::KSplit),
            attention_strategy: Some(AttentionStrategy::SplitKv),
            ..GpuOptions::default()
        };
        GpuContext::new(&gpu_options_from_env(&options).unwrap()).expect("a wgpu adapter (lavapipe in CI)")
    })
}

/// Decodes at contexts of 1, 511, 512, 513, 4100 and 20,000 tokens (split-KV partitions of 16
/// keys but for the first: one of one key; 32, the last of 15; 32; 33, the last of one; 257,
/// the last of 4; 1,250; 20,000 keys walked by one per-query invocation is well past 65,535 / 16
/// loop iterations, where lavapipe, which ends every loop of an invocation once their
/// iterations together pass 65,535, would cut a walk costing 16 a key short) against the f64
/// reference, with both attention kernels; and across partitions the bits do not depend on the
/// batch or the chunking: the 20,000-token context's last 9 tokens prefilled at once, in
/// chunks of 4, or decoded one by one after the rest, alone or beside the other sequences.
#[test]
fn long_contexts_across_kv_partitions_match_the_reference_and_stay_invariant() {
    let case = AttnCase { heads: 2, kv_heads: 1, head_dim: 64, block_size: 16, ..FULL };
    let lens = [1usize, 511, 512, 513, 4100, 20_000];
    let seqs: Vec<Seq> = lens.iter().map(|&n| Seq { cached: n - 9.min(n), new: 9.min(n) }).collect();
    let data: Vec<SeqData> =
        seqs.iter().enumerate().map(|(s, q)| seq_data(&case, q.cached + q.new, 90 + s as u64)).collect();
    let long = seqs.len() - 1;
    for c in [ctx(), gpu_class_ctx()] {
        let path = c.capabilities().attention_path();
        let together = run_attention_on(c, &case, &seqs, &data, &after_the_prefix(&seqs));
        assert_near_reference(&together, &case, &seqs, &data, &format!("{path:?}"));
        let alone = |schedule: &dyn Fn(usize, usize, usize) -> usize| {
            run_attention_on(c, &case, &seqs[long..], &data[long..], schedule).remove(0)
        };
        let prefix = seqs[long].cached;
        let one_shot = alone(&|_, step, _| if step == 0 { prefix } else { usize::MAX });
        assert_eq!(bits(&one_shot), bits(&together[long]), "{path:?}: alone vs beside the others");
        let chunked = alone(&|_, step, _| if step == 0 { prefix } else { 4 });
        assert_eq!(bits(&chunked), bits(&one_shot), "{path:?}: chunks of 4 vs one-shot");
        let decoded = alone(&|_, step, _| if step == 0 { prefix } else { 1 });
        assert_eq!(bits(&decoded), bits(&one_shot), "{path:?}: decoded vs one-shot");
    }
}

/// Each sequence's cached prefix written in the first step, the rest of it in the second.
fn after_the_prefix(seqs: &[Seq]) -> impl Fn(usize, usize, usize) -> usize + '_ {
    |s, step, _| if step == 0 { seqs[s].cached } else { usize::MAX }
}

/// Asserts every position `run_attention_on` computed within 1e-5 of the f64 reference.
fn assert_near_reference(outs: &[Vec<f32>], case: &AttnCase, seqs: &[Seq], data: &[SeqData], what: &str) {
    for (s, seq) in seqs.iter().enumerate() {
        for (i, pos) in (seq.cached..seq.cached + seq.new).enumerate() {
            for head in 0..case.heads {
                let want = attention_reference(case, &data[s], pos, head);
                let got = &outs[s][(i * case.heads + head) * case.head_dim..][..case.head_dim];
                for (e, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(g) - w).abs() <= 1e-5,
                        "{what} hd{} context {} pos {pos} head {head} dim {e}: {g} vs {w}",
                        case.head_dim,
                        seq.cached + seq.new
                    );
                }
            }
        }
    }
}

/// A query walking 20,000 keys at head dimensions 128 and 256, with the adapter's attention
/// kernel and with split-KV. Inside the walk over the keys every loop over the head's pairs is
/// written out: lavapipe ends every loop of an invocation once their iterations together pass
/// 65,535, and as loops (which its compiler does not unroll past 32 trips) they cost their trip
/// count at every key: a per-query walk of 1,100 keys at 128 came out wrong, and a split-KV
/// walk of 20,000 keys at 256 (when partitions held 128 keys: 157 of them, five to an
/// invocation).
#[test]
fn wide_heads_walk_long_contexts_right() {
    let seqs = [Seq { cached: 19_999, new: 1 }];
    for head_dim in [128, 256] {
        let case = AttnCase { heads: 2, kv_heads: 1, head_dim, block_size: 16, ..FULL };
        let data = [seq_data(&case, 20_000, 95)];
        for c in [ctx(), gpu_class_ctx()] {
            let path = c.capabilities().attention_path();
            let outs = run_attention_on(c, &case, &seqs, &data, &after_the_prefix(&seqs));
            assert_near_reference(&outs, &case, &seqs, &data, &format!("{path:?}"));
        }
    }
}

/// A context of 40,000 keys, past [`CPU_PER_QUERY_MAX_KEYS`]: a CPU adapter not forced to per
/// query takes split-KV for it (a per-query walk that long outruns lavapipe's loop limit and
/// comes out wrong), and every adapter's result matches the reference.
#[test]
fn contexts_past_the_cpu_per_query_walk_take_split_kv() {
    let caps = ctx().capabilities();
    if caps.is_cpu && caps.forced_attention.is_none() {
        assert_eq!(caps.attention_path_for(CPU_PER_QUERY_MAX_KEYS), caps.attention_path());
        assert_eq!(caps.attention_path_for(40_000), AttentionPath::SplitKv);
        assert_eq!(caps.attention_path_for(CPU_PER_QUERY_MAX_KEYS + 1), AttentionPath::SplitKv);
    }
    let case = AttnCase { heads: 2, kv_heads: 1, head_dim: 64, block_size: 16, ..FULL };
    let seqs = [Seq { cached: 39_998, new: 2 }];
    let data = [seq_data(&case, 40_000, 97)];
    let outs = run_attention_on(ctx(), &case, &seqs, &data, &after_the_prefix(&seqs));
    assert_near_reference(&outs, &case, &seqs, &data, &format!("{:?}", caps.attention_path_for(40_000)));
}

/// Attention sinks (gpt-oss: a learned logit per head in the softmax's denominator, no value)
/// in every attention kernel — per query, its subgroup form, split-KV, flash (split-KV again
/// where the adapter's subgroups are narrower than 8 lanes) — against the f64
/// reference: 4 heads on 2 KV heads of 64, sinks below, among and far above the scores (one
/// that takes nearly all the weight), a full layer and a 16-key window (gpt-oss's alternation),
/// over a cached prefix with a prefill chunk, a 40-token prompt, a decode and a one-token
/// sequence; and on each kernel a query's bits do not depend on its batch or its chunking.
#[test]
fn attention_sinks_match_the_reference_on_every_kernel() {
    const SINKS: [f32; 4] = [0.0, -3.0, 2.5, 12.0];
    let sinking = AttnCase { heads: 4, kv_heads: 2, sinks: Some(&SINKS), ..FULL };
    let per_query =
        GpuOptions { attention_strategy: Some(AttentionStrategy::PerQuery), ..GpuOptions::default() };
    let (lanes, plain) = (ctx_with_subgroups(&per_query, true), ctx_with_subgroups(&per_query, false));
    let flash = GpuOptions { attention_strategy: Some(AttentionStrategy::Flash), ..GpuOptions::default() };
    let flash = ctx_with_subgroups(&flash, true);
    let seqs = [
        Seq { cached: 20, new: 13 },
        Seq { cached: 0, new: 40 },
        Seq { cached: 45, new: 1 },
        Seq { cached: 0, new: 1 },
    ];
    for case in [AttnCase { ..sinking }, AttnCase { window: Some(16), ..sinking }] {
        let data: Vec<SeqData> =
            seqs.iter().enumerate().map(|(s, q)| seq_data(&case, q.cached + q.new, 70 + s as u64)).collect();
        for c in [&lanes, &plain, gpu_class_ctx(), &flash] {
            let path = c.capabilities().attention_path();
            let together = run_attention_on(c, &case, &seqs, &data, &after_the_prefix(&seqs));
            assert_near_reference(&together, &case, &seqs, &data, &format!("sinks {path:?}"));
            let alone = run_attention_on(c, &case, &seqs[1..2], &data[1..2], &|_, _, _| 7);
            assert_eq!(bits(&alone[0]), bits(&together[1]), "sinks {path:?}: chunks of 7 alone vs batched");
        }
    }
}

/// A context with `options` and the adapter's subgroups (`subgroups`) or none, beside what the
/// environment masks.
fn ctx_with_subgroups(options: &GpuOptions, subgroups: bool) -> GpuContext {
    let options =
        GpuOptions { disable_features: FeatureMask { f16: false, subgroup: !subgroups }, ..options.clone() };
    GpuContext::new(&gpu_options_from_env(&options).unwrap()).unwrap()
}

/// Each of `cases` over `seqs` (their cached prefixes written in one step, their new tokens
/// attended in the next, data from `seed`) has the same bits on `got` as on `want`.
fn assert_same_attention_bits(
    want: &GpuContext,
    got: &GpuContext,
    cases: Vec<AttnCase>,
    seqs: &[Seq],
    seed: u64,
) {
    for case in cases {
        let data: Vec<SeqData> = seqs
            .iter()
            .enumerate()
            .map(|(s, q)| seq_data(&case, q.cached + q.new, seed + s as u64))
            .collect();
        let schedule = |s: usize, step: usize, _| if step == 0 { seqs[s].cached } else { usize::MAX };
        let want = run_attention_on(want, &case, seqs, &data, &schedule);
        let got = run_attention_on(got, &case, seqs, &data, &schedule);
        for (s, (got, want)) in got.iter().zip(&want).enumerate() {
            let what = format!("hd{} {:?} window {:?}: sequence {s}", case.head_dim, case.kv, case.window);
            assert_eq!(bits(got), bits(want), "{what}");
        }
    }
}

/// The per-query attention kernel and its subgroup form (one subgroup of
/// `ATTENTION_DOT_LANES` lanes per query and up to `ATTENTION_MAX_GROUP` heads of a KV head:
/// lavapipe's), bit for bit, over the varlen batch of
/// `paged_attention_matches_reference_over_a_varlen_batch` (groups of 3, 1, 3, 2, 3 and 2
/// heads), two head dimensions whose pairs do not fill every lane alike (72: 36 pairs, lanes 0-3
/// hold five; 80: five each), groups of 2 out of 10 heads, 4 out of 8 and 1 out of 7, and
/// Gemma's head dimension 256 with a window.
#[test]
fn the_subgroup_attention_kernel_gives_the_per_query_kernels_bits() {
    let per_query =
        GpuOptions { attention_strategy: Some(AttentionStrategy::PerQuery), ..GpuOptions::default() };
    let lanes = ctx_with_subgroups(&per_query, true);
    if lanes.capabilities().attention_path() != AttentionPath::PerQuerySubgroup {
        eprintln!("skipped: this device's subgroups are not of {} lanes", shader::ATTENTION_DOT_LANES);
        return;
    }
    let plain = ctx_with_subgroups(&per_query, false);
    assert_eq!(plain.capabilities().attention_path(), AttentionPath::PerQuery);
    let mut cases = attention_cases();
    cases.push(AttnCase { heads: 10, kv_heads: 1, head_dim: 72, kv: KvPrecision::F16, ..FULL });
    cases.push(AttnCase { heads: 4, kv_heads: 2, head_dim: 80, block_size: 32, window: Some(45), ..FULL });
    cases.push(AttnCase { heads: 16, kv_heads: 2, head_dim: 128, kv: KvPrecision::F16, ..FULL });
    cases.push(AttnCase { heads: 7, kv_heads: 1, head_dim: 96, softcap: Some(0.5), ..FULL });
    cases.push(AttnCase {
        heads: 8,
        kv_heads: 4,
        head_dim: 256,
        kv: KvPrecision::F16,
        window: Some(100),
        ..FULL
    });
    let seqs = [
        Seq { cached: 20, new: 13 },
        Seq { cached: 0, new: 150 },
        Seq { cached: 45, new: 1 },
        Seq { cached: 0, new: 1 },
    ];
    assert_same_attention_bits(&plain, &lanes, cases, &seqs, 30);
}

/// One decode row of every weight type through the K-split GEMV on `c`: plain, normed, and a
/// gated weight over the normed row, each `n` outputs of rows of `k`.
fn gemv_outputs(c: &GpuContext, dtype: DType, k: usize) -> Vec<f32> {
    let n = 37;
    let w_bytes = quantize(dtype, &Rng::new(41).vec(n * k));
    let up_bytes = quantize(dtype, &Rng::new(42).vec(n * k));
    let w = c.upload_weight("w", dtype, n, k, &w_bytes).unwrap();
    let gated = c.upload_gated_weight("gate_up", dtype, n, k, &w_bytes, &up_bytes).unwrap();
    let norm = c.upload_f32(&[k], &Rng::new(43).vec(k)).unwrap();
    let x = c.upload_f32(&[1, k], &Rng::new(44).vec(k)).unwrap();
    let normed = LinearInput::rms_normed(&x, &norm, 1e-5);
    let outs = [0, 1, 2].map(|_| c.tensor(Elem::F32, &[1, n]).unwrap());
    let mut step = c.step();
    step.linear(&x, &w, &outs[0]).unwrap();
    step.linear(normed, &w, &outs[1]).unwrap();
    step.linear_gated(normed, &gated, GateActivation::Silu, &outs[2]).unwrap();
    let ids = outs.each_ref().map(|t| step.read(t));
    let mut read = step.submit().unwrap();
    ids.into_iter().flat_map(|id| read.f32s(id)).collect()
}

/// The K-split GEMV and split-KV attention add their invocations' partial results by one fixed
/// tree, its levels under 8 or 32 lanes (the widest the adapter's smallest subgroup holds) in
/// shuffles, and every level in workgroup memory where subgroups are masked or may be narrower
/// than 8: the same bits either way. Every weight type at rows
/// that leave most lanes idle and rows where every lane sums several runs, plain, normed and
/// gated; the
/// attention cases and heads of 72 and 256 (several rounds of the value tree).
#[test]
fn the_subgroup_tree_gives_the_shared_trees_bits() {
    let gpu_class = GpuOptions {
        linear_strategy: Some(LinearStrategy::KSplit),
        attention_strategy: Some(AttentionStrategy::SplitKv),
        ..GpuOptions::default()
    };
    let shuffled = ctx_with_subgroups(&gpu_class, true);
    if shuffled.capabilities().tree() == Tree::Shared {
        eprintln!("skipped: this device has no subgroups of 8 lanes or more");
        return;
    }
    let shared = ctx_with_subgroups(&gpu_class, false);
    assert_eq!(shared.capabilities().tree(), Tree::Shared);
    for &dtype in WEIGHT_TYPES {
        for k in [invariance_k(dtype), 2304] {
            let want = gemv_outputs(&shared, dtype, k);
            assert_eq!(bits(&gemv_outputs(&shuffled, dtype, k)), bits(&want), "{dtype:?}, rows of {k}");
        }
    }
    let mut cases = attention_cases();
    cases.push(AttnCase { heads: 10, kv_heads: 1, head_dim: 72, kv: KvPrecision::F16, ..FULL });
    cases.push(AttnCase { heads: 8, kv_heads: 4, head_dim: 256, window: Some(100), ..FULL });
    let seqs = [Seq { cached: 20, new: 13 }, Seq { cached: 0, new: 150 }, Seq { cached: 700, new: 1 }];
    assert_same_attention_bits(&shared, &shuffled, cases, &seqs, 60);
}

/// With `profile_kernels`, every dispatch is timed under its variant's label and a repeated
/// step creates nothing; without it there are no kernel times.
#[test]
fn kernel_times_count_every_dispatch_by_variant() {
    let options = GpuOptions { profile_kernels: true, ..GpuOptions::default() };
    let c = match GpuContext::new(&gpu_options_from_env(&options).unwrap()) {
        Err(GpuError::BadOption(message)) => {
            assert!(!ctx().capabilities().timestamp_query, "{message}");
            return;
        }
        opened => opened.unwrap(),
    };
    assert!(ctx().kernel_times().is_none(), "a context opened without profile_kernels");
    let (rows, k, n) = (3, 64, 40);
    let x = c.upload_f32(&[rows, k], &Rng::new(1).vec(rows * k)).unwrap();
    let norm = c.upload_f32(&[k], &Rng::new(2).vec(k)).unwrap();
    let h = c.tensor(Elem::F32, &[rows, k]).unwrap();
    let w = c.upload_weight("w", DType::Q8_0, n, k, &quantize(DType::Q8_0, &Rng::new(3).vec(n * k))).unwrap();
    let out = c.tensor(Elem::F32, &[rows, n]).unwrap();
    let run = || {
        let mut step = c.step();
        step.rms_norm(&x, &norm, 1e-5, &h).unwrap();
        step.linear(&h, &w, &out).unwrap();
        step.rms_norm(&x, &norm, 1e-5, &h).unwrap();
        let id = step.read(&out);
        step.submit().unwrap().f32s(id)
    };
    let first = run();
    let (times, counters) = (c.kernel_times().unwrap(), c.counters());
    assert_eq!(run(), first);
    let created = c.counters().since(&counters);
    assert_eq!((created.buffers_created, created.bind_groups_created), (0, 0), "a repeated profiled step");
    let step = c.kernel_times().unwrap().since(&times);
    let dispatches = |prefix: &str| {
        step.by_time()
            .iter()
            .filter(|(label, _)| label.starts_with(prefix))
            .map(|(_, t)| t.dispatches)
            .sum::<u64>()
    };
    assert_eq!((dispatches("rms_norm"), dispatches("linear/q8_0")), (2, 1), "{:?}", step.by_time());
    assert_eq!(step.total().dispatches, created.dispatches);
    assert_eq!(c.kernel_times().unwrap().total().dispatches, 6);
    assert!(step.by_time().iter().all(|(_, t)| !t.device_time.is_zero()), "{:?}", step.by_time());
    // Past one query set's 4096 timestamps: the linear's are the second set's.
    let before = c.kernel_times().unwrap();
    let mut step = c.step();
    for _ in 0..2100 {
        step.rms_norm(&x, &norm, 1e-5, &h).unwrap();
    }
    step.linear(&h, &w, &out).unwrap();
    step.submit().unwrap();
    let long = c.kernel_times().unwrap().since(&before);
    let linear = long.by_time().into_iter().find(|(label, _)| label.starts_with("linear/")).unwrap().1;
    assert_eq!((linear.dispatches, long.total().dispatches), (1, 2101));
    assert!(!linear.device_time.is_zero(), "{:?}", long.by_time());
}

#[test]
fn the_device_summary_names_every_kernel_family_choice() {
    let caps = ctx().capabilities();
    eprintln!("{}\n{}", caps.device_summary(), caps.variant_summary());
    assert!(caps.variant_summary().starts_with("linear: "));
    assert!(caps.device_summary().contains(&caps.adapter_name));
}

#[test]
fn bad_shapes_are_errors_not_panics() {
    let c = ctx();
    let (w, _) = weight(DType::F32, 4, 8, 1);
    let x = c.tensor(Elem::F32, &[2, 7]).unwrap();
    let out = c.tensor(Elem::F32, &[2, 4]).unwrap();
    let mut step = c.step();
    assert!(matches!(step.linear(&x, &w, &out), Err(GpuError::Shape(_))));
    let ids = c.tensor(Elem::U32, &[2]).unwrap();
    assert!(matches!(step.write_u32(&out, &[1]), Err(GpuError::Shape(_))), "an f32 tensor");
    assert!(matches!(step.write_u32(&ids, &[1, 2, 3]), Err(GpuError::Shape(_))), "past the buffer");
    let x8 = c.tensor(Elem::F32, &[2, 8]).unwrap();
    let not_gated = step.linear_gated(&x8, &w, GateActivation::Silu, &out);
    assert!(matches!(not_gated, Err(GpuError::Shape(ref m)) if m.contains("gated")), "{not_gated:?}");
    assert!(matches!(c.upload_weight("q", DType::Q4_1, 2, 33, &[0; 40]), Err(GpuError::Shape(_))));
    assert!(matches!(c.upload_weight("f", DType::F32, 2, 3, &[0; 20]), Err(GpuError::Shape(_))));
    let shape = KvCacheShape { num_layers: 1, num_blocks: 4, block_size: 65, num_kv_heads: 1, head_dim: 64 };
    assert!(matches!(c.kv_cache(shape, KvPrecision::F32), Err(GpuError::Shape(_))));
    // The rotary epilogue: a Q/K/V row of 2 query and 1 KV heads of 2; what it cannot rotate
    // (half-split pairs, a pair cut at an odd column, a row of the wrong width, a bias of the
    // wrong length) is an error, and the model's question says no to it.
    let shape = KvCacheShape { num_layers: 1, num_blocks: 4, block_size: 16, num_kv_heads: 1, head_dim: 2 };
    let cache = c.kv_cache(shape, KvPrecision::F32).unwrap();
    let (pairs, slots) = (c.tensor(Elem::U32, &[2]).unwrap(), c.tensor(Elem::U32, &[2]).unwrap());
    let inv = c.tensor(Elem::F32, &[1]).unwrap();
    let mut rope = RopeCacheArgs {
        positions: &pairs,
        inv_freq: &inv,
        qk_norm: None,
        slot_mapping: &slots,
        cache: &cache,
        layer: 0,
        heads: 2,
        mode: RopeMode::Interleaved,
    };
    let (qkv, bias) = (c.tensor(Elem::F32, &[2, 8]).unwrap(), c.tensor(Elem::F32, &[3]).unwrap());
    assert!(step.can_fuse_rope_cache(LinearInput::Plain(&x8), &w, None, 0, &rope));
    let fuses = step.fuses_rope_cache(LinearInput::Plain(&x8), &w, None, 0, &rope);
    assert_eq!(fuses, c.capabilities().fuses_rope(), "PAGODA_ROPE says");
    assert!(!step.can_fuse_rope_cache(LinearInput::Plain(&x8), &w, None, 3, &rope), "an odd column");
    let odd = step.linear_rope_cache(&x8, &w, None, &qkv, 3, &rope);
    assert!(matches!(odd, Err(GpuError::Shape(ref m)) if m.contains("pair")), "{odd:?}");
    let narrow = step.linear_rope_cache(&x8, &w, None, &out, 0, &rope);
    assert!(matches!(narrow, Err(GpuError::Shape(ref m)) if m.contains("Q/K/V row")), "{narrow:?}");
    let bias4 = c.tensor(Elem::F32, &[4]).unwrap();
    if c.capabilities().limits.max_storage_buffers_per_shader_stage >= 9 {
        assert!(step.can_fuse_rope_cache(LinearInput::Plain(&x8), &w, Some(&bias4), 0, &rope), "a bias");
    }
    let short = step.linear_rope_cache(&x8, &w, Some(&bias), &qkv, 0, &rope);
    assert!(matches!(short, Err(GpuError::Shape(ref m)) if m.contains("bias")), "{short:?}");
    rope.mode = RopeMode::HalfSplit;
    assert!(!step.can_fuse_rope_cache(LinearInput::Plain(&x8), &w, None, 0, &rope), "half-split");
    let half = step.linear_rope_cache(&x8, &w, None, &qkv, 0, &rope);
    assert!(matches!(half, Err(GpuError::Shape(ref m)) if m.contains("interleaved")), "{half:?}");
    // A scratch tensor whose pooled buffer (a power of two) would pass the binding limit.
    let past = c.max_binding_bytes() as usize / 4 + 1;
    let scratch = step.scratch(Elem::F32, &[past]);
    assert!(matches!(scratch, Err(GpuError::TooLarge(_))), "{scratch:?}");
    // Reading no rows gives no values (as does taking a readback twice).
    let mut step = c.step();
    let none = step.read(&out.rows(0).unwrap());
    let mut read = step.submit().unwrap();
    assert_eq!((read.f32s(none), read.u32s(none)), (vec![], vec![]));
}

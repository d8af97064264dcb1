//! The cooperative-matrix linear path (`shaders/linear_coop.wgsl`) against a plain-Rust f64
//! reference for every weight type, and its batch invariance (bitwise): a decode row, padded
//! to the decode tile, has the bits of the same row in a prefill batch, through every epilogue
//! and a fused norm, which give the bits of the separate kernels.
//!
//! It runs the path `PAGODA_LINEAR` forces (`coop`: the adapter's matrices, an error where it
//! has none, as `scripts/gpu-bench.sh` runs it; `coop-emulated`, `coop-emulated-f32`), else the
//! adapter's matrices where it offers them, else their emulation in plain arithmetic over
//! workgroup memory (lavapipe in CI): NVIDIA's 16x16 f16 matrices for everything, Metal's 8x8
//! f32 ones for the reference and invariance of a few types. The tolerance follows the
//! matrices' inputs: f16 activations and weights err by 2^-11 each.

mod kernels_support;

use std::sync::OnceLock;

use kernels_support::{Rng, bits};
use pagoda::dtype::{DType, dequantize, quantize};
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::shader::WEIGHT_DTYPES;
use pagoda::gpu::*;

/// A context on the cooperative path, and the matrices it multiplies with.
struct Coop {
    ctx: GpuContext,
    shape: CoopShape,
}

fn open(strategy: Option<LinearStrategy>) -> Coop {
    let options = gpu_options_from_env(&GpuOptions { linear_strategy: strategy, ..GpuOptions::default() })
        .expect("PAGODA_* options");
    let ctx =
        GpuContext::new(&options).expect("a wgpu adapter (lavapipe in CI) that runs the cooperative path");
    let LinearPath::Coop { shape, emulated } = ctx.capabilities().linear_path() else {
        panic!("not on the cooperative path: {}", ctx.capabilities().variant_summary());
    };
    eprintln!("cooperative path: {}{}", shape.name(), if emulated { " emulated" } else { "" });
    Coop { ctx, shape }
}

/// The contexts every test runs on: the path `PAGODA_LINEAR` forces, else the adapter's
/// matrices, else NVIDIA's emulated.
fn main_ctx() -> &'static Coop {
    static CTX: OnceLock<Coop> = OnceLock::new();
    CTX.get_or_init(|| {
        let forced = std::env::var("PAGODA_LINEAR").ok().map(|v| LinearStrategy::parse(&v).unwrap());
        match forced {
            Some(s @ (LinearStrategy::Coop | LinearStrategy::CoopEmulated(_))) => open(Some(s)),
            _ => {
                let probe = GpuContext::new(&GpuOptions {
                    linear_strategy: Some(LinearStrategy::KSplit),
                    ..gpu_options_from_env(&GpuOptions::default()).unwrap()
                })
                .expect("a wgpu adapter");
                let offered = probe.capabilities().coop.is_ok();
                drop(probe);
                let emulated = LinearStrategy::CoopEmulated(CoopShape::F16_16);
                open(Some(if offered { LinearStrategy::Coop } else { emulated }))
            }
        }
    })
}

/// Metal's 8x8 f32 matrices, emulated, where [`main_ctx`] emulates NVIDIA's: the tiles of
/// the other size and input type. `None` where the main context runs real matrices.
fn small_ctx() -> Option<&'static Coop> {
    static CTX: OnceLock<Option<Coop>> = OnceLock::new();
    CTX.get_or_init(|| {
        let emulated =
            matches!(main_ctx().ctx.capabilities().linear_path(), LinearPath::Coop { emulated: true, .. });
        emulated.then(|| open(Some(LinearStrategy::CoopEmulated(CoopShape::F32_8))))
    })
    .as_ref()
}

fn upload(c: &Coop, dtype: DType, rows: usize, cols: usize, seed: u64) -> (Weight, Vec<f32>) {
    let bytes = quantize(dtype, &Rng::new(seed).vec(rows * cols));
    let w = c.ctx.upload_weight("w", dtype, rows, cols, &bytes).unwrap();
    (w, dequantize(dtype, &bytes))
}

fn linear(c: &Coop, x: &[f32], m: usize, w: &Weight) -> Vec<f32> {
    let xt = c.ctx.upload_f32(&[m, w.cols()], x).unwrap();
    let out = c.ctx.tensor(Elem::F32, &[m, w.rows()]).unwrap();
    let mut step = c.ctx.step();
    step.linear(&xt, w, &out).unwrap();
    let id = step.read(&out);
    step.submit().unwrap().f32s(id)
}

/// Asserts `got` is x · w within what the matrices' inputs allow: each product's inputs
/// rounded to f16 (2^-11 each) for f16 matrices, then K f32 additions.
fn assert_dot_close(shape: CoopShape, got: f32, x: &[f32], w: &[f32], what: &str) {
    let exact: f64 = x.iter().zip(w).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
    let magnitude: f64 = x.iter().zip(w).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
    let inputs = match shape.elem {
        CoopElem::F16 => 2.0 * 2f64.powi(-11) * 1.01,
        CoopElem::F32 => 0.0,
    };
    let tol = (inputs + x.len() as f64 * 6e-8) * magnitude + 1e-30;
    assert!((f64::from(got) - exact).abs() <= tol, "{what}: got {got}, exact {exact}, tol {tol}");
}

/// Rows of K for `dtype`, and output columns: whole blocks for a block format (read in 16-byte
/// units; a decode stage of 128 left partial where the blocks allow); for the others a K past
/// every boundary (a group of 8, a matrix step of 16, a stage of 32), read a word at a time.
/// 70 columns leave the last tile of each size partial.
fn shapes(dtype: DType) -> &'static [(usize, usize)] {
    match dtype.block_len() {
        256 => &[(512, 70)],
        32 => &[(160, 70)],
        _ => &[(107, 70)],
    }
}

/// Batches of 1 (the decode tile) and 37 (prefill tiles, the last partial), every output
/// against the reference.
fn matches_reference(c: &Coop, types: &[DType]) {
    for &dtype in types {
        for (i, &(k, n)) in shapes(dtype).iter().enumerate() {
            let (w, wf) = upload(c, dtype, n, k, 10 + i as u64);
            for m in [1, 37] {
                let x = Rng::new(100 + i as u64).vec(m * k);
                let y = linear(c, &x, m, &w);
                for r in 0..m {
                    for col in 0..n {
                        let what = format!("{} {dtype:?} m{m} k{k} n{n} at ({r}, {col})", c.shape.name());
                        let (xr, wr) = (&x[r * k..(r + 1) * k], &wf[col * k..(col + 1) * k]);
                        assert_dot_close(c.shape, y[r * n + col], xr, wr, &what);
                    }
                }
            }
        }
    }
}

/// A row alone (the decode tile, padded) has the bits of the same row at another place in
/// batches that fill the decode tile or take prefill tiles.
fn rows_are_batch_invariant(c: &Coop, types: &[DType]) {
    let size = c.shape.size as usize;
    for &dtype in types {
        for &(k, n) in shapes(dtype) {
            let (w, _) = upload(c, dtype, n, k, 7);
            let batch = Rng::new(8).vec(48 * k);
            let row = 11;
            let alone = linear(c, &batch[row * k..(row + 1) * k], 1, &w);
            for m in [3, size, size + 1, 48] {
                let at = (row * 7 + m) % m;
                let mut x = batch[..m * k].to_vec();
                x[at * k..(at + 1) * k].copy_from_slice(&batch[row * k..(row + 1) * k]);
                let y = linear(c, &x, m, &w);
                let what = format!("{} {dtype:?} k{k}: row alone vs at {at} of {m}", c.shape.name());
                assert_eq!(bits(&y[at * n..(at + 1) * n]), bits(&alone), "{what}");
            }
        }
    }
}

#[test]
fn coop_linear_matches_the_f64_reference_for_every_weight_type() {
    matches_reference(main_ctx(), &WEIGHT_DTYPES);
    if let Some(small) = small_ctx() {
        matches_reference(small, &[DType::F32, DType::Q8_0, DType::Q4K]);
    }
}

#[test]
fn a_decode_row_has_the_bits_of_the_same_row_in_any_batch_for_every_weight_type() {
    let c = main_ctx();
    let kernels = [1, 16, 17].map(|m| c.ctx.capabilities().linear_kernel(m));
    let [decode, prefill] = c.shape.tiles().map(LinearKernel::Coop);
    let size = c.shape.size as usize;
    assert_eq!(kernels, [decode, if size < 16 { prefill } else { decode }, prefill]);
    rows_are_batch_invariant(c, &WEIGHT_DTYPES);
    if let Some(small) = small_ctx() {
        rows_are_batch_invariant(small, &[DType::F32, DType::Q8_0, DType::Q4K]);
    }
}

/// The epilogues and the fused norm give the bits of the separate kernels on the cooperative
/// path, decode row and prefill batch alike, for a dense type (its activations read a word at a
/// time) and a format of super-blocks (in 16-byte units): `linear_add` is `linear` then
/// `add_in_place`, `linear_into` with a bias is `linear` then the bias, `linear_gated` is two
/// `linear`s then `gated_mul`, and each over `LinearInput::rms_normed` rows is `rms_norm` then
/// the same kernel; a fused row alone equals the same row in a batch of 37.
#[test]
fn epilogues_and_the_fused_norm_equal_the_separate_kernels_bit_for_bit() {
    let c = main_ctx();
    let g = &c.ctx;
    let eps = 1e-5;
    for dtype in [DType::F16, DType::Q4K] {
        let (k, n) = shapes(dtype)[0];
        let gate_bytes = quantize(dtype, &Rng::new(21).vec(n * k));
        let up_bytes = quantize(dtype, &Rng::new(22).vec(n * k));
        let gate = g.upload_weight("gate", dtype, n, k, &gate_bytes).unwrap();
        let up = g.upload_weight("up", dtype, n, k, &up_bytes).unwrap();
        let gated = g.upload_gated_weight("gate_up", dtype, n, k, &gate_bytes, &up_bytes).unwrap();
        let bias = Rng::new(23).vec(n);
        let bias_t = g.upload_f32(&[n], &bias).unwrap();
        let norm = g.upload_f32(&[k], &Rng::new(26).vec(k)).unwrap();
        let batch = Rng::new(24).vec(37 * k);
        let residual = Rng::new(25).vec(37 * n);
        // linear_add, linear_into with the bias (its columns of a wider row) and linear_gated
        // of the first m rows of `rows`, normed on the way in with `normed`.
        let fused = |rows: &[f32], m: usize, normed: bool| -> [Vec<f32>; 3] {
            let x = g.upload_f32(&[m, k], &rows[..m * k]).unwrap();
            let input = if normed { LinearInput::rms_normed(&x, &norm, eps) } else { LinearInput::Plain(&x) };
            let acc = g.upload_f32(&[m, n], &residual[..m * n]).unwrap();
            let wide = g.tensor(Elem::F32, &[m, n + 5]).unwrap();
            let act = g.tensor(Elem::F32, &[m, n]).unwrap();
            let mut step = g.step();
            step.linear_add(input, &gate, &acc).unwrap();
            step.linear_into(input, &gate, Some(&bias_t), &wide, 5).unwrap();
            step.linear_gated(input, &gated, GateActivation::Silu, &act).unwrap();
            let ids = [step.read(&acc), step.read(&wide), step.read(&act)];
            let mut out = step.submit().unwrap();
            let into = out.f32s(ids[1]).chunks(n + 5).flat_map(|row| row[5..].to_vec()).collect();
            [out.f32s(ids[0]), into, out.f32s(ids[2])]
        };
        for m in [1, 37] {
            let (gl, ul) = (linear(c, &batch[..m * k], m, &gate), linear(c, &batch[..m * k], m, &up));
            let (gt, ut) = (g.upload_f32(&[m, n], &gl).unwrap(), g.upload_f32(&[m, n], &ul).unwrap());
            let res = g.upload_f32(&[m, n], &residual[..m * n]).unwrap();
            let act = g.tensor(Elem::F32, &[m, n]).unwrap();
            let mut step = g.step();
            step.add_in_place(&res, &gt).unwrap();
            step.gated_mul(GateActivation::Silu, &gt, &ut, &act).unwrap();
            let ids = (step.read(&res), step.read(&act));
            let mut out = step.submit().unwrap();
            let biased: Vec<f32> = gl.iter().enumerate().map(|(i, v)| v + bias[i % n]).collect();
            let [added, into, gated_out] = fused(&batch, m, false);
            assert_eq!(bits(&added), bits(&out.f32s(ids.0)), "{dtype:?} m{m}: linear_add");
            assert_eq!(bits(&into), bits(&biased), "{dtype:?} m{m}: linear_into with a bias");
            assert_eq!(bits(&gated_out), bits(&out.f32s(ids.1)), "{dtype:?} m{m}: linear_gated");
            let x = g.upload_f32(&[m, k], &batch[..m * k]).unwrap();
            let normed_t = g.tensor(Elem::F32, &[m, k]).unwrap();
            let mut step = g.step();
            step.rms_norm(&x, &norm, eps, &normed_t).unwrap();
            let id = step.read(&normed_t);
            let normed = step.submit().unwrap().f32s(id);
            let separate = fused(&normed, m, false);
            for (what, (a, b)) in
                ["add", "into", "gated"].iter().zip(fused(&batch, m, true).iter().zip(&separate))
            {
                assert_eq!(bits(a), bits(b), "{dtype:?} m{m}: normed {what} vs rms_norm then {what}");
            }
        }
        for normed in [false, true] {
            let alone = fused(&batch, 1, normed);
            let in_batch = fused(&batch, 37, normed);
            for (what, (a, b)) in ["add", "into", "gated"].iter().zip(alone.iter().zip(&in_batch)) {
                assert_eq!(bits(&b[..n]), bits(a), "{dtype:?} normed {normed}: {what} row alone vs in 37");
            }
        }
    }
}

/// RoPE and the K/V write in the Q/K/V projection's epilogue give the bits of `linear_into`
/// then `rope_cache` on the cooperative path, in the row and both pools, with and without
/// biases, for a decode row and a prefill batch.
#[test]
fn the_rotary_epilogue_equals_linear_then_rope_cache_bit_for_bit() {
    let c = main_ctx();
    let g = &c.ctx;
    let (heads, kv_heads, hd, k) = (4, 2, 16, 256);
    let width = (heads + 2 * kv_heads) * hd;
    let (w, _) = upload(c, DType::Q4K, width, k, 31);
    let bias = g.upload_f32(&[width], &Rng::new(34).vec(width)).unwrap();
    let shape =
        KvCacheShape { num_layers: 1, num_blocks: 8, block_size: 16, num_kv_heads: kv_heads, head_dim: hd };
    let inv = g.upload_f32(&[hd / 2], &rope_inv_freq(hd, 10000.0, None)).unwrap();
    for (m, with_bias) in [(1, false), (37, true)] {
        let x = g.upload_f32(&[m, k], &Rng::new(33).vec(m * k)).unwrap();
        let positions: Vec<u32> = (0..m as u32).map(|i| 5 * i + 2).collect();
        let slots: Vec<u32> = (0..m as u32).map(|i| if i % 5 == 4 { u32::MAX } else { 100 - i }).collect();
        let (pt, st) = (g.upload_u32(&[m], &positions).unwrap(), g.upload_u32(&[m], &slots).unwrap());
        let bias = with_bias.then_some(&bias);
        let project = |fused: bool| {
            let cache = g.kv_cache(shape, KvPrecision::F32).unwrap();
            let qkv = g.tensor(Elem::F32, &[m, width]).unwrap();
            let rope = RopeCacheArgs {
                positions: &pt,
                inv_freq: &inv,
                qk_norm: None,
                slot_mapping: &st,
                cache: &cache,
                layer: 0,
                heads,
                mode: RopeMode::Interleaved,
            };
            let mut step = g.step();
            if fused {
                assert!(step.can_fuse_rope_cache(LinearInput::Plain(&x), &w, bias, 0, &rope));
                step.linear_rope_cache(&x, &w, bias, &qkv, 0, &rope).unwrap();
            } else {
                step.linear_into(&x, &w, bias, &qkv, 0).unwrap();
                step.rope_cache(&qkv, &rope).unwrap();
            }
            let id = step.read(&qkv);
            let row = step.submit().unwrap().f32s(id);
            let (kc, vc) = g.read_kv_layer(&cache, 0).unwrap();
            (row, kc, vc)
        };
        let (fused, separate) = (project(true), project(false));
        let what = format!("m{m} bias {with_bias}");
        assert_eq!(bits(&fused.0), bits(&separate.0), "{what}: the Q/K/V row");
        assert_eq!(bits(&fused.1), bits(&separate.1), "{what}: the K pool");
        assert_eq!(bits(&fused.2), bits(&separate.2), "{what}: the V pool");
        assert!(fused.1.iter().any(|&v| v != 0.0), "{what}: nothing cached");
    }
}

/// Forcing the adapter's matrices where it has none is a typed error naming why; forcing them
/// or their emulation never leaves the cooperative path for any batch.
#[test]
fn forced_matrices_are_refused_where_the_adapter_has_none_and_never_left_by_a_batch() {
    let c = main_ctx();
    let caps = c.ctx.capabilities();
    if caps.coop.is_err() {
        let options = GpuOptions { linear_strategy: Some(LinearStrategy::Coop), ..GpuOptions::default() };
        match GpuContext::new(&gpu_options_from_env(&options).unwrap()) {
            Err(GpuError::Unsupported(why)) => assert!(why.contains("cooperative"), "{why}"),
            Err(e) => panic!("forced matrices on an adapter without them: {e}"),
            Ok(_) => panic!("forced matrices opened on an adapter without them"),
        }
    }
    let [decode, prefill] = c.shape.tiles().map(LinearKernel::Coop);
    for m in 1..=300 {
        let want = if m <= c.shape.size as usize { decode } else { prefill };
        assert_eq!(caps.linear_kernel(m), want, "batch of {m}");
    }
    assert!(caps.variant_summary().starts_with("linear: cooperative matrices of "));
    assert_eq!(caps.weight_source(), WeightSource::Buffer);
}

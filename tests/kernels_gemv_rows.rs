//! The K-split GEMV over several rows of x (llama.cpp's `NUM_COLS`): a workgroup decodes each
//! lane's run of weights once and multiplies it by the activations of up to 8 rows, each row
//! summed in the one-row GEMV's order (the same lanes' runs, the same tree). Every row of a
//! batched decode (1 to 8 rows a workgroup, full and ragged groups, up to 32 rows) has the bits
//! of the same row decoded alone and of the same row in the prefill GEMM's tiles, for every
//! weight type, every epilogue and a plain or normed input, the norm fused or apart: which
//! kernel a batch takes never changes a result. Forces the K-split path on whatever adapter
//! runs it.
//!
//! CI runs a short version (every weight type through every kernel size, fewer batches and
//! lone rows); scripts/test-long.sh (`PAGODA_TEST_LONG=1`) runs the full sweep.

mod kernels_support;

use kernels_support::{Rng, bits};
use pagoda::dtype::{DType, quantize};
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::shader::WEIGHT_DTYPES;
use pagoda::gpu::*;

fn ksplit_ctx(norm: Option<Fusion>) -> GpuContext {
    let options = GpuOptions {
        linear_strategy: Some(LinearStrategy::KSplit),
        norm_strategy: norm,
        ..GpuOptions::default()
    };
    GpuContext::new(&gpu_options_from_env(&options).unwrap()).expect("a wgpu adapter (lavapipe in CI)")
}

/// Rows of a weight of `dtype` long enough that every one of the 64 lanes sums two runs of 16
/// and some three, with (for the formats without blocks) eleven single weights past the runs.
fn long_k(dtype: DType) -> usize {
    match dtype.block_len() {
        256 => 2304,
        32 => 2112,
        _ => 2091,
    }
}

/// Output columns: nine workgroups of 4 and one of a single column.
const N: usize = 37;

/// Whether this is scripts/test-long.sh's run (the full sweeps), not CI's.
fn long_run() -> bool {
    std::env::var("PAGODA_TEST_LONG").is_ok_and(|v| !v.is_empty())
}

/// Batches of 1 to 8 rows (one workgroup, ragged past 3, 5, 6 and 7 rows), 13 (two of 8, the
/// second ragged) and 32 (four full ones: the most the GEMV takes).
const BATCHES: [usize; 10] = [1, 2, 3, 4, 5, 6, 7, 8, 13, 32];

/// CI's batches: each GEMV size once (1 row alone, 2, a ragged 4, a full 8) and two workgroups
/// of 8, the second ragged.
const CI_BATCHES: [usize; 4] = [2, 3, 8, 13];

#[test]
fn the_batch_takes_the_fewest_gemv_rows_that_hold_it_then_the_gemm() {
    let c = ksplit_ctx(None);
    let mut caps = c.capabilities().clone();
    let gemv = |rows| LinearKernel::Gemv { rows };
    let gemm = |band_rows| LinearKernel::Gemm { band_rows };
    let kernels = |caps: &Capabilities| [1, 2, 3, 4, 5, 6, 7, 8, 13, 32, 40].map(|m| caps.linear_kernel(m));
    assert_eq!(caps.gemv_max_rows(), 8);
    assert_eq!(
        kernels(&caps),
        [gemv(1), gemv(2), gemv(4), gemv(4), gemv(8), gemv(8), gemv(8), gemv(8), gemv(8), gemv(8), gemm(4)]
    );
    assert_eq!(linear_warm_up_rows(&caps), [1, 2, 3, 5, 33], "each kernel's smallest batch");
    caps.forced_gemv_rows = Some(GemvRows::new(2).unwrap());
    assert_eq!(
        kernels(&caps),
        [gemv(1), gemv(2), gemv(2), gemv(2), gemv(2), gemv(2), gemv(2), gemv(2), gemm(2), gemm(4), gemm(4)],
        "at most 2 rows a workgroup, 8 rows a batch"
    );
    caps.forced_gemv_rows = Some(GemvRows::new(1).unwrap());
    assert_eq!(linear_warm_up_rows(&caps), [1, 5, 16], "the one-row GEMV up to 4 rows, then the GEMM");
    assert!(GemvRows::parse("3").is_err() && GemvRows::parse("16").is_err() && GemvRows::parse("x").is_err());
    // A one-row GEMV fuses the norm before it, more rows do not unless forced.
    assert!(caps.fuses_norms(gemv(1)) && !caps.fuses_norms(gemv(2)) && !caps.fuses_norms(gemv(8)));
    caps.forced_norm = Some(Fusion::Fused);
    assert!(caps.fuses_norms(gemv(8)));
    let variant = |caps: &Capabilities, m| {
        let (prologue, epilogue) = (LinearPrologue::Plain, LinearEpilogue::Store);
        linear_variant_of(caps, DType::Q4K, WeightSource::Buffer, 4096, m, prologue, epilogue)
    };
    let label = variant(c.capabilities(), 32).label();
    assert!(label.starts_with("linear/q4_k/ksplit-x16") && label.ends_with("/gemv8/store"), "{label}");
    assert_eq!(variant(c.capabilities(), 32).rows_per_workgroup(), 8);
    assert!(variant(c.capabilities(), 40).label().contains("/gemm16/"));
    // A GEMV workgroup of 8 rows holds its partial sums (and a fused norm's) in WebGPU's 16 KiB.
    let gated = linear_variant_of(
        &caps,
        DType::Q4K,
        WeightSource::Buffer,
        4096,
        8,
        LinearPrologue::RmsNorm,
        LinearEpilogue::Gated(GateActivation::Silu),
    );
    let bytes = gated.reflect().unwrap().workgroup_bytes;
    assert!(bytes <= 16 << 10, "{bytes} bytes");
}

/// The rows `start .. start + m` of `x` through `w` for each of `ranges`, in one step.
fn store(c: &GpuContext, w: &Weight, x: &[f32], ranges: &[(usize, usize)]) -> Vec<Vec<f32>> {
    let k = w.cols();
    let mut step = c.step();
    let mut ids = Vec::new();
    for &(start, m) in ranges {
        let xt = c.upload_f32(&[m, k], &x[start * k..(start + m) * k]).unwrap();
        let y = c.tensor(Elem::F32, &[m, w.rows()]).unwrap();
        step.linear(&xt, w, &y).unwrap();
        ids.push(step.read(&y));
    }
    let mut out = step.submit().unwrap();
    ids.into_iter().map(|id| out.f32s(id)).collect()
}

/// Each row of each batch of `sizes` equals the same row alone, bit for bit.
fn assert_rows_alone(sizes: &[usize], alone: &[Vec<f32>], batches: &[Vec<f32>], n: usize, what: &str) {
    for (&m, batch) in sizes.iter().zip(batches) {
        for (r, row) in alone.iter().enumerate().take(m) {
            assert_eq!(bits(&batch[r * n..(r + 1) * n]), bits(row), "{what}: row {r} of {m}");
        }
    }
}

/// Every weight type (its lane runs, or two groups of 8 for the formats without runs of their
/// own, the last weights past the runs one by one) at rows where every lane sums several runs:
/// every row of each batch has the bits of the row alone. The GEMM's rows have those bits too
/// (below, tests/kernels_gemm_tiles.rs, and tests/kernels_reference.rs on the K-split path).
#[test]
fn every_weight_type_gives_each_row_of_a_batch_the_one_row_bits() {
    let c = ksplit_ctx(None);
    let sizes: &[usize] = if long_run() { &BATCHES } else { &CI_BATCHES };
    let m_max = sizes[sizes.len() - 1];
    for dtype in WEIGHT_DTYPES {
        let k = long_k(dtype);
        let w = c.upload_weight("w", dtype, N, k, &quantize(dtype, &Rng::new(1).vec(N * k))).unwrap();
        let x = Rng::new(2).vec(m_max * k);
        let alone = store(&c, &w, &x, &(0..m_max).map(|r| (r, 1)).collect::<Vec<_>>());
        let batches = store(&c, &w, &x, &sizes.iter().map(|&m| (0, m)).collect::<Vec<_>>());
        assert_rows_alone(sizes, &alone, &batches, N, &format!("{dtype:?}"));
    }
}

/// A weight of each kind and what the rows run through it read.
struct Case {
    w: Weight,
    gated: Weight,
    bias: Tensor,
    norm: Tensor,
    x: Vec<f32>,
    residual: Vec<f32>,
}

const EPS: f32 = 1e-5;

/// Rows `start .. start + m` of the case through each fused epilogue, the input normed or not,
/// one step for all of `ranges`: `linear` (store), `linear_gated`, `linear_add` onto their
/// residual rows, and `linear_into` with the bias from column 3 of a wider row; each list the
/// four outputs of a range, one after the other.
fn epilogues(c: &GpuContext, case: &Case, normed: bool, ranges: &[(usize, usize)]) -> Vec<Vec<f32>> {
    let (k, n) = (case.w.cols(), case.w.rows());
    let mut step = c.step();
    let mut ids = Vec::new();
    for &(start, m) in ranges {
        let x = c.upload_f32(&[m, k], &case.x[start * k..(start + m) * k]).unwrap();
        let input =
            if normed { LinearInput::rms_normed(&x, &case.norm, EPS) } else { LinearInput::Plain(&x) };
        let y = c.tensor(Elem::F32, &[m, n]).unwrap();
        let act = c.tensor(Elem::F32, &[m, case.gated.rows()]).unwrap();
        let acc = c.upload_f32(&[m, n], &case.residual[start * n..(start + m) * n]).unwrap();
        let wide = c.tensor(Elem::F32, &[m, n + 3]).unwrap();
        step.linear(input, &case.w, &y).unwrap();
        step.linear_gated(input, &case.gated, GateActivation::Silu, &act).unwrap();
        step.linear_add(input, &case.w, &acc).unwrap();
        step.linear_into(input, &case.w, Some(&case.bias), &wide, 3).unwrap();
        ids.push([&y, &act, &acc, &wide].map(|t| step.read(t)));
    }
    let mut out = step.submit().unwrap();
    ids.into_iter()
        .map(|[y, act, acc, wide]| {
            let into: Vec<f32> = out.f32s(wide).chunks(n + 3).flat_map(|row| row[3..].to_vec()).collect();
            // Row by row: store, gated, add, bias.
            let parts = [out.f32s(y), out.f32s(act), out.f32s(acc), into];
            (0..parts[0].len() / n)
                .flat_map(|r| parts.iter().flat_map(move |p| p[r * n..(r + 1) * n].to_vec()))
                .collect()
        })
        .collect()
}

/// The batches of the epilogue test: 4 rows a workgroup with one ragged, two workgroups of 8
/// (the second ragged), and in the long run the GEMM (tests/kernels_gemm_tiles.rs holds its
/// rows to the GEMV's bits in CI).
fn epilogue_batches() -> &'static [usize] {
    if long_run() { &[3, 13, 40] } else { &[3, 13] }
}

/// The fused epilogues (store, gated, accumulate, bias into a wider row) over plain rows and
/// over normed rows with the norm fused into the GEMV of several rows (its scales summed for
/// all the workgroup's rows) and into the GEMM: every row of a batch has the bits of the row
/// alone (the one-row GEMV with its norm fused), for the dense formats' grouped runs (F16) and a
/// format with lane runs of its own (Q4_K). tests/kernels_reference.rs checks every weight type
/// with the norm in its own dispatch on the K-split path.
#[test]
fn fused_epilogues_and_norms_keep_each_rows_bits_in_a_batch() {
    let (apart, fused) = (ksplit_ctx(None), ksplit_ctx(Some(Fusion::Fused)));
    assert!(!apart.capabilities().fuses_norms(LinearKernel::Gemv { rows: 8 }));
    let sizes = epilogue_batches();
    let m_max = sizes[sizes.len() - 1];
    for dtype in [DType::F16, DType::Q4K] {
        let k = long_k(dtype);
        let bytes = |seed| quantize(dtype, &Rng::new(seed).vec(N * k));
        let cases = [&apart, &fused].map(|c| Case {
            w: c.upload_weight("w", dtype, N, k, &bytes(1)).unwrap(),
            gated: c.upload_gated_weight("gate_up", dtype, N, k, &bytes(2), &bytes(3)).unwrap(),
            bias: c.upload_f32(&[N], &Rng::new(4).vec(N)).unwrap(),
            norm: c.upload_f32(&[k], &Rng::new(5).vec(k)).unwrap(),
            x: Rng::new(6).vec(m_max * k),
            residual: Rng::new(7).vec(m_max * N),
        });
        let batches: Vec<(usize, usize)> = sizes.iter().map(|&m| (0, m)).collect();
        let singles: Vec<(usize, usize)> = (0..m_max).map(|r| (r, 1)).collect();
        // A plain input reads no norm: the fused context runs the same kernels.
        for (c, case, normed, how) in
            [(&apart, &cases[0], false, "plain"), (&fused, &cases[1], true, "normed, the norm fused")]
        {
            let alone = epilogues(&apart, &cases[0], normed, &singles);
            let got = epilogues(c, case, normed, &batches);
            assert_rows_alone(sizes, &alone, &got, 4 * N, &format!("{dtype:?} {how}"));
        }
    }
}

/// A weight of more rows than one grid dimension holds workgroups of (a large vocabulary's
/// head: Gemma 3's 262,144 rows are 65,536 workgroups of 4), whose workgroups wrap into the
/// grid's z: the last row of a batch of 3 (one ragged workgroup of 4 rows), and in the long
/// run every row, has the bits of the row alone, in the columns past the wrap too (each pass
/// over the 65,537 workgroups takes seconds on lavapipe).
#[test]
fn the_gemv_over_several_rows_wraps_its_columns_into_z_as_the_one_row_gemv_does() {
    let c = ksplit_ctx(None);
    let max_dim = c.capabilities().limits.max_compute_workgroups_per_dimension as usize;
    let (n, k, m) = (4 * max_dim + 5, 32, 3);
    let variant = linear_variant_of(
        c.capabilities(),
        DType::F32,
        WeightSource::Buffer,
        k,
        m,
        LinearPrologue::Plain,
        LinearEpilogue::Store,
    );
    assert_eq!(variant.rows_per_workgroup(), 4);
    assert!(n.div_ceil(variant.columns_tile() as usize) > max_dim, "the grid does not wrap");
    let w =
        c.upload_weight("head", DType::F32, n, k, &quantize(DType::F32, &Rng::new(8).vec(n * k))).unwrap();
    let x = Rng::new(9).vec(m * k);
    let lone = if long_run() { 0..m } else { m - 1..m };
    let alone = store(&c, &w, &x, &lone.clone().map(|r| (r, 1)).collect::<Vec<_>>());
    let batch = store(&c, &w, &x, &[(0, m)]);
    for (r, row) in lone.zip(&alone) {
        assert_eq!(bits(&batch[0][r * n..(r + 1) * n]), bits(row), "f32 head past the grid's x: row {r}");
    }
    // The columns past the wrap are written, not left at zero.
    assert!(batch[0][(m - 1) * n + n - 5..].iter().all(|&v| v != 0.0));
}

//! The K-split prefill GEMM at every tile an adapter or a batch may pick (8, 16 and 32 rows):
//! each row of a batch has the bits of the same row through the decode GEMV, with every
//! epilogue and a plain or normed input, in full tiles and partial ones, so which tile runs
//! never changes a result. Forces the K-split path, the largest tile and the GEMV of one row a
//! workgroup (so that batches past 4 rows take the GEMM; tests/kernels_gemv_rows.rs checks the
//! GEMV over several rows) on whatever adapter runs it.

mod kernels_support;

use kernels_support::{Rng, bits};
use pagoda::dtype::{DType, quantize};
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::*;

fn ksplit_ctx(gemm_rows: u32) -> GpuContext {
    let options = GpuOptions {
        linear_strategy: Some(LinearStrategy::KSplit),
        gemm_rows: Some(GemmRows::new(gemm_rows).unwrap()),
        gemv_rows: Some(GemvRows::new(1).unwrap()),
        ..GpuOptions::default()
    };
    GpuContext::new(&gpu_options_from_env(&options).unwrap())
        .expect("a wgpu adapter (lavapipe in CI) with the workgroup memory of the GEMM tile")
}

/// Batches that take each tile up to 32 rows (`gemm_band_rows`), with full and partial tiles.
const BATCHES: [usize; 5] = [5, 9, 17, 33, 64];
const EPS: f32 = 1e-5;

/// A weight of each kind and what the rows run through it read.
struct Case {
    w: Weight,
    gated: Weight,
    bias: Tensor,
    norm: Option<Tensor>,
    x: Vec<f32>,
    residual: Vec<f32>,
}

/// Rows `start .. start + m` of the case through each fused epilogue, the input normed or not,
/// one step for all of `ranges`: `linear` (store), `linear_gated`, `linear_add` onto their
/// residual rows, and `linear_into` with the bias from column 3 of a wider row.
fn epilogues(c: &GpuContext, case: &Case, ranges: &[(usize, usize)]) -> Vec<[Vec<f32>; 4]> {
    let (k, n) = (case.w.cols(), case.w.rows());
    let mut step = c.step();
    let mut ids = Vec::new();
    for &(start, m) in ranges {
        let x = c.upload_f32(&[m, k], &case.x[start * k..(start + m) * k]).unwrap();
        let input = match &case.norm {
            Some(g) => LinearInput::rms_normed(&x, g, EPS),
            None => LinearInput::Plain(&x),
        };
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
            let into = out.f32s(wide).chunks(n + 3).flat_map(|row| row[3..].to_vec()).collect();
            [out.f32s(y), out.f32s(act), out.f32s(acc), into]
        })
        .collect()
}

#[test]
fn every_gemm_tile_gives_each_row_the_gemv_bits() {
    let c = ksplit_ctx(32);
    let kernels = BATCHES.map(|m| c.capabilities().linear_kernel(m));
    assert_eq!(kernels.map(|k| k.rows()), [8, 8, 16, 32, 32]);
    assert!(kernels.iter().all(|k| matches!(k, LinearKernel::Gemm { .. })), "{kernels:?}");
    let m_max = BATCHES[BATCHES.len() - 1];
    for dtype in [DType::F16, DType::Q8_0, DType::Q4K] {
        // Past 64 runs of 16, so every lane sums two runs and some three (Q4_K's runs spread over
        // four sub-blocks of a super-block), then (f16) eleven single weights past the runs.
        let (k, n) = match dtype.block_len() {
            256 => (2304, 37),
            32 => (2112, 37),
            _ => (2091, 37),
        };
        let bytes = |seed| quantize(dtype, &Rng::new(seed).vec(n * k));
        for normed in [false, true] {
            let case = Case {
                w: c.upload_weight("w", dtype, n, k, &bytes(1)).unwrap(),
                gated: c.upload_gated_weight("gate_up", dtype, n, k, &bytes(2), &bytes(3)).unwrap(),
                bias: c.upload_f32(&[n], &Rng::new(4).vec(n)).unwrap(),
                norm: normed.then(|| c.upload_f32(&[k], &Rng::new(5).vec(k)).unwrap()),
                x: Rng::new(6).vec(m_max * k),
                residual: Rng::new(7).vec(m_max * n),
            };
            let alone = epilogues(&c, &case, &(0..m_max).map(|r| (r, 1)).collect::<Vec<_>>());
            let batches = epilogues(&c, &case, &BATCHES.map(|m| (0, m)));
            for (m, batch) in BATCHES.into_iter().zip(batches) {
                for (r, row) in alone.iter().enumerate().take(m) {
                    for (what, (got, want)) in
                        ["store", "gated", "add", "bias"].iter().zip(batch.iter().zip(row))
                    {
                        assert_eq!(
                            bits(&got[r * n..(r + 1) * n]),
                            bits(want),
                            "{dtype:?} normed {normed}: row {r} of {m}, {what}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_gemm_tile_follows_the_batch_up_to_the_adapters_largest() {
    let c = ksplit_ctx(16);
    assert_eq!(c.capabilities().gemm_max_rows(), 16);
    let mut caps = c.capabilities().clone();
    let tiles = |caps: &Capabilities| [4, 7, 8, 15, 16, 31, 32, 4096].map(|m| 4 * caps.gemm_band_rows(m));
    assert_eq!(tiles(&caps), [8, 8, 8, 8, 16, 16, 16, 16]);
    assert_eq!(
        linear_warm_up_rows(&caps),
        [1, 5, 16],
        "the one-row GEMV's batches of up to 4 and each tile's smallest batch past them"
    );
    for (forced, expected, warm_up) in
        [(8, [8; 8], vec![1, 5]), (32, [8, 8, 8, 8, 16, 16, 32, 32], vec![1, 5, 16, 32])]
    {
        caps.forced_gemm_rows = Some(GemmRows::new(forced).unwrap());
        assert_eq!(tiles(&caps), expected, "forced {forced}");
        assert_eq!(linear_warm_up_rows(&caps), warm_up, "forced {forced}");
    }
    caps.forced_linear = Some(LinearStrategy::Sequential);
    assert_eq!(linear_warm_up_rows(&caps), [1, 4, 8], "the sequential kernel's tiles of 1, 4 and 8 rows");
    caps.forced_linear = Some(LinearStrategy::KSplit);
    caps.forced_gemm_rows = None;
    caps.limits.max_compute_workgroup_storage_size = 64 << 10;
    assert_eq!(caps.gemm_max_rows(), 16, "16 rows unless forced, however much memory there is");
    caps.limits.max_compute_workgroup_storage_size = 12 << 10;
    assert_eq!(
        caps.gemm_max_rows(),
        16,
        "the GEMM tiles take their norm from its own dispatch: 16 rows fit 12 KiB"
    );
    assert!(!caps.gemm_fits(32));
    caps.forced_norm = Some(Fusion::Fused);
    assert!(caps.gemm_fits(8) && !caps.gemm_fits(16));
    assert_eq!(caps.gemm_max_rows(), 8, "the largest tile that fits when 16 rows with a fused norm do not");
    assert!(GemmRows::parse("24").is_err() && GemmRows::parse("x").is_err());
    let small = GpuOptions {
        linear_strategy: Some(LinearStrategy::KSplit),
        gemm_rows: Some(GemmRows::new(32).unwrap()),
        webgpu_default_limits: true,
        ..GpuOptions::default()
    };
    assert!(GpuContext::new(&gpu_options_from_env(&small).unwrap()).is_ok(), "32 rows fit WebGPU's 16 KiB");
    let fused = GpuOptions { norm_strategy: Some(Fusion::Fused), ..small };
    let refused = GpuContext::new(&gpu_options_from_env(&fused).unwrap());
    assert!(
        matches!(refused, Err(GpuError::BadOption(_))),
        "a forced tile the device cannot hold (32 rows with a fused norm in 16 KiB) is refused"
    );
}

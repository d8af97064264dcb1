//! The sequential kernels read the same words from a weight texture as from a storage buffer:
//! every weight type, through the linear, gated and embedding kernels, gives the same bits
//! from either source, at shapes whose rows end mid-group and whose words fill more than a
//! texture row. Forces the sequential path and each source on whatever adapter runs it.

mod kernels_support;

use kernels_support::{Rng, bits};
use pagoda::dtype::{DType, quantize};
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::shader::WEIGHT_DTYPES;
use pagoda::gpu::*;

fn ctx(source: WeightSource) -> GpuContext {
    let options = GpuOptions {
        linear_strategy: Some(LinearStrategy::Sequential),
        weight_source: Some(source),
        ..GpuOptions::default()
    };
    GpuContext::new(&gpu_options_from_env(&options).unwrap()).expect("a wgpu adapter (lavapipe in CI)")
}

/// `[n, k]`: an odd K for the dense types (a row's last group ends mid-word, its padding read as
/// zeros), three blocks for the quantized ones (an odd count, so split rows pad their headers),
/// and enough rows (563) that every type's words fill more than one texture row of 8192 words
/// (the smallest rows, Q4_0's three blocks, take 16 words).
fn shape(dtype: DType) -> (usize, usize) {
    match dtype.block_len() {
        1 => (563, 75),
        len => (563, 3 * len),
    }
}

/// Every output a weight of `dtype` gives from `c`: the linear of 5 rows (the four-row tile
/// and a row alone), the gated linear of one row (its up rows after the gate rows), and the
/// embedding rows of some ids. The epilogues and input norms only see the sums, so they do
/// not depend on the source.
fn outputs(c: &GpuContext, dtype: DType) -> Vec<Vec<f32>> {
    let (n, k) = shape(dtype);
    let bytes = |seed| quantize(dtype, &Rng::new(seed).vec(n * k));
    let w = c.upload_weight("w", dtype, n, k, &bytes(1)).unwrap();
    let gated = c.upload_gated_weight("gate_up", dtype, n, k, &bytes(2), &bytes(3)).unwrap();
    let x = c.upload_f32(&[5, k], &Rng::new(4).vec(5 * k)).unwrap();
    let y = c.tensor(Elem::F32, &[5, n]).unwrap();
    let act = c.tensor(Elem::F32, &[1, n]).unwrap();
    let rows = c.upload_u32(&[5], &[0, 562, 7, 318, 1]).unwrap();
    let embedded = c.tensor(Elem::F32, &[5, k]).unwrap();
    let mut step = c.step();
    step.linear(&x, &w, &y).unwrap();
    step.linear_gated(&x.rows(1).unwrap(), &gated, GateActivation::Silu, &act).unwrap();
    step.embed(&rows, &w, &embedded).unwrap();
    let ids = [&y, &act, &embedded].map(|t| step.read(t));
    let mut out = step.submit().unwrap();
    ids.into_iter().map(|id| out.f32s(id)).collect()
}

#[test]
fn a_weight_texture_gives_the_bits_of_its_buffer() {
    let (buffer, texture) = (ctx(WeightSource::Buffer), ctx(WeightSource::Texture));
    assert_eq!(texture.capabilities().weight_source(), WeightSource::Texture);
    assert_eq!(buffer.capabilities().weight_source(), WeightSource::Buffer);
    for dtype in WEIGHT_DTYPES {
        let (n, k) = shape(dtype);
        let from_texture = outputs(&texture, dtype);
        let from_buffer = outputs(&buffer, dtype);
        assert_eq!(from_texture.len(), from_buffer.len());
        for (i, (got, want)) in from_texture.iter().zip(&from_buffer).enumerate() {
            assert!(got.iter().all(|v| v.is_finite()), "{dtype:?} output {i}: not finite");
            assert_eq!(bits(got), bits(want), "{dtype:?} [{n}, {k}] output {i}");
        }
    }
}

#[test]
fn a_weight_is_stored_where_the_adapter_reads_it() {
    let texture = ctx(WeightSource::Texture);
    let w = texture.upload_weight("w", DType::F16, 4, 64, &quantize(DType::F16, &[0.5; 256])).unwrap();
    assert_eq!(w.source(), WeightSource::Texture);
    let buffer = ctx(WeightSource::Buffer);
    let w = buffer.upload_weight("w", DType::F16, 4, 64, &quantize(DType::F16, &[0.5; 256])).unwrap();
    assert_eq!(w.source(), WeightSource::Buffer);
}

#[test]
fn weight_textures_on_the_k_split_path_are_a_bad_option() {
    let options = GpuOptions {
        linear_strategy: Some(LinearStrategy::KSplit),
        weight_source: Some(WeightSource::Texture),
        ..GpuOptions::default()
    };
    match GpuContext::new(&gpu_options_from_env(&options).unwrap()) {
        Err(GpuError::BadOption(message)) => assert!(message.contains("sequential"), "{message}"),
        other => panic!("expected a bad option, got {:?}", other.map(|_| ())),
    }
    assert_eq!(WeightSource::parse(" Texture ").unwrap(), WeightSource::Texture);
    assert!(matches!(WeightSource::parse("image"), Err(GpuError::BadOption(_))));
}

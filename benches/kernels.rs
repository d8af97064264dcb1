//! Kernel throughput on the selected adapter (`PAGODA_*` env as for the engine).
//!
//! Linear layers at SmolLM2-135M's shapes for M = 1, 8, 32, 256 and weights in f32, f16, Q8_0
//! and Q4_1; decode GEMV (M = 1) of every quantized type at those shapes and at a 7B model's
//! 4096 × 4096 (and of the dense types there), and a prefill of 32 rows (M = 32) of every
//! quantized type at 4096 × 4096, their bytes the weights alone
//! (so bytes/s reads as weight bandwidth); paged-attention decode at contexts 128, 1024, 4096 for batches of 1, 8, 32.
//! Criterion's "elements" are FLOPs (so elem/s reads as FLOP/s) and its bytes are the weight
//! (or KV) bytes plus activations each iteration touches. One iteration is one submitted step
//! holding `reps` identical dispatches, so submit overhead is amortised. The `dispatch` group
//! measures that overhead instead: steps of 1, 64 and 256 dispatches that do almost nothing.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use pagoda::dtype::{DType, quantize};
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::shader::WEIGHT_DTYPES;
use pagoda::gpu::{
    AttentionBatch, AttentionPath, AttentionSpec, AttentionStrategy, Elem, GpuContext, GpuOptions,
    KvCacheShape, KvPrecision,
};

/// (K, N, name) of SmolLM2-135M's projections and its 49152-row LM head.
const LINEAR_SHAPES: [(usize, usize, &str); 5] = [
    (576, 576, "q_o"),
    (576, 192, "k_v"),
    (576, 1536, "gate_up"),
    (1536, 576, "down"),
    (576, 49152, "lm_head"),
];

/// (K, N, name) of a 7B model's 4096 × 4096 projection.
const PROJ_7B: (usize, usize, &str) = (4096, 4096, "proj_7b");

fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 2654435761usize) % 2001) as f32 / 1000.0 - 1.0).collect()
}

/// Dispatches per step so that one step does at least ~50 MFLOP.
fn reps_for(flops: u64) -> usize {
    (50_000_000 / flops.max(1)).clamp(1, 64) as usize
}

fn bench_linear(c: &mut Criterion, ctx: &GpuContext) {
    let mut group = c.benchmark_group("linear");
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    for dtype in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_1] {
        for (k, n, name) in LINEAR_SHAPES {
            let bytes = quantize(dtype, &values(n * k));
            let w = ctx.upload_weight(name, dtype, n, k, &bytes).expect("upload");
            for m in [1usize, 8, 32, 256] {
                let x = ctx.upload_f32(&[m, k], &values(m * k)).expect("x");
                let y = ctx.tensor(Elem::F32, &[m, n]).expect("y");
                let flops = 2 * (m * n * k) as u64;
                let reps = reps_for(flops);
                let touched = bytes.len() + 4 * (m * k + m * n);
                group.throughput(Throughput::ElementsAndBytes {
                    elements: flops * reps as u64,
                    bytes: (touched * reps) as u64,
                });
                let id = BenchmarkId::new(format!("{}/{name}_k{k}_n{n}", dtype.name()), format!("m{m}"));
                group.bench_function(id, |b| {
                    b.iter(|| {
                        let mut step = ctx.step();
                        for _ in 0..reps {
                            step.linear(&x, &w, &y).expect("linear");
                        }
                        black_box(step.submit().expect("submit"));
                    })
                });
            }
        }
    }
    group.finish();
}

/// The quantized weight types.
fn quantized() -> Vec<DType> {
    WEIGHT_DTYPES.into_iter().filter(|dtype| dtype.is_quantized()).collect()
}

/// Decode GEMV of every quantized type: the default model's shapes whose rows make whole blocks
/// (K-quants need K a multiple of 256: the 1536-wide down projection) and 4096 × 4096; and of
/// the dense types at 4096 × 4096, where no format is decoded (what the kernel's loads, lanes
/// and tree cost without it).
fn bench_gemv(c: &mut Criterion, ctx: &GpuContext) {
    let shapes: Vec<_> = LINEAR_SHAPES.into_iter().chain([PROJ_7B]).collect();
    bench_weights(c, ctx, "gemv_quant", 1, &shapes, &quantized());
    bench_weights(c, ctx, "gemv_dense", 1, &[PROJ_7B], &[DType::F32, DType::F16, DType::BF16]);
}

/// Prefill of 32 rows through every quantized type at 4096 × 4096 (on GPUs two GEMM tiles of
/// 16 rows, their lanes walking blocks).
fn bench_quantized_gemm(c: &mut Criterion, ctx: &GpuContext) {
    bench_weights(c, ctx, "gemm_quant", 32, &[PROJ_7B], &quantized());
}

/// Group `name`: `m` rows through each of `dtypes` at each of `shapes` whose rows make whole
/// blocks, bytes the weights alone (so bytes/s reads as weight bandwidth).
fn bench_weights(
    c: &mut Criterion,
    ctx: &GpuContext,
    name: &str,
    m: usize,
    shapes: &[(usize, usize, &str)],
    dtypes: &[DType],
) {
    let mut group = c.benchmark_group(name);
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    for &(k, n, name) in shapes {
        for &dtype in dtypes {
            if !k.is_multiple_of(dtype.block_len()) {
                continue;
            }
            let bytes = quantize(dtype, &values(n * k));
            let w = ctx.upload_weight(name, dtype, n, k, &bytes).expect("upload");
            let x = ctx.upload_f32(&[m, k], &values(m * k)).expect("x");
            let y = ctx.tensor(Elem::F32, &[m, n]).expect("y");
            let flops = 2 * (m * n * k) as u64;
            let reps = reps_for(flops);
            group.throughput(Throughput::ElementsAndBytes {
                elements: flops * reps as u64,
                bytes: (bytes.len() * reps) as u64,
            });
            group.bench_function(BenchmarkId::new(dtype.name(), format!("{name}_k{k}_n{n}")), |b| {
                b.iter(|| {
                    let mut step = ctx.step();
                    for _ in 0..reps {
                        step.linear(&x, &w, &y).expect("linear");
                    }
                    black_box(step.submit().expect("submit"));
                })
            });
        }
    }
    group.finish();
}

/// Paged-attention decode with `ctx`'s attention kernel, rows `{prefix}ctxN/bB`.
fn bench_attention(c: &mut Criterion, ctx: &GpuContext, prefix: &str) {
    let (heads, kv_heads, head_dim, block_size) = (9usize, 3usize, 64usize, 16usize);
    let mut group = c.benchmark_group("paged_attention_decode");
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    for context in [128usize, 1024, 4096] {
        for batch in [1usize, 8, 32] {
            let blocks_per_seq = context.div_ceil(block_size);
            let num_blocks = 1 + batch * blocks_per_seq;
            let shape =
                KvCacheShape { num_layers: 1, num_blocks, block_size, num_kv_heads: kv_heads, head_dim };
            let cache = ctx.kv_cache(shape, KvPrecision::Auto).expect("kv cache");
            let table: Vec<u32> = (0..batch * blocks_per_seq).map(|i| 1 + i as u32).collect();
            let qsl: Vec<u32> = (0..=batch as u32).collect();
            let attn = AttentionBatch {
                query_start_loc: ctx.upload_u32(&[batch + 1], &qsl).expect("qsl"),
                seq_lens: ctx.upload_u32(&[batch], &vec![context as u32; batch]).expect("lens"),
                block_table: ctx.upload_u32(&[batch, blocks_per_seq], &table).expect("table"),
            };
            let q = ctx.upload_f32(&[batch, heads * head_dim], &values(batch * heads * head_dim)).expect("q");
            let out = ctx.tensor(Elem::F32, &[batch, heads * head_dim]).expect("out");
            let flops = (4 * batch * context * heads * head_dim) as u64;
            let reps = reps_for(flops);
            let kv_bytes = (2 * batch * context * kv_heads * head_dim * cache.format().elem_bytes()) as u64;
            group.throughput(Throughput::ElementsAndBytes {
                elements: flops * reps as u64,
                bytes: kv_bytes * reps as u64,
            });
            let spec = AttentionSpec::causal(heads, head_dim);
            group.bench_function(
                BenchmarkId::new(format!("{prefix}ctx{context}"), format!("b{batch}")),
                |b| {
                    b.iter(|| {
                        let mut step = ctx.step();
                        for _ in 0..reps {
                            step.paged_attention(&q, &cache, 0, &attn, &spec, &out).expect("attention");
                        }
                        black_box(step.submit().expect("submit"));
                    })
                },
            );
        }
    }
    group.finish();
}

/// What a dispatch costs the host and the adapter: steps of `n` RMSNorms of one 576-wide row
/// (next to no work), recorded, submitted and waited for; elem/s reads as dispatches/s. At
/// `n` = 1 it is a whole step's fixed cost, at 256 nearly all the dispatches'.
fn bench_dispatch(c: &mut Criterion, ctx: &GpuContext) {
    let mut group = c.benchmark_group("dispatch");
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    let d = 576;
    let x = ctx.upload_f32(&[1, d], &values(d)).expect("x");
    let weight = ctx.upload_f32(&[d], &values(d)).expect("weight");
    let out = ctx.tensor(Elem::F32, &[1, d]).expect("out");
    for n in [1usize, 64, 256] {
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::new("rms_norm_row", format!("n{n}")), |b| {
            b.iter(|| {
                let mut step = ctx.step();
                for _ in 0..n {
                    step.rms_norm(&x, &weight, 1e-5, &out).expect("rms_norm");
                }
                black_box(step.submit().expect("submit"));
            })
        });
    }
    group.finish();
}

fn kernels(c: &mut Criterion) {
    let ctx =
        GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap()).expect("a wgpu adapter");
    let caps = ctx.capabilities();
    eprintln!("{}\n{}", caps.device_summary(), caps.variant_summary());
    bench_linear(c, &ctx);
    bench_gemv(c, &ctx);
    bench_quantized_gemm(c, &ctx);
    bench_attention(c, &ctx, "");
    // The other of flash and split-KV attention beside the adapter's choice: split-KV where
    // flash is the default (GPUs with subgroups), else flash where the adapter can run it.
    let other = match caps.attention_path() {
        AttentionPath::Flash => Some((AttentionStrategy::SplitKv, "split-kv/")),
        _ if caps.subgroup && caps.subgroup_sizes.0 >= 8 => Some((AttentionStrategy::Flash, "flash/")),
        _ => None,
    };
    if let Some((strategy, prefix)) = other {
        let options = GpuOptions { attention_strategy: Some(strategy), ..GpuOptions::default() };
        let other = GpuContext::new(&gpu_options_from_env(&options).unwrap()).expect("a wgpu adapter");
        bench_attention(c, &other, prefix);
    }
    bench_dispatch(c, &ctx);
}

criterion_group!(benches, kernels);
criterion_main!(benches);

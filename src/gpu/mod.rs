//! wgpu plumbing: device, buffers and typed kernel launches.
//!
//! Open a [`GpuContext`], upload weights with [`GpuContext::upload_weight`] (raw GGUF or
//! little-endian bytes; quantized weights stay quantized and big ones are split across
//! buffers invisibly), allocate f32/u32 [`Tensor`]s for activations and step inputs, and
//! the paged [`KvCache`]. Each engine step records all its kernels into one [`Step`], which
//! submits them in one command buffer or, on GPUs, in chunks as they are recorded; small results (argmax ids, top-k, or full logits rows when needed) come back
//! through [`Step::read`].
//!
//! Device choice: [`GpuOptions`] (backend, adapter, masked features, WebGPU default limits,
//! the kernels forced instead of the adapter's: linear path, attention, norm and RoPE fusion,
//! GEMM tile, GEMV rows, weight source, submission in chunks; kernel profiling), completed from `PAGODA_*` variables by
//! `gpu_options_from_env` (`PAGODA_BACKEND`, `PAGODA_ADAPTER`,
//! `PAGODA_DISABLE_FEATURES=f16,subgroup`, `PAGODA_WEBGPU_LIMITS=1`, `PAGODA_LINEAR`,
//! `PAGODA_ATTENTION`, `PAGODA_NORM`, `PAGODA_ROPE`, `PAGODA_GEMM_ROWS`, `PAGODA_GEMV_ROWS`,
//! `PAGODA_WEIGHTS`, `PAGODA_SUBMIT`).
//! [`Capabilities::device_summary`] and [`Capabilities::variant_summary`] are the text for
//! `pagoda info`; [`Capabilities::kv_format`] says what a [`KvPrecision`] becomes on this device.
//! Shader variants are composed in [`shader`], the one source of truth for specialisation.
//!
//! `PAGODA_LINEAR` takes `sequential`, `ksplit`, `coop` (the adapter's cooperative matrices,
//! [`CoopShape`]) and `coop-emulated` / `coop-emulated-f32` (that kernel with the matrices
//! emulated, for tests on adapters without them).
//!
//! Every kernel reduces in one fixed order per row, so a row's bits do not depend on the other
//! rows of the batch, on how a prompt was chunked, or on whether its K/V were written by a
//! prefill or a decode.
//!
//! Nothing is created per step once its shapes have been seen: the parameter ring, the bind
//! groups, the readback staging buffers and scratch tensors ([`Step::scratch`]) live in the
//! context across steps, and [`GpuContext::counters`] counts what was created, dispatched and
//! how long recording took.
//!
//! One Llama layer on a flattened batch of `t` tokens in 8 dispatches (workspace tensors
//! allocated once for the largest step and viewed with [`Tensor::rows`]; `w_qkv` is Q, K and V
//! stacked, `w_gate_up` a gated weight from [`GpuContext::upload_gated_weight`]):
//!
//! ```no_run
//! # use pagoda::gpu::*;
//! # fn layer(ctx: &GpuContext, l: usize, x: &Tensor, h: &Tensor, qkv: &Tensor, att: &Tensor,
//! #     act: &Tensor, norm1: &Tensor, norm2: &Tensor, w_qkv: &Weight, wo: &Weight,
//! #     w_gate_up: &Weight, wd: &Weight, inv_freq: &Tensor, positions: &Tensor, slots: &Tensor,
//! #     batch: &AttentionBatch, cache: &KvCache, spec: &AttentionSpec) -> Result<(), GpuError> {
//! let mut step = ctx.step();
//! step.rms_norm(x, norm1, 1e-5, h)?;
//! step.linear(h, w_qkv, qkv)?;
//! let rope = RopeCacheArgs {
//!     positions, inv_freq, qk_norm: None, slot_mapping: slots, cache, layer: l, heads: spec.heads,
//!     mode: RopeMode::Interleaved,
//! };
//! step.rope_cache(qkv, &rope)?;
//! step.paged_attention(qkv, cache, l, batch, spec, att)?;
//! step.linear_add(att, wo, x)?;
//! step.rms_norm(x, norm2, 1e-5, h)?;
//! step.linear_gated(h, w_gate_up, GateActivation::Silu, act)?;
//! step.linear_add(act, wd, x)?;
//! // ... more layers, then gather_rows + rms_norm + linear(lm_head) + argmax/top_k, and:
//! let ids = step.read(slots);
//! let mut out = step.submit()?;
//! let _ids: Vec<u32> = out.u32s(ids);
//! # Ok(()) }
//! ```

mod attention_flash;
mod attention_rope;
mod bind_cache;
mod caps;
mod context;
mod copy_ids;
mod counters;
mod error_scopes;
mod kernel_timer;
mod kernels;
mod kv_cache;
mod kv_transfer;
mod linear_coop;
mod lora;
mod norm_sandwich;
mod options;
mod pool;
mod resident;
mod resource;
mod rope;
pub mod shader;
mod step;
mod tensor;
mod weights;

pub use attention_flash::{flash_group, flash_max_group};
pub use caps::{CPU_PER_QUERY_MAX_KEYS, Capabilities, KvPrecision};
pub use context::GpuContext;
pub use counters::GpuCounters;
pub use kernel_timer::{KernelTime, KernelTimes};
pub use kernels::{
    AttentionBatch, AttentionSpec, LinearInput, MoeRouting, RopeCacheArgs, RopeMode, RouteRule,
    SandwichInput, linear_variant_of, linear_warm_up_rows,
};
pub use kv_cache::{KvCache, KvCacheShape};
pub use kv_transfer::KvStore;
pub use linear_coop::{CoopElem, CoopShape, CoopTile};
pub use lora::{
    LORA_GROUP_ROWS, LoraBank, LoraColumns, LoraMatrices, LoraShrunk, LoraSite, NO_LORA, lora_group_capacity,
    lora_row_groups,
};
pub use options::{
    AttentionStrategy, BackendChoice, FeatureMask, Fusion, GemmRows, GemvRows, GpuOptions, LinearStrategy,
    SubmitStrategy,
};
pub use rope::{Llama3RopeScaling, llama3_freq_factors, rope_inv_freq};
pub use shader::{
    AttentionPath, GateActivation, KernelVariant, KvFormat, LinearEpilogue, LinearKernel, LinearPath,
    LinearPrologue, Tree, WeightSource,
};
pub use shader::{FLASH_KEY_LANES, FLASH_MAX_GROUP, FLASH_WG};
pub use step::{HeldStep, ReadbackId, Step, StepInFlight, StepOutput};
pub use tensor::{Elem, Tensor};
pub use weights::{Weight, resident_bytes};

/// Why a GPU operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No adapter, or none matching the requested one.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    /// The adapter refused the device request.
    #[error("device request failed: {0}")]
    RequestDevice(String),
    /// A bad backend, adapter or feature option.
    #[error("bad GPU option: {0}")]
    BadOption(String),
    /// A step call out of order (an input written after the step's first dispatch).
    #[error("out of order: {0}")]
    Order(String),
    /// Tensor shapes or types that do not fit the kernel.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// Something larger than the device limits allow.
    #[error("too large: {0}")]
    TooLarge(String),
    /// A kernel variant the device cannot run.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A shader failed to compile or validate.
    #[error("shader error: {0}")]
    Shader(String),
    /// A kernel bound a resource to a name its shader does not declare, or left one out.
    #[error("binding error: {0}")]
    Binding(String),
    /// Out of device memory.
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
    /// A validation or other error while running; the device still works.
    #[error("device error: {0}")]
    Device(String),
    /// The device is gone (driver reset, GPU removed, destroyed): nothing more can run.
    #[error("the device was lost: {0}")]
    DeviceLost(String),
}

//! pagoda: a portable LLM inference engine.
//!
//! A vLLM-V1-style engine core (paged KV cache, automatic prefix caching, a unified
//! token-budget scheduler with chunked prefill and RECOMPUTE preemption) on top of WGSL
//! compute shaders run through wgpu (Vulkan, Metal, DX12).

pub mod core;
pub mod dtype;
pub mod engine;
pub mod executor;
pub mod gpu;
pub mod hub;
pub mod ids;
pub mod model;
pub mod sampling;
#[cfg(feature = "server")]
pub mod server;
pub mod structured;
#[cfg(feature = "viz")]
pub mod viz;
pub mod workload;

pub use core::cache_config::{CacheConfig, KvCacheDtype};
pub use core::request::{FinishReason, Request, RequestStatus};
pub use core::scheduler_config::{InvalidBlockPolicy, SchedulerConfig, SchedulingPolicy};
pub use core::spec_decode::{SpeculativeConfig, SpeculativeMethod};
pub use engine::{
    CompletionOutput, Engine, EngineBuilder, EngineConfig, EngineError, ExecutorKind, Prompt, RequestOutput,
};
pub use ids::{RequestId, TokenId};
pub use model::ChatMessage;
pub use sampling::SamplingParams;

//! The engine core: block pool, prefix cache, KV cache manager and scheduler. No GPU code.

pub mod block_hash;
pub mod block_pool;
pub mod cache_config;
pub mod events;
pub mod host_tier;
pub mod id_map;
pub mod kv_cache_manager;
pub mod lora;
pub mod metrics;
pub mod output;
pub mod request;
pub mod request_queue;
pub mod scheduler;
pub mod scheduler_config;
pub mod snapshot;
pub mod spec_decode;

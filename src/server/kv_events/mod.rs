//! KV-cache events over ZeroMQ, as vLLM publishes them, for KV-cache-aware routers
//! (llm-d): `--kv-events-config` ([`KvEventsConfig`]), the msgpack wire format
//! ([`wire`]) and the publisher with its replay socket ([`KvEventPublisher`]).

pub mod events_config;
pub mod publisher;
pub mod queue;
pub mod wire;

pub use events_config::{KvEventsConfig, KvEventsConfigError, PublisherKind};
pub use publisher::{KvEventPublisher, KvEventsError};

//! `--kv-events-config`: vLLM's `KVEventsConfig` as JSON, with its field names and defaults.

use serde::Deserialize;

/// Where and how to publish KV-cache events (vLLM's `KVEventsConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvEventsConfig {
    /// Publish at all (default off, as in vLLM).
    pub enable_kv_cache_events: bool,
    /// `"zmq"` publishes over ZeroMQ; `"null"` records nothing.
    pub publisher: String,
    /// The PUB socket's endpoint: bound when it contains `*`, connected to otherwise.
    pub endpoint: String,
    /// A ROUTER socket, always bound, that answers a start sequence number with the
    /// buffered batches from there; none by default.
    pub replay_endpoint: Option<String>,
    /// Batches (one per engine step with changes) kept for replay.
    pub buffer_steps: usize,
    /// vLLM's ZeroMQ send high-water mark. The pure-Rust ZeroMQ keeps a fixed queue of
    /// [`ZMQ_QUEUE_MESSAGES`] per subscriber (vLLM's default `hwm`) and drops beyond it, so
    /// that is the only value accepted.
    pub hwm: usize,
    /// Batches waiting to be sent; past it the oldest is dropped (and counted).
    pub max_queue_size: usize,
    /// The first frame of every message (subscribers filter on it).
    pub topic: String,
}

/// Messages the ZeroMQ transport queues per subscriber before it drops (its fixed
/// high-water mark, equal to vLLM's default `hwm`).
pub const ZMQ_QUEUE_MESSAGES: usize = 100_000;

impl Default for KvEventsConfig {
    fn default() -> Self {
        Self {
            enable_kv_cache_events: false,
            publisher: "null".into(),
            endpoint: "tcp://*:5557".into(),
            replay_endpoint: None,
            buffer_steps: 10_000,
            hwm: ZMQ_QUEUE_MESSAGES,
            max_queue_size: 100_000,
            topic: String::new(),
        }
    }
}

/// A `--kv-events-config` that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvEventsConfigError {
    /// Not JSON of the expected shape.
    #[error("not a valid KVEventsConfig JSON object: {0}")]
    Json(String),
    /// An unknown publisher.
    #[error("KVEventsConfig: publisher {0:?} is unknown; use \"zmq\" or \"null\"")]
    Publisher(String),
    /// An endpoint that is not `tcp://host:port`.
    #[error("KVEventsConfig: {field} {endpoint:?} is not a tcp://HOST:PORT endpoint")]
    Endpoint {
        /// `endpoint` or `replay_endpoint`.
        field: &'static str,
        /// The value given.
        endpoint: String,
    },
    /// A size that must be at least 1.
    #[error("KVEventsConfig: {0} must be at least 1")]
    Zero(&'static str),
    /// A high-water mark the ZeroMQ transport cannot honour.
    #[error(
        "KVEventsConfig: hwm {0} is not supported: pagoda's ZeroMQ transport queues a fixed {ZMQ_QUEUE_MESSAGES} \
         messages per subscriber (vLLM's default); leave hwm out or set it to that"
    )]
    Hwm(usize),
}

/// What a valid configuration asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublisherKind {
    /// Nothing is recorded or sent.
    Off,
    /// Events are recorded and dropped (vLLM's null publisher).
    Null,
    /// Events are published over ZeroMQ.
    Zmq,
}

impl KvEventsConfig {
    /// Parses and checks the flag's JSON.
    pub fn parse(json: &str) -> Result<Self, KvEventsConfigError> {
        let config: Self =
            serde_json::from_str(json).map_err(|e| KvEventsConfigError::Json(e.to_string()))?;
        config.kind()?;
        Ok(config)
    }

    /// What this configuration asks for, once checked.
    pub fn kind(&self) -> Result<PublisherKind, KvEventsConfigError> {
        if !self.enable_kv_cache_events {
            return Ok(PublisherKind::Off);
        }
        let kind = match self.publisher.as_str() {
            "null" => return Ok(PublisherKind::Null),
            "zmq" => PublisherKind::Zmq,
            other => return Err(KvEventsConfigError::Publisher(other.to_owned())),
        };
        check_endpoint("endpoint", &self.endpoint)?;
        if let Some(replay) = &self.replay_endpoint {
            check_endpoint("replay_endpoint", replay)?;
        }
        for (name, value) in [("buffer_steps", self.buffer_steps), ("max_queue_size", self.max_queue_size)] {
            if value == 0 {
                return Err(KvEventsConfigError::Zero(name));
            }
        }
        if self.hwm != ZMQ_QUEUE_MESSAGES {
            return Err(KvEventsConfigError::Hwm(self.hwm));
        }
        Ok(kind)
    }
}

/// `tcp://HOST:PORT` with a numeric port.
fn check_endpoint(field: &'static str, endpoint: &str) -> Result<(), KvEventsConfigError> {
    let valid = endpoint
        .strip_prefix("tcp://")
        .and_then(|rest| rest.rsplit_once(':'))
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if valid { Ok(()) } else { Err(KvEventsConfigError::Endpoint { field, endpoint: endpoint.to_owned() }) }
}

/// The endpoint to bind for `endpoint`: vLLM's `*` (every interface) as `0.0.0.0`.
pub(super) fn bind_address(endpoint: &str) -> String {
    endpoint.replacen("tcp://*:", "tcp://0.0.0.0:", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_vllms_fields_and_defaults() {
        let config = KvEventsConfig::parse(
            r#"{"enable_kv_cache_events": true, "publisher": "zmq", "topic": "kv",
                "replay_endpoint": "tcp://*:5558", "buffer_steps": 4}"#,
        )
        .unwrap();
        assert_eq!(config.kind(), Ok(PublisherKind::Zmq));
        assert_eq!(config.endpoint, "tcp://*:5557");
        assert_eq!(config.replay_endpoint.as_deref(), Some("tcp://*:5558"));
        assert_eq!((config.buffer_steps, config.max_queue_size, config.hwm), (4, 100_000, 100_000));
        assert_eq!(KvEventsConfig::parse("{}").unwrap().kind(), Ok(PublisherKind::Off));
        let null = KvEventsConfig::parse(r#"{"enable_kv_cache_events": true}"#).unwrap();
        assert_eq!(null.kind(), Ok(PublisherKind::Null));
        assert_eq!(bind_address("tcp://*:5557"), "tcp://0.0.0.0:5557");
        assert_eq!(bind_address("tcp://127.0.0.1:5557"), "tcp://127.0.0.1:5557");
    }

    #[test]
    fn refuses_bad_json_publishers_endpoints_and_sizes() {
        assert!(matches!(KvEventsConfig::parse("{"), Err(KvEventsConfigError::Json(_))));
        assert!(matches!(KvEventsConfig::parse(r#"{"nope": 1}"#), Err(KvEventsConfigError::Json(_))));
        assert!(matches!(
            KvEventsConfig::parse(r#"{"buffer_steps": -1}"#),
            Err(KvEventsConfigError::Json(_))
        ));
        let on = |extra: &str| format!(r#"{{"enable_kv_cache_events": true, "publisher": "zmq", {extra}}}"#);
        assert_eq!(
            KvEventsConfig::parse(r#"{"enable_kv_cache_events": true, "publisher": "kafka"}"#),
            Err(KvEventsConfigError::Publisher("kafka".into()))
        );
        assert_eq!(
            KvEventsConfig::parse(&on(r#""endpoint": "ipc:///tmp/x""#)),
            Err(KvEventsConfigError::Endpoint { field: "endpoint", endpoint: "ipc:///tmp/x".into() })
        );
        assert_eq!(
            KvEventsConfig::parse(&on(r#""replay_endpoint": "tcp://*:port""#)),
            Err(KvEventsConfigError::Endpoint { field: "replay_endpoint", endpoint: "tcp://*:port".into() })
        );
        assert_eq!(
            KvEventsConfig::parse(&on(r#""max_queue_size": 0"#)),
            Err(KvEventsConfigError::Zero("max_queue_size"))
        );
        assert_eq!(KvEventsConfig::parse(&on(r#""hwm": 1000"#)), Err(KvEventsConfigError::Hwm(1000)));
        assert!(KvEventsConfig::parse(&on(r#""hwm": 100000"#)).is_ok());
    }
}

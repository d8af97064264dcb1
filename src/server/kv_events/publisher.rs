//! The ZeroMQ publisher: a PUB socket sending `[topic, sequence, payload]` for every batch,
//! and an optional ROUTER socket replaying buffered batches from a sequence number on.
//!
//! The engine thread only pushes batches into a bounded queue; a task on the server's
//! runtime numbers, encodes and sends them, so a slow or absent subscriber never slows the
//! engine. Sequence numbers start at 0 and count the batches sent, as vLLM's do.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketOptions, SocketRecv, SocketSend, ZmqError, ZmqMessage};

use super::events_config::{KvEventsConfig, bind_address};
use super::queue::DropOldestQueue;
use super::wire::{EventBatch, encode_batch};
use crate::engine::handle::CacheEventSink;

/// The replay answer's last message carries this sequence number (vLLM's `END_SEQ`).
pub const END_OF_REPLAY: i64 = -1;

/// A socket that could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind the KV event {what} socket to {endpoint}: {source}")]
pub struct KvEventsError {
    /// `PUB` or `replay`.
    what: &'static str,
    /// The endpoint.
    endpoint: String,
    /// What ZeroMQ said.
    source: ZmqError,
}

type ReplayBuffer = Arc<Mutex<VecDeque<(u64, Bytes)>>>;

/// A running publisher; [`KvEventPublisher::sink`] feeds it from the engine thread.
#[derive(Debug)]
pub struct KvEventPublisher {
    queue: Arc<DropOldestQueue<EventBatch>>,
    sent: Arc<AtomicU64>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    endpoint: String,
    replay_endpoint: Option<String>,
}

impl KvEventPublisher {
    /// Binds (an endpoint with `*`) or connects (any other; in the background, retrying)
    /// the PUB socket, binds the replay socket when one is configured, and starts sending.
    /// Must run inside a Tokio runtime.
    pub async fn start(config: &KvEventsConfig, block_size: usize) -> Result<Self, KvEventsError> {
        let queue = Arc::new(DropOldestQueue::new(config.max_queue_size));
        let buffer: ReplayBuffer = Arc::new(Mutex::new(VecDeque::new()));
        let mut options = SocketOptions::default();
        options.no_connect_timeout();
        let mut socket = PubSocket::with_options(options);
        let bind = config.endpoint.contains('*');
        let endpoint = if bind {
            let address = bind_address(&config.endpoint);
            let bound = socket.bind(&address).await.map_err(|source| KvEventsError {
                what: "PUB",
                endpoint: config.endpoint.clone(),
                source,
            })?;
            bound.to_string()
        } else {
            config.endpoint.clone()
        };
        let (replay, replay_endpoint) = match &config.replay_endpoint {
            Some(replay_endpoint) => {
                let mut router = RouterSocket::new();
                let bound = router.bind(&bind_address(replay_endpoint)).await.map_err(|source| {
                    KvEventsError { what: "replay", endpoint: replay_endpoint.clone(), source }
                })?;
                (Some(tokio::spawn(serve_replay(router, Arc::clone(&buffer)))), Some(bound.to_string()))
            }
            None => (None, None),
        };
        let connect_to = (!bind).then(|| config.endpoint.clone());
        let sent = Arc::new(AtomicU64::new(0));
        let sender = Sender {
            queue: Arc::clone(&queue),
            sent: Arc::clone(&sent),
            socket,
            topic: Bytes::from(config.topic.clone().into_bytes()),
            buffer,
            buffer_steps: config.buffer_steps,
            block_size,
        };
        let sender = tokio::spawn(sender.run(connect_to));
        let tasks = Mutex::new([Some(sender), replay].into_iter().flatten().collect());
        Ok(Self { queue, sent, tasks, endpoint, replay_endpoint })
    }

    /// What the engine thread calls with each step's changes: stamps them and queues them.
    pub fn sink(&self) -> CacheEventSink {
        let queue = Arc::clone(&self.queue);
        Box::new(move |events| {
            let timestamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |t| t.as_secs_f64());
            queue.push(EventBatch { timestamp, events });
        })
    }

    /// The PUB endpoint, with the port it was bound to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The replay endpoint, with the port it was bound to.
    pub fn replay_endpoint(&self) -> Option<&str> {
        self.replay_endpoint.as_deref()
    }

    /// Batches dropped because the publisher lagged `max_queue_size` behind.
    pub fn dropped_batches(&self) -> u64 {
        self.queue.dropped()
    }

    /// Batches handed to the PUB socket (and the replay buffer) so far.
    pub fn sent_batches(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }

    /// Waits until every batch queued so far is sent or dropped (or the sender stopped).
    pub async fn flush(&self) {
        while self.sent_batches() + self.queue.dropped() < self.queue.pushed() && !self.sender_stopped() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Sends what is queued, then stops both sockets; later batches are ignored.
    pub async fn close(&self) {
        self.queue.close();
        self.flush().await;
        for task in self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).drain(..) {
            task.abort();
        }
    }

    fn sender_stopped(&self) -> bool {
        self.tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .first()
            .is_none_or(JoinHandle::is_finished)
    }
}

/// The task that numbers, encodes, buffers and sends batches.
struct Sender {
    queue: Arc<DropOldestQueue<EventBatch>>,
    sent: Arc<AtomicU64>,
    socket: PubSocket,
    topic: Bytes,
    buffer: ReplayBuffer,
    buffer_steps: usize,
    block_size: usize,
}

impl Sender {
    async fn run(mut self, connect_to: Option<String>) {
        if let Some(endpoint) = connect_to
            && let Err(error) = self.socket.connect(&endpoint).await
        {
            tracing::error!(%endpoint, %error, "cannot connect the KV event publisher; no events will be sent");
            return;
        }
        let mut sequence: u64 = 0;
        while let Some(batch) = self.queue.pop().await {
            let payload = Bytes::from(encode_batch(&batch, self.block_size));
            {
                let mut buffer = self.buffer.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                buffer.push_back((sequence, payload.clone()));
                while buffer.len() > self.buffer_steps {
                    buffer.pop_front();
                }
            }
            let mut message = ZmqMessage::from(self.topic.clone());
            message.push_back(Bytes::copy_from_slice(&sequence.to_be_bytes()));
            message.push_back(payload);
            if let Err(error) = self.socket.send(message).await {
                tracing::warn!(%error, sequence, "cannot publish a KV event batch");
            }
            sequence += 1;
            self.sent.store(sequence, Ordering::Release);
        }
    }
}

/// Answers `[identity, "", start]` with `[identity, "", seq, payload]` for every buffered
/// batch from `start` on, then `[identity, "", -1, ""]`.
async fn serve_replay(mut router: RouterSocket, buffer: ReplayBuffer) {
    loop {
        let request = match router.recv().await {
            Ok(request) => request.into_vec(),
            Err(error) => {
                tracing::warn!(%error, "the KV event replay socket stopped");
                return;
            }
        };
        let [identity, _, start] = request.as_slice() else {
            tracing::warn!(frames = request.len(), "a KV event replay request must have 3 frames");
            continue;
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()).map(u64::from_be_bytes) else {
            tracing::warn!("a KV event replay request must carry an 8-byte sequence number");
            continue;
        };
        let batches: Vec<(u64, Bytes)> = buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .filter(|(sequence, _)| *sequence >= start)
            .cloned()
            .collect();
        let end = (Bytes::copy_from_slice(&END_OF_REPLAY.to_be_bytes()), Bytes::new());
        for (sequence, payload) in
            batches.into_iter().map(|(s, p)| (Bytes::copy_from_slice(&s.to_be_bytes()), p)).chain([end])
        {
            let frames = vec![identity.clone(), Bytes::new(), sequence, payload];
            let Ok(message) = ZmqMessage::try_from(frames) else { continue };
            if let Err(error) = router.send(message).await {
                tracing::warn!(%error, "cannot answer a KV event replay request");
                break;
            }
        }
    }
}

//! An engine on its own thread, with one stream of outputs per request for async code.
//!
//! The engine thread owns the [`Engine`]: it takes commands (add, abort, shut down) from a
//! channel, steps while any request is live, and sends each request's outputs to that
//! request's stream. A stream dropped before its request finished aborts the request, so a
//! client that goes away frees its KV blocks. The thread sleeps while nothing is live.
//! When asked, it also hands each step's prefix-cache changes to a sink (a KV event
//! publisher) on the same thread, so they arrive in order and nothing waits on a reader.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use tokio::sync::{mpsc as tokio_mpsc, oneshot, watch};

use super::lora::LoraUsage;
use super::metrics::EngineMetrics;
use super::{CompletionOutput, Engine, EngineError, Prompt, RequestOutput};
use crate::core::events::{CacheEvent, EventLog};
use crate::ids::{RequestId, TokenId};
use crate::sampling::SamplingParams;

/// What the engine thread is asked to do.
enum Command {
    Add {
        prompt: Prompt,
        params: Box<SamplingParams>,
        lora: Option<String>,
        outputs: tokio_mpsc::UnboundedSender<RequestOutput>,
        reply: oneshot::Sender<Result<(RequestId, Vec<TokenId>), EngineError>>,
    },
    Abort(RequestId),
    AbortAll,
    Call(Box<dyn FnOnce(&mut Engine) + Send>),
    Shutdown,
}

/// Takes the prefix-cache changes of each engine step (or command) that made some, on the
/// engine thread, in order; it must not block.
pub type CacheEventSink = Box<dyn FnMut(Vec<CacheEvent>) + Send>;

/// A handle to an engine running on its own thread; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct AsyncEngine {
    commands: mpsc::Sender<Command>,
    metrics: Arc<Mutex<EngineMetrics>>,
    loras: Arc<Mutex<LoraUsage>>,
    live: Arc<AtomicUsize>,
    device_lost: watch::Receiver<Option<String>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl AsyncEngine {
    /// Moves `engine` onto a new thread named `pagoda-engine`.
    pub fn spawn(engine: Engine) -> std::io::Result<Self> {
        Self::start(engine, None)
    }

    /// Like [`AsyncEngine::spawn`], and starts the engine's log of prefix-cache changes:
    /// after every step (or command) that changed the set of cached blocks, `sink` gets
    /// the changes on the engine thread.
    pub fn spawn_with_cache_events(engine: Engine, sink: CacheEventSink) -> std::io::Result<Self> {
        engine.scheduler().cache_event_log().start();
        Self::start(engine, Some(sink))
    }

    fn start(engine: Engine, sink: Option<CacheEventSink>) -> std::io::Result<Self> {
        let (commands, receiver) = mpsc::channel();
        let metrics = Arc::new(Mutex::new(engine.metrics()));
        let loras = Arc::new(Mutex::new(engine.lora_usage()));
        let live = Arc::new(AtomicUsize::new(0));
        let engine_log = engine.scheduler().cache_event_log();
        let (lost_sender, device_lost) = watch::channel(engine.device_lost().map(str::to_owned));
        let thread = EngineThread {
            engine,
            streams: HashMap::new(),
            metrics: Arc::clone(&metrics),
            loras: Arc::clone(&loras),
            live: Arc::clone(&live),
            cache_events: sink.map(|sink| (engine_log, sink)),
            device_lost: lost_sender,
        };
        let thread =
            std::thread::Builder::new().name("pagoda-engine".into()).spawn(move || thread.run(&receiver))?;
        Ok(Self { commands, metrics, loras, live, device_lost, thread: Mutex::new(Some(thread)) })
    }

    /// Why the engine stopped for good (its device was lost), if it did; new requests
    /// are then refused with [`EngineError::DeviceLost`].
    pub fn device_lost(&self) -> Option<String> {
        self.device_lost.borrow().clone()
    }

    /// Resolves once the engine can serve nothing more: its device was lost or its
    /// thread ended.
    pub async fn stopped(&self) {
        let mut device_lost = self.device_lost.clone();
        // An error means the thread is gone, which is a stop too.
        let _ = device_lost.wait_for(Option::is_some).await;
    }

    /// Queues a request and returns the stream of its outputs.
    pub async fn add_request(
        &self,
        prompt: impl Into<Prompt>,
        params: SamplingParams,
    ) -> Result<RequestStream, EngineError> {
        self.add_request_with_lora(prompt, params, None).await
    }

    /// [`AsyncEngine::add_request`] run with the LoRA adapter named `lora`
    /// ([`Engine::load_lora`]); `None` runs the base model.
    pub async fn add_request_with_lora(
        &self,
        prompt: impl Into<Prompt>,
        params: SamplingParams,
        lora: Option<String>,
    ) -> Result<RequestStream, EngineError> {
        let (outputs, receiver) = tokio_mpsc::unbounded_channel();
        let (reply, answer) = oneshot::channel();
        let command = Command::Add { prompt: prompt.into(), params: Box::new(params), lora, outputs, reply };
        self.commands.send(command).map_err(|_| EngineError::Stopped)?;
        let (request_id, prompt_token_ids) = answer.await.map_err(|_| EngineError::Stopped)??;
        Ok(RequestStream {
            request_id,
            prompt_token_ids,
            outputs: receiver,
            commands: self.commands.clone(),
            finished: false,
        })
    }

    /// Aborts a request; its stream ends with a `abort` output.
    pub fn abort(&self, request_id: RequestId) {
        // A stopped engine has no requests left to abort.
        let _ = self.commands.send(Command::Abort(request_id));
    }

    /// Aborts every live request; their streams end with an `abort` output.
    pub fn abort_all(&self) {
        let _ = self.commands.send(Command::AbortAll);
    }

    /// Requests added and not yet finished (their streams have outputs still to come).
    pub fn num_live_requests(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Runs `f` on the engine between two steps and returns what it returns, e.g.
    /// `engine.call(|engine| engine.reset_prefix_cache())`.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Engine) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let (reply, answer) = oneshot::channel();
        let command = Command::Call(Box::new(move |engine: &mut Engine| {
            let _ = reply.send(f(engine));
        }));
        self.commands.send(command).map_err(|_| EngineError::Stopped)?;
        answer.await.map_err(|_| EngineError::Stopped)
    }

    /// The metrics after the engine thread's latest step or command.
    pub fn metrics(&self) -> EngineMetrics {
        self.metrics.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The LoRA adapters of the running and waiting requests after the engine thread's latest
    /// step or command.
    pub fn lora_usage(&self) -> LoraUsage {
        self.loras.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Stops the engine thread (live requests' streams end) and waits for it.
    pub fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown);
        let thread = self.thread.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the engine thread panicked");
        }
    }
}

impl Drop for AsyncEngine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The outputs of one request, in order, ending with its finished output.
///
/// Dropping it before the end aborts the request.
#[derive(Debug)]
pub struct RequestStream {
    request_id: RequestId,
    prompt_token_ids: Vec<TokenId>,
    outputs: tokio_mpsc::UnboundedReceiver<RequestOutput>,
    commands: mpsc::Sender<Command>,
    finished: bool,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Add { prompt, .. } => f.debug_struct("Add").field("prompt", prompt).finish_non_exhaustive(),
            Self::Abort(id) => f.debug_tuple("Abort").field(id).finish(),
            Self::AbortAll => f.write_str("AbortAll"),
            Self::Call(_) => f.write_str("Call"),
            Self::Shutdown => f.write_str("Shutdown"),
        }
    }
}

impl RequestStream {
    /// The request's id.
    pub fn request_id(&self) -> RequestId {
        self.request_id
    }

    /// The prompt's token ids.
    pub fn prompt_token_ids(&self) -> &[TokenId] {
        &self.prompt_token_ids
    }

    /// The next output; `None` after the finished one (or if the engine stopped).
    pub async fn next(&mut self) -> Option<RequestOutput> {
        let output = self.outputs.recv().await;
        self.note(output)
    }

    /// The next output, blocking the thread (not for use inside an async runtime).
    pub fn blocking_next(&mut self) -> Option<RequestOutput> {
        let output = self.outputs.blocking_recv();
        self.note(output)
    }

    /// Waits for the whole completion.
    pub async fn collect(mut self) -> CompletionOutput {
        let mut completion = CompletionOutput::new(self.request_id, self.prompt_token_ids.clone());
        while let Some(output) = self.next().await {
            completion.extend(&output);
        }
        completion
    }

    fn note(&mut self, output: Option<RequestOutput>) -> Option<RequestOutput> {
        match &output {
            Some(output) => self.finished |= output.finished(),
            None => self.finished = true,
        }
        output
    }
}

impl futures_util::Stream for RequestStream {
    type Item = RequestOutput;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RequestOutput>> {
        let polled = self.outputs.poll_recv(cx);
        polled.map(|output| self.note(output))
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.commands.send(Command::Abort(self.request_id));
        }
    }
}

/// The engine thread's state.
struct EngineThread {
    engine: Engine,
    streams: HashMap<RequestId, tokio_mpsc::UnboundedSender<RequestOutput>>,
    metrics: Arc<Mutex<EngineMetrics>>,
    loras: Arc<Mutex<LoraUsage>>,
    live: Arc<AtomicUsize>,
    cache_events: Option<(EventLog<CacheEvent>, CacheEventSink)>,
    device_lost: watch::Sender<Option<String>>,
}

impl EngineThread {
    /// Handles commands and steps until shut down or every handle is gone.
    fn run(mut self, commands: &mpsc::Receiver<Command>) {
        loop {
            let first = if self.engine.has_unfinished_requests() {
                commands.try_recv().ok()
            } else {
                match commands.recv() {
                    Ok(command) => Some(command),
                    Err(_) => return,
                }
            };
            let mut changed = false;
            for command in first.into_iter().chain(std::iter::from_fn(|| commands.try_recv().ok())) {
                changed = true;
                if !self.handle(command) {
                    return;
                }
            }
            if self.engine.has_unfinished_requests() {
                let outputs = match self.engine.step() {
                    Ok(outputs) => outputs,
                    Err(EngineError::StepFailed { outputs, .. }) => {
                        if let Some(reason) = self.engine.device_lost() {
                            self.device_lost.send_replace(Some(reason.to_owned()));
                        }
                        outputs
                    }
                    Err(error) => {
                        tracing::error!(%error, "engine step failed; failing every live request");
                        self.engine.fail_all()
                    }
                };
                // Published before any client sees this step's outputs, so a finished
                // response is always already counted.
                self.publish_metrics();
                changed = false;
                for output in outputs {
                    changed |= self.route(output);
                }
            }
            if changed {
                self.publish_metrics();
            }
            self.publish_cache_events();
            self.live.store(self.streams.len(), Ordering::Release);
        }
    }

    /// Hands the prefix-cache changes made since the last call to the sink.
    fn publish_cache_events(&mut self) {
        if let Some((log, sink)) = &mut self.cache_events {
            let events = log.take();
            if !events.is_empty() {
                sink(events);
            }
        }
    }

    /// Makes the engine's current metrics the ones handles read.
    fn publish_metrics(&self) {
        *self.metrics.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = self.engine.metrics();
        *self.loras.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = self.engine.lora_usage();
    }

    /// Applies one command; false on shutdown.
    fn handle(&mut self, command: Command) -> bool {
        match command {
            Command::Add { prompt, params, lora, outputs, reply } => {
                let added = self.engine.encode_prompt(&prompt).and_then(|prompt_token_ids| {
                    let request_id = self.engine.add_tokens_request_with_lora(
                        prompt_token_ids.clone(),
                        *params,
                        lora.as_deref(),
                    )?;
                    Ok((request_id, prompt_token_ids))
                });
                let request_id = added.as_ref().ok().map(|&(id, _)| id);
                // Live before the caller hears of it, so a drain never misses it.
                if let Some(request_id) = request_id {
                    self.streams.insert(request_id, outputs);
                    self.live.store(self.streams.len(), Ordering::Release);
                }
                let delivered = reply.send(added).is_ok();
                if let Some(request_id) = request_id.filter(|_| !delivered) {
                    self.streams.remove(&request_id);
                    self.engine.abort(request_id);
                }
            }
            Command::Abort(request_id) => {
                if let Some(output) = self.engine.abort(request_id) {
                    self.route(output);
                }
            }
            Command::AbortAll => {
                let mut ids: Vec<RequestId> = self.streams.keys().copied().collect();
                ids.sort_unstable();
                for request_id in ids {
                    if let Some(output) = self.engine.abort(request_id) {
                        self.route(output);
                    }
                }
            }
            Command::Call(f) => f(&mut self.engine),
            Command::Shutdown => return false,
        }
        true
    }

    /// Sends an output to its stream; a stream that is gone aborts its request. True when
    /// it aborted one (the metrics changed).
    fn route(&mut self, output: RequestOutput) -> bool {
        let request_id = output.request_id;
        let finished = output.finished();
        let delivered = self.streams.get(&request_id).is_some_and(|stream| stream.send(output).is_ok());
        if finished || !delivered {
            self.streams.remove(&request_id);
        }
        let aborted = !finished && !delivered;
        if aborted {
            self.engine.abort(request_id);
        }
        aborted
    }
}

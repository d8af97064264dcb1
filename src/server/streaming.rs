//! Server-sent event streams: one JSON chunk per output, an optional usage chunk, then
//! `[DONE]`. A request the engine failed ends its stream with an error event in OpenAI's
//! shape (`{"error": {...}}`) and `[DONE]`; one the server aborted (a drain's deadline) sends
//! such an error chunk in place of its last chunk. Dropping the response (a client that went
//! away) drops the request streams, which aborts their requests.

use std::convert::Infallible;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, SelectAll, Stream, StreamExt};

use super::error::ApiError;
use super::openai::{
    ChatChunkChoice, ChatCompletionChunk, ChatFinishReason, CompletionChoice, CompletionResponse,
    ResponseMessage, Usage,
};
use super::responses::{chat_logprobs, choice_usage, completion_logprobs, tool_calls_out};
use super::tools::{ToolCallOut, ToolFormat};
use super::{ServerState, unix_seconds};
use crate::core::request::FinishReason;
use crate::engine::RequestOutput;
use crate::engine::handle::RequestStream;
use crate::ids::RequestId;
use crate::model::reasoning::{ReasoningParser, ReasoningStream, Split, Thinking};

/// Turns outputs into the JSON of one endpoint's chunks.
pub(super) trait Streamer: Send + 'static {
    /// Chunks sent before any output (the endpoint may have none).
    fn opening(&mut self) -> Vec<String>;
    /// The chunk for one output of choice `index`, or `None` when it carries nothing.
    fn chunk(&mut self, index: usize, output: &RequestOutput) -> Option<String>;
    /// The final usage chunk.
    fn usage(&mut self, usage: Usage) -> String;
}

/// Where an event stream is.
enum Phase {
    /// The endpoint's opening chunks still to send.
    Opening(std::vec::IntoIter<String>),
    Outputs,
    Usage,
    Done,
    Ended,
}

type Indexed = stream::Map<RequestStream, Box<dyn FnMut(RequestOutput) -> (usize, RequestOutput) + Send>>;

/// The SSE response over `streams` (choice `i` is `streams[i]`, `n` choices per prompt).
pub(super) fn sse_response(
    streams: Vec<RequestStream>,
    n: usize,
    include_usage: bool,
    mut streamer: impl Streamer,
) -> Response {
    let opening = Phase::Opening(streamer.opening().into_iter());
    let usage = vec![Usage::default(); streams.len()];
    let merged: SelectAll<Indexed> = stream::select_all(streams.into_iter().enumerate().map(|(index, s)| {
        let tag: Box<dyn FnMut(RequestOutput) -> (usize, RequestOutput) + Send> =
            Box::new(move |o| (index, o));
        s.map(tag)
    }));
    let events = stream::unfold(
        (opening, merged, streamer, usage),
        move |(mut phase, mut merged, mut streamer, mut usage)| async move {
            loop {
                let data = match phase {
                    Phase::Opening(ref mut chunks) => {
                        let chunk = chunks.next();
                        if chunk.is_none() {
                            phase = Phase::Outputs;
                        }
                        chunk
                    }
                    Phase::Outputs => match merged.next().await {
                        Some((_, output)) if output.finish_reason == Some(FinishReason::Error) => {
                            phase = Phase::Done;
                            Some(failed_request(output.request_id).to_json())
                        }
                        Some((index, output)) => {
                            usage[index] =
                                choice_usage(index, n, output.num_prompt_tokens, output.num_output_tokens);
                            match output.finish_reason {
                                Some(FinishReason::Abort) => Some(aborted_early(output.request_id)),
                                _ => streamer.chunk(index, &output),
                            }
                        }
                        None => {
                            phase = if include_usage { Phase::Usage } else { Phase::Done };
                            None
                        }
                    },
                    Phase::Usage => {
                        phase = Phase::Done;
                        Some(streamer.usage(usage.iter().fold(Usage::default(), |sum, &u| sum + u)))
                    }
                    Phase::Done => {
                        phase = Phase::Ended;
                        Some("[DONE]".to_owned())
                    }
                    Phase::Ended => return None,
                };
                if let Some(data) = data {
                    let event: Result<Event, Infallible> = Ok(Event::default().data(data));
                    return Some((event, (phase, merged, streamer, usage)));
                }
            }
        },
    );
    sse(events)
}

/// The error chunk of a request the server aborted before it finished (a drain's deadline).
fn aborted_early(request_id: RequestId) -> String {
    let message = format!("request {request_id} was aborted (the server is shutting down)");
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message).to_json()
}

/// The error a request that the engine failed answers with (a 500 in OpenAI's shape).
pub(super) fn failed_request(request_id: RequestId) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("request {request_id} failed: the engine could not run its step; retry later"),
    )
}

fn sse(events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

/// True when an output has text, ends its request, or has tokens whose log-probabilities
/// were asked for.
fn carries_something(output: &RequestOutput, logprobs: bool) -> bool {
    !output.new_text.is_empty() || output.finished() || (logprobs && !output.new_token_ids.is_empty())
}

/// Chunks of `/v1/completions`.
pub(super) struct CompletionStreamer {
    state: Arc<ServerState>,
    id: String,
    created: u64,
    logprobs: bool,
    text_offsets: Vec<usize>,
}

impl CompletionStreamer {
    /// A streamer for response `id`, with log-probabilities when asked for.
    pub(super) fn new(state: Arc<ServerState>, id: String, logprobs: bool) -> Self {
        Self { state, id, created: unix_seconds(), logprobs, text_offsets: Vec::new() }
    }

    fn response(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> String {
        let response = CompletionResponse {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.state.model_name.clone(),
            choices,
            usage,
        };
        serde_json::to_string(&response).unwrap_or_default()
    }
}

impl Streamer for CompletionStreamer {
    fn opening(&mut self) -> Vec<String> {
        Vec::new()
    }

    fn chunk(&mut self, index: usize, output: &RequestOutput) -> Option<String> {
        if !carries_something(output, self.logprobs) {
            return None;
        }
        if self.text_offsets.len() <= index {
            self.text_offsets.resize(index + 1, 0);
        }
        let logprobs = self.logprobs.then(|| {
            completion_logprobs(
                &self.state.tokenizer,
                &output.new_token_ids,
                &output.new_logprobs,
                self.text_offsets[index],
            )
        });
        self.text_offsets[index] += output.new_text.len();
        let choice = CompletionChoice {
            index,
            text: output.new_text.clone(),
            logprobs,
            finish_reason: output.finish_reason,
            prompt_logprobs: None,
        };
        Some(self.response(vec![choice], None))
    }

    fn usage(&mut self, usage: Usage) -> String {
        self.response(Vec::new(), Some(usage))
    }
}

/// Where a streamed choice stands when tools were offered: its text is held while it may
/// still become a tool call, sent as content once it cannot, and a call is sent whole as
/// `delta.tool_calls` when the choice ends.
enum CallScan {
    /// The text so far could still open a call.
    Undecided(String),
    /// The reply opened a call: held until the end.
    Calls(String),
    /// The reply is plain text: streamed as it comes.
    Text,
}

/// Chunks of `/v1/chat/completions`.
pub(super) struct ChatStreamer {
    state: Arc<ServerState>,
    id: String,
    created: u64,
    num_choices: usize,
    logprobs: bool,
    calls: Option<ToolFormat>,
    scans: Vec<CallScan>,
    /// Each choice's reasoning splitter, with a reasoning parser.
    reasoning: Vec<ReasoningStream>,
}

impl ChatStreamer {
    /// A streamer for response `id` with `num_choices` choices, with log-probabilities when
    /// asked for, splitting off the reasoning with `reasoning`'s parser when there is one, and
    /// parsing tool calls in `calls`' format from the answer when tools were offered.
    pub(super) fn new(
        state: Arc<ServerState>,
        id: String,
        num_choices: usize,
        logprobs: bool,
        calls: Option<ToolFormat>,
        reasoning: Option<(ReasoningParser, Thinking)>,
    ) -> Self {
        let scans = (0..num_choices).map(|_| CallScan::Undecided(String::new())).collect();
        let reasoning = match reasoning {
            Some((parser, thinking)) => (0..num_choices).map(|_| parser.stream(thinking)).collect(),
            None => Vec::new(),
        };
        Self { state, id, created: unix_seconds(), num_choices, logprobs, calls, scans, reasoning }
    }

    /// The reasoning and answer text of choice `index`'s `output` (all answer without a
    /// reasoning parser).
    fn split(&mut self, index: usize, output: &RequestOutput) -> Split {
        let Some(stream) = self.reasoning.get_mut(index) else {
            return Split { reasoning: String::new(), content: output.new_text.clone() };
        };
        let mut split = stream.push(&output.new_text);
        if output.finished() {
            split.append(stream.finish());
        }
        split
    }

    fn chunk_json(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> String {
        let chunk = ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.state.model_name.clone(),
            choices,
            usage,
        };
        serde_json::to_string(&chunk).unwrap_or_default()
    }

    /// The tool calls choice `index` ends with when tools were offered and its reasoning format
    /// wrote them apart from the answer (harmony's), numbered for `delta.tool_calls`.
    fn apart_calls(&self, index: usize, output: &RequestOutput) -> Option<Vec<ToolCallOut>> {
        if self.calls.is_none() || output.finish_reason != Some(FinishReason::Stop) {
            return None;
        }
        let calls = self.reasoning.get(index)?.tool_calls()?;
        let mut out = tool_calls_out(&self.id, index, &calls);
        for (i, call) in out.iter_mut().enumerate() {
            call.index = Some(i);
        }
        Some(out)
    }

    /// The content, tool calls and finish reason that choice `index` sends for the answer
    /// `text` of an output ending with `finish_reason`, holding text back while it may still
    /// open a call in `format`.
    fn scan(
        &mut self,
        index: usize,
        format: ToolFormat,
        text: &str,
        finish_reason: Option<FinishReason>,
    ) -> Delta {
        let finish = finish_reason.map(ChatFinishReason::from);
        let Some(scan) = self.scans.get_mut(index) else { return Delta::text(text, finish) };
        let undecided = matches!(scan, CallScan::Undecided(_));
        let held = match scan {
            CallScan::Text => return Delta::text(text, finish),
            CallScan::Undecided(held) | CallScan::Calls(held) => {
                held.push_str(text);
                held
            }
        };
        let opened = held.trim_start();
        if undecided && opened.starts_with(format.opener()) {
            let held = std::mem::take(held);
            *scan = CallScan::Calls(held);
        } else if undecided && !format.opener().starts_with(opened) {
            let text = std::mem::take(held);
            *scan = CallScan::Text;
            return Delta::text(&text, finish);
        }
        if finish_reason.is_none() {
            return Delta::default();
        }
        let (CallScan::Undecided(held) | CallScan::Calls(held)) = std::mem::replace(scan, CallScan::Text)
        else {
            return Delta::default();
        };
        let parsed = (finish_reason == Some(FinishReason::Stop)).then(|| format.parse(&held)).flatten();
        match parsed {
            Some(calls) => {
                let mut tool_calls = tool_calls_out(&self.id, index, &calls);
                for (i, call) in tool_calls.iter_mut().enumerate() {
                    call.index = Some(i);
                }
                Delta {
                    content: None,
                    tool_calls: Some(tool_calls),
                    finish: Some(ChatFinishReason::ToolCalls),
                }
            }
            None => Delta::text(&held, finish),
        }
    }
}

/// What one chat chunk carries for a choice.
#[derive(Default)]
struct Delta {
    content: Option<String>,
    tool_calls: Option<Vec<ToolCallOut>>,
    finish: Option<ChatFinishReason>,
}

impl Delta {
    /// `text` (none when empty) and `finish`.
    fn text(text: &str, finish: Option<ChatFinishReason>) -> Self {
        Self { content: (!text.is_empty()).then(|| text.to_owned()), tool_calls: None, finish }
    }
}

impl Streamer for ChatStreamer {
    fn opening(&mut self) -> Vec<String> {
        (0..self.num_choices)
            .map(|index| {
                let delta = ResponseMessage {
                    role: Some("assistant"),
                    content: Some(String::new()),
                    ..ResponseMessage::default()
                };
                let choice = ChatChunkChoice { index, delta, logprobs: None, finish_reason: None };
                self.chunk_json(vec![choice], None)
            })
            .collect()
    }

    fn chunk(&mut self, index: usize, output: &RequestOutput) -> Option<String> {
        if !carries_something(output, self.logprobs) {
            return None;
        }
        let Split { reasoning, content } = self.split(index, output);
        let mut delta = match self.calls {
            Some(format) => self.scan(index, format, &content, output.finish_reason),
            None => Delta::text(&content, output.finish_reason.map(ChatFinishReason::from)),
        };
        if let Some(calls) = self.apart_calls(index, output) {
            delta.tool_calls = Some(calls);
            delta.finish = Some(ChatFinishReason::ToolCalls);
        }
        let logprobs = self
            .logprobs
            .then(|| chat_logprobs(&self.state.tokenizer, &output.new_token_ids, &output.new_logprobs));
        let reasoning = (!reasoning.is_empty()).then_some(reasoning);
        if reasoning.is_none()
            && delta.content.is_none()
            && delta.tool_calls.is_none()
            && delta.finish.is_none()
            && logprobs.is_none()
        {
            return None;
        }
        let message = ResponseMessage {
            content: delta.content,
            tool_calls: delta.tool_calls,
            ..ResponseMessage::default()
        };
        let choice = ChatChunkChoice {
            index,
            delta: message.with_reasoning(reasoning),
            logprobs,
            finish_reason: delta.finish,
        };
        Some(self.chunk_json(vec![choice], None))
    }

    fn usage(&mut self, usage: Usage) -> String {
        self.chunk_json(Vec::new(), Some(usage))
    }
}

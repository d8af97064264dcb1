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

use super::echo::{echo_logprobs, vllm_prompt_logprobs};
use super::error::ApiError;
use super::openai::{
    ChatChunkChoice, ChatCompletionChunk, ChatFinishReason, CompletionChoice, CompletionResponse,
    ResponseMessage, Usage,
};
use super::responses::{chat_logprobs, choice_usage, completion_logprobs, tool_calls_out};
use super::tools::{ToolCallOut, ToolFormat};
use super::{ServerState, unix_seconds};
use crate::core::request::FinishReason;
use crate::engine::handle::RequestStream;
use crate::engine::{CompletionOutput, RequestOutput};
use crate::ids::{RequestId, TokenId};
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
    logprobs: Option<usize>,
    text_offsets: Vec<usize>,
    /// What each choice's first chunk carries before its generated text.
    prompt: StreamedPrompt,
    /// Choices whose first chunk was sent.
    opened: Vec<bool>,
}

/// What a streamed completion's choices put first: the echoed prompt (`echo`), vLLM's
/// `prompt_logprobs`, and whether the generated token is dropped (`echo` with `max_tokens:
/// 0`).
#[derive(Debug, Clone, Default)]
pub(super) struct StreamedPrompt {
    /// Each prompt's text and token ids, when `echo` is set.
    pub echo: Vec<(String, Vec<TokenId>)>,
    /// Choices per prompt.
    pub n: usize,
    /// vLLM's `prompt_logprobs` asked for: alternatives a position.
    pub prompt_logprobs: Option<usize>,
    /// Scoring only: the one token generated to run the prefill is not sent.
    pub score_only: bool,
}

impl CompletionStreamer {
    /// A streamer for response `id`, with `logprobs` top log-probabilities a token when asked
    /// for, and `prompt` first in each choice.
    pub(super) fn new(
        state: Arc<ServerState>,
        id: String,
        logprobs: Option<usize>,
        prompt: StreamedPrompt,
    ) -> Self {
        Self {
            state,
            id,
            created: unix_seconds(),
            logprobs,
            text_offsets: Vec::new(),
            prompt,
            opened: Vec::new(),
        }
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

    /// The first chunk of choice `index`: the echoed prompt (and its logprobs) before the
    /// output's own text and tokens, and vLLM's `prompt_logprobs`.
    fn opening_choice(&self, index: usize, output: &RequestOutput) -> CompletionChoice {
        let tokenizer = &self.state.tokenizer;
        let prompt_logprobs = output.prompt_logprobs.as_deref().unwrap_or_default();
        let (token_ids, logprobs, text) = match self.prompt.score_only {
            true => (&[][..], &[][..], ""),
            false => (&output.new_token_ids[..], &output.new_logprobs[..], output.new_text.as_str()),
        };
        let echo = self.prompt.echo.get(index / self.prompt.n.max(1));
        let completion = CompletionOutput {
            prompt_token_ids: echo.map(|(_, ids)| ids.clone()).unwrap_or_default(),
            token_ids: token_ids.to_vec(),
            logprobs: logprobs.to_vec(),
            prompt_logprobs: output.prompt_logprobs.clone(),
            ..CompletionOutput::new(output.request_id, Vec::new())
        };
        CompletionChoice {
            index,
            text: format!("{}{text}", echo.map_or("", |(text, _)| text.as_str())),
            logprobs: self.logprobs.map(|top_n| match echo {
                Some(_) => echo_logprobs(tokenizer, &completion, top_n),
                None => completion_logprobs(tokenizer, token_ids, logprobs, 0),
            }),
            finish_reason: match self.prompt.score_only {
                true => Some(FinishReason::Length),
                false => output.finish_reason,
            },
            prompt_logprobs: self
                .prompt
                .prompt_logprobs
                .map(|top_n| vllm_prompt_logprobs(tokenizer, prompt_logprobs, top_n)),
        }
    }
}

impl Streamer for CompletionStreamer {
    fn opening(&mut self) -> Vec<String> {
        Vec::new()
    }

    fn chunk(&mut self, index: usize, output: &RequestOutput) -> Option<String> {
        if self.opened.len() <= index {
            self.opened.resize(index + 1, false);
            self.text_offsets.resize(index + 1, 0);
        }
        let opens = !self.opened[index];
        let puts_prompt_first = !self.prompt.echo.is_empty() || self.prompt.prompt_logprobs.is_some();
        if opens && puts_prompt_first {
            // The prompt goes with the choice's first tokens (which bring its logprobs).
            if output.new_token_ids.is_empty() && !output.finished() {
                return None;
            }
            self.opened[index] = true;
            let choice = self.opening_choice(index, output);
            self.text_offsets[index] = choice.text.len();
            return Some(self.response(vec![choice], None));
        }
        if self.prompt.score_only || !carries_something(output, self.logprobs.is_some()) {
            return None;
        }
        self.opened[index] = true;
        let logprobs = self.logprobs.map(|_| {
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
        let usage = match self.prompt.score_only {
            true => Usage::new(usage.prompt_tokens, 0),
            false => usage,
        };
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

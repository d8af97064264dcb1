//! OpenAI API request and response bodies, with vLLM's extra sampling fields.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::tools::{ParsedCall, Tool, ToolCallOut};
use crate::core::request::FinishReason;
use crate::ids::TokenId;
use crate::model::ChatMessage;
use crate::model::chat::TemplateKwargs;
use crate::sampling::{MAX_LOGIT_BIAS, SamplingParams};
use crate::structured::{Constraint, StructuredOutputsParams};

/// A string or a list of strings (`stop`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, expecting = "a string or a list of strings")]
pub enum OneOrMany {
    /// One string.
    One(String),
    /// Several strings.
    Many(Vec<String>),
}

/// The `prompt` of a completion request.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "prompt to be a string, a list of strings, a list of token ids or a list of lists of token ids"
)]
pub enum PromptInput {
    /// One text prompt.
    Text(String),
    /// Several text prompts.
    Texts(Vec<String>),
    /// One tokenized prompt.
    Tokens(Vec<TokenId>),
    /// Several tokenized prompts.
    TokenLists(Vec<Vec<TokenId>>),
}

/// `stream_options`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the token usage.
    #[serde(default)]
    pub include_usage: bool,
}

/// Sampling fields shared by both endpoints (OpenAI's and vLLM's extras).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SamplingFields {
    /// Softmax temperature (OpenAI default 1).
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    /// Top-k sampling (vLLM extra).
    pub top_k: Option<i32>,
    /// Min-p sampling (vLLM extra).
    pub min_p: Option<f32>,
    /// Seed of the request's random stream: any 64-bit signed integer, as vLLM takes it (a
    /// negative seed is its two's complement, so -1 draws as `u64::MAX`).
    pub seed: Option<i64>,
    /// OpenAI presence penalty.
    pub presence_penalty: Option<f32>,
    /// OpenAI frequency penalty.
    pub frequency_penalty: Option<f32>,
    /// vLLM repetition penalty.
    pub repetition_penalty: Option<f32>,
    /// Stop strings.
    pub stop: Option<OneOrMany>,
    /// Stop token ids (vLLM extra).
    pub stop_token_ids: Option<Vec<TokenId>>,
    /// Tokens before a stop may end the request (vLLM extra).
    pub min_tokens: Option<usize>,
    /// Keep going past EOS (vLLM extra).
    pub ignore_eos: Option<bool>,
    /// Keep the matched stop string (vLLM extra).
    pub include_stop_str_in_output: Option<bool>,
    /// Leave special tokens out of the text (vLLM extra).
    pub skip_special_tokens: Option<bool>,
    /// Biases added to token ids' logits: `{"token id": bias}`, each clamped to [-100, 100]
    /// as vLLM clamps it.
    pub logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
    /// Choices per prompt (default 1): each is its own request on the shared prompt, the
    /// prompt's blocks computed once through the prefix cache; with a seed, choice `i` uses
    /// `seed + i` (as vLLM does).
    pub n: Option<usize>,
    /// OpenAI's output format: `text`, `json_object` or `json_schema`.
    pub response_format: Option<serde_json::Value>,
    /// vLLM's constraint: one of `json`, `json_object`, `regex`, `choice`, `grammar`.
    pub structured_outputs: Option<serde_json::Value>,
    /// vLLM's older name for a JSON schema constraint.
    pub guided_json: Option<serde_json::Value>,
    /// vLLM's older name for a regex constraint.
    pub guided_regex: Option<String>,
    /// vLLM's older name for a choice constraint.
    pub guided_choice: Option<Vec<String>>,
    /// vLLM's older name for a grammar constraint.
    pub guided_grammar: Option<String>,
    /// vLLM's prompt logprobs: each prompt token's logprob and rank, and this many top
    /// logprobs at its position (at most [`crate::sampling::MAX_LOGPROBS`]).
    pub prompt_logprobs: Option<usize>,
    /// Every other field of the body, which the server does not implement: refused or logged
    /// by [`super::unknown_fields::check`].
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// Most choices one request may ask for per prompt.
pub const MAX_CHOICES: usize = 64;

impl SamplingFields {
    /// Choices per prompt: `n`, 1 when absent.
    pub fn num_choices(&self) -> Result<usize, ApiError> {
        match self.n.unwrap_or(1) {
            n @ 1..=MAX_CHOICES => Ok(n),
            n => Err(ApiError::bad_request(format!("n = {n} is out of range 1..={MAX_CHOICES}"), "n")),
        }
    }

    /// The request's structured-output constraint and the field that set it; a 400 when
    /// two fields set one or a field does not parse.
    pub fn constraint(&self) -> Result<Option<(Constraint, &'static str)>, ApiError> {
        let mut found = Vec::new();
        if let Some(format) = &self.response_format
            && let Some(constraint) = response_format(format)?
        {
            found.push((constraint, "response_format"));
        }
        if let Some(value) = &self.structured_outputs {
            let constraint = serde_json::from_value(value.clone())
                .map_err(|e| ApiError::bad_request(e.to_string(), "structured_outputs"))?;
            found.push((constraint, "structured_outputs"));
        }
        if let Some(schema) = &self.guided_json {
            let params = StructuredOutputsParams { json: Some(schema.clone()), ..Default::default() };
            let constraint = Constraint::try_from(params)
                .map_err(|e| ApiError::bad_request(e.to_string(), "guided_json"))?;
            found.push((constraint, "guided_json"));
        }
        if let Some(regex) = &self.guided_regex {
            found.push((Constraint::Regex(regex.clone()), "guided_regex"));
        }
        if let Some(choice) = &self.guided_choice {
            found.push((Constraint::Choice(choice.clone()), "guided_choice"));
        }
        if let Some(grammar) = &self.guided_grammar {
            found.push((Constraint::Grammar(grammar.clone()), "guided_grammar"));
        }
        match found.len() {
            0 | 1 => Ok(found.pop()),
            _ => Err(ApiError::bad_request(
                format!("{} and {} both constrain the output; use one", found[0].1, found[1].1),
                found[1].1,
            )),
        }
    }

    /// The engine's parameters for these fields, `max_tokens` and `logprobs`.
    pub fn to_params(&self, max_tokens: usize, logprobs: Option<usize>) -> Result<SamplingParams, ApiError> {
        let defaults = SamplingParams::default();
        let params = SamplingParams {
            temperature: self.temperature.unwrap_or(defaults.temperature),
            top_k: self.top_k.unwrap_or(defaults.top_k),
            top_p: self.top_p.unwrap_or(defaults.top_p),
            min_p: self.min_p.unwrap_or(defaults.min_p),
            seed: self.seed.map(|seed| seed as u64),
            repetition_penalty: self.repetition_penalty.unwrap_or(defaults.repetition_penalty),
            presence_penalty: self.presence_penalty.unwrap_or(defaults.presence_penalty),
            frequency_penalty: self.frequency_penalty.unwrap_or(defaults.frequency_penalty),
            logit_bias: self.logit_bias.as_ref().map(logit_bias).transpose()?.unwrap_or_default(),
            max_tokens,
            min_tokens: self.min_tokens.unwrap_or(defaults.min_tokens),
            stop: match &self.stop {
                None => Vec::new(),
                Some(OneOrMany::One(stop)) => vec![stop.clone()],
                Some(OneOrMany::Many(stops)) => stops.clone(),
            },
            stop_token_ids: self.stop_token_ids.clone().unwrap_or_default(),
            ignore_eos: self.ignore_eos.unwrap_or(defaults.ignore_eos),
            logprobs,
            prompt_logprobs: self.prompt_logprobs,
            include_stop_str_in_output: self
                .include_stop_str_in_output
                .unwrap_or(defaults.include_stop_str_in_output),
            skip_special_tokens: self.skip_special_tokens.unwrap_or(defaults.skip_special_tokens),
            structured_outputs: self.constraint()?.map(|(constraint, _)| constraint),
        };
        params.validate().map_err(|error| ApiError::bad_request(error.to_string(), "sampling"))?;
        Ok(params)
    }
}

/// OpenAI's `logit_bias` object as token ids and biases clamped to [-100, 100] (vLLM's way);
/// a 400 for a key that is not a token id or a value that is not a number.
fn logit_bias(map: &serde_json::Map<String, serde_json::Value>) -> Result<BTreeMap<TokenId, f32>, ApiError> {
    let blame = |message: String| ApiError::bad_request(message, "logit_bias");
    map.iter()
        .map(|(key, value)| {
            let id = key.parse().map_err(|_| blame(format!("logit_bias keys are token ids, got {key:?}")))?;
            let bias =
                value.as_f64().ok_or_else(|| blame(format!("logit_bias of token {key} is not a number")))?;
            Ok((id, (bias as f32).clamp(-MAX_LOGIT_BIAS, MAX_LOGIT_BIAS)))
        })
        .collect()
}

/// The constraint of an OpenAI `response_format`: none for `text`, any object for
/// `json_object`, the schema of `json_schema`.
fn response_format(format: &serde_json::Value) -> Result<Option<Constraint>, ApiError> {
    let blame = |message: String| ApiError::bad_request(message, "response_format");
    match format.get("type").and_then(serde_json::Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::JsonObject)),
        Some("json_schema") => {
            let schema = format
                .get("json_schema")
                .and_then(|spec| spec.get("schema"))
                .ok_or_else(|| blame("response_format json_schema needs json_schema.schema".into()))?;
            Ok(Some(Constraint::JsonSchema(schema.clone())))
        }
        Some(other) => Err(blame(format!(
            "response_format type {other:?} is not supported; use text, json_object or json_schema"
        ))),
        None => Err(blame("response_format needs a type".into())),
    }
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// The served model's name.
    pub model: Option<String>,
    /// The prompt(s).
    pub prompt: PromptInput,
    /// Most tokens to generate (OpenAI default 16).
    pub max_tokens: Option<usize>,
    /// Return this many top log-probabilities per token.
    pub logprobs: Option<usize>,
    /// Stream chunks over server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Return the prompt before the completion (and with `logprobs`, the prompt tokens'
    /// log-probabilities first, the first one `null`); with `max_tokens: 0` it scores the
    /// prompt without generating.
    pub echo: Option<bool>,
    /// Text after the completion; not served.
    pub suffix: Option<String>,
    /// Candidates per choice to pick the best from; only `n` (no extra candidates) is served.
    pub best_of: Option<usize>,
    /// Sampling fields.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

impl CompletionRequest {
    /// A 400 for the legacy fields pagoda does not serve, rather than a silent ignore.
    pub fn check_unsupported(&self) -> Result<(), ApiError> {
        if self.suffix.as_deref().is_some_and(|suffix| !suffix.is_empty()) {
            return Err(ApiError::bad_request("suffix is not supported", "suffix"));
        }
        match self.best_of {
            Some(best_of) if best_of != self.sampling.n.unwrap_or(1) => Err(ApiError::bad_request(
                format!("best_of = {best_of} is not supported; only best_of = n is"),
                "best_of",
            )),
            _ => Ok(()),
        }
    }
}

/// Text content of a chat message: a string or a list of text parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Content parts; only `text` parts are understood.
    Parts(Vec<ContentPart>),
}

/// One content part of a chat message.
#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    /// The part type; only `text` is served.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    pub text: Option<String>,
}

/// One message of a chat request.
#[derive(Debug, Clone, Deserialize)]
pub struct RequestMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its content (absent or null on an assistant message that only calls tools).
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// An assistant message's tool calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// The call a `tool` message answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// An assistant message's reasoning, also taken under vLLM's current name `reasoning`;
    /// the template gets it as the message's `reasoning_content`.
    #[serde(default, alias = "reasoning")]
    pub reasoning_content: Option<String>,
}

impl RequestMessage {
    /// The message as the chat template takes it.
    pub fn to_chat_message(&self) -> Result<ChatMessage, ApiError> {
        let calls_tools =
            self.role == "assistant" && self.tool_calls.as_ref().is_some_and(|calls| !calls.is_empty());
        let content = match &self.content {
            None if calls_tools => String::new(),
            None => {
                return Err(ApiError::bad_request(
                    "invalid request body: a message needs content (only an assistant message with tool_calls may leave it out)",
                    "messages",
                ));
            }
            Some(MessageContent::Text(text)) => text.clone(),
            Some(MessageContent::Parts(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match (&*part.kind, &part.text) {
                        ("text", Some(part_text)) => text.push_str(part_text),
                        (kind, _) => {
                            return Err(ApiError::bad_request(
                                format!("content parts of type {kind:?} are not supported; only text is"),
                                "messages",
                            ));
                        }
                    }
                }
                text
            }
        };
        let mut message = ChatMessage::new(self.role.clone(), content);
        message.tool_call_id = self.tool_call_id.clone();
        message.reasoning_content = self.reasoning_content.clone();
        for call in self.tool_calls.iter().flatten() {
            message.tool_calls.push(template_tool_call(call)?);
        }
        Ok(message)
    }
}

/// A tool call of a request message as chat templates read it: its `arguments` JSON text
/// parsed into an object (as vLLM hands it to templates).
fn template_tool_call(call: &serde_json::Value) -> Result<serde_json::Value, ApiError> {
    let parsed = call.get("function").and_then(ParsedCall::from_json).ok_or_else(|| {
        ApiError::bad_request(
            "a tool call needs a function with a name and JSON object arguments",
            "messages",
        )
    })?;
    Ok(serde_json::json!({
        "id": call.get("id").cloned().unwrap_or_default(),
        "type": "function",
        "function": parsed.to_json("arguments"),
    }))
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    /// The served model's name.
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<RequestMessage>,
    /// Most tokens to generate (legacy name).
    pub max_tokens: Option<usize>,
    /// Most tokens to generate.
    pub max_completion_tokens: Option<usize>,
    /// Return log-probabilities.
    #[serde(default)]
    pub logprobs: bool,
    /// How many top log-probabilities per token (needs `logprobs`).
    pub top_logprobs: Option<usize>,
    /// Stream chunks over server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Functions the model may call.
    #[serde(default)]
    pub tools: Vec<Tool>,
    /// `none`, `auto`, `required` or `{"type": "function", "function": {"name"}}`.
    pub tool_choice: Option<serde_json::Value>,
    /// Allow more than one call in a reply (default true).
    pub parallel_tool_calls: Option<bool>,
    /// Extra variables for the chat template (vLLM's), e.g. `{"enable_thinking": false}`.
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// `low`, `medium` or `high`: the chat template's `reasoning_effort`.
    pub reasoning_effort: Option<String>,
    /// Sampling fields.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// The values `reasoning_effort` may take.
pub const REASONING_EFFORTS: [&str; 3] = ["low", "medium", "high"];

impl ChatCompletionRequest {
    /// The chat template's extra variables: `chat_template_kwargs`, with `reasoning_effort` set
    /// from the request's field when it has one; a 400 for an effort that is not one of
    /// [`REASONING_EFFORTS`].
    pub fn template_kwargs(&self) -> Result<TemplateKwargs, ApiError> {
        let mut kwargs = self.chat_template_kwargs.clone().unwrap_or_default();
        if let Some(effort) = &self.reasoning_effort {
            if !REASONING_EFFORTS.contains(&effort.as_str()) {
                return Err(ApiError::bad_request(
                    format!("reasoning_effort {effort:?} is not low, medium or high"),
                    "reasoning_effort",
                ));
            }
            kwargs.insert("reasoning_effort".into(), effort.clone().into());
        }
        Ok(kwargs)
    }
}

/// Why a chat choice ended: the engine's reasons, and `tool_calls` when the reply was
/// parsed into calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatFinishReason {
    /// EOS, stop token or stop string.
    Stop,
    /// `max_tokens` or `max_model_len`.
    Length,
    /// Aborted.
    Abort,
    /// Failed.
    Error,
    /// The reply is tool calls.
    ToolCalls,
}

impl From<FinishReason> for ChatFinishReason {
    fn from(reason: FinishReason) -> Self {
        match reason {
            FinishReason::Stop => Self::Stop,
            FinishReason::Length => Self::Length,
            FinishReason::Abort => Self::Abort,
            FinishReason::Error => Self::Error,
        }
    }
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Their sum.
    pub total_tokens: usize,
}

impl Usage {
    /// Usage of `prompt_tokens` + `completion_tokens`.
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Self {
        Self { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens }
    }
}

impl std::ops::Add for Usage {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self::new(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)
    }
}

/// Legacy completion log-probabilities.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CompletionLogprobs {
    /// Each token's text.
    pub tokens: Vec<String>,
    /// Each token's log-probability (`null` for an echoed prompt's first token).
    pub token_logprobs: Vec<Option<f32>>,
    /// Each position's top tokens and their log-probabilities (`null` for an echoed prompt's
    /// first token).
    pub top_logprobs: Vec<Option<serde_json::Map<String, serde_json::Value>>>,
    /// Each token's byte offset in the text.
    pub text_offset: Vec<usize>,
}

/// One choice of a completion response or chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompletionChoice {
    /// Which prompt and choice it is: prompt number × n + choice number.
    pub index: usize,
    /// Generated text (a delta when streaming).
    pub text: String,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<CompletionLogprobs>,
    /// Why it ended; `null` until then.
    pub finish_reason: Option<FinishReason>,
    /// The prompt's log-probabilities in vLLM's shape, when `prompt_logprobs` asked for them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<VllmPromptLogprobs>,
}

/// One prompt token's or alternative's entry in vLLM's `prompt_logprobs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmLogprob {
    /// Its log-probability.
    pub logprob: f32,
    /// Its rank at its position (1 is the most likely).
    pub rank: usize,
    /// Its text.
    pub decoded_token: String,
}

/// vLLM's `prompt_logprobs`: per prompt position, `null` for the first, then the prompt's token
/// and the top tokens by id.
pub type VllmPromptLogprobs = Vec<Option<BTreeMap<TokenId, VllmLogprob>>>;

/// A completion response, or one streamed chunk of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompletionResponse {
    /// `cmpl-<n>`.
    pub id: String,
    /// `text_completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model.
    pub model: String,
    /// One choice per prompt.
    pub choices: Vec<CompletionChoice>,
    /// Token usage (on the final response or chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One alternative token with its log-probability.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Vec<u8>,
}

/// One generated token with its log-probability and alternatives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatTokenLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Vec<u8>,
    /// The most likely tokens at this position.
    pub top_logprobs: Vec<TopLogprob>,
}

/// Chat log-probabilities.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatLogprobs {
    /// One entry per generated token.
    pub content: Vec<ChatTokenLogprob>,
}

/// An assistant message or a streamed delta of one.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResponseMessage {
    /// `assistant` (only on the first delta when streaming).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// The text (the answer, when a reasoning parser split the reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The reasoning, when a reasoning parser split the reply (the name vLLM used first and
    /// DeepSeek's API uses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The same reasoning under the name vLLM's current releases use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The tool calls of the reply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

impl ResponseMessage {
    /// The message with `reasoning` under both of its names (none when `None`).
    pub fn with_reasoning(self, reasoning: Option<String>) -> Self {
        Self { reasoning_content: reasoning.clone(), reasoning, ..self }
    }
}

/// One choice of a chat response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatChoice {
    /// The choice, 0..n.
    pub index: usize,
    /// The reply.
    pub message: ResponseMessage,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// Why it ended.
    pub finish_reason: Option<ChatFinishReason>,
}

/// One choice of a streamed chat chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatChunkChoice {
    /// The choice, 0..n.
    pub index: usize,
    /// The new part of the reply.
    pub delta: ResponseMessage,
    /// Log-probabilities of this chunk's tokens, when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// Why it ended; `null` until then.
    pub finish_reason: Option<ChatFinishReason>,
}

/// A chat completion response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatCompletionResponse {
    /// `chatcmpl-<n>`.
    pub id: String,
    /// `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model.
    pub model: String,
    /// The reply.
    pub choices: Vec<ChatChoice>,
    /// Token usage.
    pub usage: Usage,
    /// The (templated) prompt's log-probabilities in vLLM's shape, when `prompt_logprobs` asked
    /// for them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<VllmPromptLogprobs>,
}

/// One streamed chat chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatCompletionChunk {
    /// `chatcmpl-<n>`, the same for every chunk of a response.
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model.
    pub model: String,
    /// The delta (empty on the usage chunk).
    pub choices: Vec<ChatChunkChoice>,
    /// Token usage, on the last chunk when `stream_options.include_usage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelCard {
    /// The served model name.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// Unix seconds when the server started.
    pub created: u64,
    /// `pagoda`.
    pub owned_by: &'static str,
    /// What the model was read from: the served name for the base model, the path for a
    /// LoRA adapter.
    pub root: String,
    /// The base model's name for a LoRA adapter; `null` for the base model.
    pub parent: Option<String>,
    /// Longest prompt + output.
    pub max_model_len: usize,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The served model, then its LoRA adapters.
    pub data: Vec<ModelCard>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logit_bias_is_clamped_as_vllm_clamps_it_and_keys_must_be_ids() {
        let fields = |bias: serde_json::Value| -> SamplingFields {
            serde_json::from_value(serde_json::json!({ "logit_bias": bias })).unwrap()
        };
        let params = fields(serde_json::json!({"5": 1e9, "6": -300, "7": 2.5})).to_params(4, None).unwrap();
        assert_eq!(params.logit_bias, BTreeMap::from([(5, 100.0), (6, -100.0), (7, 2.5)]));
        let refused = fields(serde_json::json!({"five": 1})).to_params(4, None).unwrap_err();
        assert_eq!(refused.param.as_deref(), Some("logit_bias"));
    }
}

//! The HTTP handlers.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::future::join_all;
use serde::de::DeserializeOwned;

use super::echo::{drop_generated, echo_logprobs, vllm_prompt_logprobs};
use super::error::ApiError;
use super::openai::{
    ChatChoice, ChatCompletionRequest, ChatCompletionResponse, CompletionChoice, CompletionRequest,
    CompletionResponse, ModelCard, ModelList, PromptInput, SamplingFields, Usage,
};
use super::responses::{chat_logprobs, choice_usage, completion_logprobs, reply};
use super::streaming::{ChatStreamer, CompletionStreamer, StreamedPrompt, failed_request, sse_response};
use super::tools::{Tool, ToolChoice, call_grammar, tool_values};
use super::unknown_fields::{self, Endpoint};
use super::{ServerState, prometheus, unix_seconds};
use crate::core::request::FinishReason;
use crate::engine::handle::RequestStream;
use crate::engine::{CompletionOutput, EngineError, Prompt};
use crate::ids::TokenId;
use crate::model::chat::TemplateKwargs;
use crate::model::reasoning::{ReasoningParser, Thinking};
use crate::sampling::SamplingParams;

/// `POST /v1/completions`.
pub async fn completions(
    State(state): State<Arc<ServerState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: CompletionRequest = parse_body(&state, body)?;
    let lora = check_model(&state, request.model.as_deref())?;
    unknown_fields::check(Endpoint::Completions, &request.sampling.extra)?;
    request.check_unsupported()?;
    let prompts: Vec<Prompt> = match request.prompt {
        PromptInput::Text(text) => vec![Prompt::Text(text)],
        PromptInput::Texts(texts) => texts.into_iter().map(Prompt::Text).collect(),
        PromptInput::Tokens(ids) => vec![Prompt::TokenIds(ids)],
        PromptInput::TokenLists(lists) => lists.into_iter().map(Prompt::TokenIds).collect(),
    };
    if prompts.is_empty() {
        return Err(ApiError::bad_request("prompt must not be empty", "prompt"));
    }
    let echo = request.echo == Some(true);
    // Scoring only: the engine generates one token to run the prefill, and it is dropped.
    let score_only = echo && request.max_tokens == Some(0);
    let max_tokens = if score_only { 1 } else { request.max_tokens.unwrap_or(16) };
    let mut params = request.sampling.to_params(max_tokens, request.logprobs)?;
    if let (true, Some(top_n)) = (echo, request.logprobs) {
        params.prompt_logprobs = Some(params.prompt_logprobs.map_or(top_n, |asked| asked.max(top_n)));
    }
    let n = request.sampling.num_choices()?;
    state.limits.check(prompts.len(), n, &params)?;
    let echoed: Vec<String> = match echo {
        true => prompts.iter().map(|prompt| echo_text(&state, prompt)).collect::<Result<_, _>>()?,
        false => Vec::new(),
    };
    let streamed_echo = match request.stream {
        true => echoed
            .iter()
            .zip(&prompts)
            .map(|(text, prompt)| echo_tokens(&state, text, prompt))
            .collect::<Result<_, _>>()?,
        false => Vec::new(),
    };
    let streams = start(&state, prompts, &params, n, &request.sampling, lora.as_deref()).await?;
    let id = state.next_response_id("cmpl");
    if request.stream {
        let include_usage = request.stream_options.is_some_and(|options| options.include_usage);
        let prompt = StreamedPrompt {
            echo: streamed_echo,
            n,
            prompt_logprobs: request.sampling.prompt_logprobs,
            score_only,
        };
        let streamer = CompletionStreamer::new(Arc::clone(&state), id, request.logprobs, prompt);
        return Ok(sse_response(streams, n, include_usage, streamer));
    }
    let mut completions = join_all(streams.into_iter().map(RequestStream::collect)).await;
    check_completed(&completions)?;
    if score_only {
        completions.iter_mut().for_each(drop_generated);
    }
    let usage = total_usage(&completions, n);
    let tokenizer = &state.tokenizer;
    let choices = completions
        .iter()
        .enumerate()
        .map(|(index, completion)| CompletionChoice {
            index,
            text: match echoed.get(index / n) {
                Some(prompt) => format!("{prompt}{}", completion.text),
                None => completion.text.clone(),
            },
            logprobs: request.logprobs.map(|top_n| match echo {
                true => echo_logprobs(tokenizer, completion, top_n),
                false => completion_logprobs(tokenizer, &completion.token_ids, &completion.logprobs, 0),
            }),
            finish_reason: completion.finish_reason,
            prompt_logprobs: request.sampling.prompt_logprobs.map(|top_n| {
                vllm_prompt_logprobs(
                    tokenizer,
                    completion.prompt_logprobs.as_deref().unwrap_or_default(),
                    top_n,
                )
            }),
        })
        .collect();
    let response = CompletionResponse {
        id,
        object: "text_completion",
        created: unix_seconds(),
        model: lora.clone().unwrap_or_else(|| state.model_name.clone()),
        choices,
        usage: Some(usage),
    };
    Ok(Json(response).into_response())
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<Arc<ServerState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: ChatCompletionRequest = parse_body(&state, body)?;
    let lora = check_model(&state, request.model.as_deref())?;
    unknown_fields::check(Endpoint::ChatCompletions, &request.sampling.extra)?;
    if request.messages.is_empty() {
        return Err(ApiError::bad_request("messages must not be empty", "messages"));
    }
    let messages = request.messages.iter().map(|m| m.to_chat_message()).collect::<Result<Vec<_>, _>>()?;
    let max_tokens = request.max_completion_tokens.or(request.max_tokens);
    if request.top_logprobs.is_some() && !request.logprobs {
        return Err(ApiError::bad_request("top_logprobs needs logprobs set to true", "top_logprobs"));
    }
    let logprobs = request.logprobs.then(|| request.top_logprobs.unwrap_or(0));
    let max_tokens = max_tokens.unwrap_or(state.max_model_len);
    let mut params = request.sampling.to_params(max_tokens, logprobs)?;
    check_tool_types(&request.tools)?;
    let tool_choice = ToolChoice::parse(request.tool_choice.as_ref(), &request.tools)?;
    let calls = (tool_choice != ToolChoice::None).then_some(state.tool_format);
    if let Some(constraint) = forced_calls(&state, &request, &tool_choice) {
        if params.structured_outputs.is_some() {
            return Err(ApiError::bad_request(
                "tool_choice forces a tool call, which cannot be combined with another output constraint",
                "tool_choice",
            ));
        }
        params.structured_outputs = Some(constraint);
    }
    if request.stream && params.prompt_logprobs.is_some() {
        return Err(ApiError::bad_request("prompt_logprobs is not supported with stream", "prompt_logprobs"));
    }
    let n = request.sampling.num_choices()?;
    state.limits.check(1, n, &params)?;
    let kwargs = request.template_kwargs()?;
    let reasoning = reasoning_split(&state, &mut params, &kwargs);
    let prompt = Prompt::ChatWithKwargs {
        messages,
        tools: calls.is_some().then(|| tool_values(&request.tools)),
        kwargs,
    };
    let streams = start(&state, vec![prompt], &params, n, &request.sampling, lora.as_deref()).await?;
    let id = state.next_response_id("chatcmpl");
    if request.stream {
        let include_usage = request.stream_options.is_some_and(|options| options.include_usage);
        let logprobs = params.logprobs.is_some();
        let streamer = ChatStreamer::new(Arc::clone(&state), id, n, logprobs, calls, reasoning);
        return Ok(sse_response(streams, n, include_usage, streamer));
    }
    let completions = join_all(streams.into_iter().map(RequestStream::collect)).await;
    check_completed(&completions)?;
    let choices = completions
        .iter()
        .enumerate()
        .map(|(index, completion)| {
            let (message, finish_reason) = reply(&id, index, calls, reasoning, completion);
            ChatChoice {
                index,
                message,
                logprobs: params
                    .logprobs
                    .map(|_| chat_logprobs(&state.tokenizer, &completion.token_ids, &completion.logprobs)),
                finish_reason,
            }
        })
        .collect();
    let response = ChatCompletionResponse {
        id,
        object: "chat.completion",
        created: unix_seconds(),
        model: lora.clone().unwrap_or_else(|| state.model_name.clone()),
        usage: total_usage(&completions, n),
        prompt_logprobs: params.prompt_logprobs.map(|top_n| {
            let prompt = completions.first().and_then(|c| c.prompt_logprobs.as_deref()).unwrap_or_default();
            vllm_prompt_logprobs(&state.tokenizer, prompt, top_n)
        }),
        choices,
    };
    Ok(Json(response).into_response())
}

/// A 400 for a tool that is not a function.
pub(super) fn check_tool_types(tools: &[Tool]) -> Result<(), ApiError> {
    match tools.iter().find(|tool| tool.kind != "function") {
        Some(tool) => Err(ApiError::bad_request(
            format!("tools of type {:?} are not supported; only function", tool.kind),
            "tools",
        )),
        None => Ok(()),
    }
}

/// How a chat reply is split into reasoning and answer: by the server's reasoning parser,
/// unless the reply is constrained (structured outputs or a forced tool call), whose
/// constraint holds from its first token, so that all of it is answer. A parser whose markers
/// are special tokens keeps them in the text.
fn reasoning_split(
    state: &ServerState,
    params: &mut SamplingParams,
    kwargs: &TemplateKwargs,
) -> Option<(ReasoningParser, Thinking)> {
    let parser = state.reasoning_parser.filter(|_| params.structured_outputs.is_none())?;
    if parser.needs_special_tokens() {
        params.skip_special_tokens = false;
    }
    Some((parser, Thinking::from_template_kwargs(kwargs)))
}

/// The grammar that `tool_choice: "required"` or a named function imposes on the reply.
fn forced_calls(
    state: &ServerState,
    request: &ChatCompletionRequest,
    choice: &ToolChoice,
) -> Option<crate::structured::Constraint> {
    let parallel = request.parallel_tool_calls.unwrap_or(true);
    let tools: Vec<&Tool> = match choice {
        ToolChoice::None | ToolChoice::Auto => return None,
        ToolChoice::Required => request.tools.iter().collect(),
        ToolChoice::Function(name) => request.tools.iter().filter(|t| &t.function.name == name).collect(),
    };
    Some(call_grammar(state.tool_format, &tools, parallel && matches!(choice, ToolChoice::Required)))
}

/// `GET /v1/models`.
pub async fn models(State(state): State<Arc<ServerState>>) -> Json<ModelList> {
    let card = |id: String, root: String, parent: Option<String>| ModelCard {
        id,
        object: "model",
        created: state.created,
        owned_by: "pagoda",
        root,
        parent,
        max_model_len: state.max_model_len,
    };
    let base = card(state.model_name.clone(), state.model_name.clone(), None);
    let adapters =
        state.loras.list().into_iter().map(|(name, path)| {
            card(name, path.to_string_lossy().into_owned(), Some(state.model_name.clone()))
        });
    Json(ModelList { object: "list", data: std::iter::once(base).chain(adapters).collect() })
}

/// `GET /health`: 200 while the engine serves; 503 once a drain has begun (so routers stop
/// sending) or the device was lost.
pub async fn health(State(state): State<Arc<ServerState>>) -> Result<StatusCode, ApiError> {
    if let Some(reason) = state.engine.device_lost() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("the engine stopped: {reason}")));
    }
    if state.is_draining() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down"));
    }
    Ok(StatusCode::OK)
}

/// `GET /metrics`.
pub async fn metrics(State(state): State<Arc<ServerState>>) -> Response {
    let lora = state.engine.lora_usage();
    let exposition = prometheus::Exposition {
        lora: &lora,
        prefix: state.metrics_prefix,
        model_name: &state.model_name,
        cache: state.cache_info,
        kv_events_dropped: state.kv_events.as_ref().map(|publisher| publisher.dropped_batches()),
    };
    let text = prometheus::render(&state.engine.metrics(), &exposition);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// Parses a JSON body, answering 413 when it is over the limit and 400 with serde's
/// message when it does not fit.
pub(super) fn parse_body<T: DeserializeOwned>(
    state: &ServerState,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => state.limits.body_too_large(),
        status => ApiError::new(status, format!("cannot read the request body: {}", rejection.body_text())),
    })?;
    serde_json::from_slice(&body)
        .map_err(|error| ApiError::bad_request(format!("invalid request body: {error}"), "body"))
}

/// The LoRA adapter a request's `model` names (`None` for the base model); a request for
/// another model is a 404, as OpenAI and vLLM answer it.
pub(super) fn check_model(state: &ServerState, model: Option<&str>) -> Result<Option<String>, ApiError> {
    match model {
        Some(model) if model == state.model_name => Ok(None),
        Some(model) if state.loras.contains(model) => Ok(Some(model.to_owned())),
        Some(model) => Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("the model {model:?} does not exist; this server serves {:?}", state.model_name),
            param: Some("model".into()),
        }),
        None => Ok(None),
    }
}

/// Adds `n` requests per prompt, prompt by prompt (choice `i` of a seeded request draws
/// from `seed + i`), run with LoRA adapter `lora` if one is named; on any error the ones
/// already added are aborted (their streams are dropped). A constraint that does not compile
/// is a 400 blaming the field that set it.
async fn start(
    state: &ServerState,
    prompts: Vec<Prompt>,
    params: &SamplingParams,
    n: usize,
    fields: &SamplingFields,
    lora: Option<&str>,
) -> Result<Vec<RequestStream>, ApiError> {
    let mut streams = Vec::with_capacity(prompts.len() * n);
    for prompt in prompts {
        for choice in 0..n as u64 {
            let params =
                SamplingParams { seed: params.seed.map(|seed| seed.wrapping_add(choice)), ..params.clone() };
            let added = state.engine.add_request_with_lora(prompt.clone(), params, lora.map(str::to_owned));
            let stream = added.await.map_err(|error| match (&error, fields.constraint()) {
                (EngineError::Constraint(e), Ok(Some((_, field)))) => {
                    ApiError::bad_request(e.to_string(), field)
                }
                _ => ApiError::from(error),
            })?;
            streams.push(stream);
        }
    }
    Ok(streams)
}

/// The text `echo` puts before a completion: a text prompt as given, a tokenized one decoded.
fn echo_text(state: &ServerState, prompt: &Prompt) -> Result<String, ApiError> {
    match prompt {
        Prompt::Text(text) => Ok(text.clone()),
        Prompt::TokenIds(ids) => state
            .tokenizer
            .decode(ids, false)
            .map_err(|error| ApiError::bad_request(error.to_string(), "prompt")),
        _ => Err(ApiError::bad_request("echo needs a text or token prompt", "echo")),
    }
}

/// An echoed prompt's text and token ids (a text prompt tokenized as the engine tokenizes it).
fn echo_tokens(state: &ServerState, text: &str, prompt: &Prompt) -> Result<(String, Vec<TokenId>), ApiError> {
    let ids = match prompt {
        Prompt::TokenIds(ids) => ids.clone(),
        _ => state
            .tokenizer
            .encode_prompt(text)
            .map_err(|error| ApiError::bad_request(error.to_string(), "prompt"))?,
    };
    Ok((text.to_owned(), ids))
}

/// A request the engine failed is a 500 (so is one that ended any other unexpected way).
fn check_completed(completions: &[CompletionOutput]) -> Result<(), ApiError> {
    match completions.iter().find(|c| {
        c.finish_reason != Some(FinishReason::Stop) && c.finish_reason != Some(FinishReason::Length)
    }) {
        Some(completion) if completion.finish_reason == Some(FinishReason::Error) => {
            Err(failed_request(completion.request_id))
        }
        Some(completion) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("request {} ended with {:?}", completion.request_id, completion.finish_reason),
        )),
        None => Ok(()),
    }
}

/// Token usage of the completions of `n` choices per prompt: each prompt counts once (as
/// vLLM counts it), every choice's generated tokens count.
fn total_usage(completions: &[CompletionOutput], n: usize) -> Usage {
    completions.iter().enumerate().fold(Usage::default(), |sum, (index, completion)| {
        sum + choice_usage(index, n, completion.prompt_token_ids.len(), completion.token_ids.len())
    })
}

//! vLLM's `POST /tokenize` and `POST /detokenize`: the token ids a prompt or a conversation
//! becomes, exactly as the completion endpoints feed it to the model, and the text of ids; and
//! vLLM's `GET /tokenizer_info`, which clients such as lm-evaluation-harness read to tokenize
//! through the server.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::ServerState;
use super::error::ApiError;
use super::openai::RequestMessage;
use super::routes::{check_model, check_tool_types, parse_body};
use super::tools::{Tool, tool_values};
use crate::engine::{EngineError, encode_chat};
use crate::ids::TokenId;

/// `POST /tokenize`'s body: a text `prompt`, or chat `messages` (and `tools`) rendered as
/// `/v1/chat/completions` renders them.
#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    /// The served model's name.
    pub model: Option<String>,
    /// A text prompt (control tokens written in it are parsed).
    pub prompt: Option<String>,
    /// A conversation.
    pub messages: Option<Vec<RequestMessage>>,
    /// Functions the conversation offers the model.
    #[serde(default)]
    pub tools: Vec<Tool>,
    /// End the conversation with the assistant's header (default true).
    pub add_generation_prompt: Option<bool>,
    /// Extra variables for the chat template, as `/v1/chat/completions` takes them.
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// BOS first where the model wants one: by default for a prompt (as `/v1/completions`
    /// adds it), not for messages (their template writes it).
    pub add_special_tokens: Option<bool>,
    /// Also return each token's text.
    #[serde(default)]
    pub return_token_strs: bool,
}

/// `POST /tokenize`'s answer.
#[derive(Debug, Serialize)]
pub struct TokenizeResponse {
    /// How many tokens.
    pub count: usize,
    /// The longest prompt plus output a request may have.
    pub max_model_len: usize,
    /// The token ids.
    pub tokens: Vec<TokenId>,
    /// Each token's vocabulary entry as stored (byte-level vocabularies write bytes in GPT-2's
    /// alphabet: `Ġworld`), when asked; null otherwise.
    pub token_strs: Option<Vec<String>>,
}

/// `POST /detokenize`'s body.
#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    /// The served model's name.
    pub model: Option<String>,
    /// Token ids.
    pub tokens: Vec<TokenId>,
}

/// `POST /detokenize`'s answer.
#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    /// The text of the ids, control tokens included.
    pub prompt: String,
}

/// `GET /tokenizer_info`'s answer: the tokenizer's special tokens and chat template, in the
/// fields of vLLM's answer that clients read.
#[derive(Debug, Serialize)]
pub struct TokenizerInfoResponse {
    /// The BOS token's text, if the vocabulary has one.
    pub bos_token: Option<String>,
    /// The EOS token's text, if the vocabulary has one.
    pub eos_token: Option<String>,
    /// No padding token is used.
    pub pad_token: Option<String>,
    /// Whether a text prompt starts with BOS.
    pub add_bos_token: bool,
    /// The chat template's source, if the model has one.
    pub chat_template: Option<String>,
    /// The longest prompt plus output a request may have.
    pub model_max_length: usize,
}

/// `GET /tokenizer_info`.
pub async fn tokenizer_info(State(state): State<Arc<ServerState>>) -> Json<TokenizerInfoResponse> {
    let tokenizer = &state.tokenizer;
    let piece = |id: Option<TokenId>| id.and_then(|id| tokenizer.id_to_piece(id));
    Json(TokenizerInfoResponse {
        bos_token: piece(tokenizer.bos_token_id()),
        eos_token: piece(tokenizer.eos_token_id()),
        pad_token: None,
        add_bos_token: tokenizer.prompt_bos().is_some(),
        chat_template: state.chat_template.as_ref().map(|template| template.source().to_owned()),
        model_max_length: state.max_model_len,
    })
}

/// `POST /tokenize`.
pub async fn tokenize(
    State(state): State<Arc<ServerState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let request: TokenizeRequest = parse_body(&state, body)?;
    check_model(&state, request.model.as_deref())?;
    let add_bos = request.add_special_tokens.unwrap_or(request.prompt.is_some());
    let return_token_strs = request.return_token_strs;
    let encode = encoder(&state, request)?;
    let tokenizer = Arc::clone(&state.tokenizer);
    let (tokens, token_strs) = off_runtime(move || {
        let mut tokens = encode()?;
        if let Some(bos) = tokenizer.prompt_bos().filter(|_| add_bos) {
            tokens.insert(0, bos);
        }
        let token_strs = return_token_strs
            .then(|| tokens.iter().map(|&id| tokenizer.id_to_piece(id).unwrap_or_default()).collect());
        Ok::<_, EngineError>((tokens, token_strs))
    })
    .await??;
    Ok(Json(TokenizeResponse { count: tokens.len(), max_model_len: state.max_model_len, tokens, token_strs }))
}

/// What `request` asks to tokenize, as work for the blocking threads: its prompt, or its
/// messages and tools in the chat template (the caller adds BOS); a 400 for neither, both,
/// or a conversation the chat endpoint would refuse.
fn encoder(state: &ServerState, request: TokenizeRequest) -> Result<Encode, ApiError> {
    let tokenizer = Arc::clone(&state.tokenizer);
    match (request.prompt, request.messages) {
        (Some(prompt), None) => Ok(Box::new(move || Ok(tokenizer.encode(&prompt, true)?))),
        (None, Some(messages)) if messages.is_empty() => {
            Err(ApiError::bad_request("messages must not be empty", "messages"))
        }
        (None, Some(messages)) => {
            let messages =
                messages.iter().map(RequestMessage::to_chat_message).collect::<Result<Vec<_>, _>>()?;
            check_tool_types(&request.tools)?;
            let tools = (!request.tools.is_empty()).then(|| tool_values(&request.tools));
            let add_generation_prompt = request.add_generation_prompt.unwrap_or(true);
            let kwargs = request.chat_template_kwargs.unwrap_or_default();
            let template = state.chat_template.clone();
            Ok(Box::new(move || {
                encode_chat(
                    &tokenizer,
                    template.as_deref(),
                    &messages,
                    tools.as_deref(),
                    &kwargs,
                    add_generation_prompt,
                )
            }))
        }
        _ => Err(ApiError::bad_request("give one of prompt and messages", "prompt")),
    }
}

/// Tokenizing work that runs off the async runtime.
type Encode = Box<dyn FnOnce() -> Result<Vec<TokenId>, EngineError> + Send>;

/// `POST /detokenize`.
pub async fn detokenize(
    State(state): State<Arc<ServerState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let request: DetokenizeRequest = parse_body(&state, body)?;
    check_model(&state, request.model.as_deref())?;
    let tokenizer = Arc::clone(&state.tokenizer);
    let prompt = off_runtime(move || tokenizer.decode(&request.tokens, false))
        .await?
        .map_err(|e| ApiError::bad_request(e.to_string(), "tokens"))?;
    Ok(Json(DetokenizeResponse { prompt }))
}

/// Runs `f` on Tokio's blocking threads: a body of megabytes takes long enough to tokenize
/// that it would hold up the other requests' tasks.
async fn off_runtime<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Result<R, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("the tokenizer failed: {e}")))
}

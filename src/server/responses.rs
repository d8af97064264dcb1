//! Pieces of response bodies that plain and streamed answers share: choices' usage,
//! log-probabilities, and the assistant message with its reasoning and tool calls.

use super::openai::{
    ChatFinishReason, ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, ResponseMessage, TopLogprob, Usage,
};
use super::tools::{ParsedCall, ToolCallOut, ToolFormat, call_out};
use crate::core::request::FinishReason;
use crate::engine::CompletionOutput;
use crate::ids::TokenId;
use crate::model::Tokenizer;
use crate::model::reasoning::{ReasoningParser, Reply, Thinking};
use crate::sampling::TokenLogprobs;

/// The calls of choice `index` in OpenAI's shape, with ids unique within the response.
pub(super) fn tool_calls_out(response_id: &str, index: usize, calls: &[ParsedCall]) -> Vec<ToolCallOut> {
    let stem = response_id.trim_start_matches("chatcmpl-");
    calls.iter().enumerate().map(|(i, call)| call_out(call, format!("call_{stem}_{index}_{i}"))).collect()
}

/// The assistant message of a finished choice: with a reasoning parser (`reasoning`), its
/// reasoning apart; then its tool calls when tools were offered and the reply wrote calls
/// (finish reason `tool_calls`), else its answer's text. Calls are what the reasoning format
/// wrote apart (harmony's, beside the answer), or else the answer parsed in `calls`' format
/// (in place of the answer).
pub(super) fn reply(
    response_id: &str,
    index: usize,
    calls: Option<ToolFormat>,
    reasoning: Option<(ReasoningParser, Thinking)>,
    completion: &CompletionOutput,
) -> (ResponseMessage, Option<ChatFinishReason>) {
    let finish_reason = completion.finish_reason.map(ChatFinishReason::from);
    let Reply { reasoning, mut content, tool_calls } = match reasoning {
        Some((parser, thinking)) => parser.split(&completion.text, thinking),
        None => Reply { content: Some(completion.text.clone()), ..Reply::default() },
    };
    let parsed = match calls.filter(|_| completion.finish_reason == Some(FinishReason::Stop)) {
        None => None,
        Some(_) if tool_calls.is_some() => tool_calls,
        Some(format) => {
            let parsed = format.parse(content.as_deref().unwrap_or_default());
            if parsed.is_some() {
                content = None;
            }
            parsed
        }
    };
    let message = ResponseMessage {
        role: Some("assistant"),
        content,
        tool_calls: parsed.as_ref().map(|parsed| tool_calls_out(response_id, index, parsed)),
        ..ResponseMessage::default()
    };
    let finish_reason = if parsed.is_some() { Some(ChatFinishReason::ToolCalls) } else { finish_reason };
    (message.with_reasoning(reasoning), finish_reason)
}

/// The usage choice `index` adds when there are `n` choices per prompt: its prompt's tokens
/// only for the prompt's first choice.
pub(super) fn choice_usage(index: usize, n: usize, prompt_tokens: usize, completion_tokens: usize) -> Usage {
    Usage::new(if index.is_multiple_of(n) { prompt_tokens } else { 0 }, completion_tokens)
}

/// One token's text (lossy for a partial UTF-8 character) and raw bytes.
pub(super) fn token_text(tokenizer: &Tokenizer, token: TokenId) -> (String, Vec<u8>) {
    let bytes = tokenizer.token_bytes(token).map(<[u8]>::to_vec).unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// Legacy completion log-probabilities of `token_ids`; `text_offset` starts at `offset`.
pub(super) fn completion_logprobs(
    tokenizer: &Tokenizer,
    token_ids: &[TokenId],
    logprobs: &[TokenLogprobs],
    mut offset: usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for (&token, entry) in token_ids.iter().zip(logprobs) {
        let (text, _) = token_text(tokenizer, token);
        out.text_offset.push(offset);
        offset += text.len();
        out.tokens.push(text);
        out.token_logprobs.push(Some(entry.logprob));
        out.top_logprobs.push(Some(top_map(tokenizer, &entry.top)));
    }
    out
}

/// A position's top tokens as the legacy `{text: logprob}` object.
pub(super) fn top_map(
    tokenizer: &Tokenizer,
    top: &[(TokenId, f32)],
) -> serde_json::Map<String, serde_json::Value> {
    top.iter().map(|&(id, logprob)| (token_text(tokenizer, id).0, serde_json::Value::from(logprob))).collect()
}

/// Chat log-probabilities of `token_ids`.
pub(super) fn chat_logprobs(
    tokenizer: &Tokenizer,
    token_ids: &[TokenId],
    logprobs: &[TokenLogprobs],
) -> ChatLogprobs {
    let entry = |token: TokenId, logprob: f32| {
        let (token, bytes) = token_text(tokenizer, token);
        TopLogprob { token, logprob, bytes }
    };
    let content = token_ids
        .iter()
        .zip(logprobs)
        .map(|(&token, logprobs)| {
            let sampled = entry(token, logprobs.logprob);
            ChatTokenLogprob {
                token: sampled.token,
                logprob: sampled.logprob,
                bytes: sampled.bytes,
                top_logprobs: logprobs.top.iter().map(|&(id, logprob)| entry(id, logprob)).collect(),
            }
        })
        .collect();
    ChatLogprobs { content }
}

//! Prompt log-probabilities in the server's answers: vLLM's `prompt_logprobs` and OpenAI's
//! `echo` on `/v1/completions` (the prompt first in the text and in the legacy logprobs).

use std::collections::BTreeMap;

use super::openai::{CompletionLogprobs, VllmLogprob, VllmPromptLogprobs};
use super::responses::{completion_logprobs, token_text, top_map};
use crate::engine::CompletionOutput;
use crate::model::Tokenizer;
use crate::sampling::PromptTokenLogprobs;

/// vLLM's `prompt_logprobs` of a completion, `top_n` alternatives a position (the request's
/// own `prompt_logprobs`; the engine may have computed more for `echo`).
pub(super) fn vllm_prompt_logprobs(
    tokenizer: &Tokenizer,
    prompt_logprobs: &[Option<PromptTokenLogprobs>],
    top_n: usize,
) -> VllmPromptLogprobs {
    let decoded = |id| token_text(tokenizer, id).0;
    prompt_logprobs
        .iter()
        .map(|entry| {
            entry.as_ref().map(|entry| {
                let own = VllmLogprob {
                    logprob: entry.logprob,
                    rank: entry.rank,
                    decoded_token: decoded(entry.token_id),
                };
                let mut position = BTreeMap::from([(entry.token_id, own)]);
                for (rank, &(id, logprob)) in entry.top.iter().take(top_n).enumerate() {
                    position.insert(id, VllmLogprob { logprob, rank: rank + 1, decoded_token: decoded(id) });
                }
                position
            })
        })
        .collect()
}

/// The legacy logprobs of an echoed completion: the prompt's tokens first (the first with
/// `null`s, the others with their logprob and `top_n` alternatives), then the generated ones.
pub(super) fn echo_logprobs(
    tokenizer: &Tokenizer,
    completion: &CompletionOutput,
    top_n: usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    let mut offset = 0;
    let prompt = completion.prompt_logprobs.as_deref().unwrap_or_default();
    for (index, &token) in completion.prompt_token_ids.iter().enumerate() {
        let entry = prompt.get(index).and_then(Option::as_ref);
        let text = token_text(tokenizer, token).0;
        out.text_offset.push(offset);
        offset += text.len();
        out.tokens.push(text);
        out.token_logprobs.push(entry.map(|entry| entry.logprob));
        out.top_logprobs
            .push(entry.map(|entry| top_map(tokenizer, &entry.top[..top_n.min(entry.top.len())])));
    }
    let generated = completion_logprobs(tokenizer, &completion.token_ids, &completion.logprobs, offset);
    out.tokens.extend(generated.tokens);
    out.token_logprobs.extend(generated.token_logprobs);
    out.top_logprobs.extend(generated.top_logprobs);
    out.text_offset.extend(generated.text_offset);
    out
}

/// A completion scored without generating (`echo` with `max_tokens: 0`): the one token the
/// engine generated to run the prefill is dropped, and it ended by its length.
pub(super) fn drop_generated(completion: &mut CompletionOutput) {
    completion.token_ids.clear();
    completion.logprobs.clear();
    completion.text.clear();
    completion.finish_reason = Some(crate::core::request::FinishReason::Length);
}

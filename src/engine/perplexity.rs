//! Perplexity of a text by llama.cpp's `llama-perplexity` method: the text tokenized whole
//! (BOS first where the model wants one, control tokens not parsed), cut into chunks of
//! `ctx_size` tokens (the last partial one dropped), each chunk's first token replaced by BOS
//! where the model wants one, and each chunk's second half scored: the logprob of every token
//! after position `ctx_size / 2` given the chunk before it. PPL = exp(mean negative
//! log-likelihood), with llama.cpp's ± estimate (the NLL's standard error times PPL).
//!
//! Every chunk is one request asking for prompt logprobs, so the engine batches as many chunks
//! as its token budget holds; the logprobs are the prefill's own, bit for bit what decoding
//! each token would give.

use std::collections::BTreeMap;

use super::{Engine, EngineError};
use crate::ids::{RequestId, TokenId};
use crate::model::tokenizer::TokenizerError;
use crate::sampling::{PromptLogprobs, SamplingParams};

/// How a perplexity run cuts the text (llama-perplexity's `--ctx-size` and `--chunks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerplexityOptions {
    /// Tokens a chunk (one context window).
    pub ctx_size: usize,
    /// Score at most this many chunks (all of them when `None`).
    pub max_chunks: Option<usize>,
}

/// Why a perplexity run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PerplexityError {
    /// The context is too short to score two tokens a chunk.
    #[error("the context size must be at least 4 tokens, got {0}")]
    CtxSize(usize),
    /// The text has fewer than two chunks of tokens (llama-perplexity's own limit).
    #[error(
        "the text tokenizes to {tokens} tokens; a context of {ctx_size} needs at least {} \
         (two chunks)",
        2 * ctx_size
    )]
    TooShort {
        /// Tokens in the text.
        tokens: usize,
        /// The context size asked for.
        ctx_size: usize,
    },
    /// `max_chunks` is zero.
    #[error("--chunks must be at least 1")]
    NoChunks,
    /// The text could not be tokenized.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The engine refused or failed a chunk.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The engine finished a chunk without its prompt logprobs.
    #[error("chunk {0} finished without its prompt logprobs")]
    MissingLogprobs(usize),
}

/// A perplexity run's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Perplexity {
    /// Tokens in the whole text.
    pub num_tokens: usize,
    /// The context size (tokens a chunk).
    pub ctx_size: usize,
    /// Per chunk, in order: the running PPL over the chunks up to it (llama-perplexity's
    /// `[i]value` line); its length is the number of chunks scored.
    pub running_ppl: Vec<f64>,
    /// Tokens scored.
    pub num_scored: usize,
    /// Mean negative log-likelihood of the scored tokens.
    pub mean_nll: f64,
    /// exp(`mean_nll`).
    pub ppl: f64,
    /// llama-perplexity's ± estimate: the NLL's standard error times PPL.
    pub ppl_error: f64,
}

/// The chunks of `tokens` the options score: `ctx_size` tokens each, the last partial one
/// dropped, each one's first token replaced by `bos` when given.
pub fn chunks(
    tokens: &[TokenId],
    options: &PerplexityOptions,
    bos: Option<TokenId>,
) -> Result<Vec<Vec<TokenId>>, PerplexityError> {
    let ctx_size = options.ctx_size;
    if ctx_size < 4 {
        return Err(PerplexityError::CtxSize(ctx_size));
    }
    if options.max_chunks == Some(0) {
        return Err(PerplexityError::NoChunks);
    }
    if tokens.len() < 2 * ctx_size {
        return Err(PerplexityError::TooShort { tokens: tokens.len(), ctx_size });
    }
    let available = tokens.len() / ctx_size;
    let count = options.max_chunks.map_or(available, |max| max.min(available));
    Ok(tokens
        .chunks_exact(ctx_size)
        .take(count)
        .map(|chunk| {
            let mut chunk = chunk.to_vec();
            if let Some(bos) = bos {
                chunk[0] = bos;
            }
            chunk
        })
        .collect())
}

/// The negative log-likelihoods a chunk's prompt logprobs give to its second half: the tokens
/// after position `ctx_size / 2`.
fn scored_nlls(prompt_logprobs: &PromptLogprobs, ctx_size: usize) -> Option<Vec<f64>> {
    prompt_logprobs
        .get(ctx_size / 2 + 1..ctx_size)?
        .iter()
        .map(|entry| entry.as_ref().map(|entry| -f64::from(entry.logprob)))
        .collect()
}

/// Running sums of the NLL and its square over chunks taken in order (llama-perplexity's
/// accumulation).
#[derive(Debug, Default)]
struct Accumulator {
    count: usize,
    nll: f64,
    nll2: f64,
    running_ppl: Vec<f64>,
}

impl Accumulator {
    /// Adds one chunk's NLLs and returns the running PPL.
    fn add(&mut self, nlls: &[f64]) -> f64 {
        for &v in nlls {
            self.nll += v;
            self.nll2 += v * v;
        }
        self.count += nlls.len();
        let ppl = (self.nll / self.count as f64).exp();
        self.running_ppl.push(ppl);
        ppl
    }

    /// The final estimate.
    fn finish(self, num_tokens: usize, ctx_size: usize) -> Perplexity {
        let count = self.count as f64;
        let mean_nll = self.nll / count;
        let ppl = mean_nll.exp();
        let variance = self.nll2 / count - mean_nll * mean_nll;
        let ppl_error = match variance > 0.0 && self.count > 1 {
            true => (variance / (count - 1.0)).sqrt() * ppl,
            false => 0.0,
        };
        Perplexity {
            num_tokens,
            ctx_size,
            running_ppl: self.running_ppl,
            num_scored: self.count,
            mean_nll,
            ppl,
            ppl_error,
        }
    }
}

/// Measures the perplexity of `text` on `engine`'s model. `progress(chunks_done,
/// chunks_total, running_ppl)` is called as each chunk is counted, in order.
pub fn perplexity(
    engine: &mut Engine,
    text: &str,
    options: &PerplexityOptions,
    mut progress: impl FnMut(usize, usize, f64),
) -> Result<Perplexity, PerplexityError> {
    let tokenizer = engine.tokenizer();
    let bos = tokenizer.prompt_bos();
    let mut tokens: Vec<TokenId> = bos.into_iter().collect();
    tokens.extend(tokenizer.encode(text, false)?);
    let chunks = chunks(&tokens, options, bos)?;
    let params = SamplingParams { prompt_logprobs: Some(0), ignore_eos: true, ..SamplingParams::greedy(1) };
    let mut index_of: BTreeMap<RequestId, usize> = BTreeMap::new();
    let scored = chunks.iter().enumerate().try_for_each(|(index, chunk)| {
        index_of.insert(engine.add_tokens_request(chunk.clone(), params.clone())?, index);
        Ok::<(), PerplexityError>(())
    });
    let scored = scored.and_then(|()| score(engine, &index_of, options.ctx_size, &mut progress));
    if scored.is_err() {
        // Leave nothing of this run in the engine.
        for &request_id in index_of.keys() {
            engine.abort(request_id);
        }
    }
    Ok(scored?.finish(tokens.len(), options.ctx_size))
}

/// Steps `engine` until every chunk in `index_of` (request id to chunk index) is scored.
fn score(
    engine: &mut Engine,
    index_of: &BTreeMap<RequestId, usize>,
    ctx_size: usize,
    progress: &mut impl FnMut(usize, usize, f64),
) -> Result<Accumulator, PerplexityError> {
    let total = index_of.len();
    let mut done: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let mut sums = Accumulator::default();
    while sums.running_ppl.len() < total {
        for output in engine.step()? {
            let Some(&index) = index_of.get(&output.request_id) else { continue };
            if let Some(prompt_logprobs) = &output.prompt_logprobs {
                let nlls =
                    scored_nlls(prompt_logprobs, ctx_size).ok_or(PerplexityError::MissingLogprobs(index))?;
                done.insert(index, nlls);
            } else if output.finished() && !done.contains_key(&index) && sums.running_ppl.len() <= index {
                return Err(PerplexityError::MissingLogprobs(index));
            }
        }
        while let Some(nlls) = done.remove(&sums.running_ppl.len()) {
            let ppl = sums.add(&nlls);
            progress(sums.running_ppl.len(), total, ppl);
        }
    }
    Ok(sums)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(ctx_size: usize, max_chunks: Option<usize>) -> PerplexityOptions {
        PerplexityOptions { ctx_size, max_chunks }
    }

    #[test]
    fn chunks_drop_the_partial_tail_and_start_with_bos() {
        let tokens: Vec<TokenId> = (10..30).collect();
        let cut = chunks(&tokens, &options(8, None), Some(1)).unwrap();
        assert_eq!(cut, vec![vec![1, 11, 12, 13, 14, 15, 16, 17], vec![1, 19, 20, 21, 22, 23, 24, 25]]);
        let plain = chunks(&tokens, &options(6, Some(2)), None).unwrap();
        assert_eq!(plain, vec![vec![10, 11, 12, 13, 14, 15], vec![16, 17, 18, 19, 20, 21]]);
    }

    #[test]
    fn bad_options_are_typed_errors() {
        let tokens: Vec<TokenId> = (0..20).collect();
        assert!(matches!(chunks(&tokens, &options(3, None), None), Err(PerplexityError::CtxSize(3))));
        assert!(matches!(
            chunks(&tokens, &options(11, None), None),
            Err(PerplexityError::TooShort { tokens: 20, ctx_size: 11 })
        ));
        assert!(matches!(chunks(&tokens, &options(4, Some(0)), None), Err(PerplexityError::NoChunks)));
    }

    #[test]
    fn the_estimate_is_llama_perplexitys() {
        // Two chunks of 8 score positions 5..8 each: NLLs 1, 2, 3 then 2, 2, 2.
        let mut sums = Accumulator::default();
        assert_eq!(sums.add(&[1.0, 2.0, 3.0]), 2f64.exp());
        assert_eq!(sums.add(&[2.0, 2.0, 2.0]), 2f64.exp());
        let result = sums.finish(16, 8);
        assert_eq!((result.num_scored, result.mean_nll, result.ppl), (6, 2.0, 2f64.exp()));
        // nll2 / count - mean^2 = (1 + 4 + 9 + 12) / 6 - 4 = 1/3; sqrt(1/3 / 5) * ppl.
        let expected = (1.0f64 / 15.0).sqrt() * 2f64.exp();
        assert!((result.ppl_error - expected).abs() < 1e-12, "{}", result.ppl_error);
    }

    #[test]
    fn the_second_half_after_its_first_token_is_scored() {
        use crate::sampling::PromptTokenLogprobs;
        let entry = |logprob: f32| Some(PromptTokenLogprobs { token_id: 0, logprob, rank: 1, top: vec![] });
        let mut logprobs: PromptLogprobs = vec![None];
        logprobs.extend((1..8).map(|i| entry(-(i as f32))));
        // ctx 8: first = 4, positions 4..7 predict tokens 5, 6, 7.
        assert_eq!(scored_nlls(&logprobs, 8), Some(vec![5.0, 6.0, 7.0]));
        assert_eq!(scored_nlls(&logprobs[..6].to_vec(), 8), None);
    }
}

//! How a request samples its tokens and when it stops.
//!
//! [`SamplingParams`] holds a request's knobs (vLLM's names and defaults) and checks them
//! with [`SamplingParams::validate`]. Executors own the logits, so they sample: they call
//! [`sample_logits`] on a request's logits row (or [`sample_candidates`] on top-k
//! candidates read back from the GPU) with a [`SamplingContext`] that carries the request's
//! token history and seed.
//!
//! A constrained request (structured outputs) also carries a [`TokenMask`]: tokens outside
//! it are ruled out before anything else, as vLLM applies its grammar bitmask to the logits.
//!
//! The pipeline follows vLLM V1: the `logit_bias` additions, repetition / frequency / presence
//! penalties, the `min_tokens` mask on stop tokens, then greedy argmax, or temperature,
//! `min_p`, `top_k`, `top_p` and one draw. Each draw comes from a ChaCha8 stream keyed by the
//! request's seed and selected by the output position, so a seeded request samples the same
//! tokens alone or in any batch, and after a preemption recomputes it.

use std::collections::{BTreeMap, HashMap};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::ids::TokenId;
use crate::structured::{Constraint, TokenMask};

/// The most top log-probabilities one request may ask for per token.
pub const MAX_LOGPROBS: usize = 20;

/// The largest `logit_bias` magnitude (OpenAI's range): -100 all but bans a token, 100 all
/// but forces it.
pub const MAX_LOGIT_BIAS: f32 = 100.0;

/// Per-request sampling and stopping parameters, with vLLM's names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens; 0 or -1 keeps all.
    pub top_k: i32,
    /// Keep the smallest set of tokens whose probability reaches `top_p`.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one.
    pub min_p: f32,
    /// Seed for this request's random stream; the same seed repeats the same output.
    pub seed: Option<u64>,
    /// Divides positive (multiplies negative) logits of tokens seen in prompt or output.
    pub repetition_penalty: f32,
    /// Subtracted once from the logits of tokens already generated.
    pub presence_penalty: f32,
    /// Subtracted per occurrence from the logits of tokens already generated.
    pub frequency_penalty: f32,
    /// Added to the logits of these token ids before the penalties (OpenAI's `logit_bias`,
    /// each in [-[`MAX_LOGIT_BIAS`], [`MAX_LOGIT_BIAS`]]).
    pub logit_bias: BTreeMap<TokenId, f32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Tokens to generate before EOS or stop tokens may end the request.
    pub min_tokens: usize,
    /// Strings that end generation; not part of the output unless `include_stop_str_in_output`.
    pub stop: Vec<String>,
    /// Token ids that end generation.
    pub stop_token_ids: Vec<u32>,
    /// Keep generating past the EOS token.
    pub ignore_eos: bool,
    /// Return this many top log-probabilities per generated token.
    pub logprobs: Option<usize>,
    /// Return, for each prompt token after the first, its log-probability and rank and the
    /// this many top log-probabilities at its position (vLLM's `prompt_logprobs`), computed
    /// from the request's own prefill. A request that sets it takes no prefix-cache hits, so
    /// every position is computed.
    pub prompt_logprobs: Option<usize>,
    /// Keep the matched stop string at the end of the text.
    pub include_stop_str_in_output: bool,
    /// Leave special tokens out of the detokenized text.
    pub skip_special_tokens: bool,
    /// Hold the output to a JSON schema, a regex, a list of choices or a grammar.
    pub structured_outputs: Option<Constraint>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: BTreeMap::new(),
            max_tokens: 16,
            min_tokens: 0,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            prompt_logprobs: None,
            include_stop_str_in_output: false,
            skip_special_tokens: true,
            structured_outputs: None,
        }
    }
}

/// A sampling parameter out of its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingParamsError {
    /// `temperature` is negative or not finite.
    #[error("temperature must be a finite number >= 0, got {0}")]
    Temperature(f32),
    /// `top_k` is below -1.
    #[error("top_k must be -1, 0 (both keep all tokens) or positive, got {0}")]
    TopK(i32),
    /// `top_p` is outside (0, 1].
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
    /// `min_p` is outside [0, 1].
    #[error("min_p must be in [0, 1], got {0}")]
    MinP(f32),
    /// `repetition_penalty` is not a finite number > 0.
    #[error("repetition_penalty must be a finite number > 0, got {0}")]
    RepetitionPenalty(f32),
    /// `presence_penalty` is outside [-2, 2].
    #[error("presence_penalty must be in [-2, 2], got {0}")]
    PresencePenalty(f32),
    /// `frequency_penalty` is outside [-2, 2].
    #[error("frequency_penalty must be in [-2, 2], got {0}")]
    FrequencyPenalty(f32),
    /// A `logit_bias` value is outside [-[`MAX_LOGIT_BIAS`], [`MAX_LOGIT_BIAS`]] or not finite.
    #[error("logit_bias of token {token_id} must be in [-{MAX_LOGIT_BIAS}, {MAX_LOGIT_BIAS}], got {bias}")]
    LogitBias {
        /// The biased token.
        token_id: TokenId,
        /// Its bias.
        bias: f32,
    },
    /// `max_tokens` is 0.
    #[error("max_tokens must be at least 1")]
    MaxTokens,
    /// `min_tokens` exceeds `max_tokens`.
    #[error("min_tokens ({min_tokens}) must not exceed max_tokens ({max_tokens})")]
    MinTokens {
        /// The requested minimum.
        min_tokens: usize,
        /// The requested maximum.
        max_tokens: usize,
    },
    /// One of the `stop` strings is empty.
    #[error("stop strings must not be empty")]
    EmptyStop,
    /// `logprobs` asks for more than [`MAX_LOGPROBS`].
    #[error("logprobs must be at most {MAX_LOGPROBS}, got {0}")]
    Logprobs(usize),
    /// `prompt_logprobs` asks for more than [`MAX_LOGPROBS`].
    #[error("prompt_logprobs must be at most {MAX_LOGPROBS}, got {0}")]
    PromptLogprobs(usize),
}

impl SamplingParams {
    /// Greedy decoding for `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> Self {
        Self { temperature: 0.0, max_tokens, ..Self::default() }
    }

    /// True when this request takes the argmax at every step.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == 1
    }

    /// True when a penalty changes the logits.
    pub fn has_penalties(&self) -> bool {
        self.repetition_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0
    }

    /// True when a bias or a penalty changes the logits.
    pub fn adjusts_logits(&self) -> bool {
        !self.logit_bias.is_empty() || self.has_penalties()
    }

    /// Checks every field's range; the error names the first bad one.
    pub fn validate(&self) -> Result<(), SamplingParamsError> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(SamplingParamsError::Temperature(self.temperature));
        }
        if self.top_k < -1 {
            return Err(SamplingParamsError::TopK(self.top_k));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingParamsError::TopP(self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplingParamsError::MinP(self.min_p));
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return Err(SamplingParamsError::RepetitionPenalty(self.repetition_penalty));
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return Err(SamplingParamsError::PresencePenalty(self.presence_penalty));
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return Err(SamplingParamsError::FrequencyPenalty(self.frequency_penalty));
        }
        if let Some((&token_id, &bias)) =
            self.logit_bias.iter().find(|&(_, bias)| !(-MAX_LOGIT_BIAS..=MAX_LOGIT_BIAS).contains(bias))
        {
            return Err(SamplingParamsError::LogitBias { token_id, bias });
        }
        if self.max_tokens == 0 {
            return Err(SamplingParamsError::MaxTokens);
        }
        if self.min_tokens > self.max_tokens {
            return Err(SamplingParamsError::MinTokens {
                min_tokens: self.min_tokens,
                max_tokens: self.max_tokens,
            });
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(SamplingParamsError::EmptyStop);
        }
        match (self.logprobs, self.prompt_logprobs) {
            (Some(n), _) if n > MAX_LOGPROBS => Err(SamplingParamsError::Logprobs(n)),
            (_, Some(n)) if n > MAX_LOGPROBS => Err(SamplingParamsError::PromptLogprobs(n)),
            _ => Ok(()),
        }
    }
}

/// What the sampler needs to know about one request at one step.
#[derive(Debug, Clone, Copy)]
pub struct SamplingContext<'a> {
    /// The request's parameters.
    pub params: &'a SamplingParams,
    /// Its prompt token ids.
    pub prompt_token_ids: &'a [TokenId],
    /// Its tokens generated so far; the token being sampled goes at `output_token_ids.len()`.
    pub output_token_ids: &'a [TokenId],
    /// The model's end-of-sequence token, masked (with the stop tokens) before `min_tokens`.
    pub eos_token_id: Option<TokenId>,
    /// The request's seed: `params.seed`, or one the engine drew for it.
    pub seed: u64,
    /// The tokens its constraint allows next, for a constrained request.
    pub mask: Option<&'a TokenMask>,
}

/// Log-probabilities of one generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// Log-probability of the sampled token.
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, best first.
    pub top: Vec<(TokenId, f32)>,
}

/// Log-probabilities at one prompt position: those of the prompt's own token there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptTokenLogprobs {
    /// The prompt's token at this position.
    pub token_id: TokenId,
    /// Its log-probability given the prompt before it.
    pub logprob: f32,
    /// Its rank: 1 plus the number of tokens with a larger logit (vLLM's rank).
    pub rank: usize,
    /// The most likely tokens and their log-probabilities, best first (ties by lower id);
    /// serialized as `[id, logprob]` pairs.
    pub top: Vec<(TokenId, f32)>,
}

/// A request's prompt log-probabilities, one entry per prompt token; the first token has
/// nothing before it, so its entry is `None`.
pub type PromptLogprobs = Vec<Option<PromptTokenLogprobs>>;

/// The log-probabilities of `token_id` and of the `top_n` best tokens in a full raw logits
/// row: the same arithmetic as a sampled token's logprobs, so a prompt position's logprob is
/// bit for bit what decoding that token from the same row gives.
pub fn prompt_token_logprobs(logits: &[f32], token_id: TokenId, top_n: usize) -> PromptTokenLogprobs {
    let raw: Vec<(TokenId, f32)> =
        logits.iter().enumerate().map(|(id, &logit)| (id as TokenId, logit)).collect();
    let TokenLogprobs { logprob, top } = raw_logprobs(&raw, token_id, top_n, None);
    let own = logits.get(token_id as usize).copied().unwrap_or(f32::NEG_INFINITY);
    let rank = 1 + logits.iter().filter(|&&logit| logit > own).count();
    PromptTokenLogprobs { token_id, logprob, rank, top }
}

/// One sampled token and, when asked for, its log-probabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledToken {
    /// The chosen token.
    pub token_id: TokenId,
    /// Log-probabilities of the raw (unbiased, unpenalized, untempered) distribution, when the
    /// request set `logprobs`.
    pub logprobs: Option<TokenLogprobs>,
}

/// The uniform draw in [0, 1) for the token at `output_position` of a request with `seed`.
///
/// A pure function of its arguments: the ChaCha8 stream `output_position` under key `seed`.
pub fn uniform_draw(seed: u64, output_position: usize) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(output_position as u64);
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Applies vLLM's penalties to a full logits row in place.
///
/// Repetition: a token seen in the prompt or the output has a positive logit divided by
/// the penalty and a negative one multiplied by it. Frequency and presence: a token
/// generated `n > 0` times loses `n * frequency_penalty + presence_penalty`. Token ids
/// outside the row are ignored.
pub fn apply_penalties(logits: &mut [f32], ctx: &SamplingContext<'_>) {
    let mut row: Vec<(TokenId, f32)> =
        logits.iter().enumerate().map(|(id, &logit)| (id as TokenId, logit)).collect();
    penalize(&mut row, ctx, |id| Some(id as usize));
    for (slot, (_, logit)) in logits.iter_mut().zip(row) {
        *slot = logit;
    }
}

/// Samples one token from a full logits row (one logit per vocabulary id).
pub fn sample_logits(logits: &[f32], ctx: &SamplingContext<'_>) -> SampledToken {
    let candidates = logits.iter().enumerate().map(|(id, &logit)| (id as TokenId, logit)).collect();
    sample_pairs(candidates, None, ctx, |id| Some(id as usize))
}

/// Samples one token from candidates `(token id, raw logit)`, for example the top-k rows a
/// GPU kernel read back, in any order.
///
/// `log_normalizer` is the log-sum-exp of the full raw logits row; it is needed only for
/// log-probabilities (when absent, they are normalized over the candidates). Biases and
/// penalties can only move candidates, so sampling is exact when the request's `top_k` (or
/// greedy) is covered by the candidates and it has neither.
pub fn sample_candidates(
    candidates: Vec<(TokenId, f32)>,
    log_normalizer: Option<f32>,
    ctx: &SamplingContext<'_>,
) -> SampledToken {
    let positions: HashMap<TokenId, usize> = if ctx.params.adjusts_logits() {
        candidates.iter().enumerate().map(|(index, &(id, _))| (id, index)).collect()
    } else {
        HashMap::new()
    };
    sample_pairs(candidates, log_normalizer, ctx, |id| positions.get(&id).copied())
}

/// The whole pipeline over `(id, raw logit)` pairs; `index_of` finds a token's pair.
fn sample_pairs(
    mut candidates: Vec<(TokenId, f32)>,
    log_normalizer: Option<f32>,
    ctx: &SamplingContext<'_>,
    index_of: impl Fn(TokenId) -> Option<usize>,
) -> SampledToken {
    let params = ctx.params;
    if let Some(mask) = ctx.mask {
        for (id, logit) in candidates.iter_mut() {
            if !mask.allows(*id) {
                *logit = f32::NEG_INFINITY;
            }
        }
    }
    let raw = params.logprobs.map(|top_n| (candidates.clone(), top_n));
    bias(&mut candidates, params, &index_of);
    if params.has_penalties() {
        penalize(&mut candidates, ctx, index_of);
    }
    mask_stop_tokens(&mut candidates, ctx);
    let token_id = if params.is_greedy() {
        argmax(&candidates)
    } else {
        draw(candidates, params, uniform_draw(ctx.seed, ctx.output_token_ids.len()))
    };
    let logprobs = raw.map(|(raw, top_n)| raw_logprobs(&raw, token_id, top_n, log_normalizer));
    SampledToken { token_id, logprobs }
}

/// Log-probabilities of `token_id` and of the `top_n` best raw candidates.
fn raw_logprobs(
    raw: &[(TokenId, f32)],
    token_id: TokenId,
    top_n: usize,
    log_normalizer: Option<f32>,
) -> TokenLogprobs {
    let normalizer = log_normalizer.unwrap_or_else(|| log_sum_exp(raw.iter().map(|&(_, l)| l)));
    let sampled = raw.iter().find(|&&(id, _)| id == token_id).map_or(f32::NEG_INFINITY, |&(_, l)| l);
    TokenLogprobs { logprob: sampled - normalizer, top: top_logprobs(raw, top_n, normalizer) }
}

/// The `top_n` most likely candidates as `(id, logprob)`, best first, ties by lower id.
fn top_logprobs(candidates: &[(TokenId, f32)], top_n: usize, normalizer: f32) -> Vec<(TokenId, f32)> {
    let mut best: Vec<(TokenId, f32)> = candidates.to_vec();
    let take = top_n.min(best.len());
    if take == 0 {
        return Vec::new();
    }
    if take < best.len() {
        best.select_nth_unstable_by(take - 1, by_logit_desc);
        best.truncate(take);
    }
    best.sort_by(by_logit_desc);
    best.into_iter().map(|(id, logit)| (id, logit - normalizer)).collect()
}

/// Descending logit, then ascending token id: the one order every tie follows.
fn by_logit_desc(a: &(TokenId, f32), b: &(TokenId, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Sorts `candidates` into [`by_logit_desc`]'s order (a total order: ids differ) with a
/// least-significant-digit radix sort on [`descending_key`], linear in their number: the id's
/// digits, then the logit's.
fn sort_by_logit_desc(candidates: &mut [(TokenId, f32)]) {
    const DIGIT: u32 = 11;
    let mut keys: Vec<u64> = candidates.iter().map(|&(id, logit)| descending_key(id, logit)).collect();
    let mut scratch = vec![0; keys.len()];
    let id_bits = 32 - candidates.iter().map(|&(id, _)| id).max().unwrap_or(0).leading_zeros();
    let shifts = (0..id_bits).step_by(DIGIT as usize).chain((32..64).step_by(DIGIT as usize));
    for shift in shifts {
        let digit = |key: u64| ((key >> shift) & ((1 << DIGIT) - 1)) as usize;
        let mut starts = [0usize; 1 << DIGIT];
        for &key in &keys {
            starts[digit(key)] += 1;
        }
        let mut sum = 0;
        for start in starts.iter_mut() {
            (*start, sum) = (sum, sum + *start);
        }
        for &key in &keys {
            let slot = &mut starts[digit(key)];
            scratch[*slot] = key;
            *slot += 1;
        }
        std::mem::swap(&mut keys, &mut scratch);
    }
    for (candidate, key) in candidates.iter_mut().zip(keys) {
        *candidate = from_descending_key(key);
    }
}

/// A key whose ascending order is [`by_logit_desc`]'s: the logit's bits mapped to an
/// unsigned integer in `f32::total_cmp`'s order and flipped, then the id.
fn descending_key(id: TokenId, logit: f32) -> u64 {
    let bits = logit.to_bits() as i32;
    let ordered = (bits ^ (((bits >> 31) as u32) >> 1) as i32) as u32 ^ 0x8000_0000;
    (u64::from(!ordered) << 32) | u64::from(id)
}

/// The pair [`descending_key`] made `key` from.
fn from_descending_key(key: u64) -> (TokenId, f32) {
    let bits = (!((key >> 32) as u32) ^ 0x8000_0000) as i32;
    let logit = f32::from_bits((bits ^ (((bits >> 31) as u32) >> 1) as i32) as u32);
    (key as TokenId, logit)
}

/// log(sum(exp(x))), stable; -inf for no finite value.
fn log_sum_exp(values: impl Iterator<Item = f32> + Clone) -> f32 {
    let max = values.clone().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return max;
    }
    let sum: f64 = values.map(|v| f64::from(v - max).exp()).sum();
    max + sum.ln() as f32
}

/// Adds the request's `logit_bias` to `(id, logit)` pairs; `index_of` maps a token id to its
/// pair (ids without one are ignored).
fn bias(
    candidates: &mut [(TokenId, f32)],
    params: &SamplingParams,
    index_of: impl Fn(TokenId) -> Option<usize>,
) {
    for (&token_id, &bias) in &params.logit_bias {
        if let Some(index) = index_of(token_id).filter(|&index| index < candidates.len()) {
            candidates[index].1 += bias;
        }
    }
}

/// Applies the penalties to `(id, logit)` pairs; `index_of` maps a token id to its pair.
fn penalize(
    candidates: &mut [(TokenId, f32)],
    ctx: &SamplingContext<'_>,
    index_of: impl Fn(TokenId) -> Option<usize>,
) {
    let params = ctx.params;
    let mut output_counts: HashMap<TokenId, u32> = HashMap::new();
    for &token in ctx.output_token_ids {
        *output_counts.entry(token).or_default() += 1;
    }
    if params.repetition_penalty != 1.0 {
        let mut seen: Vec<usize> = ctx
            .prompt_token_ids
            .iter()
            .chain(output_counts.keys())
            .filter_map(|&token| index_of(token))
            .filter(|&index| index < candidates.len())
            .collect();
        seen.sort_unstable();
        seen.dedup();
        for index in seen {
            let logit = &mut candidates[index].1;
            *logit = if *logit > 0.0 {
                *logit / params.repetition_penalty
            } else {
                *logit * params.repetition_penalty
            };
        }
    }
    if params.frequency_penalty != 0.0 || params.presence_penalty != 0.0 {
        for (&token, &count) in &output_counts {
            if let Some(index) = index_of(token).filter(|&index| index < candidates.len()) {
                candidates[index].1 -= count as f32 * params.frequency_penalty + params.presence_penalty;
            }
        }
    }
}

/// Before `min_tokens` tokens exist, EOS and the stop tokens cannot be sampled, unless
/// a constraint allows nothing else (a complete structured output ends there).
fn mask_stop_tokens(candidates: &mut [(TokenId, f32)], ctx: &SamplingContext<'_>) {
    let params = ctx.params;
    if ctx.output_token_ids.len() >= params.min_tokens {
        return;
    }
    let is_stop = |id: &TokenId| Some(*id) == ctx.eos_token_id || params.stop_token_ids.contains(id);
    if ctx.mask.is_some() && !candidates.iter().any(|(id, logit)| *logit > f32::NEG_INFINITY && !is_stop(id))
    {
        return;
    }
    for (id, logit) in candidates.iter_mut() {
        if is_stop(id) {
            *logit = f32::NEG_INFINITY;
        }
    }
}

/// The candidate with the largest logit; ties go to the lowest token id.
fn argmax(candidates: &[(TokenId, f32)]) -> TokenId {
    candidates.iter().min_by(|a, b| by_logit_desc(a, b)).map_or(0, |&(id, _)| id)
}

/// Temperature, `min_p`, `top_k`, `top_p`, then the token whose cumulative probability
/// interval holds `uniform` (candidates sorted by descending logit, ties by lower id).
fn draw(mut candidates: Vec<(TokenId, f32)>, params: &SamplingParams, uniform: f64) -> TokenId {
    candidates.retain(|&(_, logit)| logit > f32::NEG_INFINITY);
    if candidates.is_empty() {
        return 0;
    }
    sort_by_logit_desc(&mut candidates);
    let max = candidates[0].1;
    let temperature = f64::from(params.temperature);
    let weights: Vec<f64> =
        candidates.iter().map(|&(_, logit)| (f64::from(logit - max) / temperature).exp()).collect();
    let total: f64 = weights.iter().sum();

    // Every filter keeps a prefix of the sorted list; the first (most likely) token always stays.
    let min_weight = f64::from(params.min_p) * weights[0];
    let mut keep = weights.iter().take_while(|&&w| w >= min_weight).count().max(1);
    if params.top_k > 0 {
        keep = keep.min(params.top_k as usize);
    }
    if params.top_p < 1.0 {
        let kept_total: f64 = weights[..keep].iter().sum();
        let target = f64::from(params.top_p) * kept_total;
        let mut cumulative = 0.0;
        let mut within = 0;
        for &weight in &weights[..keep] {
            cumulative += weight;
            within += 1;
            if cumulative >= target {
                break;
            }
        }
        keep = within;
    }
    let kept = &weights[..keep];
    let kept_total: f64 = if keep == weights.len() { total } else { kept.iter().sum() };

    let threshold = uniform * kept_total;
    let mut cumulative = 0.0;
    for (index, &weight) in kept.iter().enumerate() {
        cumulative += weight;
        if threshold < cumulative {
            return candidates[index].0;
        }
    }
    candidates[keep - 1].0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(
        params: &'a SamplingParams,
        prompt: &'a [TokenId],
        output: &'a [TokenId],
    ) -> SamplingContext<'a> {
        SamplingContext {
            params,
            prompt_token_ids: prompt,
            output_token_ids: output,
            eos_token_id: Some(0),
            seed: 7,
            mask: None,
        }
    }

    #[test]
    fn default_params_are_valid() {
        assert_eq!(SamplingParams::default().validate(), Ok(()));
        assert_eq!(SamplingParams::greedy(4).validate(), Ok(()));
    }

    #[test]
    fn validation_names_the_bad_field() {
        let bad = |edit: fn(&mut SamplingParams)| {
            let mut params = SamplingParams::default();
            edit(&mut params);
            params.validate().unwrap_err()
        };
        assert_eq!(bad(|p| p.temperature = -0.5), SamplingParamsError::Temperature(-0.5));
        assert!(matches!(bad(|p| p.temperature = f32::NAN), SamplingParamsError::Temperature(_)));
        assert_eq!(bad(|p| p.top_k = -2), SamplingParamsError::TopK(-2));
        assert_eq!(bad(|p| p.top_p = 0.0), SamplingParamsError::TopP(0.0));
        assert_eq!(bad(|p| p.top_p = 1.5), SamplingParamsError::TopP(1.5));
        assert_eq!(bad(|p| p.min_p = 2.0), SamplingParamsError::MinP(2.0));
        assert_eq!(bad(|p| p.repetition_penalty = 0.0), SamplingParamsError::RepetitionPenalty(0.0));
        assert_eq!(bad(|p| p.presence_penalty = 3.0), SamplingParamsError::PresencePenalty(3.0));
        assert_eq!(bad(|p| p.frequency_penalty = -2.5), SamplingParamsError::FrequencyPenalty(-2.5));
        assert_eq!(bad(|p| p.max_tokens = 0), SamplingParamsError::MaxTokens);
        assert_eq!(
            bad(|p| p.min_tokens = 17),
            SamplingParamsError::MinTokens { min_tokens: 17, max_tokens: 16 }
        );
        assert_eq!(bad(|p| p.stop = vec!["ok".into(), String::new()]), SamplingParamsError::EmptyStop);
        assert_eq!(bad(|p| p.logprobs = Some(21)), SamplingParamsError::Logprobs(21));
        assert_eq!(bad(|p| p.prompt_logprobs = Some(21)), SamplingParamsError::PromptLogprobs(21));
        let at_the_max = SamplingParams { prompt_logprobs: Some(MAX_LOGPROBS), ..SamplingParams::default() };
        assert_eq!(at_the_max.validate(), Ok(()));
        assert_eq!(
            bad(|p| p.logit_bias = BTreeMap::from([(3, 1.0), (7, -100.5)])),
            SamplingParamsError::LogitBias { token_id: 7, bias: -100.5 }
        );
        assert!(matches!(
            bad(|p| p.logit_bias = BTreeMap::from([(0, f32::NAN)])),
            SamplingParamsError::LogitBias { .. }
        ));
    }

    #[test]
    fn the_draws_radix_sort_orders_as_by_logit_desc() {
        let specials = [0.0, -0.0, 1.0, -1.0, f32::INFINITY, f32::MIN_POSITIVE, -f32::MIN_POSITIVE, f32::MAX];
        let mut state = 1u32;
        let mut pairs: Vec<(TokenId, f32)> = (0..2000u32)
            .map(|id| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let logit = match id % 4 {
                    0 => specials[(state >> 8) as usize % specials.len()],
                    1 => ((state >> 16) % 8) as f32 - 4.0,
                    _ => f32::from_bits(state) % 100.0,
                };
                (id, if logit.is_nan() { 0.5 } else { logit })
            })
            .collect();
        // In any order, as GPU candidates come; ids past 16 bits too.
        pairs.reverse();
        pairs.rotate_left(700);
        pairs[5].0 = 1 << 20;
        let mut by_key = pairs.clone();
        sort_by_logit_desc(&mut by_key);
        pairs.sort_by(by_logit_desc);
        let bits = |v: &[(TokenId, f32)]| v.iter().map(|&(id, l)| (id, l.to_bits())).collect::<Vec<_>>();
        assert_eq!(bits(&by_key), bits(&pairs));
    }

    #[test]
    fn uniform_draw_is_a_pure_function_of_seed_and_position() {
        let a = uniform_draw(42, 3);
        assert_eq!(a.to_bits(), uniform_draw(42, 3).to_bits());
        assert_ne!(a.to_bits(), uniform_draw(42, 4).to_bits());
        assert_ne!(a.to_bits(), uniform_draw(43, 3).to_bits());
        assert!((0.0..1.0).contains(&a));
    }

    #[test]
    fn greedy_takes_the_argmax_with_ties_to_the_lowest_id() {
        let params = SamplingParams::greedy(4);
        let logits = [0.5, 2.0, -1.0, 2.0];
        assert_eq!(sample_logits(&logits, &ctx(&params, &[], &[])).token_id, 1);
    }

    #[test]
    fn top_k_one_equals_greedy_for_every_seed() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3 - (i as f32) * 0.01).collect();
        let greedy = SamplingParams::greedy(4);
        let expected = sample_logits(&logits, &ctx(&greedy, &[], &[])).token_id;
        let top1 = SamplingParams { temperature: 1.3, top_k: 1, ..SamplingParams::default() };
        for seed in 0..20 {
            let c = SamplingContext { seed, ..ctx(&top1, &[], &[]) };
            assert_eq!(sample_logits(&logits, &c).token_id, expected);
        }
    }

    #[test]
    fn draws_follow_the_cumulative_distribution_exactly() {
        // Probabilities 0.5, 0.25, 0.25 at temperature 1 (logits ln 2, 0, 0).
        let logits = [std::f32::consts::LN_2, 0.0, 0.0];
        let params = SamplingParams::default();
        let pick = |uniform| {
            draw(logits.iter().enumerate().map(|(i, &l)| (i as TokenId, l)).collect(), &params, uniform)
        };
        assert_eq!(pick(0.0), 0);
        assert_eq!(pick(0.49), 0);
        assert_eq!(pick(0.51), 1);
        assert_eq!(pick(0.74), 1);
        assert_eq!(pick(0.76), 2);
        assert_eq!(pick(0.999), 2);
    }

    #[test]
    fn top_p_min_p_and_top_k_cut_the_tail() {
        let logits = [std::f32::consts::LN_2, 0.0, 0.0];
        let candidates = || logits.iter().enumerate().map(|(i, &l)| (i as TokenId, l)).collect::<Vec<_>>();
        // top_p 0.5 keeps only token 0.
        let top_p = SamplingParams { top_p: 0.5, ..SamplingParams::default() };
        assert_eq!(draw(candidates(), &top_p, 0.99), 0);
        // top_p 0.6 keeps tokens 0 and 1 (2/3 and 1/3 after renormalising).
        let top_p = SamplingParams { top_p: 0.6, ..SamplingParams::default() };
        assert_eq!(draw(candidates(), &top_p, 0.6), 0);
        assert_eq!(draw(candidates(), &top_p, 0.7), 1);
        assert_eq!(draw(candidates(), &top_p, 0.99), 1);
        // min_p 0.6 drops tokens with p < 0.3: only token 0.
        let min_p = SamplingParams { min_p: 0.6, ..SamplingParams::default() };
        assert_eq!(draw(candidates(), &min_p, 0.99), 0);
        // top_k 2 keeps tokens 0 and 1.
        let top_k = SamplingParams { top_k: 2, ..SamplingParams::default() };
        assert_eq!(draw(candidates(), &top_k, 0.99), 1);
    }

    #[test]
    fn low_temperature_sharpens_high_temperature_flattens() {
        let logits = [1.0, 0.0];
        let candidates = || logits.iter().enumerate().map(|(i, &l)| (i as TokenId, l)).collect::<Vec<_>>();
        // At T=0.1, p(token 0) = 1 / (1 + e^-10) > 0.9999.
        let cold = SamplingParams { temperature: 0.1, ..SamplingParams::default() };
        assert_eq!(draw(candidates(), &cold, 0.9999), 0);
        // At T=100, p(token 0) = 1 / (1 + e^-0.01) ~ 0.5025.
        let hot = SamplingParams { temperature: 100.0, ..SamplingParams::default() };
        assert_eq!(draw(candidates(), &hot, 0.5), 0);
        assert_eq!(draw(candidates(), &hot, 0.51), 1);
    }

    #[test]
    fn seeded_sampling_repeats_and_depends_on_position() {
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32 * 0.2).collect();
        let params = SamplingParams { seed: Some(5), ..SamplingParams::default() };
        let tokens = |output: &[TokenId]| sample_logits(&logits, &ctx(&params, &[], output)).token_id;
        let first: Vec<TokenId> = (0..30).map(|n| tokens(&vec![1; n])).collect();
        let again: Vec<TokenId> = (0..30).map(|n| tokens(&vec![1; n])).collect();
        assert_eq!(first, again);
        let distinct: std::collections::HashSet<TokenId> = first.iter().copied().collect();
        assert!(distinct.len() > 5, "positions must draw independently: {first:?}");
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_logits() {
        let params = SamplingParams { repetition_penalty: 2.0, ..SamplingParams::default() };
        let mut logits = [4.0, -4.0, 4.0, -4.0, 1.0];
        apply_penalties(&mut logits, &ctx(&params, &[0, 1], &[1, 4, 99]));
        assert_eq!(logits, [2.0, -8.0, 4.0, -4.0, 0.5]);
    }

    #[test]
    fn frequency_and_presence_penalties_count_output_tokens_only() {
        let params =
            SamplingParams { frequency_penalty: 0.5, presence_penalty: 1.0, ..SamplingParams::default() };
        let mut logits = [3.0, 3.0, 3.0, 3.0];
        apply_penalties(&mut logits, &ctx(&params, &[3, 3, 3], &[1, 2, 2, 2]));
        assert_eq!(logits, [3.0, 1.5, 0.5, 3.0]);
    }

    #[test]
    fn penalties_change_the_greedy_choice() {
        let logits = [0.0, 3.0, 2.5, 1.0];
        let plain = SamplingParams::greedy(8);
        assert_eq!(sample_logits(&logits, &ctx(&plain, &[], &[1])).token_id, 1);
        let penalized = SamplingParams { presence_penalty: 1.0, ..SamplingParams::greedy(8) };
        assert_eq!(sample_logits(&logits, &ctx(&penalized, &[], &[1])).token_id, 2);
        let repeated = SamplingParams { repetition_penalty: 1.5, ..SamplingParams::greedy(8) };
        assert_eq!(sample_logits(&logits, &ctx(&repeated, &[1], &[])).token_id, 2);
    }

    #[test]
    fn logit_bias_is_added_before_the_penalties_and_not_to_logprobs() {
        let logits = [0.0, 3.0, 2.5, 1.0];
        let banned =
            SamplingParams { logit_bias: BTreeMap::from([(1, -100.0)]), ..SamplingParams::greedy(8) };
        assert_eq!(sample_logits(&logits, &ctx(&banned, &[], &[])).token_id, 2);
        let forced = SamplingParams { logit_bias: BTreeMap::from([(0, 3.5)]), ..SamplingParams::greedy(8) };
        assert_eq!(sample_logits(&logits, &ctx(&forced, &[], &[])).token_id, 0);
        // 3 + 1 = 4 halved by the repetition penalty: 2 < 2.5 (penalized first, 1.5 + 1 > 2.5).
        let both = SamplingParams {
            logit_bias: BTreeMap::from([(1, 1.0)]),
            repetition_penalty: 2.0,
            logprobs: Some(1),
            ..SamplingParams::greedy(8)
        };
        let sampled = sample_logits(&logits, &ctx(&both, &[1], &[]));
        assert_eq!(sampled.token_id, 2);
        let raw_normalizer = logits.iter().map(|l| l.exp()).sum::<f32>().ln();
        let top = sampled.logprobs.unwrap().top[0];
        assert_eq!(top.0, 1);
        assert!((top.1 - (3.0 - raw_normalizer)).abs() < 1e-6, "the bias must not reach logprobs: {top:?}");
        let out_of_row =
            SamplingParams { logit_bias: BTreeMap::from([(9, 100.0)]), ..SamplingParams::greedy(8) };
        assert_eq!(sample_logits(&logits, &ctx(&out_of_row, &[], &[])).token_id, 1);
        let candidates = vec![(2, 2.5), (1, 3.0)];
        assert_eq!(sample_candidates(candidates, None, &ctx(&banned, &[], &[])).token_id, 2);
    }

    #[test]
    fn min_tokens_masks_eos_and_stop_tokens() {
        let logits = [5.0, 1.0, 4.0, 3.0];
        let params = SamplingParams { min_tokens: 2, stop_token_ids: vec![2], ..SamplingParams::greedy(8) };
        assert_eq!(sample_logits(&logits, &ctx(&params, &[], &[3])).token_id, 3);
        assert_eq!(sample_logits(&logits, &ctx(&params, &[], &[3, 3])).token_id, 0);
    }

    #[test]
    fn logprobs_come_from_the_raw_distribution() {
        let logits = [std::f32::consts::LN_2, 0.0, 0.0, f32::NEG_INFINITY];
        let params = SamplingParams { logprobs: Some(2), presence_penalty: 2.0, ..SamplingParams::greedy(8) };
        let sampled = sample_logits(&logits, &ctx(&params, &[], &[0]));
        assert_eq!(sampled.token_id, 1);
        let logprobs = sampled.logprobs.unwrap();
        assert!((logprobs.logprob - 0.25f32.ln()).abs() < 1e-6);
        assert_eq!(logprobs.top.iter().map(|&(id, _)| id).collect::<Vec<_>>(), vec![0, 1]);
        assert!((logprobs.top[0].1 - 0.5f32.ln()).abs() < 1e-6);
        assert!((logprobs.top[1].1 - 0.25f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn a_prompt_tokens_logprobs_are_the_decoded_tokens_bits_with_its_rank() {
        let logits = [0.5, 2.0, -1.0, 2.0, 1.25];
        let params = SamplingParams { logprobs: Some(2), ..SamplingParams::greedy(8) };
        let decoded = sample_logits(&logits, &ctx(&params, &[], &[]));
        assert_eq!(decoded.token_id, 1);
        let prompt = prompt_token_logprobs(&logits, 1, 2);
        let decoded = decoded.logprobs.unwrap();
        assert_eq!(prompt.logprob.to_bits(), decoded.logprob.to_bits());
        assert_eq!(prompt.top, decoded.top);
        assert_eq!((prompt.token_id, prompt.rank), (1, 1));
        // Two tokens (ids 1 and 3) have larger logits than id 4.
        let third = prompt_token_logprobs(&logits, 4, 0);
        assert_eq!((third.rank, third.top.len()), (3, 0));
        let normalizer = logits.iter().map(|&l| f64::from(l).exp()).sum::<f64>().ln();
        assert!((f64::from(third.logprob) - (1.25 - normalizer)).abs() < 1e-6);
    }

    #[test]
    fn candidates_sample_like_the_full_row_when_they_cover_top_k() {
        let logits: Vec<f32> = (0..64).map(|i| ((i * 13) % 17) as f32 * 0.25).collect();
        let params = SamplingParams { top_k: 4, seed: Some(9), ..SamplingParams::default() };
        let mut candidates: Vec<(TokenId, f32)> =
            logits.iter().enumerate().map(|(i, &l)| (i as TokenId, l)).collect();
        candidates.sort_by(by_logit_desc);
        candidates.truncate(8);
        for n in 0..20 {
            let output = vec![3; n];
            let c = ctx(&params, &[], &output);
            assert_eq!(
                sample_candidates(candidates.clone(), None, &c).token_id,
                sample_logits(&logits, &c).token_id
            );
        }
    }
}

//! Shared by the engine and server tests: the tiny model's files and an executor whose
//! logits are a pure function of each request's token history, sampled with pagoda's own
//! CPU sampler (so seeds, penalties and stop tokens act exactly as an executor makes them).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use pagoda::core::output::{ModelRunnerOutput, SchedulerOutput};
use pagoda::executor::{ExecutorError, ModelExecutor, StepMasks};
use pagoda::model::testing::TinyLlama;
use pagoda::model::{ModelFiles, Tokenizer};
use pagoda::sampling::{SamplingContext, SamplingParams, sample_logits};
use pagoda::{Engine, EngineConfig, RequestId, TokenId};

/// The tiny model's vocabulary size (3 special tokens, 256 bytes, 16 merges).
pub const VOCAB: usize = 275;
/// The tiny model's EOS (`<|im_end|>`).
pub const EOS: TokenId = 2;

/// Logits of the next token given the prompt and the output so far.
pub type LogitsFn = Box<dyn Fn(&[TokenId], &[TokenId]) -> Vec<f32> + Send>;

struct Tracked {
    params: SamplingParams,
    prompt: Vec<TokenId>,
    output: Vec<TokenId>,
}

/// Samples from `logits(prompt, output)` once a request's known tokens are all computed.
pub struct LogitsExecutor {
    logits: LogitsFn,
    requests: HashMap<RequestId, Tracked>,
    step_delay: Duration,
}

impl LogitsExecutor {
    /// An executor over `logits`; each step sleeps `step_delay` (to leave time for a
    /// client to act while requests run).
    pub fn new(logits: LogitsFn, step_delay: Duration) -> Self {
        Self { logits, requests: HashMap::new(), step_delay }
    }
}

impl ModelExecutor for LogitsExecutor {
    fn execute(
        &mut self,
        so: &SchedulerOutput,
        masks: &mut StepMasks<'_>,
    ) -> Result<ModelRunnerOutput, ExecutorError> {
        std::thread::sleep(self.step_delay);
        for id in &so.finished_req_ids {
            self.requests.remove(id);
        }
        let mut computed: Vec<(RequestId, usize)> = Vec::new();
        for new in &so.scheduled_new_reqs {
            let tracked = Tracked {
                params: new.sampling_params.clone(),
                prompt: new.prompt_token_ids.clone(),
                output: Vec::new(),
            };
            self.requests.insert(new.req_id, tracked);
            computed.push((new.req_id, new.num_computed_tokens));
        }
        for cached in &so.scheduled_cached_reqs {
            computed.push((cached.req_id, cached.num_computed_tokens));
        }
        let mut out = ModelRunnerOutput::default();
        for (id, num_computed) in computed {
            let tracked = self
                .requests
                .get_mut(&id)
                .ok_or_else(|| ExecutorError::InvalidBatch(format!("unknown request {id}")))?;
            let known = tracked.prompt.len() + tracked.output.len();
            if num_computed + so.num_scheduled_tokens[&id] < known {
                continue;
            }
            let logits = (self.logits)(&tracked.prompt, &tracked.output);
            let mask = match tracked.params.structured_outputs {
                Some(_) => {
                    Some(masks.get(id).and_then(|all| all.first()).ok_or(ExecutorError::MissingMask(id))?)
                }
                None => None,
            };
            let ctx = SamplingContext {
                params: &tracked.params,
                prompt_token_ids: &tracked.prompt,
                output_token_ids: &tracked.output,
                eos_token_id: Some(EOS),
                seed: tracked.params.seed.expect("the engine seeds every request"),
                mask,
            };
            let sampled = sample_logits(&logits, &ctx);
            tracked.output.push(sampled.token_id);
            out.sampled_token_ids.insert(id, vec![sampled.token_id]);
            if let Some(logprobs) = sampled.logprobs {
                out.logprobs.insert(id, vec![logprobs]);
            }
        }
        Ok(out)
    }
}

/// A 64-bit mix of a token history.
pub fn history_hash(prompt: &[TokenId], output: &[TokenId]) -> u64 {
    prompt.iter().chain(output).fold(0x9e37_79b9_7f4a_7c15u64, |h, &t| {
        (h ^ u64::from(t)).wrapping_mul(0x1000_0000_01b3).rotate_left(17)
    })
}

/// Pseudo-random logits in [-4, 4) from the history, never favouring EOS.
pub fn random_logits(prompt: &[TokenId], output: &[TokenId]) -> Vec<f32> {
    let mut state = history_hash(prompt, output);
    (0..VOCAB)
        .map(|id| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if id as TokenId == EOS { -8.0 } else { ((state >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0 }
        })
        .collect()
}

/// Logits that make greedy decoding write `script` after any prompt, then EOS.
pub fn scripted_logits(script: Vec<TokenId>) -> LogitsFn {
    Box::new(move |_prompt: &[TokenId], output: &[TokenId]| {
        let next = script.get(output.len()).copied().unwrap_or(EOS);
        let mut logits = vec![0.0; VOCAB];
        logits[next as usize] = 10.0;
        logits
    })
}

/// The tiny model opened from a fresh directory.
pub fn tiny_model(dir: &Path) -> ModelFiles {
    TinyLlama::new(0).write_hf_dir(dir).unwrap();
    ModelFiles::open(dir).unwrap()
}

/// The tiny model's tokenizer.
pub fn tiny_tokenizer() -> Tokenizer {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path()).tokenizer
}

/// The token id of one byte in the tiny vocabulary.
pub fn byte_token(tokenizer: &Tokenizer, byte: u8) -> TokenId {
    (0..VOCAB as TokenId).find(|&id| tokenizer.token_bytes(id) == Some(&[byte])).unwrap()
}

/// The byte tokens spelling `text`.
pub fn byte_tokens(text: &str) -> Vec<TokenId> {
    let tokenizer = tiny_tokenizer();
    text.bytes().map(|b| byte_token(&tokenizer, b)).collect()
}

/// An engine on the tiny model's tokenizer with `logits` as its model.
pub fn engine(config: EngineConfig, logits: LogitsFn) -> Engine {
    slow_engine(config, logits, Duration::ZERO)
}

/// An engine whose every step takes at least `step_delay`.
pub fn slow_engine(config: EngineConfig, logits: LogitsFn, step_delay: Duration) -> Engine {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    Engine::with_executor(config, model, Box::new(LogitsExecutor::new(logits, step_delay))).unwrap()
}

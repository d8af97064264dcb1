//! Workloads: arrivals of requests over time, run to completion through the engine's step
//! and reported as throughput, latency, preemption and cache figures — on simulated time
//! ([`sim`]: scheduler and simulated executor, what `pagoda bench --executor sim` and the
//! visualizer run) or on wall-clock time ([`wall`]: a whole [`crate::Engine`]). Both runners
//! admit arrivals the same way ([`Arrival::request`]) and keep latencies by one rule
//! ([`report::Latencies`]).

pub mod releases;
pub mod report;
pub mod sim;
pub mod wall;

use std::str::FromStr;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

pub use self::report::WorkloadReport;
pub use self::sim::{WorkloadError, WorkloadRunner, run_workload};
use crate::core::request::Request;
use crate::ids::{RequestId, TokenId};
use crate::sampling::SamplingParams;

/// One request of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    /// Simulated seconds after the start.
    pub time_s: f64,
    /// The prompt.
    pub prompt_token_ids: Vec<TokenId>,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Lower runs first under PRIORITY.
    pub priority: i32,
    /// Keep generating past EOS (benchmarks usually do, so output lengths are as asked).
    pub ignore_eos: bool,
    /// A closed-loop turn: it arrives only after the turn it follows finished, plus a think
    /// time (and not before `time_s`).
    #[serde(default)]
    pub follows: Option<FollowUp>,
}

/// The turn an arrival waits for, and how long after that turn finished it comes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FollowUp {
    /// Index of the arrival it follows (in [`Workload::arrivals`]).
    pub previous: usize,
    /// Seconds between that turn's end and this one's arrival.
    pub think_time_s: f64,
}

impl Arrival {
    /// How it samples: greedy for `max_tokens` tokens, past EOS when `ignore_eos`.
    pub fn sampling_params(&self) -> SamplingParams {
        SamplingParams { ignore_eos: self.ignore_eos, ..SamplingParams::greedy(self.max_tokens.max(1)) }
    }

    /// The scheduler's request for it, as `request_id`, stopping at `eos_token_id`.
    pub fn request(&self, request_id: RequestId, eos_token_id: Option<TokenId>) -> Request {
        let mut request = Request::new(
            request_id,
            self.prompt_token_ids.clone(),
            self.sampling_params(),
            eos_token_id,
            self.time_s,
        );
        request.priority = self.priority;
        request
    }
}

/// A named list of arrivals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Its name.
    pub name: String,
    /// The requests, in any order.
    pub arrivals: Vec<Arrival>,
    /// The softmax temperature every request samples at, each from its own seeded stream
    /// (0: greedy).
    #[serde(default)]
    pub temperature: f32,
}

impl Workload {
    /// Its arrivals with their request ids: each arrival's index, as every runner numbers them.
    pub fn numbered(&self) -> Vec<(RequestId, Arrival)> {
        self.arrivals
            .iter()
            .cloned()
            .enumerate()
            .map(|(index, arrival)| (index as RequestId, arrival))
            .collect()
    }

    /// For each arrival, whether it follows another turn, or an earlier arrival's prompt is a
    /// strict prefix of its own: a conversation returning with its history.
    pub fn returning(&self) -> Vec<bool> {
        self.arrivals
            .iter()
            .map(|arrival| {
                let prompt = &arrival.prompt_token_ids;
                arrival.follows.is_some()
                    || self.arrivals.iter().any(|earlier| {
                        earlier.time_s <= arrival.time_s
                            && earlier.prompt_token_ids.len() < prompt.len()
                            && prompt.starts_with(&earlier.prompt_token_ids)
                    })
            })
            .collect()
    }

    /// The same arrivals with every prompt made `input_len` tokens long (cut, or repeated
    /// from its start) and every request generating `output_len` tokens at most; `None`
    /// keeps what the workload drew.
    pub fn with_lengths(mut self, input_len: Option<usize>, output_len: Option<usize>) -> Self {
        for arrival in &mut self.arrivals {
            if let Some(len) = input_len {
                arrival.prompt_token_ids =
                    arrival.prompt_token_ids.iter().copied().cycle().take(len).collect();
            }
            if let Some(len) = output_len {
                arrival.max_tokens = len;
            }
        }
        self
    }

    /// The same arrivals sampled at `temperature` (0: greedy).
    pub fn with_temperature(self, temperature: f32) -> Self {
        Self { temperature, ..self }
    }

    /// How `arrival` samples: [`Arrival::sampling_params`] at the workload's temperature.
    pub fn sampling_params(&self, arrival: &Arrival) -> SamplingParams {
        SamplingParams { temperature: self.temperature, ..arrival.sampling_params() }
    }
}

/// The built-in workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuiltinWorkload {
    /// Independent prompts of 16..512 tokens and outputs of 16..256, Poisson arrivals at
    /// 20 requests/s, priorities 0..4.
    Random,
    /// Four 256-token system prompts shared by all requests, each with a 16..128-token
    /// question and 32..128 output tokens, 20 requests/s.
    SharedPrefix,
    /// Everything arrives at once with long outputs (256..512) so the KV cache overflows and
    /// requests are preempted.
    MemoryPressure,
    /// Prompts of 1024..4096 tokens with short outputs, 2 requests/s: chunked prefill.
    LongPrompt,
    /// Input-grounded answers, where speculation pays: a passage of 64..128 tokens twice,
    /// then its first quarter, so the answer copies the rest of the passage; 32..128 output
    /// tokens, 4 requests/s, EOS honoured.
    InputGrounded,
    /// Conversations of four turns that come back, closed-loop as vLLM's multi-turn
    /// benchmark runs them: each starts with a 192..320-token prompt (first turns arrive at
    /// 1 request/s), each later turn is the previous prompt plus a 24..48-token reply and
    /// question and arrives 2 s (think time) after the previous turn finished; 16..32 output
    /// tokens. Enough conversations overflow a small KV pool, so a returning one finds its
    /// history evicted (a host KV tier keeps it).
    MultiTurnChat,
}

/// A workload name that is not built in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown workload {0:?}; known: random, shared-prefix, memory-pressure, long-prompt, input-grounded, multi-turn-chat"
)]
pub struct UnknownWorkload(pub String);

impl BuiltinWorkload {
    /// Every built-in workload.
    pub const ALL: [Self; 6] = [
        Self::Random,
        Self::SharedPrefix,
        Self::MemoryPressure,
        Self::LongPrompt,
        Self::InputGrounded,
        Self::MultiTurnChat,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::SharedPrefix => "shared-prefix",
            Self::MemoryPressure => "memory-pressure",
            Self::LongPrompt => "long-prompt",
            Self::InputGrounded => "input-grounded",
            Self::MultiTurnChat => "multi-turn-chat",
        }
    }

    /// `num_requests` arrivals drawn from `seed`, tokens in `3..vocab_size`.
    pub fn generate(self, num_requests: usize, vocab_size: u32, seed: u64) -> Workload {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let low = 3.min(vocab_size.saturating_sub(1));
        let tokens = |rng: &mut ChaCha8Rng, len: usize| -> Vec<TokenId> {
            (0..len).map(|_| rng.random_range(low..vocab_size.max(low + 1))).collect()
        };
        if self == Self::MultiTurnChat {
            return Workload {
                name: self.name().to_owned(),
                arrivals: multi_turn_chat(num_requests, &mut rng, tokens),
                temperature: 0.0,
            };
        }
        let system_prompts: Vec<Vec<TokenId>> = (0..4).map(|_| tokens(&mut rng, 256)).collect();
        let mut time_s = 0.0;
        let arrivals = (0..num_requests)
            .map(|_| {
                let (rate, prompt, max_tokens, priority) = match self {
                    Self::Random => {
                        let len = rng.random_range(16..=512);
                        (20.0, tokens(&mut rng, len), rng.random_range(16..=256), rng.random_range(0..4))
                    }
                    Self::SharedPrefix => {
                        let system = &system_prompts[rng.random_range(0..system_prompts.len())];
                        let len = rng.random_range(16..=128);
                        let prompt = [system.clone(), tokens(&mut rng, len)].concat();
                        (20.0, prompt, rng.random_range(32..=128), 0)
                    }
                    Self::MemoryPressure => {
                        let len = rng.random_range(128..=512);
                        (f64::INFINITY, tokens(&mut rng, len), rng.random_range(256..=512), 0)
                    }
                    Self::LongPrompt => {
                        let len = rng.random_range(1024..=4096);
                        (2.0, tokens(&mut rng, len), rng.random_range(16..=64), 0)
                    }
                    Self::InputGrounded => {
                        let len = rng.random_range(64..=128);
                        let passage = tokens(&mut rng, len);
                        let prompt = [passage.clone(), passage.clone(), passage[..len / 4].to_vec()].concat();
                        (4.0, prompt, rng.random_range(32..=128), 0)
                    }
                    Self::MultiTurnChat => unreachable!("drawn by multi_turn_chat"),
                };
                let ignore_eos = self != Self::InputGrounded;
                let arrival = Arrival {
                    time_s,
                    prompt_token_ids: prompt,
                    max_tokens,
                    priority,
                    ignore_eos,
                    follows: None,
                };
                let uniform: f64 = rng.random_range(f64::EPSILON..1.0);
                time_s += -uniform.ln() / rate;
                arrival
            })
            .collect();
        Workload { name: self.name().to_owned(), arrivals, temperature: 0.0 }
    }
}

/// Turns of each [`BuiltinWorkload::MultiTurnChat`] conversation.
const CHAT_TURNS: usize = 4;

/// Seconds a [`BuiltinWorkload::MultiTurnChat`] user thinks between a reply and the next turn.
const CHAT_THINK_TIME_S: f64 = 2.0;

/// [`BuiltinWorkload::MultiTurnChat`]'s arrivals: `num_requests` turns of
/// `num_requests / 4` (rounded up) conversations, turn by turn; first turns at Poisson
/// times, later ones following the conversation's previous turn.
fn multi_turn_chat(
    num_requests: usize,
    rng: &mut ChaCha8Rng,
    tokens: impl Fn(&mut ChaCha8Rng, usize) -> Vec<TokenId>,
) -> Vec<Arrival> {
    let num_conversations = num_requests.div_ceil(CHAT_TURNS);
    let mut histories: Vec<Vec<TokenId>> = Vec::with_capacity(num_conversations);
    let mut arrivals = Vec::with_capacity(num_requests);
    let mut time_s = 0.0;
    for index in 0..num_requests {
        let conversation = index % num_conversations.max(1);
        let added = match histories.get(conversation) {
            None => rng.random_range(192..=320),
            Some(_) => rng.random_range(24..=48),
        };
        let turn = tokens(rng, added);
        if conversation == histories.len() {
            histories.push(turn);
        } else {
            histories[conversation].extend(turn);
        }
        let prompt_token_ids = histories[conversation].clone();
        let max_tokens = rng.random_range(16..=32);
        let follows = index
            .checked_sub(num_conversations)
            .map(|previous| FollowUp { previous, think_time_s: CHAT_THINK_TIME_S });
        let arrival_s = if follows.is_some() { 0.0 } else { time_s };
        arrivals.push(Arrival {
            time_s: arrival_s,
            prompt_token_ids,
            max_tokens,
            priority: 0,
            ignore_eos: true,
            follows,
        });
        let uniform: f64 = rng.random_range(f64::EPSILON..1.0);
        if follows.is_none() {
            time_s += -uniform.ln();
        }
    }
    arrivals
}

impl FromStr for BuiltinWorkload {
    type Err = UnknownWorkload;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|w| w.name() == name).ok_or_else(|| UnknownWorkload(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_grounded_prompts_repeat_a_passage_and_start_it_again() {
        let workload: Workload = "input-grounded".parse::<BuiltinWorkload>().unwrap().generate(3, 1000, 5);
        for arrival in &workload.arrivals {
            let prompt = &arrival.prompt_token_ids;
            let len =
                (64..=128).find(|&len| 2 * len + len / 4 == prompt.len()).expect("a passage of 64..128");
            assert_eq!(prompt[..len], prompt[len..2 * len]);
            assert_eq!(prompt[..len / 4], prompt[2 * len..]);
            assert!(!arrival.ignore_eos);
        }
    }

    #[test]
    fn multi_turn_chats_return_with_their_history_turn_by_turn() {
        let workload = BuiltinWorkload::MultiTurnChat.generate(10, 1000, 4);
        let prompts: Vec<&Vec<TokenId>> = workload.arrivals.iter().map(|a| &a.prompt_token_ids).collect();
        // Three conversations: turns 0..2 open them, 3..5 return to them, then 6..8, then 9.
        for (index, prompt) in prompts.iter().enumerate().skip(3) {
            let previous = prompts[index - 3];
            assert!(prompt.starts_with(previous), "turn {index} extends turn {}", index - 3);
            assert!((24..=48).contains(&(prompt.len() - previous.len())));
        }
        assert!(prompts[..3].iter().all(|p| (192..=320).contains(&p.len())));
        let returning = workload.returning();
        assert_eq!(returning, [vec![false; 3], vec![true; 7]].concat());
        let first_turns = &workload.arrivals[..3];
        assert!(first_turns.windows(2).all(|w| w[0].time_s < w[1].time_s));
        assert!(first_turns.iter().all(|a| a.follows.is_none()));
        for (index, arrival) in workload.arrivals.iter().enumerate().skip(3) {
            assert_eq!(arrival.follows, Some(FollowUp { previous: index - 3, think_time_s: 2.0 }));
        }
    }

    #[test]
    fn numbered_arrivals_keep_order_ids_and_settings() {
        let workload = BuiltinWorkload::SharedPrefix.generate(5, 1000, 3);
        let numbered = workload.numbered();
        let ids: Vec<RequestId> = numbered.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        for ((request_id, arrival), source) in numbered.iter().zip(&workload.arrivals) {
            assert_eq!(arrival, source);
            let request = arrival.request(*request_id, Some(2));
            assert_eq!(request.arrival_time, source.time_s);
            assert_eq!(request.prompt_token_ids, source.prompt_token_ids);
            assert_eq!(request.sampling_params.max_tokens, source.max_tokens);
            assert!(request.sampling_params.ignore_eos);
        }
    }
}

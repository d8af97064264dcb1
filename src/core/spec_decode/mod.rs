//! Speculative decoding's engine-core side: the `--speculative-config` (vLLM's
//! `SpeculativeConfig`) and the proposers that guess a request's next tokens for the
//! scheduler to verify in one forward pass (n-gram prompt lookup, as vLLM's
//! `NgramProposer`).

pub mod config;
pub mod ngram;

pub use self::config::{
    MAX_NUM_SPECULATIVE_TOKENS, SpeculativeConfig, SpeculativeConfigError, SpeculativeMethod,
};
pub use self::ngram::{NgramIndex, NgramProposer};

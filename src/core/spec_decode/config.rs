//! `--speculative-config`: vLLM's `SpeculativeConfig` fields under vLLM's names, parsed from
//! JSON; an unknown field is refused by name, never ignored.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The most tokens one step may propose for a request (the per-position acceptance
/// counters have this many slots).
pub const MAX_NUM_SPECULATIVE_TOKENS: usize = 16;

/// n-gram lengths when neither `prompt_lookup_min` nor `prompt_lookup_max` is given
/// (vLLM's defaults).
const DEFAULT_PROMPT_LOOKUP: usize = 5;

/// How proposals are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeculativeMethod {
    /// Prompt lookup: the tokens that followed the earliest earlier occurrence of the n-gram
    /// ending the request's own prompt and output.
    Ngram,
    /// A smaller model with the same vocabulary (`model`) proposes greedily.
    DraftModel,
}

/// Speculative decoding's settings (vLLM's `--speculative-config` JSON object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeConfig {
    /// How proposals are made; left out, `model` decides (as in vLLM: `"ngram"` or a path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<SpeculativeMethod>,
    /// The most tokens proposed per request and step (1 to [`MAX_NUM_SPECULATIVE_TOKENS`]).
    pub num_speculative_tokens: usize,
    /// Longest n-gram matched (n-gram method); defaults to `prompt_lookup_min`, or 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_lookup_max: Option<usize>,
    /// Shortest n-gram matched (n-gram method); defaults to `prompt_lookup_max`, or 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_lookup_min: Option<usize>,
    /// The draft model (draft-model method), or `"ngram"` for the n-gram method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<PathBuf>,
    /// Proposals per request by batch size (vLLM's dynamic speculative decoding):
    /// `[[from, to, k], ...]`, inclusive ranges of running requests, the first from 1, in
    /// order and disjoint; while that many requests run, at most `k` tokens are proposed
    /// (capped at `num_speculative_tokens`; 0 turns speculation off). A batch size in a gap
    /// or past the last range takes the range before it. Left out: `num_speculative_tokens`
    /// at every batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_speculative_tokens_per_batch_size: Option<Vec<[usize; 3]>>,
}

/// A speculative configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpeculativeConfigError {
    /// The JSON does not parse, or names a field or method that does not exist.
    #[error("speculative config: {0}")]
    Json(String),
    /// Neither `method` nor `model` says how to propose.
    #[error("speculative config: give \"method\" (\"ngram\" or \"draft_model\") or \"model\"")]
    NoMethod,
    /// The draft-model method without a `model` path.
    #[error("speculative config: method \"draft_model\" needs \"model\": the draft model's path")]
    NoDraftModel,
    /// `num_speculative_tokens` is out of range.
    #[error(
        "speculative config: num_speculative_tokens={0} must be between 1 and {MAX_NUM_SPECULATIVE_TOKENS}"
    )]
    NumSpeculativeTokens(usize),
    /// An n-gram length is 0.
    #[error("speculative config: {field}={value} must be > 0")]
    ZeroLookup {
        /// `prompt_lookup_min` or `prompt_lookup_max`.
        field: &'static str,
        /// Its value.
        value: usize,
    },
    /// `num_speculative_tokens_per_batch_size` is not a schedule vLLM accepts.
    #[error("speculative config: num_speculative_tokens_per_batch_size: {0}")]
    BatchSizeSchedule(String),
    /// `prompt_lookup_min` exceeds `prompt_lookup_max`.
    #[error("speculative config: prompt_lookup_min={min} must be <= prompt_lookup_max={max}")]
    LookupOrder {
        /// `prompt_lookup_min`.
        min: usize,
        /// `prompt_lookup_max`.
        max: usize,
    },
}

impl SpeculativeConfig {
    /// The n-gram method proposing up to `num_speculative_tokens` tokens after matches of
    /// `prompt_lookup_min..=prompt_lookup_max` tokens.
    pub fn ngram(num_speculative_tokens: usize, prompt_lookup_min: usize, prompt_lookup_max: usize) -> Self {
        Self {
            method: Some(SpeculativeMethod::Ngram),
            num_speculative_tokens,
            prompt_lookup_max: Some(prompt_lookup_max),
            prompt_lookup_min: Some(prompt_lookup_min),
            model: None,
            num_speculative_tokens_per_batch_size: None,
        }
    }

    /// The draft-model method: the model at `model` proposes up to `num_speculative_tokens`
    /// tokens greedily.
    pub fn draft_model(model: impl Into<PathBuf>, num_speculative_tokens: usize) -> Self {
        Self {
            method: Some(SpeculativeMethod::DraftModel),
            num_speculative_tokens,
            prompt_lookup_max: None,
            prompt_lookup_min: None,
            model: Some(model.into()),
            num_speculative_tokens_per_batch_size: None,
        }
    }

    /// The most tokens proposed per request while `batch_size` requests run
    /// ([`Self::num_speculative_tokens_per_batch_size`]'s entry for it, else
    /// `num_speculative_tokens`).
    pub fn num_speculative_tokens_at(&self, batch_size: usize) -> usize {
        let Some(schedule) = &self.num_speculative_tokens_per_batch_size else {
            return self.num_speculative_tokens;
        };
        let entry = schedule.iter().take_while(|[from, _, _]| *from <= batch_size.max(1)).last();
        entry.map_or(self.num_speculative_tokens, |[_, _, k]| *k).min(self.num_speculative_tokens)
    }

    /// The draft model's path, for the draft-model method.
    pub fn draft_model_path(&self) -> Option<&std::path::Path> {
        (self.method == Some(SpeculativeMethod::DraftModel)).then_some(self.model.as_deref()).flatten()
    }

    /// Parses and validates the JSON object `--speculative-config` takes.
    pub fn from_json(text: &str) -> Result<Self, SpeculativeConfigError> {
        let config: Self =
            serde_json::from_str(text).map_err(|e| SpeculativeConfigError::Json(e.to_string()))?;
        config.validated()
    }

    /// The configuration with vLLM's defaults filled in (`method` from `model`, the n-gram
    /// lengths from each other), or why it cannot be used.
    pub fn validated(mut self) -> Result<Self, SpeculativeConfigError> {
        let method = match (self.method, self.model.as_deref()) {
            (Some(method), _) => method,
            (None, Some(model)) if model.as_os_str() == "ngram" || model.as_os_str() == "[ngram]" => {
                SpeculativeMethod::Ngram
            }
            (None, Some(_)) => SpeculativeMethod::DraftModel,
            (None, None) => return Err(SpeculativeConfigError::NoMethod),
        };
        if method == SpeculativeMethod::DraftModel
            && self.model.as_deref().is_none_or(|model| model.as_os_str().is_empty())
        {
            return Err(SpeculativeConfigError::NoDraftModel);
        }
        let k = self.num_speculative_tokens;
        if !(1..=MAX_NUM_SPECULATIVE_TOKENS).contains(&k) {
            return Err(SpeculativeConfigError::NumSpeculativeTokens(k));
        }
        let (min, max) = match (self.prompt_lookup_min, self.prompt_lookup_max) {
            (None, None) => (DEFAULT_PROMPT_LOOKUP, DEFAULT_PROMPT_LOOKUP),
            (Some(min), None) => (min, min),
            (None, Some(max)) => (max, max),
            (Some(min), Some(max)) => (min, max),
        };
        for (field, value) in [("prompt_lookup_min", min), ("prompt_lookup_max", max)] {
            if value == 0 {
                return Err(SpeculativeConfigError::ZeroLookup { field, value });
            }
        }
        if min > max {
            return Err(SpeculativeConfigError::LookupOrder { min, max });
        }
        if let Some(schedule) = &mut self.num_speculative_tokens_per_batch_size {
            check_schedule(schedule).map_err(SpeculativeConfigError::BatchSizeSchedule)?;
        }
        self.method = Some(method);
        self.prompt_lookup_min = Some(min);
        self.prompt_lookup_max = Some(max);
        Ok(self)
    }
}

/// Sorts a batch-size schedule and checks it as vLLM does: not empty, each range positive
/// and in order, the ranges disjoint, the first from batch size 1.
fn check_schedule(schedule: &mut [[usize; 3]]) -> Result<(), String> {
    schedule.sort_unstable();
    let Some(first) = schedule.first() else {
        return Err("must not be empty".into());
    };
    if first[0] != 1 {
        return Err(format!("the first batch-size range must start at 1, not {}", first[0]));
    }
    let mut previous_end = 0;
    for &[from, to, _] in schedule.iter() {
        if from == 0 || from > to {
            return Err(format!("batch-size range ({from}, {to}) must be positive and in order"));
        }
        if from <= previous_end {
            return Err(format!("batch-size range ({from}, {to}) overlaps the one before it"));
        }
        previous_end = to;
    }
    Ok(())
}

impl std::str::FromStr for SpeculativeConfig {
    type Err = SpeculativeConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::from_json(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_fields_parse_and_defaults_fill_in() {
        let config = SpeculativeConfig::from_json(
            r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}"#,
        )
        .unwrap();
        assert_eq!(config, SpeculativeConfig::ngram(4, 2, 4));
        let only_max = SpeculativeConfig::from_json(
            r#"{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}"#,
        )
        .unwrap();
        assert_eq!((only_max.prompt_lookup_min, only_max.prompt_lookup_max), (Some(3), Some(3)));
        let by_model =
            SpeculativeConfig::from_json(r#"{"model": "[ngram]", "num_speculative_tokens": 2}"#).unwrap();
        assert_eq!(by_model.method, Some(SpeculativeMethod::Ngram));
        assert_eq!((by_model.prompt_lookup_min, by_model.prompt_lookup_max), (Some(5), Some(5)));
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused_by_name() {
        let unknown = SpeculativeConfig::from_json(
            r#"{"method": "ngram", "num_speculative_tokens": 2, "lookahead": 3}"#,
        )
        .unwrap_err();
        assert!(unknown.to_string().contains("unknown field `lookahead`"), "{unknown}");
        let method =
            SpeculativeConfig::from_json(r#"{"method": "eagle", "num_speculative_tokens": 2}"#).unwrap_err();
        assert!(method.to_string().contains("unknown variant `eagle`"), "{method}");
        let draft =
            SpeculativeConfig::from_json(r#"{"model": "/m/draft.gguf", "num_speculative_tokens": 2}"#)
                .unwrap();
        assert_eq!(draft.method, Some(SpeculativeMethod::DraftModel));
        assert_eq!(draft.draft_model_path(), Some(std::path::Path::new("/m/draft.gguf")));
        let pathless =
            SpeculativeConfig::from_json(r#"{"method": "draft_model", "num_speculative_tokens": 2}"#);
        assert_eq!(pathless, Err(SpeculativeConfigError::NoDraftModel));
        let none = SpeculativeConfig::from_json(r#"{"num_speculative_tokens": 2}"#);
        assert_eq!(none, Err(SpeculativeConfigError::NoMethod));
        let zero = SpeculativeConfig::from_json(r#"{"method": "ngram", "num_speculative_tokens": 0}"#);
        assert_eq!(zero, Err(SpeculativeConfigError::NumSpeculativeTokens(0)));
        let order = SpeculativeConfig::from_json(
            r#"{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2}"#,
        );
        assert_eq!(order, Err(SpeculativeConfigError::LookupOrder { min: 4, max: 2 }));
        let zero_min = SpeculativeConfig::from_json(
            r#"{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0, "prompt_lookup_max": 2}"#,
        );
        assert_eq!(
            zero_min,
            Err(SpeculativeConfigError::ZeroLookup { field: "prompt_lookup_min", value: 0 })
        );
        assert!(SpeculativeConfig::from_json("{").is_err());
    }

    #[test]
    fn the_batch_size_schedule_caps_proposals_as_vllms_dense_lookup_does() {
        let config = SpeculativeConfig::from_json(
            r#"{"method": "ngram", "num_speculative_tokens": 4,
                "num_speculative_tokens_per_batch_size": [[9, 16, 0], [1, 2, 6], [4, 8, 2]]}"#,
        )
        .unwrap();
        assert_eq!(
            config.num_speculative_tokens_per_batch_size,
            Some(vec![[1, 2, 6], [4, 8, 2], [9, 16, 0]])
        );
        // [1, 2]: 6 capped at 4; 3 falls in the gap after [1, 2]; past the last range its k.
        let ks: Vec<usize> =
            [0, 1, 2, 3, 4, 8, 9, 16, 500].map(|b| config.num_speculative_tokens_at(b)).into();
        assert_eq!(ks, [4, 4, 4, 4, 2, 2, 0, 0, 0]);
        assert_eq!(SpeculativeConfig::ngram(3, 1, 2).num_speculative_tokens_at(1000), 3);
        let refused = |schedule: &str| {
            let json = format!(
                r#"{{"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": {schedule}}}"#
            );
            SpeculativeConfig::from_json(&json).unwrap_err().to_string()
        };
        assert!(refused("[]").contains("must not be empty"));
        assert!(refused("[[2, 4, 1]]").contains("must start at 1"));
        assert!(refused("[[1, 4, 1], [3, 8, 0]]").contains("overlaps"));
        assert!(refused("[[1, 4, 1], [6, 5, 0]]").contains("in order"));
        // vLLM's context-bucketed 5-item entries are not served (a JSON error).
        assert!(refused("[[1, 4, 1, 1, 8]]").starts_with("speculative config: "));
    }
}

//! Structured outputs: a request's output held to a JSON schema, a regular expression, a
//! list of choices or a Lark grammar.
//!
//! A [`Constraint`] sits in the request's [`crate::sampling::SamplingParams`]. The engine
//! compiles it with [`llguidance`] over the model's own vocabulary
//! ([`vocab::GuidanceVocab`]) into a [`ConstraintState`], which tracks the request's output
//! tokens and gives, before each sampled token, the [`crate::structured::TokenMask`] of the
//! tokens that keep the output matchable. The mask applies before sampling, greedy included.
//! The state follows the request's tokens, not the steps: after a preemption it has
//! consumed the same tokens, so a recomputed or batched request samples the same output.

pub mod mask;
pub mod state;
pub mod vocab;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use self::mask::TokenMask;
pub use self::state::{ConstraintState, Grammars, json_layout};

/// What a request's output must match.
///
/// In JSON it takes vLLM's `structured_outputs` shape: an object with exactly one of
/// `json` (a schema, as an object or as JSON text), `json_object: true`, `regex`, `choice`
/// or `grammar`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StructuredOutputsParams", into = "StructuredOutputsParams")]
pub enum Constraint {
    /// JSON valid under this JSON Schema.
    JsonSchema(Value),
    /// Any JSON object.
    JsonObject,
    /// Text matching this regular expression (whole output, Rust `regex` syntax).
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A sentence of this Lark grammar (llguidance's dialect, which also reads GBNF rules).
    Grammar(String),
}

impl Constraint {
    /// vLLM's name of this kind of constraint (`json`, `json_object`, `regex`, `choice`,
    /// `grammar`), for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::JsonSchema(_) => "json",
            Self::JsonObject => "json_object",
            Self::Regex(_) => "regex",
            Self::Choice(_) => "choice",
            Self::Grammar(_) => "grammar",
        }
    }
}

/// vLLM's `StructuredOutputsParams`: the wire form of a [`Constraint`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StructuredOutputsParams {
    /// A JSON Schema, as a JSON value or as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<Value>,
    /// A regular expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// A list of allowed outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice: Option<Vec<String>>,
    /// A Lark (or GBNF) grammar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
    /// Any JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_object: Option<bool>,
}

impl TryFrom<StructuredOutputsParams> for Constraint {
    type Error = ConstraintError;

    fn try_from(params: StructuredOutputsParams) -> Result<Self, ConstraintError> {
        let mut found = Vec::new();
        if let Some(schema) = params.json {
            found.push(Self::JsonSchema(match schema {
                Value::String(text) => serde_json::from_str(&text)
                    .map_err(|e| ConstraintError::invalid("json", format!("the schema is not JSON: {e}")))?,
                schema => schema,
            }));
        }
        if let Some(regex) = params.regex {
            found.push(Self::Regex(regex));
        }
        if let Some(choice) = params.choice {
            found.push(Self::Choice(choice));
        }
        if let Some(grammar) = params.grammar {
            found.push(Self::Grammar(grammar));
        }
        if params.json_object == Some(true) {
            found.push(Self::JsonObject);
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(ConstraintError::NoConstraint),
            _ => Err(ConstraintError::SeveralConstraints(found.iter().map(Constraint::kind).collect())),
        }
    }
}

impl From<Constraint> for StructuredOutputsParams {
    fn from(constraint: Constraint) -> Self {
        let mut params = Self::default();
        match constraint {
            Constraint::JsonSchema(schema) => params.json = Some(schema),
            Constraint::JsonObject => params.json_object = Some(true),
            Constraint::Regex(regex) => params.regex = Some(regex),
            Constraint::Choice(choice) => params.choice = Some(choice),
            Constraint::Grammar(grammar) => params.grammar = Some(grammar),
        }
        params
    }
}

/// Why a constraint cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    /// `structured_outputs` names no constraint.
    #[error("structured_outputs must set one of json, json_object, regex, choice or grammar")]
    NoConstraint,
    /// `structured_outputs` names more than one constraint.
    #[error("structured_outputs sets {} constraints ({}); set exactly one", .0.len(), .0.join(", "))]
    SeveralConstraints(Vec<&'static str>),
    /// The schema, regex, choice list or grammar does not compile.
    #[error("invalid {kind} constraint: {message}")]
    Invalid {
        /// The constraint's kind, as [`Constraint::kind`] names it.
        kind: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The model has no end-of-sequence token, so a finished output could never stop.
    #[error("structured outputs need a model with an end-of-sequence token")]
    NoEosToken,
    /// The output left the constraint while generating (an internal failure: masked
    /// sampling never picks a token the constraint rules out).
    #[error("the constraint failed while generating: {0}")]
    Failed(String),
    /// The vocabulary could not be indexed for llguidance.
    #[error("the vocabulary cannot be used for structured outputs: {0}")]
    Vocabulary(String),
}

impl ConstraintError {
    /// An [`ConstraintError::Invalid`] of `kind`.
    pub fn invalid(kind: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid { kind, message: message.into() }
    }
}

//! Compiling constraints for one model, and following one request's output through its
//! constraint.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{Value, json};

use super::TokenMask;
use super::vocab::{GuidanceVocab, SameBytes};
use super::{Constraint, ConstraintError};
use crate::ids::TokenId;
use crate::model::Tokenizer;
use crate::model::chat::clip;

/// How JSON outputs are laid out: one space after `,` and `:` and no other whitespace, the
/// layout of Python's `json.dumps`. Models write it naturally, and a sampled output cannot
/// wander off into unbounded whitespace. A schema's own `x-guidance` options win.
pub fn json_layout() -> Value {
    json!({ "whitespace_flexible": false, "item_separator": ", ", "key_separator": ": " })
}

/// Compiles constraints over one model's vocabulary; llguidance's parser factory is built
/// on the first constrained request (indexing the vocabulary takes a moment).
pub struct Grammars {
    tokenizer: Arc<Tokenizer>,
    eos_token_id: Option<TokenId>,
    extra_eos_token_ids: Vec<TokenId>,
    factory: OnceLock<Result<(ParserFactory, Arc<SameBytes>), ConstraintError>>,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars").field("eos_token_id", &self.eos_token_id).finish_non_exhaustive()
    }
}

impl Grammars {
    /// Constraints over `tokenizer`'s vocabulary; a finished output ends with `eos_token_id`
    /// or one of `extra_eos_token_ids`.
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        eos_token_id: Option<TokenId>,
        extra_eos_token_ids: Vec<TokenId>,
    ) -> Self {
        Self { tokenizer, eos_token_id, extra_eos_token_ids, factory: OnceLock::new() }
    }

    /// The parser factory and the vocabulary's same-bytes groups, built on first use.
    fn factory(&self) -> Result<&(ParserFactory, Arc<SameBytes>), ConstraintError> {
        let built = self.factory.get_or_init(|| {
            let eos = self.eos_token_id.ok_or(ConstraintError::NoEosToken)?;
            let vocab = GuidanceVocab::new(self.tokenizer.clone(), eos, &self.extra_eos_token_ids);
            let mut factory = ParserFactory::new_simple(&(Arc::new(vocab) as toktrie::TokEnv))
                .map_err(|e| ConstraintError::Vocabulary(clip(&e.to_string()).to_owned()))?;
            factory.quiet();
            factory.limits_mut().verbose_errors = false;
            Ok((factory, Arc::new(SameBytes::of(&self.tokenizer))))
        });
        built.as_ref().map_err(Clone::clone)
    }

    /// Compiles `constraint` into the state of a request that has generated nothing yet.
    pub fn compile(&self, constraint: &Constraint) -> Result<ConstraintState, ConstraintError> {
        let (factory, same_bytes) = self.factory()?;
        let kind = constraint.kind();
        let grammar = top_level_grammar(constraint)?;
        let parser = catch_unwind(AssertUnwindSafe(|| factory.create_parser(grammar)))
            .map_err(|_| ConstraintError::invalid(kind, "the grammar compiler failed on this input"))?
            .map_err(|e| ConstraintError::invalid(kind, clip(&e.to_string()).to_owned()))?;
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(message) => Err(ConstraintError::invalid(kind, clip(&message).to_owned())),
            None => Ok(ConstraintState { matcher, consumed: 0, same_bytes: Arc::clone(same_bytes) }),
        }
    }
}

/// llguidance's grammar for `constraint`.
fn top_level_grammar(constraint: &Constraint) -> Result<TopLevelGrammar, ConstraintError> {
    Ok(match constraint {
        Constraint::JsonSchema(schema) => {
            let mut schema = schema.clone();
            if let Some(object) = schema.as_object_mut() {
                object.entry("x-guidance").or_insert_with(json_layout);
            } else if !schema.is_boolean() {
                return Err(ConstraintError::invalid("json", "a JSON schema must be an object or a boolean"));
            }
            TopLevelGrammar::from_json_schema(schema)
        }
        Constraint::JsonObject => {
            TopLevelGrammar::from_json_schema(json!({ "type": "object", "x-guidance": json_layout() }))
        }
        Constraint::Regex(regex) => TopLevelGrammar::from_regex(regex),
        Constraint::Choice(choices) => {
            if choices.is_empty() {
                return Err(ConstraintError::invalid("choice", "the list of choices is empty"));
            }
            let escaped: Vec<String> = choices.iter().map(|c| regex_syntax::escape(c)).collect();
            TopLevelGrammar::from_regex(&escaped.join("|"))
        }
        Constraint::Grammar(grammar) => TopLevelGrammar::from_lark(grammar.clone()),
    })
}

/// Where one request's output stands in its constraint.
pub struct ConstraintState {
    matcher: Matcher,
    /// Output tokens the matcher has consumed.
    consumed: usize,
    same_bytes: Arc<SameBytes>,
}

impl std::fmt::Debug for ConstraintState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintState").field("consumed", &self.consumed).finish_non_exhaustive()
    }
}

impl ConstraintState {
    /// Advances over `new_tokens`, the output tokens after the [`Self::consumed`] it has
    /// seen. Tokens after the output is complete (end-of-sequence tokens that `ignore_eos`
    /// kept going past) change nothing.
    pub fn follow(&mut self, new_tokens: &[TokenId]) -> Result<(), ConstraintError> {
        for &token in new_tokens {
            if !self.matcher.is_stopped() {
                self.matcher
                    .consume_token(token)
                    .map_err(|e| ConstraintError::Failed(clip(&e.to_string()).to_owned()))?;
            }
            self.consumed += 1;
        }
        Ok(())
    }

    /// The tokens that may come next; only the end-of-sequence tokens once the output is
    /// complete.
    pub fn mask(&mut self) -> Result<TokenMask, ConstraintError> {
        let mut allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| ConstraintError::Failed(clip(&e.to_string()).to_owned()))?;
        self.same_bytes.widen(&mut allowed);
        Ok(TokenMask::from_words(allowed.as_slice().to_vec()))
    }

    /// The masks of the positions a step samples at when it verifies `proposals`: this
    /// position's, then, on a copy of the matcher advanced along the proposals, the one after
    /// each proposal — as token-by-token decoding would compute them once it accepted the
    /// proposals before. They stop after a proposal the grammar refuses (no token after it
    /// can be accepted).
    pub fn masks_along(&mut self, proposals: &[TokenId]) -> Result<Vec<TokenMask>, ConstraintError> {
        let mut masks = vec![self.mask()?];
        if proposals.is_empty() {
            return Ok(masks);
        }
        let mut copy = ConstraintState {
            matcher: self.matcher.deep_clone(),
            consumed: self.consumed,
            same_bytes: Arc::clone(&self.same_bytes),
        };
        for &token in proposals {
            if !masks.last().is_some_and(|mask| mask.allows(token)) || copy.follow(&[token]).is_err() {
                break;
            }
            masks.push(copy.mask()?);
        }
        Ok(masks)
    }

    /// Output tokens consumed so far.
    pub fn consumed(&self) -> usize {
        self.consumed
    }
}

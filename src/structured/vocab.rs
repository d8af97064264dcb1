//! The model's vocabulary as llguidance reads it: a token trie of each id's bytes.

use std::collections::HashMap;
use std::sync::Arc;

use toktrie::{SimpleVob, TokRxInfo, TokTrie, TokenizerEnv};

use crate::ids::TokenId;
use crate::model::Tokenizer;

/// A [`Tokenizer`] seen through llguidance's [`TokenizerEnv`]: every id maps to the bytes
/// it decodes to; control tokens are marked special (llguidance's `0xFF` prefix) so that no
/// grammar writes them as text, while the end-of-sequence token stays reachable.
pub struct GuidanceVocab {
    trie: TokTrie,
    tokenizer: Arc<Tokenizer>,
}

/// Groups of ordinary tokens that spell the same bytes (SentencePiece's `▁` and its byte
/// token `<0x20>`, say). llguidance's trie marks one id of such a group in a mask; the
/// others must follow it, or a model could never pick its own usual spelling.
#[derive(Debug, Default)]
pub struct SameBytes {
    groups: Vec<Vec<TokenId>>,
}

impl SameBytes {
    /// The groups of `tokenizer`'s vocabulary.
    pub fn of(tokenizer: &Tokenizer) -> Self {
        let mut by_bytes: HashMap<&[u8], Vec<TokenId>> = HashMap::new();
        for id in 0..tokenizer.vocab_size() as TokenId {
            match tokenizer.token_bytes(id) {
                Some(bytes) if !bytes.is_empty() && !tokenizer.is_special(id) => {
                    by_bytes.entry(bytes).or_default().push(id)
                }
                _ => {}
            }
        }
        let mut groups: Vec<Vec<TokenId>> = by_bytes.into_values().filter(|ids| ids.len() > 1).collect();
        groups.sort_unstable();
        Self { groups }
    }

    /// Allows every token of a group one of whose tokens `mask` allows.
    pub fn widen(&self, mask: &mut SimpleVob) {
        for group in &self.groups {
            if group.iter().any(|&id| mask.is_allowed(id)) {
                for &id in group {
                    mask.allow_token(id);
                }
            }
        }
    }
}

impl GuidanceVocab {
    /// Indexes `tokenizer`'s vocabulary; a finished output may end with the model's
    /// `eos_token_id` or any of its `extra_eos_token_ids`.
    pub fn new(tokenizer: Arc<Tokenizer>, eos_token_id: TokenId, extra_eos_token_ids: &[TokenId]) -> Self {
        let words: Vec<Vec<u8>> = (0..tokenizer.vocab_size() as TokenId)
            .map(|id| {
                let bytes = tokenizer.token_bytes(id).unwrap_or_default();
                if tokenizer.is_special(id) {
                    [&[TokTrie::SPECIAL_TOKEN_MARKER], bytes].concat()
                } else {
                    bytes.to_vec()
                }
            })
            .collect();
        let info = TokRxInfo {
            tok_bos: tokenizer.bos_token_id(),
            ..TokRxInfo::new(words.len() as u32, eos_token_id)
        };
        let eos: Vec<TokenId> =
            std::iter::once(eos_token_id).chain(extra_eos_token_ids.iter().copied()).collect();
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
        Self { trie, tokenizer }
    }
}

impl TokenizerEnv for GuidanceVocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// The tokenizer's own ids for `bytes` when they decode back to exactly `bytes` (byte-level
    /// vocabularies); otherwise (a SentencePiece space prefix, bytes that are not UTF-8) the
    /// trie's greedy longest-match ids, which always spell `bytes`.
    fn tokenize_bytes(&self, bytes: &[u8]) -> Vec<TokenId> {
        let canonical = std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| self.tokenizer.encode(text, false).ok())
            .filter(|ids| self.tokenizer.decode_bytes(ids, false).is_ok_and(|spelled| spelled == bytes));
        canonical.unwrap_or_else(|| self.trie.greedy_tokenize(bytes))
    }
}

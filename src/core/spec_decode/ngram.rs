//! Prompt-lookup proposals (vLLM's `NgramProposer`): find the longest n-gram of
//! `prompt_lookup_min..=prompt_lookup_max` tokens that ends the request's tokens and occurred
//! before, and propose the tokens that followed its earliest occurrence.
//!
//! Each request keeps an [`NgramIndex`] of where each of its n-grams first ended, grown by
//! the tokens it gained since the last step: a proposal costs a few hash lookups, not a scan
//! (or a copy) of the request's whole history.

use std::collections::HashMap;

use super::config::{SpeculativeConfig, SpeculativeMethod};
use crate::ids::TokenId;

/// Proposes up to `k` tokens by n-gram lookup in a request's own prompt and output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NgramProposer {
    /// Most tokens proposed.
    pub k: usize,
    /// Shortest n-gram matched.
    pub min_n: usize,
    /// Longest n-gram matched.
    pub max_n: usize,
}

/// Where each n-gram (`min_n..=max_n` tokens) of one request's tokens first ended, for the
/// positions indexed so far. Tokens are only ever appended to a request, so the index only
/// grows.
#[derive(Debug, Clone, Default)]
pub struct NgramIndex {
    /// N-grams ending at positions below this are indexed.
    indexed: usize,
    /// Each n-gram seen, and the position its earliest occurrence ends at.
    first_end: HashMap<Box<[TokenId]>, usize>,
}

impl NgramProposer {
    /// The proposer a validated n-gram configuration describes (`None` for other methods).
    pub fn from_config(config: &SpeculativeConfig) -> Option<Self> {
        let config = config.clone().validated().ok()?;
        (config.method == Some(SpeculativeMethod::Ngram)).then(|| Self {
            k: config.num_speculative_tokens,
            min_n: config.prompt_lookup_min.unwrap_or(1),
            max_n: config.prompt_lookup_max.unwrap_or(1),
        })
    }

    /// The tokens that followed the earliest earlier occurrence of the longest n-gram
    /// (`min_n..=max_n` tokens) ending `prompt` + `output`, at most `max_tokens` of them (and
    /// at most `k`, and never past the end of the tokens); empty when nothing matches. As
    /// vLLM's `_find_longest_matched_ngram_and_propose_tokens`
    /// (`vllm/v1/spec_decode/ngram_proposer.py`): among equally long matches the earliest
    /// wins (its KMP over the reversed tokens moves `position` on `prev_lps >= longest_ngram`,
    /// "the earliest position in the original tokens"). `index` is this request's, extended
    /// here by the tokens it gained.
    pub fn propose(
        &self,
        index: &mut NgramIndex,
        prompt: &[TokenId],
        output: &[TokenId],
        max_tokens: usize,
    ) -> Vec<TokenId> {
        let at = |i: usize| if i < prompt.len() { prompt[i] } else { output[i - prompt.len()] };
        let total = prompt.len() + output.len();
        let Some(last) = total.checked_sub(1) else {
            return Vec::new();
        };
        // Occurrences end before the last token (the n-gram ending there is the one matched).
        let mut key = Vec::with_capacity(self.max_n);
        for end in index.indexed..last {
            for n in self.min_n..=self.max_n.min(end + 1) {
                key.clear();
                key.extend((end + 1 - n..=end).map(at));
                if !index.first_end.contains_key(key.as_slice()) {
                    index.first_end.insert(key.as_slice().into(), end);
                }
            }
        }
        index.indexed = index.indexed.max(last);
        let k = self.k.min(max_tokens);
        if k == 0 {
            return Vec::new();
        }
        for n in (self.min_n..=self.max_n.min(last)).rev() {
            key.clear();
            key.extend((total - n..total).map(at));
            if let Some(&end) = index.first_end.get(key.as_slice()) {
                let start = end + 1;
                return (start..total.min(start + k)).map(at).collect();
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposer(k: usize, min_n: usize, max_n: usize) -> NgramProposer {
        NgramProposer { k, min_n, max_n }
    }

    impl NgramProposer {
        /// A proposal from a fresh index over `tokens`, all prompt.
        fn propose_all(&self, tokens: &[TokenId], max_tokens: usize) -> Vec<TokenId> {
            self.propose(&mut NgramIndex::default(), tokens, &[], max_tokens)
        }
    }

    /// The reference: a scan over every earlier position (vLLM's definition).
    fn scan(p: &NgramProposer, tokens: &[TokenId], max_tokens: usize) -> Vec<TokenId> {
        let k = p.k.min(max_tokens);
        let total = tokens.len();
        if k == 0 || total < p.min_n.max(1) {
            return Vec::new();
        }
        let last = total - 1;
        let (mut longest, mut start) = (0, 0);
        for end in 0..last {
            let len = (0..p.max_n.min(end + 1))
                .take_while(|&back| tokens[end - back] == tokens[last - back])
                .count();
            if len > longest {
                longest = len;
                start = end + 1;
            }
        }
        if longest < p.min_n {
            return Vec::new();
        }
        tokens[start..total.min(start + k)].to_vec()
    }

    #[test]
    fn the_index_grown_token_by_token_proposes_what_a_full_scan_does() {
        // A small alphabet repeats n-grams often; the prompt/output split moves around.
        let mut state = 0x2545_f491_u32;
        let tokens: Vec<TokenId> = (0..400)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state % 5
            })
            .collect();
        for p in [proposer(4, 2, 4), proposer(3, 1, 3), proposer(5, 3, 3)] {
            let prompt_len = 37;
            let mut index = NgramIndex::default();
            for total in prompt_len..=tokens.len() {
                let proposed = p.propose(&mut index, &tokens[..prompt_len], &tokens[prompt_len..total], 7);
                assert_eq!(proposed, scan(&p, &tokens[..total], 7), "{p:?} at {total} tokens");
            }
        }
    }

    #[test]
    fn the_longest_match_proposes_what_followed_it() {
        // vLLM's docstring example: [4, 2, 3] cannot be matched, [2, 3] can.
        assert_eq!(proposer(4, 2, 3).propose_all(&[1, 2, 3, 4, 2, 3], usize::MAX), vec![4, 2, 3]);
        // A 3-gram match beats a 2-gram one that occurs earlier.
        let tokens = [7, 8, 1, 5, 6, 7, 8, 2, 4, 6, 7, 8];
        assert_eq!(proposer(2, 2, 3).propose_all(&tokens, usize::MAX), vec![2, 4]);
        // Capped at max_n, the earlier 3-gram wins again.
        assert_eq!(proposer(2, 2, 2).propose_all(&tokens, usize::MAX), vec![1, 5]);
    }

    /// vLLM's `tests/v1/spec_decode/test_ngram.py` (`test_find_longest_matched_ngram_and_propose_tokens`
    /// and `test_ngram_proposer`, max_model_len 1024), case by case with its expected outputs.
    #[test]
    fn vllms_test_ngram_cases_propose_what_vllm_asserts() {
        // (tokens, min_n, max_n, k, expected)
        type Case = (&'static [TokenId], usize, usize, usize, &'static [TokenId]);
        let cases: [Case; 13] = [
            (&[1, 2, 3, 4, 1, 2, 3, 5, 6], 2, 2, 2, &[]),
            (&[1, 2, 3, 4, 1, 2, 3], 2, 2, 3, &[4, 1, 2]),
            (&[1, 2, 3, 4, 1, 2, 3], 2, 2, 2, &[4, 1]),
            (&[1, 2, 3, 4, 1, 2, 3], 1, 1, 3, &[4, 1, 2]),
            (&[1, 2, 3, 4, 1, 2, 3], 1, 1, 2, &[4, 1]),
            (&[1, 3, 6, 2, 3, 4, 1, 2, 3], 2, 2, 3, &[4, 1, 2]),
            // "Return on the first match": 3 occurs at 1 and 4, the earlier wins.
            (&[1, 3, 6, 2, 3, 4, 1, 2, 3], 1, 1, 2, &[6, 2]),
            // No match.
            (&[1, 2, 3, 4, 5], 2, 2, 2, &[]),
            // No match for the 4-gram.
            (&[1, 2, 3, 4, 1, 2, 3], 4, 4, 2, &[]),
            // No match for the 4-gram but one for the 3-gram.
            (&[1, 2, 3, 4, 1, 2, 3], 3, 4, 2, &[4, 1]),
            // Both a 4-gram and a 3-gram match: the 4-gram's (not [5, 1]).
            (&[2, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3, 4], 3, 4, 2, &[1, 2]),
            // A 2-gram and a 3-gram match, no 4-gram: the 3-gram's (not [5, 2]).
            (&[3, 4, 5, 2, 3, 4, 1, 2, 3, 4], 2, 4, 2, &[1, 2]),
            // "Multiple 3-gram matched, but always pick the first one."
            (&[1, 2, 3, 100, 1, 2, 3, 200, 1, 2, 3, 300, 1, 2, 3], 3, 3, 2, &[100, 1]),
        ];
        for (tokens, min_n, max_n, k, expected) in cases {
            let max_model_len = 1024;
            let proposed = proposer(k, min_n, max_n).propose_all(tokens, max_model_len - tokens.len());
            assert_eq!(proposed, expected, "{tokens:?} min_n={min_n} max_n={max_n} k={k}");
        }
    }

    #[test]
    fn among_equal_matches_the_earliest_wins() {
        let tokens = [3, 4, 10, 11, 3, 4, 20, 21, 3, 4];
        assert_eq!(proposer(2, 2, 2).propose_all(&tokens, usize::MAX), vec![10, 11]);
    }

    #[test]
    fn no_match_short_context_or_no_room_propose_nothing() {
        assert!(proposer(3, 2, 3).propose_all(&[1, 2, 3, 4, 5], usize::MAX).is_empty());
        assert!(proposer(3, 2, 3).propose_all(&[1], usize::MAX).is_empty());
        assert!(proposer(3, 1, 3).propose_all(&[1, 2, 1], 0).is_empty());
        // Below min_n the longest match does not count.
        assert!(proposer(3, 3, 4).propose_all(&[1, 2, 9, 1, 2], usize::MAX).is_empty());
    }

    #[test]
    fn proposals_stop_at_k_at_max_tokens_and_at_the_end_of_the_tokens() {
        let tokens = [1, 2, 3, 4, 5, 6, 1, 2];
        assert_eq!(proposer(3, 2, 2).propose_all(&tokens, usize::MAX), vec![3, 4, 5]);
        assert_eq!(proposer(3, 2, 2).propose_all(&tokens, 2), vec![3, 4]);
        // An overlapping run: [5, 5, 5] ends at index 2, only two tokens follow it.
        assert_eq!(proposer(4, 1, 3).propose_all(&[5, 5, 5, 5, 5], usize::MAX), vec![5, 5]);
    }

    #[test]
    fn the_config_gives_the_proposer() {
        let config = SpeculativeConfig::ngram(4, 2, 3);
        assert_eq!(NgramProposer::from_config(&config), Some(proposer(4, 2, 3)));
    }
}

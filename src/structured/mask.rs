//! The set of tokens a constraint allows next.

use crate::ids::TokenId;

/// A set of allowed token ids: bit `id % 32` of word `id / 32` (llguidance's layout). Ids
/// past its end are not allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u32>,
}

impl TokenMask {
    /// The mask with these bit words.
    pub fn from_words(words: Vec<u32>) -> Self {
        Self { words }
    }

    /// Exactly the ids in `ids`.
    pub fn from_ids(ids: impl IntoIterator<Item = TokenId>) -> Self {
        let mut words = Vec::new();
        for id in ids {
            let word = id as usize / 32;
            if word >= words.len() {
                words.resize(word + 1, 0);
            }
            words[word] |= 1 << (id % 32);
        }
        Self { words }
    }

    /// True when `id` is allowed.
    pub fn allows(&self, id: TokenId) -> bool {
        self.words.get(id as usize / 32).is_some_and(|word| word & (1 << (id % 32)) != 0)
    }

    /// The allowed ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = TokenId> + '_ {
        self.words.iter().enumerate().flat_map(|(index, &word)| {
            (0..32).filter(move |bit| word & (1 << bit) != 0).map(move |bit| (index * 32 + bit) as TokenId)
        })
    }
}

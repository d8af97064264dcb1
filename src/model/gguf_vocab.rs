//! What the `tokenizer.json` definitions of GGUF vocabularies share: the token types, the
//! vocabulary map, and the added tokens.

use serde_json::{Value, json};

/// GGUF `tokenizer.ggml.token_type` values.
pub mod token_type {
    /// An ordinary piece.
    pub const NORMAL: i64 = 1;
    /// The unknown token.
    pub const UNKNOWN: i64 = 2;
    /// A control token (BOS, EOS, ...).
    pub const CONTROL: i64 = 3;
    /// A user-defined token, always matched as a whole.
    pub const USER_DEFINED: i64 = 4;
    /// A byte-fallback token `<0xNN>`.
    pub const BYTE: i64 = 6;
}

/// The type of token `id` (normal when the file lists no types).
pub fn type_of(types: &[i64], id: usize) -> i64 {
    types.get(id).copied().unwrap_or(token_type::NORMAL)
}

/// Pieces by id as a `tokenizer.json` vocabulary; a repeated piece keeps its first id.
pub fn vocab_map(pieces: &[&str]) -> serde_json::Map<String, Value> {
    let mut vocab = serde_json::Map::with_capacity(pieces.len());
    for (id, &piece) in pieces.iter().enumerate() {
        vocab.entry(piece.to_owned()).or_insert(json!(id));
    }
    vocab
}

/// The added tokens: those of a type in `special_types` (special: skipped when decoding
/// without special tokens), and user-defined ones (not special); each matched whole, never
/// normalized.
pub fn added_tokens(pieces: &[&str], types: &[i64], special_types: &[i64]) -> Vec<Value> {
    (0..pieces.len())
        .filter_map(|id| {
            let ty = type_of(types, id);
            let special = special_types.contains(&ty);
            (special || ty == token_type::USER_DEFINED).then(|| {
                json!({"id": id, "content": pieces[id], "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": special})
            })
        })
        .collect()
}

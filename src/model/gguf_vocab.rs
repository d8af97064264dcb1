//! What the `tokenizer.json` definitions of GGUF vocabularies share: the token types, the
//! vocabulary map, and the added tokens with the whitespace they strip.

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
/// normalized, taking the whitespace after it along where `rstrip` says so (see
/// [`rstrip_tokens`]).
pub fn added_tokens(pieces: &[&str], types: &[i64], special_types: &[i64], rstrip: &[bool]) -> Vec<Value> {
    (0..pieces.len())
        .filter_map(|id| {
            let ty = type_of(types, id);
            let special = special_types.contains(&ty);
            let rstrip = rstrip.get(id).copied().unwrap_or(false);
            (special || ty == token_type::USER_DEFINED).then(|| {
                json!({"id": id, "content": pieces[id], "single_word": false, "lstrip": false,
                       "rstrip": rstrip, "normalized": false, "special": special})
            })
        })
        .collect()
}

/// Per token, whether it strips the whitespace to its right, as llama.cpp decides for want of
/// a GGUF field (llama-vocab.cpp, "set attributes by model/tokenizer/architecture name"): in a
/// model whose `general.name`, lowercased, contains `phi-3` or `phi3`, every unknown, control
/// and user-defined token and `</s>` do, except `<unk>`, `<s>` and `<|endoftext|>` — what
/// Phi-3's tokenizer.json says of them, so that `<|user|>\nHello` has no newline token.
/// llama.cpp's other name-keyed rules (an lstrip `<mask>` for Jina, Nomic BERT MoE and
/// ModernBERT) are for encoder families pagoda does not run, and it keys none on
/// `normalized`.
pub fn rstrip_tokens(model_name: Option<&str>, pieces: &[&str], types: &[i64]) -> Vec<bool> {
    let name = model_name.unwrap_or_default().to_lowercase();
    if !["phi-3", "phi3"].iter().any(|n| name.contains(n)) {
        return Vec::new();
    }
    let stripping = [token_type::UNKNOWN, token_type::CONTROL, token_type::USER_DEFINED];
    (0..pieces.len())
        .map(|id| match pieces[id] {
            "<unk>" | "<s>" | "<|endoftext|>" => false,
            "</s>" => true,
            _ => stripping.contains(&type_of(types, id)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use token_type::{BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED};

    const PIECES: [&str; 8] =
        ["<unk>", "<s>", "</s>", "<0x0A>", "\u{2581}a", "<|endoftext|>", "<|user|>", "<|u|>"];
    const TYPES: [i64; 8] = [UNKNOWN, CONTROL, CONTROL, BYTE, NORMAL, CONTROL, CONTROL, USER_DEFINED];

    #[test]
    fn phi3_names_strip_after_special_tokens_as_llama_cpp_does() {
        let phi3 = [false, false, true, false, false, false, true, true];
        for name in ["phi3", "Phi-3 Mini 4k Instruct", "my-PHI3-finetune"] {
            assert_eq!(rstrip_tokens(Some(name), &PIECES, &TYPES), phi3, "{name}");
        }
        // llama.cpp matches these two spellings only: other names keep the whitespace
        for name in [Some("Phi 3.5 Mini Instruct"), Some("Llama 3.2 1B"), None] {
            assert!(!rstrip_tokens(name, &PIECES, &TYPES).contains(&true), "{name:?}");
        }
        let added = added_tokens(&PIECES, &TYPES, &[UNKNOWN, CONTROL], &phi3);
        let strips: Vec<(&str, bool)> =
            added.iter().map(|t| (t["content"].as_str().unwrap(), t["rstrip"].as_bool().unwrap())).collect();
        assert_eq!(
            strips,
            [
                ("<unk>", false),
                ("<s>", false),
                ("</s>", true),
                ("<|endoftext|>", false),
                ("<|user|>", true),
                ("<|u|>", true)
            ]
        );
    }
}

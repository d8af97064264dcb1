//! A SentencePiece (`llama`) vocabulary from GGUF metadata as a `tokenizer.json` definition,
//! built the way Hugging Face converts one: BPE over the pieces with merges ordered by the
//! scores of the pieces they make, byte fallback to `<0xNN>` tokens, `▁` for spaces (and a
//! leading one when `add_space_prefix`).

use std::collections::HashMap;

use serde_json::{Value, json};

use super::gguf_vocab::{added_tokens, token_type, type_of, vocab_map};

/// A SentencePiece vocabulary as GGUF stores it.
#[derive(Debug)]
pub struct SentencePieceVocab<'a> {
    /// Pieces by id.
    pub pieces: &'a [&'a str],
    /// Scores by id (higher merges first).
    pub scores: &'a [f64],
    /// Token types by id (empty: all normal).
    pub types: &'a [i64],
    /// The unknown token's id.
    pub unk_id: Option<u32>,
    /// Prepend `▁` to the text, as SentencePiece's `add_dummy_prefix`.
    pub add_space_prefix: bool,
    /// Per token, whether it strips the whitespace after it (empty: none does).
    pub rstrip: &'a [bool],
}

impl SentencePieceVocab<'_> {
    /// The `tokenizer.json` definition of this vocabulary.
    pub fn definition(&self) -> Value {
        let vocab = vocab_map(self.pieces);
        let added =
            added_tokens(self.pieces, self.types, &[token_type::UNKNOWN, token_type::CONTROL], self.rstrip);
        let mut normalizers =
            vec![json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"})];
        let mut decoders = vec![
            json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
            json!({"type": "ByteFallback"}),
            json!({"type": "Fuse"}),
        ];
        if self.add_space_prefix {
            normalizers.insert(0, json!({"type": "Prepend", "prepend": "\u{2581}"}));
            decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
        }
        let unk = self.unk_id.and_then(|id| self.pieces.get(id as usize)).copied();
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": normalizers},
            "pre_tokenizer": null,
            "post_processor": null,
            "decoder": {"type": "Sequence", "decoders": decoders},
            "model": {"type": "BPE", "dropout": null, "unk_token": unk, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                      "vocab": vocab, "merges": self.merges()},
        })
    }

    /// Every split of a normal piece into two pieces of the vocabulary, ordered as Hugging
    /// Face's `generate_merges` orders them: by the score of the piece made (highest first),
    /// then the longer left and right parts first; ties keep vocabulary order, and the
    /// splits of one piece go by the ids of their parts.
    fn merges(&self) -> Vec<[&str; 2]> {
        let mut ids: HashMap<&str, usize> = HashMap::with_capacity(self.pieces.len());
        for (id, &piece) in self.pieces.iter().enumerate() {
            ids.entry(piece).or_insert(id);
        }
        let mut merges: Vec<(f64, [&str; 2])> = Vec::new();
        for (id, &piece) in self.pieces.iter().enumerate() {
            if !matches!(type_of(self.types, id), token_type::NORMAL | token_type::USER_DEFINED) {
                continue;
            }
            let score = self.scores.get(id).copied().unwrap_or(0.0);
            let mut local: Vec<(usize, usize, [&str; 2])> = piece
                .char_indices()
                .skip(1)
                .filter_map(|(at, _)| {
                    let (left, right) = piece.split_at(at);
                    Some((*ids.get(left)?, *ids.get(right)?, [left, right]))
                })
                .collect();
            local.sort_by_key(|&(l, r, _)| (l, r));
            merges.extend(local.into_iter().map(|(_, _, pair)| (score, pair)));
        }
        let key = |(score, [l, r]): &(f64, [&str; 2])| (*score, l.chars().count(), r.chars().count());
        merges.sort_by(|a, b| {
            let (ka, kb) = (key(a), key(b));
            kb.0.total_cmp(&ka.0).then(kb.1.cmp(&ka.1)).then(kb.2.cmp(&ka.2))
        });
        merges.into_iter().map(|(_, pair)| pair).collect()
    }
}

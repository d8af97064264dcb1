//! Text to token ids and back: from an HF `tokenizer.json`, or a `tokenizers::Tokenizer`
//! rebuilt from GGUF `tokenizer.ggml.*` metadata: byte-level BPE (`gpt2`) with the model's
//! pre-tokenizer and control tokens, or a SentencePiece vocabulary (`llama`, see
//! [`super::sentencepiece`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::gguf::{GgufError, GgufFile};
use super::gguf_vocab::{added_tokens, rstrip_tokens, token_type, vocab_map};
use super::sentencepiece::SentencePieceVocab;

/// Why a tokenizer could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// No tokenizer file where one was expected.
    #[error("no tokenizer found: {0} does not exist")]
    NotFound(PathBuf),
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The GGUF file has no `tokenizer.ggml.*` vocabulary.
    #[error("the GGUF file has no tokenizer (metadata key {0:?} is missing)")]
    MissingGgufTokenizer(String),
    /// A GGUF tokenizer model other than byte-level BPE or SentencePiece.
    #[error("unsupported GGUF tokenizer model {0:?} (supported: gpt2 byte-level BPE, llama SentencePiece)")]
    UnsupportedModel(String),
    /// A GGUF pre-tokenizer name pagoda does not know.
    #[error("unsupported GGUF pre-tokenizer {0:?}")]
    UnsupportedPreTokenizer(String),
    /// The tokenizer definition is malformed.
    #[error("invalid tokenizer: {0}")]
    Invalid(String),
    /// Encoding or decoding failed inside the tokenizers library.
    #[error("tokenizer failure: {0}")]
    Failed(String),
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    UnknownId {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// Reading GGUF metadata failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// Llama 3's split.
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// o200k's split (gpt-4o, gpt-oss), as llama.cpp's `gpt-4o` and its tokenizer.json write it.
const GPT4O_REGEX: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's split.
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A tokenizer: encode with or without parsing special tokens, decode, and per-token bytes
/// for incremental detokenization.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    with_special: tokenizers::Tokenizer,
    literal: tokenizers::Tokenizer,
    token_bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    bos_token_id: Option<u32>,
    eos_token_id: Option<u32>,
    add_bos_token: bool,
}

impl Tokenizer {
    /// Load `tokenizer.json` (and `tokenizer_config.json` when present) from an HF model directory.
    pub fn from_hf_dir(dir: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let dir = dir.as_ref();
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Err(TokenizerError::NotFound(path));
        }
        let def = read_json(&path)?;
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.exists() { Some(read_json(&config_path)?) } else { None };
        Self::from_hf_json(def, config.as_ref())
    }

    /// Build from a parsed `tokenizer.json` and optional `tokenizer_config.json`.
    pub fn from_hf_json(def: Value, config: Option<&Value>) -> Result<Self, TokenizerError> {
        let with_special = build(&def)?;
        let token = |key: &str| {
            config.and_then(|c| c.get(key)).and_then(|v| v.as_str().or_else(|| v.get("content")?.as_str()))
        };
        let bos_token_id = token("bos_token").and_then(|t| with_special.token_to_id(t));
        let eos_token_id = token("eos_token").and_then(|t| with_special.token_to_id(t));
        let add_bos_token = match config.and_then(|c| c.get("add_bos_token")).and_then(Value::as_bool) {
            Some(add) => add,
            None => {
                let probe =
                    with_special.encode("", true).map_err(|e| TokenizerError::Failed(e.to_string()))?;
                bos_token_id.is_some() && probe.get_ids().first().copied() == bos_token_id
            }
        };
        Self::assemble(def, with_special, bos_token_id, eos_token_id, add_bos_token)
    }

    /// Build from a GGUF file's `tokenizer.ggml.*` metadata: byte-level BPE (`gpt2`) or a
    /// SentencePiece vocabulary (`llama`), with the whitespace stripping llama.cpp gives
    /// some models' special tokens by their `general.name` (see [`rstrip_tokens`]).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, TokenizerError> {
        let missing = |k: &str| TokenizerError::MissingGgufTokenizer(k.to_owned());
        let model = gguf.get_str("tokenizer.ggml.model")?.ok_or_else(|| missing("tokenizer.ggml.model"))?;
        let tokens =
            gguf.get_str_array("tokenizer.ggml.tokens")?.ok_or_else(|| missing("tokenizer.ggml.tokens"))?;
        let types = gguf.get_int_array("tokenizer.ggml.token_type")?.unwrap_or_default();
        if !types.is_empty() && types.len() != tokens.len() {
            return Err(TokenizerError::Invalid(format!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                types.len(),
                tokens.len()
            )));
        }
        let token_id = |k: &str| -> Result<Option<u32>, TokenizerError> {
            Ok(gguf.get_int(k)?.and_then(|v| u32::try_from(v).ok()).filter(|&v| (v as usize) < tokens.len()))
        };
        let bos_token_id = token_id("tokenizer.ggml.bos_token_id")?;
        let eos_token_id = token_id("tokenizer.ggml.eos_token_id")?;
        let rstrip = rstrip_tokens(gguf.get_str("general.name")?, &tokens, &types);
        let def = match model {
            "gpt2" => {
                let merges = gguf
                    .get_str_array("tokenizer.ggml.merges")?
                    .ok_or_else(|| missing("tokenizer.ggml.merges"))?;
                let pre = gguf.get_str("tokenizer.ggml.pre")?.unwrap_or("default");
                byte_level_definition(&tokens, &types, &rstrip, &merges, pre)?
            }
            "llama" => {
                let scores = gguf
                    .get_float_array("tokenizer.ggml.scores")?
                    .ok_or_else(|| missing("tokenizer.ggml.scores"))?;
                if scores.len() != tokens.len() {
                    return Err(TokenizerError::Invalid(format!(
                        "tokenizer.ggml.scores has {} entries for {} tokens",
                        scores.len(),
                        tokens.len()
                    )));
                }
                let unk_id = token_id("tokenizer.ggml.unknown_token_id")?
                    .or_else(|| types.iter().position(|&t| t == token_type::UNKNOWN).map(|id| id as u32));
                let add_space_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
                SentencePieceVocab {
                    pieces: &tokens,
                    scores: &scores,
                    types: &types,
                    unk_id,
                    add_space_prefix,
                    rstrip: &rstrip,
                }
                .definition()
            }
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };
        let add_bos_token = gguf.get_bool("tokenizer.ggml.add_bos_token")?.unwrap_or(model == "llama");
        let with_special = build(&def)?;
        Self::assemble(def, with_special, bos_token_id, eos_token_id, add_bos_token)
    }

    fn assemble(
        def: Value,
        with_special: tokenizers::Tokenizer,
        bos_token_id: Option<u32>,
        eos_token_id: Option<u32>,
        add_bos_token: bool,
    ) -> Result<Self, TokenizerError> {
        let byte_level = mentions_byte_level(&def);
        let added = with_special.get_added_tokens_decoder();
        let vocab_size = with_special.get_vocab_size(true);
        let mut token_bytes = vec![Vec::new(); vocab_size];
        let mut special = vec![false; vocab_size];
        let byte_of = byte_decoder();
        for (piece, id) in with_special.get_vocab(true) {
            let Some(slot) = token_bytes.get_mut(id as usize) else { continue };
            *slot = match added.get(&id) {
                Some(t) => t.content.as_bytes().to_vec(),
                None if byte_level => piece.chars().flat_map(&byte_of).collect(),
                None => piece_bytes(&piece),
            };
        }
        for (&id, t) in &added {
            if let Some(s) = special.get_mut(id as usize) {
                *s = t.special;
            }
        }
        let literal = literal_tokenizer(def, &with_special, added.values())?;
        Ok(Self { with_special, literal, token_bytes, special, bos_token_id, eos_token_id, add_bos_token })
    }

    /// Token ids of a text prompt as the model expects it: BOS first when the model wants
    /// it, then `text` with control tokens written in it parsed.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut ids: Vec<u32> = self.prompt_bos().into_iter().collect();
        ids.extend(self.encode(text, true)?);
        Ok(ids)
    }

    /// Token ids of `text`. With `parse_special`, control tokens written in the text
    /// (`<|im_start|>`) become their ids; without, they are tokenized as plain text.
    /// Never adds BOS: see [`Self::add_bos_token`].
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>, TokenizerError> {
        let tok = if parse_special { &self.with_special } else { &self.literal };
        let enc = tok.encode(text, false).map_err(|e| TokenizerError::Failed(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`; with `skip_special`, control tokens are left out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        self.check_ids(ids)?;
        self.with_special.decode(ids, skip_special).map_err(|e| TokenizerError::Failed(e.to_string()))
    }

    /// The raw bytes `ids` stand for (special tokens as their text unless `skip_special`);
    /// concatenating them and decoding as UTF-8 is what an incremental detokenizer does.
    pub fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Result<Vec<u8>, TokenizerError> {
        self.check_ids(ids)?;
        let mut out = Vec::new();
        for &id in ids {
            if !(skip_special && self.special[id as usize]) {
                out.extend_from_slice(&self.token_bytes[id as usize]);
            }
        }
        Ok(out)
    }

    fn check_ids(&self, ids: &[u32]) -> Result<(), TokenizerError> {
        match ids.iter().find(|&&id| id as usize >= self.token_bytes.len()) {
            Some(&id) => Err(TokenizerError::UnknownId { id, vocab_size: self.token_bytes.len() }),
            None => Ok(()),
        }
    }

    /// The raw bytes one token stands for, if the id exists.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.token_bytes.get(id as usize).map(Vec::as_slice)
    }

    /// The vocabulary entry of `id` as stored (byte-level pieces use GPT-2's byte alphabet).
    pub fn id_to_piece(&self, id: u32) -> Option<String> {
        self.with_special.id_to_token(id)
    }

    /// The id of a vocabulary entry.
    pub fn piece_to_id(&self, piece: &str) -> Option<u32> {
        self.with_special.token_to_id(piece)
    }

    /// True for control (special) tokens.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// Beginning-of-sequence token, if the model has one.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    /// End-of-sequence token, if the model has one.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos_token_id
    }

    /// True when prompts should start with BOS.
    pub fn add_bos_token(&self) -> bool {
        self.add_bos_token
    }

    /// The BOS a prompt starts with: the model's, when it has one and wants it.
    pub fn prompt_bos(&self) -> Option<u32> {
        self.bos_token_id.filter(|_| self.add_bos_token)
    }

    /// The text of a token (BOS, EOS) for chat templates; empty when absent.
    pub fn token_text(&self, id: Option<u32>) -> String {
        id.and_then(|id| self.token_bytes(id))
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    }
}

/// The `tokenizer.json` definition of a GGUF byte-level BPE vocabulary.
fn byte_level_definition(
    tokens: &[&str],
    types: &[i64],
    rstrip: &[bool],
    merges: &[&str],
    pre: &str,
) -> Result<Value, TokenizerError> {
    let vocab = vocab_map(tokens);
    let added = added_tokens(tokens, types, &[token_type::CONTROL], rstrip);
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": gguf_pre_tokenizer(pre)?,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges},
    }))
}

fn read_json(path: &Path) -> Result<Value, TokenizerError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| TokenizerError::Io { path: path.to_owned(), source })?;
    serde_json::from_str(&text).map_err(|e| TokenizerError::Invalid(format!("{}: {e}", path.display())))
}

/// Builds a `tokenizers` tokenizer from a tokenizer.json definition, after the checks it
/// would otherwise fail with a panic (or worse) on hostile input; a panic left in it
/// becomes an error too.
fn build(def: &Value) -> Result<tokenizers::Tokenizer, TokenizerError> {
    check_bpe_merges(def)?;
    let bytes = serde_json::to_vec(def).map_err(|e| TokenizerError::Invalid(e.to_string()))?;
    std::panic::catch_unwind(|| tokenizers::Tokenizer::from_bytes(bytes))
        .map_err(|_| {
            TokenizerError::Invalid("the tokenizer definition made the tokenizers crate panic".into())
        })?
        .map_err(|e| TokenizerError::Invalid(e.to_string()))
}

/// The tokenizer that reads the text of special tokens as plain text: `with_special` told not
/// to split them out. Where a special token's match could hide a non-special added token
/// (one inside it, or starting in it), that would differ from a tokenizer without the special
/// tokens, so it is built as one from `def` instead.
fn literal_tokenizer<'a>(
    mut def: Value,
    with_special: &tokenizers::Tokenizer,
    added: impl Iterator<Item = &'a tokenizers::AddedToken>,
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let (special, plain): (Vec<_>, Vec<_>) = added.partition(|t| t.special);
    let hides =
        |s: &str, p: &str| s.contains(p) || s.char_indices().skip(1).any(|(i, _)| p.starts_with(&s[i..]));
    if plain.iter().any(|p| special.iter().any(|s| hides(&s.content, &p.content))) {
        if let Some(list) = def.get_mut("added_tokens").and_then(Value::as_array_mut) {
            list.retain(|t| !t.get("special").and_then(Value::as_bool).unwrap_or(false));
        }
        return build(&def);
    }
    let mut literal = with_special.clone();
    literal.set_encode_special_tokens(true);
    Ok(literal)
}

/// With a `continuing_subword_prefix`, the tokenizers crate cuts that prefix off the second
/// token of every BPE merge without checking it is there (an overflow, or a cut inside a
/// UTF-8 character): refuse such merges first.
fn check_bpe_merges(def: &Value) -> Result<(), TokenizerError> {
    let model = &def["model"];
    let Some(prefix) = model["continuing_subword_prefix"].as_str().filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    for merge in model["merges"].as_array().into_iter().flatten() {
        let second = match merge {
            Value::String(pair) => pair.split_once(' ').map(|(_, second)| second),
            Value::Array(pair) => pair.get(1).and_then(Value::as_str),
            _ => None,
        };
        if let Some(second) = second.filter(|second| !second.starts_with(prefix)) {
            return Err(TokenizerError::Invalid(format!(
                "BPE merge {merge}: {second:?} does not start with the continuing_subword_prefix {prefix:?}"
            )));
        }
    }
    Ok(())
}

/// The pre-tokenizer llama.cpp uses for a `tokenizer.ggml.pre` name, in tokenizer.json form.
fn gguf_pre_tokenizer(pre: &str) -> Result<Value, TokenizerError> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |regex: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]})
    };
    Ok(match pre {
        "default" | "gpt-2" | "gpt2" | "phi-2" | "jina-es" | "jina-de" | "roberta-bpe" => byte_level(true),
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => json!({
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)],
        }),
        "llama3" | "llama-bpe" | "llama-v3" | "falcon3" | "pixtral" | "smaug-bpe" => split(LLAMA3_REGEX),
        "qwen2" | "deepseek-r1-qwen" | "megrez" => split(QWEN2_REGEX),
        "gpt-4o" => split(GPT4O_REGEX),
        other => return Err(TokenizerError::UnsupportedPreTokenizer(other.to_owned())),
    })
}

/// True when the definition uses GPT-2's byte alphabet (a `ByteLevel` decoder).
fn mentions_byte_level(def: &Value) -> bool {
    fn walk(v: &Value) -> bool {
        match v {
            Value::Object(m) => {
                m.get("type").and_then(Value::as_str) == Some("ByteLevel") || m.values().any(walk)
            }
            Value::Array(a) => a.iter().any(walk),
            _ => false,
        }
    }
    def.get("decoder").is_some_and(walk)
}

/// GPT-2's byte-to-char alphabet of byte-level BPE vocabularies: printable Latin-1 bytes
/// stand for themselves, the rest for U+0100 onwards in byte order.
pub fn gpt2_byte_chars() -> [char; 256] {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
    let mut chars = ['\0'; 256];
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        chars[b as usize] = if printable(b) {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap_or(char::REPLACEMENT_CHARACTER)
        };
    }
    chars
}

/// The inverse of [`gpt2_byte_chars`]; a char outside the alphabet stands for its UTF-8.
fn byte_decoder() -> impl Fn(char) -> Vec<u8> {
    let map: HashMap<char, u8> = gpt2_byte_chars().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
    move |c: char| match map.get(&c) {
        Some(&b) => vec![b],
        None => c.to_string().into_bytes(),
    }
}

/// Bytes of a SentencePiece-style piece: `<0xNN>` byte tokens and `▁` for space.
fn piece_bytes(piece: &str) -> Vec<u8> {
    if let Some(hex) = piece.strip_prefix("<0x").and_then(|p| p.strip_suffix('>'))
        && hex.len() == 2
        && let Ok(b) = u8::from_str_radix(hex, 16)
    {
        return vec![b];
    }
    piece.replace('\u{2581}', " ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_round_trips_every_byte() {
        let decode = byte_decoder();
        assert_eq!(decode('A'), vec![b'A']);
        assert_eq!(decode('\u{120}'), vec![b' ']);
        assert_eq!(decode('\u{10a}'), vec![b'\n']);
        assert_eq!(decode('\u{100}'), vec![0]);
    }

    #[test]
    fn sentencepiece_pieces_become_bytes() {
        assert_eq!(piece_bytes("<0x0A>"), vec![b'\n']);
        assert_eq!(piece_bytes("\u{2581}the"), b" the".to_vec());
    }

    /// A word-level tokenizer with the special token `<|x|>` and the non-special `plain`, both
    /// in its vocabulary as in real tokenizers.
    fn word_level(plain: &str) -> Value {
        json!({
            "version": "1.0",
            "added_tokens": [
                {"id": 4, "content": "<|x|>", "single_word": false, "lstrip": false, "rstrip": false,
                 "normalized": false, "special": true},
                {"id": 5, "content": plain, "single_word": false, "lstrip": false, "rstrip": false,
                 "normalized": false, "special": false},
            ],
            "normalizer": null,
            "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": null,
            "decoder": null,
            "model": {
                "type": "WordLevel",
                "vocab": {"[UNK]": 0, "a": 1, "b": 2, "x|>": 3, "<|x|>": 4, plain: 5},
                "unk_token": "[UNK]",
            },
        })
    }

    /// Ids of `text` from the definition with its special tokens taken out.
    fn without_special(def: &Value, text: &str) -> Vec<u32> {
        let mut def = def.clone();
        def["added_tokens"].as_array_mut().unwrap().retain(|t| t["special"] == false);
        build(&def).unwrap().encode(text, false).unwrap().get_ids().to_vec()
    }

    #[test]
    fn special_tokens_read_as_text_are_what_a_tokenizer_without_them_reads() {
        let text = "a <|x|> <|y b";
        for plain in ["<|y", "<|", "x|> <"] {
            let def = word_level(plain);
            let tokenizer = Tokenizer::from_hf_json(def.clone(), None).unwrap();
            let literal = tokenizer.encode(text, false).unwrap();
            assert_eq!(literal, without_special(&def, text), "{plain}");
            assert!(literal.contains(&5), "{plain}: {literal:?}");
            assert!(tokenizer.encode(text, true).unwrap().contains(&4), "{plain}");
        }
    }

    #[test]
    fn unknown_pre_tokenizer_is_named() {
        assert!(
            matches!(gguf_pre_tokenizer("tekken"), Err(TokenizerError::UnsupportedPreTokenizer(p)) if p == "tekken")
        );
    }
}

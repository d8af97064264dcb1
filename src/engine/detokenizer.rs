//! Incremental detokenization that never splits a UTF-8 character.

use crate::ids::TokenId;
use crate::model::Tokenizer;
use crate::model::tokenizer::TokenizerError;

/// Turns a request's output tokens into text one token at a time.
///
/// Each token's raw bytes are appended to a pending buffer; only complete UTF-8 characters
/// leave it. A byte sequence that can never become valid UTF-8 becomes U+FFFD, exactly as
/// a lossy decode of the whole output would write it.
#[derive(Debug, Clone, Default)]
pub struct IncrementalDetokenizer {
    pending: Vec<u8>,
    skip_special_tokens: bool,
}

impl IncrementalDetokenizer {
    /// A detokenizer that leaves special tokens out when `skip_special_tokens`.
    pub fn new(skip_special_tokens: bool) -> Self {
        Self { pending: Vec::new(), skip_special_tokens }
    }

    /// Appends `token` and returns the text it completed (often empty mid-character).
    pub fn push(&mut self, tokenizer: &Tokenizer, token: TokenId) -> Result<String, TokenizerError> {
        let bytes = tokenizer.decode_bytes(&[token], self.skip_special_tokens)?;
        self.pending.extend_from_slice(&bytes);
        Ok(self.take_complete())
    }

    /// The bytes still pending at the end of the output, decoded lossily.
    pub fn flush(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }

    /// Removes and returns the longest prefix of `pending` that is complete text.
    fn take_complete(&mut self) -> String {
        let mut text = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(valid) => {
                    text.push_str(valid);
                    start = self.pending.len();
                    break;
                }
                Err(error) => {
                    let valid_end = start + error.valid_up_to();
                    // The prefix is valid UTF-8 by the error's own report.
                    text.push_str(&String::from_utf8_lossy(&self.pending[start..valid_end]));
                    match error.error_len() {
                        Some(invalid) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            start = valid_end + invalid;
                        }
                        None => {
                            start = valid_end;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testing::TinyLlama;

    fn tiny_tokenizer() -> Tokenizer {
        let dir = tempfile::tempdir().unwrap();
        TinyLlama::new(0).write_hf_dir(dir.path()).unwrap();
        Tokenizer::from_hf_dir(dir.path()).unwrap()
    }

    /// The id of the tiny vocabulary's single-byte token for `byte`.
    fn byte_token(tokenizer: &Tokenizer, byte: u8) -> TokenId {
        (0..tokenizer.vocab_size() as TokenId).find(|&id| tokenizer.token_bytes(id) == Some(&[byte])).unwrap()
    }

    #[test]
    fn multi_byte_characters_wait_until_complete() {
        let tokenizer = tiny_tokenizer();
        let mut detok = IncrementalDetokenizer::new(true);
        let text = "aé€😀b";
        let pieces: Vec<String> = text
            .as_bytes()
            .iter()
            .map(|&byte| detok.push(&tokenizer, byte_token(&tokenizer, byte)).unwrap())
            .collect();
        // a | é (2 bytes) | € (3 bytes) | 😀 (4 bytes) | b
        let expected = ["a", "", "é", "", "", "€", "", "", "", "😀", "b"];
        assert_eq!(pieces, expected);
        assert_eq!(detok.flush(), "");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters_and_a_cut_tail_flushes() {
        let tokenizer = tiny_tokenizer();
        let mut detok = IncrementalDetokenizer::new(true);
        let push = |detok: &mut IncrementalDetokenizer, byte| {
            detok.push(&tokenizer, byte_token(&tokenizer, byte)).unwrap()
        };
        assert_eq!(push(&mut detok, 0xff), "\u{fffd}");
        assert_eq!(push(&mut detok, b'x'), "x");
        assert_eq!(push(&mut detok, 0xe2), "");
        assert_eq!(push(&mut detok, 0x82), "");
        assert_eq!(detok.flush(), "\u{fffd}");
    }

    #[test]
    fn special_tokens_are_skipped_or_kept() {
        let tokenizer = tiny_tokenizer();
        let eos = tokenizer.eos_token_id().unwrap();
        assert_eq!(IncrementalDetokenizer::new(true).push(&tokenizer, eos).unwrap(), "");
        assert_eq!(IncrementalDetokenizer::new(false).push(&tokenizer, eos).unwrap(), "<|im_end|>");
    }

    #[test]
    fn pieces_concatenate_to_the_full_decode() {
        let tokenizer = tiny_tokenizer();
        let ids = tokenizer.encode("the wise cat is in the tower, 42 times ünïcödé", false).unwrap();
        let mut detok = IncrementalDetokenizer::new(true);
        let joined: String = ids.iter().map(|&id| detok.push(&tokenizer, id).unwrap()).collect();
        assert_eq!(joined, tokenizer.decode(&ids, true).unwrap());
    }
}

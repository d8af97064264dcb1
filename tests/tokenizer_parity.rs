//! The SmolLM2-135M-Instruct GGUF against llama.cpp's reference data: tokenizer ids,
//! decode round trips, the chat template and the model config.

use pagoda::model::gguf::GgufFile;
use pagoda::model::{ChatMessage, ModelConfig, ModelFiles, RopeVariant, Tokenizer, default_model_path};
use serde_json::Value;

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/smollm2-135m-instruct-q4_1.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("fixture JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("id list").iter().map(|i| i.as_u64().expect("id") as u32).collect()
}

fn smollm2() -> GgufFile {
    GgufFile::open(default_model_path().expect("default model")).expect("SmolLM2 GGUF")
}

#[test]
fn every_fixture_string_tokenizes_to_llama_cpp_ids_and_decodes_back() {
    let tokenizer = Tokenizer::from_gguf(&smollm2()).expect("tokenizer");
    let fixture = fixture();
    let cases = fixture["tokenize"].as_array().expect("tokenize list");
    assert_eq!(cases.len(), 46);
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let text = case["text"].as_str().unwrap();
        let parse_special = case["parse_special"].as_bool().unwrap();
        let expected = ids(&case["ids"]);
        let got = tokenizer.encode(text, parse_special).expect("encode");
        if got != expected {
            failures.push(format!("{name}: got {got:?}, expected {expected:?}"));
            continue;
        }
        let decoded = tokenizer.decode(&got, false).expect("decode");
        if decoded != case["detokenized"].as_str().unwrap() {
            failures.push(format!("{name}: decoded {decoded:?}"));
        }
        let bytes = tokenizer.decode_bytes(&got, false).expect("decode_bytes");
        if bytes != text.as_bytes() {
            failures.push(format!("{name}: token bytes {:?}", String::from_utf8_lossy(&bytes)));
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn special_tokens_are_skipped_on_request() {
    let tokenizer = Tokenizer::from_gguf(&smollm2()).expect("tokenizer");
    let ids = tokenizer.encode("<|im_start|>user\nHi there<|im_end|>\n", true).unwrap();
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "user\nHi there\n");
    assert!(tokenizer.is_special(1) && tokenizer.is_special(2) && !tokenizer.is_special(4093));
    assert_eq!(
        (tokenizer.bos_token_id(), tokenizer.eos_token_id(), tokenizer.add_bos_token()),
        (Some(1), Some(2), false)
    );
}

#[test]
fn chat_prompts_render_and_tokenize_like_the_fixture() {
    let model = ModelFiles::open(default_model_path().expect("default model")).expect("open SmolLM2");
    let fixture = fixture();
    let template = model.chat_template.as_ref().expect("SmolLM2 ships a chat template");
    let stored = smollm2().get_str("tokenizer.chat_template").unwrap().map(str::to_owned);
    assert_eq!(stored.as_deref(), fixture["model"]["chat_template"].as_str());
    let mut checked = 0;
    for entry in fixture["greedy"].as_array().unwrap() {
        let prompt = entry["prompt_text"].as_str().unwrap();
        let is_chat = entry["format"] == "chat";
        if is_chat {
            let messages = [ChatMessage::new("user", entry["user_text"].as_str().unwrap())];
            assert_eq!(template.render(&messages, true).unwrap(), prompt);
            checked += 1;
        }
        assert_eq!(
            model.tokenizer.encode(prompt, is_chat).unwrap(),
            ids(&entry["prompt_ids"]),
            "{}",
            entry["id"]
        );
    }
    assert_eq!(checked, 4);
}

#[test]
fn smollm2_config_has_the_known_values() {
    let gguf = smollm2();
    let c = ModelConfig::from_gguf(&gguf).expect("config");
    assert_eq!(c.architecture, "llama");
    assert_eq!(
        (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.vocab_size),
        (30, 576, 9, 3, 49152)
    );
    assert_eq!((c.head_dim, c.intermediate_size, c.rope_theta), (64, 1536, 100000.0));
    assert!(c.tie_word_embeddings);
    assert_eq!(c.rope_variant, RopeVariant::Interleaved);
    assert_eq!((c.bos_token_id, c.eos_token_ids.as_slice()), (Some(1), &[2][..]));
    assert_eq!(gguf.version(), 3);
}

#[test]
fn smollm2_weights_are_quantized_and_shape_checked() {
    let model = ModelFiles::open(default_model_path().expect("default model")).expect("open SmolLM2");
    let w = model.llama_weights().expect("weights");
    assert_eq!(w.layers.len(), 30);
    assert_eq!(*w.embed_tokens.shape, [49152, 576]);
    assert!(w.layers[0].q_proj.dtype.is_quantized());
    assert_eq!(w.lm_head.data.as_ptr(), w.embed_tokens.data.as_ptr());
}

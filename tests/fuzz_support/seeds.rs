//! Seed inputs, all from real files: the tiny models the tests write (GGUF in each
//! weight type, the HF directory's files), the default model's metadata and chat template
//! when it is on disk, real chat templates, and OpenAI request bodies.

use std::path::PathBuf;

use pagoda::dtype::DType;
use pagoda::model::gguf::{GgufFile, GgufWriter, MetadataValue};
use pagoda::model::testing::{TINY_CHAT_TEMPLATE, TinyDims, TinyLlama};

/// Sizes that keep the tiny model's files small (tens of KB), so each execution is cheap.
pub fn small_dims() -> TinyDims {
    TinyDims {
        hidden_size: 32,
        intermediate_size: 32,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        ..TinyDims::default()
    }
}

/// The default model's GGUF when `PAGODA_MODEL_GGUF` names one.
fn real_gguf() -> Option<GgufFile> {
    let path = PathBuf::from(std::env::var_os("PAGODA_MODEL_GGUF")?);
    GgufFile::open(path).ok()
}

/// The tiny model as GGUF in F32, F16, Q8_0, Q4_0 and Q4_1, and — when the default model
/// is on disk — its full metadata (every value type it uses, the real tokenizer and chat
/// template) with the vocabulary cut to 512 tokens and no tensors.
pub fn gguf_files() -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut seeds = Vec::new();
    for (index, dtype) in
        [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1].into_iter().enumerate()
    {
        let path = dir.path().join(format!("tiny{index}.gguf"));
        TinyLlama::with_dims(index as u64, small_dims()).write_gguf(&path, dtype).expect("the tiny GGUF");
        seeds.push(std::fs::read(&path).expect("the tiny GGUF"));
    }
    if let Some(real) = real_gguf() {
        let mut writer = GgufWriter::new();
        for key in real.metadata_keys() {
            let value = match real.get(key).cloned() {
                Some(MetadataValue::Array { element_type, mut items }) => {
                    items.truncate(512);
                    MetadataValue::Array { element_type, items }
                }
                Some(value) => value,
                None => continue,
            };
            writer.metadata(key, value);
        }
        seeds.push(writer.to_bytes());
    }
    seeds
}

/// The files of the tiny model's HF directory, by name.
pub fn hf_files() -> Vec<(String, Vec<u8>)> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    TinyLlama::with_dims(0, small_dims()).write_hf_dir(dir.path()).expect("the tiny HF directory");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.path())
        .expect("the tiny HF directory")
        .map(|entry| {
            let entry = entry.expect("a directory entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(entry.path()).expect("a tiny model file"))
        })
        .collect();
    files.sort();
    files
}

/// Chat templates in the styles models ship: the tiny one, ChatML with a system default,
/// Llama 3, Gemma, Mistral (with `raise_exception`), and the default model's own.
pub fn chat_templates() -> Vec<String> {
    let mut templates = vec![
        TINY_CHAT_TEMPLATE.to_owned(),
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}".to_owned(),
        "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}".to_owned(),
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}".to_owned(),
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}".to_owned(),
    ];
    if let Some(template) =
        real_gguf().and_then(|real| real.get_str("tokenizer.chat_template").ok().flatten().map(str::to_owned))
    {
        templates.push(template);
    }
    templates
}

/// OpenAI request bodies for `/v1/completions` and `/v1/chat/completions`.
pub fn request_bodies() -> Vec<Vec<u8>> {
    [
        r#"{"model": "tiny", "prompt": "Say this is a test", "max_tokens": 7, "temperature": 0}"#,
        r#"{"prompt": ["a", "b"], "n": 2, "seed": 3, "stop": ["\n", "."], "logprobs": 2}"#,
        r#"{"prompt": [1, 2, 3], "stream": true, "stream_options": {"include_usage": true}, "top_k": 5, "min_p": 0.1}"#,
        r#"{"prompt": [[1, 2], [3]], "best_of": 1, "echo": false, "suffix": "", "logit_bias": {}}"#,
        r#"{"prompt": "x", "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "min_tokens": 2, "stop_token_ids": [2], "ignore_eos": true, "include_stop_str_in_output": true, "skip_special_tokens": false}"#,
        r#"{"model": "tiny", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}], "max_tokens": 16}"#,
        r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}], "stream": true, "n": 3, "seed": 1}"#,
        r#"{"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 5, "stop": "END"}"#,
        r#"{"messages": [{"role": "user", "content": "Hi"}], "logit_bias": {"5": -100, "7": 2.5, "11": 100}}"#,
    ]
    .iter()
    .map(|body| body.as_bytes().to_vec())
    .collect()
}

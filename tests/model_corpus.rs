//! A corpus of malformed model files — GGUF headers, metadata of every type, tensor infos,
//! offsets and alignment; the GGUF tokenizer and chat template; config.json,
//! tokenizer.json, tokenizer_config.json and safetensors — each opened through
//! `ModelFiles::open` and answered with exactly the typed error expected, never a panic.

use std::path::{Path, PathBuf};

use pagoda::dtype::DType;
use pagoda::model::gguf::{GgufFile, GgufWriter, MetadataValue};
use pagoda::model::testing::TinyLlama;
use pagoda::model::{ModelError, ModelFiles};
use serde_json::{Value, json};

/// The variant path of an error, e.g. `Gguf::TensorPastEnd` for
/// `ModelError::Gguf(GgufError::TensorPastEnd { .. })`.
fn kind(error: &ModelError) -> String {
    let debug = format!("{error:?}");
    let mut path = Vec::new();
    for part in debug.split('(') {
        let ident: String = part.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !ident.starts_with(|c: char| c.is_ascii_uppercase()) {
            break;
        }
        let ends_here = part.len() > ident.len();
        path.push(ident);
        if ends_here {
            break;
        }
    }
    path.join("::")
}

// ---- raw GGUF bytes -------------------------------------------------------------------

fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// A GGUF header: magic, version, tensor count, metadata count.
fn header(version: u32, tensors: u64, kvs: u64) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&tensors.to_le_bytes());
    out.extend_from_slice(&kvs.to_le_bytes());
    out
}

/// A v3 file with one metadata pair: `key`, value type `type_id`, raw value bytes.
fn one_kv(type_id: u32, value: &[u8]) -> Vec<u8> {
    let mut out = header(3, 0, 1);
    string(&mut out, b"general.test");
    out.extend_from_slice(&type_id.to_le_bytes());
    out.extend_from_slice(value);
    out
}

/// A v3 file with no metadata and one tensor info; `data` follows, aligned to 32.
fn one_tensor(name: &[u8], dims: &[u64], type_id: u32, offset: u64, data: usize) -> Vec<u8> {
    let mut out = header(3, 1, 0);
    string(&mut out, name);
    out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        out.extend_from_slice(&d.to_le_bytes());
    }
    out.extend_from_slice(&type_id.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.resize(out.len().next_multiple_of(32) + data, 0);
    out
}

fn le(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// Array value bytes: element type, count, then `items`.
fn array(element_type: u32, count: u64, items: &[u8]) -> Vec<u8> {
    let mut out = element_type.to_le_bytes().to_vec();
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(items);
    out
}

// ---- the tiny model, rebuilt with one change --------------------------------------------

/// The tiny model's GGUF rebuilt: `meta` maps each (key, value) to its replacement (None
/// drops it) and may append pairs; `tensor` does the same for (name, dtype, shape, data).
fn tiny_gguf(
    dir: &Path,
    meta: impl Fn(&str, MetadataValue) -> Option<MetadataValue>,
    extra: &[(&str, MetadataValue)],
    tensor: impl Fn(&str, DType, Vec<usize>, Vec<u8>) -> Option<(DType, Vec<usize>, Vec<u8>)>,
) -> Vec<u8> {
    let path = dir.join("base.gguf");
    TinyLlama::new(0).write_gguf(&path, DType::F32).unwrap();
    let gguf = GgufFile::open(&path).unwrap();
    let mut w = GgufWriter::new();
    for key in gguf.metadata_keys() {
        if let Some(value) = meta(key, gguf.get(key).unwrap().clone()) {
            w.metadata(key, value);
        }
    }
    for (key, value) in extra {
        w.metadata(key, value.clone());
    }
    for info in gguf.tensor_infos() {
        let data = gguf.tensor(&info.name).unwrap().data.to_vec();
        if let Some((dtype, shape, data)) = tensor(&info.name, info.dtype, info.shape.clone(), data) {
            w.tensor(&info.name, dtype, &shape, data).unwrap();
        }
    }
    w.to_bytes()
}

fn keep_tensor(
    _: &str,
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
) -> Option<(DType, Vec<usize>, Vec<u8>)> {
    Some((dtype, shape, data))
}

/// The tiny GGUF with metadata `key` replaced by `value` (or dropped).
fn with_meta(dir: &Path, key: &'static str, value: Option<MetadataValue>) -> Vec<u8> {
    tiny_gguf(dir, move |k, v| if k == key { value.clone() } else { Some(v) }, &[], keep_tensor)
}

fn gguf_cases(dir: &Path) -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let valid = tiny_gguf(dir, |_, v| Some(v), &[], keep_tensor);
    let s = |text: &str| MetadataValue::String(text.into());
    let mut nested: Vec<u8> = (0..6).flat_map(|_| array(9, 1, &[])).collect();
    nested.extend_from_slice(&array(0, 1, &[7]));
    vec![
        ("empty file", vec![], "Gguf::Truncated"),
        ("three bytes", b"GGU".to_vec(), "Gguf::Truncated"),
        ("bad magic", b"GGML\x03\0\0\0\0\0\0\0\0\0\0\0".to_vec(), "Gguf::BadMagic"),
        ("zeroes", vec![0; 64], "Gguf::BadMagic"),
        ("version 1", header(1, 0, 0), "Gguf::UnsupportedVersion"),
        ("version 4", header(4, 0, 0), "Gguf::UnsupportedVersion"),
        ("version u32::MAX", header(u32::MAX, 0, 0), "Gguf::UnsupportedVersion"),
        ("cut after the version", header(3, 0, 0)[..10].to_vec(), "Gguf::Truncated"),
        ("2^60 tensors", header(3, 1 << 60, 0), "Gguf::TooLarge"),
        ("2^40 metadata pairs", header(3, 0, 1 << 40), "Gguf::TooLarge"),
        ("five pairs claimed, none present", header(3, 0, 5), "Gguf::Truncated"),
        ("key of 2^60 bytes", [header(3, 0, 1), le(1 << 60)].concat(), "Gguf::TooLarge"),
        ("key past the end", [header(3, 0, 1), le(1000), b"abc".to_vec()].concat(), "Gguf::Truncated"),
        (
            "key not UTF-8",
            [header(3, 0, 1), le(2), vec![0xff, 0xfe], 4u32.to_le_bytes().to_vec(), le(0)].concat(),
            "Gguf::InvalidUtf8",
        ),
        ("value type 13", one_kv(13, &[0; 8]), "Gguf::UnknownValueType"),
        ("value type u32::MAX", one_kv(u32::MAX, &[0; 8]), "Gguf::UnknownValueType"),
        ("u32 value cut", one_kv(4, &[1, 2]), "Gguf::Truncated"),
        ("u64 value cut", one_kv(10, &[1, 2, 3]), "Gguf::Truncated"),
        ("f64 value cut", one_kv(12, &[]), "Gguf::Truncated"),
        ("bool value missing", one_kv(7, &[]), "Gguf::Truncated"),
        ("string of 100 MB claimed", one_kv(8, &le(100_000_000)), "Gguf::TooLarge"),
        ("string past the end", one_kv(8, &[le(100), b"short".to_vec()].concat()), "Gguf::Truncated"),
        ("string not UTF-8", one_kv(8, &[le(3), vec![0xc3, 0x28, 0x41]].concat()), "Gguf::InvalidUtf8"),
        ("array of element type 13", one_kv(9, &array(13, 1, &[0; 8])), "Gguf::UnknownValueType"),
        ("array of 10^9 strings", one_kv(9, &array(8, 1_000_000_000, &[])), "Gguf::TooLarge"),
        ("array of 10^7 bytes, 3 present", one_kv(9, &array(0, 10_000_000, &[1, 2, 3])), "Gguf::Truncated"),
        ("array of 2^63 u64", one_kv(9, &array(10, 1 << 63, &[])), "Gguf::TooLarge"),
        (
            "array of strings cut",
            one_kv(9, &array(8, 2, &[le(1), b"a".to_vec(), le(9)].concat())),
            "Gguf::Truncated",
        ),
        ("arrays nested six deep", one_kv(9, &nested), "Gguf::NestingTooDeep"),
        ("alignment 0", tiny_with_alignment(dir, MetadataValue::U32(0)), "Gguf::BadAlignment"),
        ("alignment 3", tiny_with_alignment(dir, MetadataValue::U32(3)), "Gguf::BadAlignment"),
        ("alignment 2^21", tiny_with_alignment(dir, MetadataValue::U64(1 << 21)), "Gguf::BadAlignment"),
        ("alignment -32", tiny_with_alignment(dir, MetadataValue::I32(-32)), "Gguf::BadAlignment"),
        ("alignment a string", tiny_with_alignment(dir, s("32")), "Gguf::WrongType"),
        ("tensor with 9 dims", one_tensor(b"t", &[1; 9], 0, 0, 4), "Gguf::BadTensorDims"),
        ("tensor type 4 (retired)", one_tensor(b"t", &[8], 4, 0, 64), "Gguf::UnknownTensorType"),
        ("tensor type 99", one_tensor(b"t", &[8], 99, 0, 64), "Gguf::UnknownTensorType"),
        ("tensor type IQ2_XXS", one_tensor(b"t", &[256], 16, 0, 256), "Gguf::UnsupportedTensorType"),
        ("tensor type TQ1_0", one_tensor(b"t", &[256], 34, 0, 256), "Gguf::UnsupportedTensorType"),
        ("tensor of 2^60 elements", one_tensor(b"t", &[1 << 30, 1 << 30], 0, 0, 64), "Gguf::TensorPastEnd"),
        ("tensor of 2^62 f32, 2^64 bytes", one_tensor(b"t", &[1 << 62], 0, 0, 64), "Gguf::BadTensorDims"),
        ("tensor of 2^80 elements", one_tensor(b"t", &[1 << 40, 1 << 40], 0, 0, 64), "Gguf::BadTensorDims"),
        ("Q8_0 row of 31", one_tensor(b"t", &[31, 2], 8, 0, 256), "Gguf::BadTensorDims"),
        ("offset not aligned", one_tensor(b"t", &[4], 0, 1, 64), "Gguf::MisalignedTensor"),
        ("offset past the end", one_tensor(b"t", &[4], 0, 1 << 40, 64), "Gguf::TensorPastEnd"),
        ("offset near u64::MAX", one_tensor(b"t", &[4], 0, u64::MAX - 31, 64), "Gguf::TensorPastEnd"),
        ("tensor data cut by one byte", valid[..valid.len() - 1].to_vec(), "Gguf::TensorPastEnd"),
        ("duplicate tensor", duplicate_tensor(), "Gguf::DuplicateTensor"),
        ("tensor info cut in its dims", one_tensor(b"t", &[4, 4], 0, 0, 0)[..40].to_vec(), "Gguf::Truncated"),
        ("tensor name of 2^62 bytes", [header(3, 1, 0), le(1 << 62)].concat(), "Gguf::TooLarge"),
        ("no architecture", with_meta(dir, "general.architecture", None), "Config::MissingField"),
        (
            "architecture mamba",
            with_meta(dir, "general.architecture", Some(s("mamba"))),
            "Config::UnsupportedArchitecture",
        ),
        (
            "architecture an integer",
            with_meta(dir, "general.architecture", Some(MetadataValue::U32(1))),
            "Config::Gguf::WrongType",
        ),
        ("no block_count", with_meta(dir, "llama.block_count", None), "Config::MissingField"),
        (
            "zero heads",
            with_meta(dir, "llama.attention.head_count", Some(MetadataValue::U32(0))),
            "Config::InvalidField",
        ),
        (
            "zero kv heads",
            with_meta(dir, "llama.attention.head_count_kv", Some(MetadataValue::U32(0))),
            "Config::InvalidField",
        ),
        (
            "negative hidden size",
            with_meta(dir, "llama.embedding_length", Some(MetadataValue::I64(-64))),
            "Config::InvalidField",
        ),
        (
            "rms eps a string",
            with_meta(dir, "llama.attention.layer_norm_rms_epsilon", Some(s("tiny"))),
            "Config::Gguf::WrongType",
        ),
        (
            "hidden size 2^40",
            with_meta(dir, "llama.embedding_length", Some(MetadataValue::U64(1 << 40))),
            "Weights::ShapeMismatch",
        ),
        (
            "tokenizer model t5",
            with_meta(dir, "tokenizer.ggml.model", Some(s("t5"))),
            "Tokenizer::UnsupportedModel",
        ),
        (
            "SentencePiece vocabulary without scores",
            with_meta(dir, "tokenizer.ggml.model", Some(s("llama"))),
            "Tokenizer::MissingGgufTokenizer",
        ),
        (
            "no tokenizer model",
            with_meta(dir, "tokenizer.ggml.model", None),
            "Tokenizer::MissingGgufTokenizer",
        ),
        ("no tokens", with_meta(dir, "tokenizer.ggml.tokens", None), "Tokenizer::MissingGgufTokenizer"),
        ("no merges", with_meta(dir, "tokenizer.ggml.merges", None), "Tokenizer::MissingGgufTokenizer"),
        (
            "tokens are integers",
            with_meta(dir, "tokenizer.ggml.tokens", Some(MetadataValue::i32s([1, 2]))),
            "Tokenizer::Gguf::WrongType",
        ),
        (
            "token types too short",
            with_meta(dir, "tokenizer.ggml.token_type", Some(MetadataValue::i32s([1]))),
            "Tokenizer::Invalid",
        ),
        (
            "unknown pre-tokenizer",
            with_meta(dir, "tokenizer.ggml.pre", Some(s("klingon"))),
            "Tokenizer::UnsupportedPreTokenizer",
        ),
        (
            "chat template syntax error",
            with_meta(dir, "tokenizer.chat_template", Some(s("{% for %}"))),
            "Chat::Syntax",
        ),
        (
            "chat template an integer",
            with_meta(dir, "tokenizer.chat_template", Some(MetadataValue::U8(1))),
            "Chat::Gguf::WrongType",
        ),
        (
            "no embeddings",
            tiny_gguf(dir, |_, v| Some(v), &[], |n, d, s, b| (n != "token_embd.weight").then_some((d, s, b))),
            "Weights::MissingTensor",
        ),
        (
            "embeddings of the wrong shape",
            tiny_gguf(
                dir,
                |_, v| Some(v),
                &[],
                |n, d, s, b| {
                    if n == "token_embd.weight" {
                        Some((d, vec![s[0] / 5, s[1] * 5], b))
                    } else {
                        Some((d, s, b))
                    }
                },
            ),
            "Weights::ShapeMismatch",
        ),
    ]
}

fn tiny_with_alignment(dir: &Path, value: MetadataValue) -> Vec<u8> {
    with_meta(dir, "general.alignment", Some(value))
}

fn duplicate_tensor() -> Vec<u8> {
    let mut out = header(3, 2, 0);
    for _ in 0..2 {
        string(&mut out, b"t");
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&le(4));
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&le(0));
    }
    out.resize(out.len().next_multiple_of(32) + 16, 0);
    out
}

#[test]
fn malformed_gguf_files_give_the_expected_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases = gguf_cases(dir.path());
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let mut failures = Vec::new();
    for (index, (name, bytes, expected)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("case{index}.gguf"));
        std::fs::write(&path, bytes).unwrap();
        match ModelFiles::open(&path) {
            Ok(_) => failures.push(format!("{name}: opened")),
            Err(error) if kind(&error) != *expected => {
                failures.push(format!("{name}: {} ({error}), expected {expected}", kind(&error)))
            }
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---- HF directories ---------------------------------------------------------------------

/// The tiny model's HF directory with `file` replaced by `bytes` (None removes it).
fn hf_dir(root: &Path, index: usize, file: &str, bytes: Option<Vec<u8>>) -> PathBuf {
    let dir = root.join(format!("hf{index}"));
    TinyLlama::new(0).write_hf_dir(&dir).unwrap();
    match bytes {
        Some(bytes) => std::fs::write(dir.join(file), bytes).unwrap(),
        None => std::fs::remove_file(dir.join(file)).unwrap(),
    }
    dir
}

/// One of the tiny model's JSON files with `edit` applied.
fn edited_json(file: &str, edit: impl Fn(&mut Value)) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(0).write_hf_dir(dir.path()).unwrap();
    let mut value: Value = serde_json::from_slice(&std::fs::read(dir.path().join(file)).unwrap()).unwrap();
    edit(&mut value);
    serde_json::to_vec(&value).unwrap()
}

/// A safetensors file: header length, header JSON, data.
fn safetensors(header: &Value, data: &[u8]) -> Vec<u8> {
    let header = header.to_string();
    [le(header.len() as u64), header.into_bytes(), data.to_vec()].concat()
}

fn hf_cases() -> Vec<(&'static str, &'static str, Option<Vec<u8>>, &'static str)> {
    let set = |key: &'static str, value: Value| move |v: &mut Value| v[key] = value.clone();
    vec![
        ("no config.json", "config.json", None, "Config::Io"),
        ("config.json not JSON", "config.json", Some(b"{\"hidden_size\": ".to_vec()), "Config::Json"),
        ("config.json an array", "config.json", Some(b"[1, 2]".to_vec()), "Config::MissingField"),
        (
            "config.json no hidden_size",
            "config.json",
            Some(edited_json("config.json", |v| {
                v.as_object_mut().unwrap().remove("hidden_size");
            })),
            "Config::MissingField",
        ),
        (
            "config.json hidden_size a string",
            "config.json",
            Some(edited_json("config.json", set("hidden_size", json!("64")))),
            "Config::InvalidField",
        ),
        (
            "config.json zero layers",
            "config.json",
            Some(edited_json("config.json", set("num_hidden_layers", json!(0)))),
            "Config::InvalidField",
        ),
        (
            "config.json 7 kv heads",
            "config.json",
            Some(edited_json("config.json", set("num_key_value_heads", json!(7)))),
            "Config::InvalidField",
        ),
        (
            "config.json model_type bert",
            "config.json",
            Some(edited_json("config.json", |v| {
                v["model_type"] = json!("bert");
                v["architectures"] = json!(["BertModel"]);
            })),
            "Config::UnsupportedArchitecture",
        ),
        ("no tokenizer.json", "tokenizer.json", None, "Tokenizer::NotFound"),
        ("tokenizer.json not JSON", "tokenizer.json", Some(b"{".to_vec()), "Tokenizer::Invalid"),
        (
            "tokenizer.json without a model",
            "tokenizer.json",
            Some(edited_json("tokenizer.json", |v| {
                v.as_object_mut().unwrap().remove("model");
            })),
            "Tokenizer::Invalid",
        ),
        (
            "tokenizer.json merges of unknown tokens",
            "tokenizer.json",
            Some(edited_json(
                "tokenizer.json",
                set(
                    "model",
                    json!({
                        "type": "BPE", "vocab": {"a": 0}, "merges": ["x y"]
                    }),
                ),
            )),
            "Tokenizer::Invalid",
        ),
        (
            "tokenizer.json merges without the continuing_subword_prefix",
            "tokenizer.json",
            Some(edited_json("tokenizer.json", |v| {
                v["model"]["continuing_subword_prefix"] = json!("##########")
            })),
            "Tokenizer::Invalid",
        ),
        (
            "tokenizer_config.json template syntax error",
            "tokenizer_config.json",
            Some(edited_json("tokenizer_config.json", set("chat_template", json!("{% if %}")))),
            "Chat::Syntax",
        ),
        (
            "tokenizer_config.json not JSON",
            "tokenizer_config.json",
            Some(b"nope".to_vec()),
            "Tokenizer::Invalid",
        ),
        ("no model.safetensors", "model.safetensors", None, "Safetensors::NotFound"),
        ("safetensors empty", "model.safetensors", Some(vec![]), "Safetensors::Invalid"),
        ("safetensors header of 2^60 bytes", "model.safetensors", Some(le(1 << 60)), "Safetensors::Invalid"),
        (
            "safetensors header not JSON",
            "model.safetensors",
            Some([le(4), b"{{{{".to_vec()].concat()),
            "Safetensors::Invalid",
        ),
        (
            "safetensors data past the end",
            "model.safetensors",
            Some(safetensors(
                &json!({"x": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}}),
                &[0; 16],
            )),
            "Safetensors::Invalid",
        ),
        (
            "safetensors shape and offsets disagree",
            "model.safetensors",
            Some(safetensors(&json!({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}), &[0; 4])),
            "Safetensors::Invalid",
        ),
        (
            "safetensors of I64",
            "model.safetensors",
            Some(safetensors(&json!({"x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}), &[0; 8])),
            "Safetensors::UnsupportedDtype",
        ),
        (
            "safetensors without the embeddings",
            "model.safetensors",
            Some(safetensors(&json!({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}), &[0; 4])),
            "Weights::MissingTensor",
        ),
    ]
}

#[test]
fn malformed_hf_directories_give_the_expected_typed_errors() {
    let root = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (index, (name, file, bytes, expected)) in hf_cases().into_iter().enumerate() {
        let dir = hf_dir(root.path(), index, file, bytes);
        match ModelFiles::open(&dir) {
            Ok(_) => failures.push(format!("{name}: opened")),
            Err(error) if kind(&error) != expected => {
                failures.push(format!("{name}: {} ({error}), expected {expected}", kind(&error)))
            }
            Err(_) => {}
        }
    }
    let not_a_model = root.path().join("model.bin");
    std::fs::write(&not_a_model, b"weights").unwrap();
    assert_eq!(kind(&ModelFiles::open(&not_a_model).unwrap_err()), "UnknownFormat");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

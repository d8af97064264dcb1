//! Mutations of seed inputs: byte-level (flips, interesting integers, inserts, deletes,
//! splices, dictionary tokens), JSON-level (replace, drop or add a node) and GGUF-level
//! (change one metadata value and write the file again).

use pagoda::model::gguf::{GgufFile, GgufWriter, MetadataValue};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

/// Integers that sit on the edges of sizes, counts and offsets.
const INTERESTING: [u64; 16] = [
    0,
    1,
    2,
    7,
    8,
    31,
    32,
    255,
    256,
    65535,
    1 << 31,
    u32::MAX as u64,
    1 << 32,
    1 << 60,
    i64::MAX as u64,
    u64::MAX,
];

/// How many mutations to stack: mostly one, sometimes up to four.
fn stack(rng: &mut ChaCha8Rng) -> usize {
    [1, 1, 1, 1, 1, 2, 2, 3, 4][rng.random_range(0..9)]
}

/// Byte-level mutations of `input`, 1 to 4 stacked; `splice` is another seed to borrow
/// from, `dictionary` tokens worth inserting, `hot` the prefix most mutations hit.
pub fn bytes(rng: &mut ChaCha8Rng, input: &[u8], splice: &[u8], dictionary: &[&str], hot: usize) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..stack(rng) {
        let limit = if rng.random_bool(0.8) { hot.min(out.len()) } else { out.len() };
        let at = if limit == 0 { 0 } else { rng.random_range(0..limit) };
        match rng.random_range(0..9) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << rng.random_range(0..8);
            }
            1 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] = [0, 1, 0x7f, 0x80, 0xff][rng.random_range(0..5)];
            }
            2 => {
                let value = INTERESTING[rng.random_range(0..INTERESTING.len())];
                let width = [2, 4, 8][rng.random_range(0..3)];
                let bytes = value.to_le_bytes();
                for (k, &b) in bytes[..width].iter().enumerate() {
                    if let Some(slot) = out.get_mut(at + k) {
                        *slot = b;
                    }
                }
            }
            3 => {
                let len = rng.random_range(1..=16);
                let insert: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                out.splice(at..at, insert);
            }
            4 if !out.is_empty() => {
                let end = (at + rng.random_range(1..=64)).min(out.len());
                out.drain(at.min(end)..end);
            }
            5 if !out.is_empty() => {
                let end = (at + rng.random_range(1..=64)).min(out.len());
                let chunk = out[at.min(end)..end].to_vec();
                let to = rng.random_range(0..=out.len());
                out.splice(to..to, chunk);
            }
            6 => out.truncate(at),
            7 if !splice.is_empty() => {
                let from = rng.random_range(0..splice.len());
                let end = (from + rng.random_range(1..=256)).min(splice.len());
                out.splice(at..at, splice[from..end].iter().copied());
            }
            8 if !dictionary.is_empty() => {
                let token = dictionary[rng.random_range(0..dictionary.len())];
                out.splice(at..at, token.bytes());
            }
            _ => {}
        }
    }
    out
}

/// Keys worth adding to JSON bodies and files.
const JSON_KEYS: [&str; 32] = [
    "prompt",
    "messages",
    "role",
    "content",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stop",
    "stop_token_ids",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "logprobs",
    "top_logprobs",
    "stream",
    "stream_options",
    "min_tokens",
    "logit_bias",
    "best_of",
    "echo",
    "suffix",
    "model",
    "hidden_size",
    "vocab_size",
    "num_attention_heads",
    "num_key_value_heads",
    "added_tokens",
    "merges",
    "vocab",
    "chat_template",
];

/// A value that tends to break parsers and validators.
fn hostile_value(rng: &mut ChaCha8Rng) -> Value {
    match rng.random_range(0..14) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(0),
        3 => json!(-1),
        4 => json!(INTERESTING[rng.random_range(0..INTERESTING.len())]),
        5 => json!(1e308),
        6 => json!(-1e308),
        7 => json!(0.5),
        8 => json!(""),
        9 => json!("x".repeat(rng.random_range(1..5000))),
        10 => json!([]),
        11 => json!({}),
        12 => json!([[[[[[[[1]]]]]]]]),
        _ => json!(["a", 1, null]),
    }
}

/// Nodes in `value`, itself included.
fn count_nodes(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count_nodes).sum(),
        Value::Object(map) => map.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Applies `mutate_node` to the `index`-th node of `value` in pre-order; true once done.
fn mutate_nth(value: &mut Value, index: &mut usize, rng: &mut ChaCha8Rng) -> bool {
    if *index == 0 {
        mutate_node(value, rng);
        return true;
    }
    *index -= 1;
    match value {
        Value::Array(items) => items.iter_mut().any(|item| mutate_nth(item, index, rng)),
        Value::Object(map) => map.values_mut().any(|item| mutate_nth(item, index, rng)),
        _ => false,
    }
}

/// Replaces a node, drops a child, adds a known key, wraps the node in an array, or
/// repeats an array's items.
fn mutate_node(node: &mut Value, rng: &mut ChaCha8Rng) {
    match rng.random_range(0..5) {
        0 => *node = hostile_value(rng),
        1 => match node {
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth(rng.random_range(0..map.len())).cloned().unwrap_or_default();
                map.remove(&key);
            }
            Value::Array(items) if !items.is_empty() => {
                items.remove(rng.random_range(0..items.len()));
            }
            _ => *node = Value::Null,
        },
        2 => match node {
            Value::Object(map) => {
                map.insert(JSON_KEYS[rng.random_range(0..JSON_KEYS.len())].into(), hostile_value(rng));
            }
            other => *other = hostile_value(rng),
        },
        3 => *node = json!([node.clone()]),
        _ => {
            if let Value::Array(items) = node
                && items.len() < 1000
            {
                let copy = items.clone();
                for _ in 0..rng.random_range(1..8) {
                    items.extend(copy.iter().cloned());
                }
            }
        }
    }
}

/// One to four JSON-level mutations of `value`.
pub fn json(rng: &mut ChaCha8Rng, value: &Value) -> Value {
    let mut out = value.clone();
    for _ in 0..stack(rng) {
        let mut index = rng.random_range(0..count_nodes(&out));
        mutate_nth(&mut out, &mut index, rng);
    }
    out
}

/// One GGUF-level mutation: parse `input`, change one metadata value (edit a string,
/// shrink or grow an array, swap its type) and write the file again with its tensors;
/// `None` when `input` does not parse.
pub fn gguf(rng: &mut ChaCha8Rng, input: &[u8]) -> Option<Vec<u8>> {
    let file = GgufFile::from_bytes(input.to_vec()).ok()?;
    let keys = file.metadata_keys();
    let target = rng.random_range(0..keys.len().max(1));
    let mut writer = GgufWriter::new();
    for (index, key) in keys.iter().enumerate() {
        let value = file.get(key)?.clone();
        if index != target {
            writer.metadata(key, value);
            continue;
        }
        match rng.random_range(0..6) {
            0 => continue,
            1 => writer.metadata(key, mutate_value(rng, value)),
            2 => writer.metadata(&format!("{key}x"), value),
            _ => writer.metadata(key, mutate_value(rng, value)),
        };
    }
    for info in file.tensor_infos() {
        let data = file.tensor(&info.name).ok()?.data.to_vec();
        writer.tensor(&info.name, info.dtype, &info.shape, data).ok()?;
    }
    Some(writer.to_bytes())
}

fn mutate_value(rng: &mut ChaCha8Rng, value: MetadataValue) -> MetadataValue {
    match value {
        MetadataValue::String(text) => {
            let edited =
                bytes(rng, text.as_bytes(), b"{{ }}{% %}", &["{%", "%}", "{{", "}}", "\\", "<|"], 4096);
            MetadataValue::String(String::from_utf8_lossy(&edited).into_owned())
        }
        MetadataValue::Array { element_type, mut items } => {
            match rng.random_range(0..5) {
                0 if !items.is_empty() => items.truncate(rng.random_range(0..items.len())),
                1 if !items.is_empty() => {
                    let i = rng.random_range(0..items.len());
                    items[i] = mutate_value(rng, items[i].clone());
                }
                2 if !items.is_empty() => {
                    let i = rng.random_range(0..items.len());
                    let copy = items[i].clone();
                    items.insert(rng.random_range(0..items.len()), copy);
                }
                3 => items.reverse(),
                _ => return MetadataValue::Array { element_type: 5, items: vec![MetadataValue::I32(-1); 3] },
            }
            MetadataValue::Array { element_type, items }
        }
        MetadataValue::U32(_) | MetadataValue::I32(_) | MetadataValue::U64(_) | MetadataValue::I64(_) => {
            let v = INTERESTING[rng.random_range(0..INTERESTING.len())];
            match rng.random_range(0..4) {
                0 => MetadataValue::U32(v as u32),
                1 => MetadataValue::I32(v as i32),
                2 => MetadataValue::U64(v),
                _ => MetadataValue::I64(v as i64),
            }
        }
        MetadataValue::F32(_) | MetadataValue::F64(_) => {
            MetadataValue::F32([0.0, -1.0, f32::NAN, f32::INFINITY, 1e-30, 1e30][rng.random_range(0..6)])
        }
        MetadataValue::Bool(b) => MetadataValue::Bool(!b),
        other => MetadataValue::String(format!("{other:?}")),
    }
}

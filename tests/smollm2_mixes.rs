//! The default model requantized by llama.cpp's `llama-quantize` into the mixes people
//! download (Q4_K_M, Q5_K_M, Q6_K, Q3_K_M, IQ4_XS, Q5_0, Q2_K; scripts/make-mixes.sh, directory in
//! `PAGODA_MIX_DIR`): each loads with its tensors kept in their stored types, and its greedy
//! continuation of the fixture prompts with an f32 KV cache equals the fp32 reference's
//! (assets/smollm2-mixes-greedy.json, made by scripts/make-mix-reference.py with np_llama.py);
//! and the real blocks of each quantized type in them dequantize bit-identically to
//! `gguf.quants.dequantize`.

use std::path::PathBuf;

use pagoda::core::cache_config::KvCacheDtype;
use pagoda::model::ModelFiles;
use pagoda::model::gguf::GgufFile;
use pagoda::{Engine, Prompt, SamplingParams};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Below this reference margin (top-1 minus top-2 logit) pagoda's f32 summation order may
/// pick the other token; no step of the committed references is that close.
const MIN_MARGIN: f64 = 1e-3;

fn reference() -> Value {
    serde_json::from_str(include_str!("../assets/smollm2-mixes-greedy.json")).unwrap()
}

fn mix_path(mix: &str) -> PathBuf {
    let dir = std::env::var_os("PAGODA_MIX_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_MIX_DIR names the directory scripts/make-mixes.sh prints");
    let path = dir.join(format!("SmolLM2-135M-Instruct.{mix}.gguf"));
    assert!(path.is_file(), "{} is missing: run scripts/make-mixes.sh", path.display());
    path
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn ids(value: &Value) -> Vec<u32> {
    value.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect()
}

/// The quantized types llama-quantize writes into each mix of the default model (its
/// 576-wide rows are no whole K-quant super-blocks and fall back to 32-blocks).
fn expected_types(mix: &str) -> &'static [&'static str] {
    match mix {
        "Q4_K_M" => &["q4_k", "q5_0", "q6_k", "q8_0"],
        "Q5_K_M" => &["q5_1", "q5_k", "q6_k", "q8_0"],
        "Q6_K" => &["q6_k", "q8_0"],
        "Q3_K_M" => &["q4_0", "q4_k", "q5_0", "q5_1", "q5_k", "q8_0"],
        "IQ4_XS" => &["iq4_nl", "iq4_xs", "q5_k", "q8_0"],
        "Q5_0" => &["q5_0", "q8_0"],
        "Q2_K" => &["q3_k", "q4_0", "q8_0"],
        other => panic!("unknown mix {other}"),
    }
}

/// `mix` loads with its stored types, and its greedy continuation of every reference prompt is
/// the reference's up to the first step whose margin is below [`MIN_MARGIN`].
fn generates_the_reference_tokens(mix: &str) {
    let reference = reference();
    let tokens = reference["tokens"].as_u64().unwrap() as usize;
    let entry = &reference["mixes"][mix];
    let path = mix_path(mix);
    let files = ModelFiles::open(&path).unwrap();
    let mut types: Vec<&str> =
        files.weights.tensors().map(|t| t.dtype.name()).filter(|&name| name != "f32").collect();
    types.sort_unstable();
    types.dedup();
    assert_eq!(types, expected_types(mix), "{mix}: stored types");
    let mut engine = Engine::builder().model(&path).kv_cache_dtype(KvCacheDtype::F32).build().unwrap();
    let cases = entry["cases"].as_array().unwrap();
    let prompts: Vec<Prompt> = cases.iter().map(|c| Prompt::TokenIds(ids(&c["prompt_ids"]))).collect();
    let params = SamplingParams { temperature: 0.0, max_tokens: tokens, ..SamplingParams::default() };
    let completions = engine.generate(prompts, &params).unwrap();
    for (case, completion) in cases.iter().zip(&completions) {
        let expected = ids(&case["generated_ids"]);
        let margins: Vec<f64> =
            case["step_margins"].as_array().unwrap().iter().map(|m| m.as_f64().unwrap()).collect();
        let checked = margins.iter().position(|&m| m < MIN_MARGIN).unwrap_or(expected.len());
        assert_eq!(
            completion.token_ids[..checked.min(completion.token_ids.len())],
            expected[..checked],
            "{mix} prompt {}",
            case["id"]
        );
    }
}

/// One test per mix, so that the test harness's threads share them out.
macro_rules! mix_tests {
    ($($test:ident => $mix:literal),* $(,)?) => {
        /// The mixes tested one by one below.
        const MIXES: &[&str] = &[$($mix),*];
        $(#[test] fn $test() { generates_the_reference_tokens($mix); })*
    };
}

mix_tests! {
    q4_k_m_generates_the_reference_tokens => "Q4_K_M",
    q5_k_m_generates_the_reference_tokens => "Q5_K_M",
    q6_k_generates_the_reference_tokens => "Q6_K",
    q3_k_m_generates_the_reference_tokens => "Q3_K_M",
    iq4_xs_generates_the_reference_tokens => "IQ4_XS",
    q5_0_generates_the_reference_tokens => "Q5_0",
    q2_k_generates_the_reference_tokens => "Q2_K",
}

#[test]
fn every_mix_of_the_reference_has_its_test() {
    let reference = reference();
    let mut held: Vec<&str> = reference["mixes"].as_object().unwrap().keys().map(String::as_str).collect();
    let mut tested = MIXES.to_vec();
    held.sort_unstable();
    tested.sort_unstable();
    assert_eq!(held, tested);
}

#[test]
fn real_blocks_dequantize_bit_identically_to_the_gguf_package() {
    let reference = reference();
    for (mix, entry) in reference["mixes"].as_object().unwrap() {
        let path = mix_path(mix);
        let file_sha = sha256_hex(&std::fs::read(&path).unwrap());
        assert_eq!(
            file_sha,
            entry["sha256"].as_str().unwrap(),
            "{mix}: not the file the reference was made from"
        );
        let gguf = GgufFile::open(&path).unwrap();
        for (dtype, expected) in entry["dequantized"].as_object().unwrap() {
            let tensor = gguf.tensor(expected["tensor"].as_str().unwrap()).unwrap();
            assert_eq!(tensor.dtype.name(), dtype);
            let values: Vec<u8> = tensor.to_f32().iter().flat_map(|v| v.to_le_bytes()).collect();
            assert_eq!(sha256_hex(&values), expected["sha256"].as_str().unwrap(), "{mix}: {dtype} values");
        }
    }
}

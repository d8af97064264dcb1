//! Shared by the SmolLM2 tests: the default model's files and the fixture's `greedy_fp32`
//! reference (an f32 forward pass over the dequantized weights).

#![allow(dead_code)]

use pagoda::model::{ModelFiles, default_model_path};
use serde_json::Value;

/// One `greedy_fp32` entry of the fixture.
#[derive(Clone)]
pub struct GreedyCase {
    /// The fixture's name for it ("A1", ...).
    pub id: String,
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// The reference's greedy continuation.
    pub generated: Vec<u32>,
    /// The reference's ten largest first-position logits, as (token, logit).
    pub top10: Vec<(u32, f64)>,
    /// The reference's margin between its best and second-best logit at each step.
    pub margins: Vec<f64>,
}

/// Every `greedy_fp32` entry, in fixture order.
pub fn greedy_cases() -> Vec<GreedyCase> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/smollm2-135m-instruct-q4_1.json");
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids = |v: &Value| v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect();
    fixture["greedy_fp32"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| GreedyCase {
            id: e["id"].as_str().unwrap().to_owned(),
            prompt: ids(&e["prompt_ids"]),
            generated: ids(&e["generated_ids"]),
            top10: e["top10_first"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap()))
                .collect(),
            margins: e["step_margins"].as_array().unwrap().iter().map(|m| m.as_f64().unwrap()).collect(),
        })
        .collect()
}

/// The default model (SmolLM2-135M-Instruct Q4_1), fetched by `scripts/fetch-model.sh`.
pub fn smollm2() -> ModelFiles {
    ModelFiles::open(default_model_path().expect("default model")).expect("open SmolLM2")
}

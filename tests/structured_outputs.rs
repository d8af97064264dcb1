//! Structured outputs through the engine: JSON schemas, regexes, choices and Lark grammars
//! hold the default model's output (greedy and sampled), a constrained request samples the
//! same tokens alone, batched, chunked or preempted, and a bad constraint is a typed error.

use std::sync::Arc;

use pagoda::engine::EngineError;
use pagoda::model::gguf::GgufFile;
use pagoda::model::{Tokenizer, default_model_path};
use pagoda::structured::{Constraint, ConstraintError, Grammars};
use pagoda::{CacheConfig, Engine, ExecutorKind, FinishReason, SamplingParams};
use serde_json::{Value, json};

const PROMPT: &str = "<|im_start|>user\nDescribe a cat named Tom as JSON.<|im_end|>\n<|im_start|>assistant\n";

fn engine(executor: ExecutorKind, num_gpu_blocks: usize, max_num_batched_tokens: usize) -> Engine {
    engine_with_blocks(executor, num_gpu_blocks, 16, max_num_batched_tokens)
}

fn engine_with_blocks(
    executor: ExecutorKind,
    num_gpu_blocks: usize,
    block_size: usize,
    max_num_batched_tokens: usize,
) -> Engine {
    Engine::builder()
        .model(default_model_path().expect("default model"))
        .executor(executor)
        .cache(CacheConfig { num_gpu_blocks, block_size, ..CacheConfig::default() })
        .max_num_seqs(16)
        .max_num_batched_tokens(max_num_batched_tokens)
        .build()
        .expect("engine")
}

fn constrained(constraint: Constraint, temperature: f32, seed: u64, max_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature,
        seed: Some(seed),
        max_tokens,
        structured_outputs: Some(constraint),
        ..SamplingParams::default()
    }
}

fn cat_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 30},
            "color": {"enum": ["black", "white", "orange", "grey"]},
            "indoor": {"type": "boolean"}
        },
        "required": ["name", "age", "color", "indoor"],
        "additionalProperties": false
    })
}

/// True when `value` has exactly the cat schema's shape.
fn is_cat(value: &Value) -> bool {
    let Some(object) = value.as_object() else { return false };
    object.len() == 4
        && object["name"].as_str().is_some_and(|name| name.chars().count() <= 12)
        && object["age"].as_u64().is_some_and(|age| age <= 30)
        && ["black", "white", "orange", "grey"].contains(&object["color"].as_str().unwrap_or(""))
        && object["indoor"].is_boolean()
}

/// Says whether an output satisfies its constraint.
type Validator = Box<dyn Fn(&str) -> bool>;

#[test]
fn the_default_model_keeps_to_each_kind_of_constraint() {
    let mut engine = engine(ExecutorKind::Wgpu, 512, 256);
    let cases: Vec<(Constraint, Validator)> = vec![
        (Constraint::JsonSchema(cat_schema()), Box::new(|text| serde_json::from_str(text).is_ok_and(|v| is_cat(&v)))),
        (
            Constraint::JsonObject,
            Box::new(|text| serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object())),
        ),
        (
            Constraint::Regex(r"[A-Z][a-z]{1,8} is [0-9]{1,2} years old\.".into()),
            Box::new(|text| {
                let (name, rest) = text.split_once(" is ").unwrap_or_default();
                let (age, tail) = rest.split_once(" years old").unwrap_or_default();
                name.len() >= 2
                    && name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    && name.chars().skip(1).all(|c| c.is_ascii_lowercase())
                    && (1..=2).contains(&age.len())
                    && age.chars().all(|c| c.is_ascii_digit())
                    && tail == "."
            }),
        ),
        (
            Constraint::Choice(vec!["tabby".into(), "siamese".into(), "persian cat".into()]),
            Box::new(|text| ["tabby", "siamese", "persian cat"].contains(&text)),
        ),
        (
            Constraint::Grammar(
                "start: expr\nexpr: term ((\"+\" | \"-\") term) ~ 0..3\nterm: NUMBER | \"(\" expr \")\"\nNUMBER: /[0-9]{1,3}/\n"
                    .into(),
            ),
            Box::new(|text| arithmetic(text).is_some()),
        ),
    ];
    for (constraint, valid) in &cases {
        for (temperature, seed) in [(0.0, 0), (0.7, 1), (0.7, 2)] {
            let params = constrained(constraint.clone(), temperature, seed, 96);
            let output = engine.generate([PROMPT], &params).unwrap().remove(0);
            assert_eq!(output.finish_reason, Some(FinishReason::Stop), "{constraint:?}: {:?}", output.text);
            assert!(valid(&output.text), "{constraint:?} at T={temperature} seed {seed}: {:?}", output.text);
        }
    }
}

/// The value of an arithmetic expression of the test grammar, if `text` is one.
fn arithmetic(text: &str) -> Option<i64> {
    fn expr(s: &[u8], i: &mut usize) -> Option<i64> {
        let mut value = term(s, i)?;
        while let Some(&op) = s.get(*i).filter(|&&c| c == b'+' || c == b'-') {
            *i += 1;
            let rhs = term(s, i)?;
            value = if op == b'+' { value + rhs } else { value - rhs };
        }
        Some(value)
    }
    fn term(s: &[u8], i: &mut usize) -> Option<i64> {
        if s.get(*i) == Some(&b'(') {
            *i += 1;
            let value = expr(s, i)?;
            (s.get(*i) == Some(&b')')).then(|| *i += 1)?;
            return Some(value);
        }
        let start = *i;
        while s.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        std::str::from_utf8(&s[start..*i]).ok()?.parse().ok().filter(|_| (1..=3).contains(&(*i - start)))
    }
    let mut i = 0;
    let value = expr(text.as_bytes(), &mut i)?;
    (i == text.len()).then_some(value)
}

#[test]
fn constrained_requests_sample_the_same_tokens_alone_batched_chunked_and_preempted() {
    let requests: Vec<SamplingParams> = (0..6)
        .map(|seed| {
            let constraint = if seed % 2 == 0 {
                Constraint::JsonSchema(cat_schema())
            } else {
                Constraint::Regex(r"(meow ){2,6}[a-z]{3,10}".into())
            };
            constrained(constraint, 0.7, seed, 48)
        })
        .collect();
    let alone: Vec<Vec<u32>> = {
        let mut engine = engine(ExecutorKind::Wgpu, 512, 256);
        requests.iter().map(|p| engine.generate([PROMPT], p).unwrap().remove(0).token_ids).collect()
    };
    // Small chunks and a KV pool too small for all six: prefills are chunked, requests preempted.
    let mut engine = engine_with_blocks(ExecutorKind::Wgpu, 24, 4, 24);
    let ids: Vec<u64> = requests.iter().map(|p| engine.add_request(PROMPT, p.clone()).unwrap()).collect();
    let mut batched: Vec<Vec<u32>> = vec![Vec::new(); ids.len()];
    while engine.has_unfinished_requests() {
        for output in engine.step().unwrap() {
            let index = ids.iter().position(|&id| id == output.request_id).unwrap();
            batched[index].extend(&output.new_token_ids);
        }
    }
    assert!(engine.metrics().scheduler.num_preemptions > 0, "the pool was meant to force preemptions");
    assert_eq!(batched, alone);
}

#[test]
fn a_bad_constraint_is_a_typed_error_naming_its_kind() {
    let mut engine = engine(ExecutorKind::Sim, 64, 256);
    let cases = [
        (Constraint::Regex("(unclosed".into()), "regex"),
        (Constraint::Grammar("start: missing_rule\n".into()), "grammar"),
        (Constraint::JsonSchema(json!({"type": "no-such-type"})), "json"),
        (Constraint::JsonSchema(json!(42)), "json"),
        (Constraint::Choice(Vec::new()), "choice"),
    ];
    for (constraint, kind) in cases {
        let error = engine.add_request(PROMPT, constrained(constraint.clone(), 0.0, 0, 8)).unwrap_err();
        match error {
            EngineError::Constraint(ConstraintError::Invalid { kind: k, .. }) => {
                assert_eq!(k, kind, "{constraint:?}")
            }
            other => panic!("{constraint:?}: expected an invalid-constraint error, got {other}"),
        }
    }
    assert!(!engine.has_unfinished_requests());
}

#[test]
fn structured_outputs_take_vllms_json_shape() {
    let parse =
        |value: Value| serde_json::from_value::<SamplingParams>(json!({ "structured_outputs": value }));
    let params = parse(json!({"choice": ["a", "b"]})).unwrap();
    assert_eq!(params.structured_outputs, Some(Constraint::Choice(vec!["a".into(), "b".into()])));
    let params = parse(json!({"json": "{\"type\": \"integer\"}"})).unwrap();
    assert_eq!(params.structured_outputs, Some(Constraint::JsonSchema(json!({"type": "integer"}))));
    assert_eq!(parse(json!({"json_object": true})).unwrap().structured_outputs, Some(Constraint::JsonObject));
    for bad in
        [json!({}), json!({"regex": "a", "choice": ["a"]}), json!({"regexp": "a"}), json!({"json": "{"})]
    {
        assert!(parse(bad.clone()).is_err(), "{bad}");
    }
    let round_trip = serde_json::to_value(constrained(Constraint::Regex("a+".into()), 0.0, 0, 4)).unwrap();
    assert_eq!(round_trip["structured_outputs"], json!({"regex": "a+"}));
}

/// Over Llama 2's SentencePiece vocabulary (`PAGODA_SPM_GGUF`), a valid answer can be
/// spelled through the constraint's masks, token by token; a lone space may be the `▁`
/// piece as well as the byte token `<0x20>` (both spell it); only EOS follows the complete
/// answer; a token that leaves the schema is ruled out.
#[test]
fn sentencepiece_vocabularies_take_constraints_too() {
    let path =
        std::env::var_os("PAGODA_SPM_GGUF").expect("PAGODA_SPM_GGUF: run scripts/llama2-vocab.py gguf");
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(path).unwrap()).unwrap();
    let eos = tokenizer.eos_token_id();
    let grammars = Grammars::new(Arc::new(tokenizer.clone()), eos, Vec::new());
    let mut state = grammars.compile(&Constraint::JsonSchema(cat_schema())).unwrap();
    let bytes = |id: u32| tokenizer.token_bytes(id).unwrap_or_default();
    let space_piece = tokenizer.piece_to_id("\u{2581}").unwrap();
    let mut rest: &[u8] = br#"{"name": "Tom", "age": 3, "color": "grey", "indoor": true}"#;
    while !rest.is_empty() {
        let mask = state.mask().unwrap();
        if rest.starts_with(b" 3") {
            assert!(mask.allows(space_piece), "the lone \u{2581} piece was ruled out");
        }
        let next = mask
            .ids()
            .filter(|&id| !bytes(id).is_empty() && rest.starts_with(bytes(id)))
            .max_by_key(|&id| bytes(id).len())
            .unwrap_or_else(|| panic!("no allowed token continues {:?}", String::from_utf8_lossy(rest)));
        state.follow(&[next]).unwrap();
        rest = &rest[bytes(next).len()..];
    }
    assert_eq!(state.mask().unwrap().ids().collect::<Vec<_>>(), vec![eos.unwrap()], "only EOS may follow");
    let mut state = grammars.compile(&Constraint::JsonSchema(cat_schema())).unwrap();
    let hello = tokenizer.encode("hello", false).unwrap()[0];
    assert!(!state.mask().unwrap().allows(hello));
}

#[test]
fn a_constraint_cut_by_max_tokens_ends_with_length_and_a_valid_prefix() {
    let mut engine = engine(ExecutorKind::Sim, 64, 256);
    for seed in 0..4 {
        let params = constrained(Constraint::Regex("[0-9]{40}!".into()), 1.0, seed, 5);
        let output = engine.generate([format!("count {seed}")], &params).unwrap().remove(0);
        assert_eq!(output.finish_reason, Some(FinishReason::Length));
        assert_eq!(output.token_ids.len(), 5);
        assert!(
            !output.text.is_empty() && output.text.bytes().all(|b| b.is_ascii_digit()),
            "{:?}",
            output.text
        );
    }
}

#[test]
fn ignore_eos_runs_past_a_complete_answer_on_end_tokens_only() {
    let mut engine = engine(ExecutorKind::Sim, 64, 256);
    let params = SamplingParams {
        ignore_eos: true,
        ..constrained(Constraint::Choice(vec!["yes".into(), "no".into()]), 1.0, 3, 12)
    };
    let output = engine.generate(["answer"], &params).unwrap().remove(0);
    assert_eq!(output.finish_reason, Some(FinishReason::Length));
    assert_eq!(output.token_ids.len(), 12);
    let eos = engine.tokenizer().eos_token_id().unwrap();
    let answer_len = output.token_ids.iter().position(|&t| t == eos).expect("an end token after the answer");
    assert!(output.token_ids[answer_len..].iter().all(|&t| t == eos), "{:?}", output.token_ids);
    let answer = engine.tokenizer().decode(&output.token_ids[..answer_len], true).unwrap();
    assert!(answer == "yes" || answer == "no", "{answer:?}");
}

#[test]
fn the_simulated_model_keeps_to_a_choice_and_stops() {
    let mut engine = engine(ExecutorKind::Sim, 64, 256);
    let choices: Vec<String> = ["alpha", "beta gamma", "delta"].map(String::from).to_vec();
    for seed in 0..8 {
        let params = constrained(Constraint::Choice(choices.clone()), 1.0, seed, 32);
        let output = engine.generate([format!("pick one {seed}")], &params).unwrap().remove(0);
        assert!(choices.contains(&output.text), "{:?}", output.text);
        assert_eq!(output.finish_reason, Some(FinishReason::Stop));
    }
}

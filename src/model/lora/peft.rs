//! PEFT's LoRA format: `adapter_config.json` (rank, alpha, rsLoRA, target modules, per-module
//! rank and alpha patterns) and `adapter_model.safetensors` (`…layers.L.self_attn.q_proj.lora_A.weight`
//! `[r, in]` and `…lora_B.weight` `[out, r]`). Fields that change the product in ways pagoda does
//! not implement (DoRA, trained biases, extra saved modules, …) are refused by name.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{LoraAdapter, LoraError, LoraModule, LoraTarget, QkRows, module};
use crate::model::architecture::ModelConfig;
use crate::model::safetensors::SafetensorsFiles;

/// Fields that must hold their default (or be absent): each changes the adapter's product.
const MUST_BE_DEFAULT: [(&str, &[Value]); 10] = [
    ("use_dora", &[Value::Bool(false)]),
    ("fan_in_fan_out", &[Value::Bool(false)]),
    ("lora_bias", &[Value::Bool(false)]),
    ("use_qalora", &[Value::Bool(false)]),
    ("modules_to_save", &[]),
    ("layers_to_transform", &[]),
    ("trainable_token_indices", &[]),
    ("target_parameters", &[]),
    ("alora_invocation_tokens", &[]),
    ("megatron_config", &[]),
];

/// The parsed `adapter_config.json`.
#[derive(Debug)]
struct PeftConfig {
    r: usize,
    alpha: f64,
    rslora: bool,
    targets: Vec<LoraTarget>,
    rank_pattern: Vec<(String, usize)>,
    alpha_pattern: Vec<(String, f64)>,
}

/// Reads the PEFT adapter in directory `dir` for a base model of `config`.
pub fn load(dir: &Path, config: &ModelConfig) -> Result<LoraAdapter, LoraError> {
    let read = |reason: String| LoraError::Read { path: dir.to_owned(), reason };
    let text = std::fs::read_to_string(dir.join("adapter_config.json"))
        .map_err(|e| read(format!("adapter_config.json: {e}")))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| read(format!("adapter_config.json: {e}")))?;
    let cfg = parse_config(dir, &json)?;
    let files = SafetensorsFiles::open_files(&[dir.join("adapter_model.safetensors")])
        .map_err(|e| read(e.to_string()))?;
    let unsupported = |what: String| LoraError::Unsupported { path: dir.to_owned(), what };
    let mut pairs: BTreeMap<(usize, LoraTarget), [Option<String>; 2]> = BTreeMap::new();
    for name in files.names() {
        let (layer, target, is_b) = parse_tensor_name(name).ok_or_else(|| {
            unsupported(format!("tensor {name:?} (only lora_A/lora_B of the seven linears)"))
        })?;
        if !cfg.targets.contains(&target) {
            return Err(unsupported(format!(
                "tensor {name:?}: {} is not among target_modules",
                target.hf_name()
            )));
        }
        pairs.entry((layer, target)).or_default()[usize::from(is_b)] = Some(name.to_owned());
    }
    let mut modules: Vec<LoraModule> = Vec::new();
    for ((layer, target), [a, b]) in pairs {
        let (Some(a), Some(b)) = (a, b) else {
            return Err(read(format!("layer {layer} {} lacks its lora_A or lora_B", target.hf_name())));
        };
        let (a, b) = (
            files.tensor(&a).map_err(|e| read(e.to_string()))?,
            files.tensor(&b).map_err(|e| read(e.to_string()))?,
        );
        let full = format!("model.layers.{layer}.{}", hf_module(target));
        let expected_rank = pattern(&cfg.rank_pattern, &full).unwrap_or(cfg.r);
        let alpha = pattern(&cfg.alpha_pattern, &full).unwrap_or(cfg.alpha);
        let m = module(dir, config, (layer, target), (a.to_f32(), &a.shape), (b.to_f32(), &b.shape), |r| {
            if cfg.rslora { (alpha / (r as f64).sqrt()) as f32 } else { (alpha / r as f64) as f32 }
        })?;
        if m.rank != expected_rank {
            return Err(LoraError::Mismatch {
                path: dir.to_owned(),
                reason: format!(
                    "{full}: rank {} in the tensors, {expected_rank} in adapter_config.json",
                    m.rank
                ),
            });
        }
        modules.push(m);
    }
    if modules.is_empty() {
        return Err(read("no lora_A/lora_B tensors".into()));
    }
    Ok(LoraAdapter { path: dir.to_owned(), modules, qk_rows: QkRows::HuggingFace })
}

fn parse_config(dir: &Path, json: &Value) -> Result<PeftConfig, LoraError> {
    let unsupported = |what: String| LoraError::Unsupported { path: dir.to_owned(), what };
    let read = |reason: String| LoraError::Read { path: dir.to_owned(), reason };
    let field = |name: &str| json.get(name).filter(|v| !v.is_null());
    match field("peft_type").and_then(Value::as_str) {
        Some("LORA") => {}
        other => return Err(unsupported(format!("peft_type {other:?} (only \"LORA\")"))),
    }
    if let Some(bias) = field("bias").and_then(Value::as_str).filter(|&b| b != "none") {
        return Err(unsupported(format!("bias {bias:?} (only \"none\")")));
    }
    for (name, allowed) in MUST_BE_DEFAULT {
        if let Some(v) = field(name) {
            let empty =
                v.as_array().is_some_and(Vec::is_empty) || v.as_object().is_some_and(|o| o.is_empty());
            if !allowed.contains(v) && !empty {
                return Err(unsupported(format!("{name} = {v}")));
            }
        }
    }
    let r =
        field("r").and_then(Value::as_u64).ok_or_else(|| read("adapter_config.json has no rank r".into()))?;
    let alpha = field("lora_alpha").and_then(Value::as_f64).unwrap_or(8.0);
    let rslora = field("use_rslora").and_then(Value::as_bool).unwrap_or(false);
    let targets = match field("target_modules") {
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| {
                let name = n.as_str().unwrap_or_default();
                let short = name.rsplit('.').next().unwrap_or(name);
                LoraTarget::ALL
                    .into_iter()
                    .find(|t| t.hf_name() == short)
                    .ok_or_else(|| unsupported(format!("target module {name:?} (only the seven linears)")))
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::String(s)) if s == "all-linear" => LoraTarget::ALL.to_vec(),
        Some(other) => return Err(unsupported(format!("target_modules {other} (a list of module names)"))),
        None => return Err(read("adapter_config.json has no target_modules".into())),
    };
    let patterns = |name: &str| -> Result<Vec<(String, f64)>, LoraError> {
        let Some(map) = field(name) else { return Ok(Vec::new()) };
        let map = map.as_object().ok_or_else(|| read(format!("{name} is not an object")))?;
        map.iter()
            .map(|(key, v)| {
                if key.chars().any(|c| "^$*+?()[]{}|\\".contains(c)) {
                    return Err(unsupported(format!(
                        "{name} key {key:?} (a regular expression; only module names)"
                    )));
                }
                let v = v.as_f64().ok_or_else(|| read(format!("{name}[{key:?}] is not a number")))?;
                Ok((key.clone(), v))
            })
            .collect()
    };
    let rank_pattern = patterns("rank_pattern")?.into_iter().map(|(k, v)| (k, v as usize)).collect();
    Ok(PeftConfig {
        r: r as usize,
        alpha,
        rslora,
        targets,
        rank_pattern,
        alpha_pattern: patterns("alpha_pattern")?,
    })
}

/// `self_attn.q_proj` or `mlp.gate_proj`.
fn hf_module(target: LoraTarget) -> String {
    let block = match target {
        LoraTarget::Q | LoraTarget::K | LoraTarget::V | LoraTarget::O => "self_attn",
        _ => "mlp",
    };
    format!("{block}.{}", target.hf_name())
}

/// The value of the pattern that names `module` (PEFT's rule: the key is the module's full
/// name or a dot-separated suffix of it); the longest such key wins.
fn pattern<T: Copy>(patterns: &[(String, T)], module: &str) -> Option<T> {
    patterns
        .iter()
        .filter(|(key, _)| module == key || module.ends_with(&format!(".{key}")))
        .max_by_key(|(key, _)| key.len())
        .map(|&(_, v)| v)
}

/// `(layer, target, is_b)` of `base_model.model.model.layers.L.{self_attn|mlp}.X.lora_{A|B}.weight`.
fn parse_tensor_name(name: &str) -> Option<(usize, LoraTarget, bool)> {
    let rest = name.strip_prefix("base_model.model.model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, is_b) = match rest.strip_suffix(".lora_A.weight") {
        Some(m) => (m, false),
        None => (rest.strip_suffix(".lora_B.weight")?, true),
    };
    let target = LoraTarget::ALL.into_iter().find(|&t| hf_module(t) == module)?;
    Some((layer.parse().ok()?, target, is_b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_names_parse_to_layer_target_and_side() {
        assert_eq!(
            parse_tensor_name("base_model.model.model.layers.3.mlp.down_proj.lora_B.weight"),
            Some((3, LoraTarget::Down, true))
        );
        assert_eq!(
            parse_tensor_name("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"),
            Some((0, LoraTarget::Q, false))
        );
        assert_eq!(parse_tensor_name("base_model.model.model.embed_tokens.lora_embedding_A"), None);
        assert_eq!(
            parse_tensor_name("base_model.model.model.layers.0.mlp.gate_proj.lora_magnitude_vector"),
            None
        );
    }

    #[test]
    fn patterns_match_whole_dotted_suffixes_longest_first() {
        let p = vec![("down_proj".to_owned(), 2), ("layers.1.mlp.down_proj".to_owned(), 6)];
        assert_eq!(pattern(&p, "model.layers.0.mlp.down_proj"), Some(2));
        assert_eq!(pattern(&p, "model.layers.1.mlp.down_proj"), Some(6));
        assert_eq!(pattern(&p, "model.layers.0.mlp.xdown_proj"), None);
    }
}

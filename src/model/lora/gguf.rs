//! llama.cpp's LoRA GGUF (`convert_lora_to_gguf.py`): `general.type = adapter`,
//! `adapter.type = lora`, one `adapter.lora.alpha` (scale `alpha / r` per tensor, as llama.cpp
//! computes it; `alpha = 0` means scale 1), tensors `blk.L.<linear>.weight.lora_a` `[r, in]` and
//! `….lora_b` `[out, r]` (Llama's Q and K rows permuted for interleaved RoPE, as its base).

use std::collections::BTreeMap;
use std::path::Path;

use super::{LoraAdapter, LoraError, LoraModule, LoraTarget, QkRows, module};
use crate::model::architecture::ModelConfig;
use crate::model::gguf::GgufFile;

/// Reads the LoRA GGUF at `path` for a base model of `config`.
pub fn load(path: &Path, config: &ModelConfig) -> Result<LoraAdapter, LoraError> {
    let read = |reason: String| LoraError::Read { path: path.to_owned(), reason };
    let unsupported = |what: String| LoraError::Unsupported { path: path.to_owned(), what };
    let file = GgufFile::open(path).map_err(|e| read(e.to_string()))?;
    let text = |key: &str| file.get_str(key).map_err(|e| read(e.to_string()));
    match text("general.type")? {
        Some("adapter") => {}
        other => return Err(unsupported(format!("general.type {other:?} (a LoRA GGUF has \"adapter\")"))),
    }
    match text("adapter.type")? {
        Some("lora") => {}
        other => return Err(unsupported(format!("adapter.type {other:?} (only \"lora\")"))),
    }
    if file.get("adapter.alora.invocation_tokens").is_some() {
        return Err(unsupported("adapter.alora.invocation_tokens (activated LoRA)".into()));
    }
    let arch = text("general.architecture")?.unwrap_or_default().to_owned();
    if arch != config.architecture {
        return Err(LoraError::Mismatch {
            path: path.to_owned(),
            reason: format!("made for architecture {arch:?}, the base model is {:?}", config.architecture),
        });
    }
    let alpha = file.get_float("adapter.lora.alpha").map_err(|e| read(e.to_string()))?.unwrap_or(0.0);
    let mut pairs: BTreeMap<(usize, LoraTarget), [Option<String>; 2]> = BTreeMap::new();
    for info in file.tensor_infos() {
        let (layer, target, is_b) = parse_tensor_name(&info.name).ok_or_else(|| {
            unsupported(format!("tensor {:?} (only lora_a/lora_b of the seven linears)", info.name))
        })?;
        pairs.entry((layer, target)).or_default()[usize::from(is_b)] = Some(info.name.clone());
    }
    let mut modules: Vec<LoraModule> = Vec::new();
    for ((layer, target), [a, b]) in pairs {
        let (Some(a), Some(b)) = (a, b) else {
            return Err(read(format!("blk.{layer}.{} lacks its lora_a or lora_b", target.gguf_name())));
        };
        let a = file.tensor(&a).map_err(|e| read(e.to_string()))?;
        let b = file.tensor(&b).map_err(|e| read(e.to_string()))?;
        modules.push(module(
            path,
            config,
            (layer, target),
            (a.to_f32(), &a.shape),
            (b.to_f32(), &b.shape),
            |r| {
                if alpha == 0.0 { 1.0 } else { (alpha / r as f64) as f32 }
            },
        )?);
    }
    if modules.is_empty() {
        return Err(read("no lora_a/lora_b tensors".into()));
    }
    let qk_rows = if arch == "llama" { QkRows::Interleaved } else { QkRows::HuggingFace };
    Ok(LoraAdapter { path: path.to_owned(), modules, qk_rows })
}

/// `(layer, target, is_b)` of `blk.L.<linear>.weight.lora_{a|b}`.
fn parse_tensor_name(name: &str) -> Option<(usize, LoraTarget, bool)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (linear, is_b) = match rest.strip_suffix(".weight.lora_a") {
        Some(l) => (l, false),
        None => (rest.strip_suffix(".weight.lora_b")?, true),
    };
    let target = LoraTarget::ALL.into_iter().find(|t| t.gguf_name() == linear)?;
    Some((layer.parse().ok()?, target, is_b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_names_parse_to_layer_target_and_side() {
        assert_eq!(parse_tensor_name("blk.1.ffn_down.weight.lora_b"), Some((1, LoraTarget::Down, true)));
        assert_eq!(parse_tensor_name("blk.0.attn_output.weight.lora_a"), Some((0, LoraTarget::O, false)));
        assert_eq!(parse_tensor_name("blk.0.attn_norm.weight"), None);
        assert_eq!(parse_tensor_name("token_embd.weight.lora_a"), None);
    }
}

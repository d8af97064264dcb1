//! Where a model comes from: `--model` as a path (which wins when it exists), a Hub id
//! fetched into the Hugging Face cache, or the default model; and what the cache holds, with
//! the family each model is and whether pagoda runs it (`pagoda models`).

use std::path::{Path, PathBuf};

use super::architecture::ModelConfig;
use super::files::{ModelError, default_model_path};
use super::gguf::GgufFile;
use crate::hub::inventory::{CachedSnapshot, scan};
use crate::hub::select::{GgufName, Plan, plan};
use crate::hub::{Freshness, HubId, HubSettings, ProgressStyle, fetch};

/// The file or directory to open for `model` (`None`: the default model). A path that exists
/// is used as it is; otherwise `model` is read as a Hub id and taken from the cache, or
/// downloaded into it (progress drawn as bars when `bars`, else logged).
pub fn resolve_model_path(model: Option<&Path>, bars: bool) -> Result<PathBuf, ModelError> {
    let Some(model) = model else { return default_model_path() };
    if model.exists() {
        return Ok(model.to_owned());
    }
    let id = hub_id(model)?;
    let style = if bars { ProgressStyle::Bar } else { ProgressStyle::Lines };
    Ok(fetch(&id, &HubSettings::from_env(style), Freshness::CacheFirst)?.path)
}

/// `model` read as a Hub id, or why it does not exist as a path nor parse as an id.
pub fn hub_id(model: &Path) -> Result<HubId, ModelError> {
    let text = model.to_str().unwrap_or_default();
    HubId::parse(text).map_err(|error| match error {
        crate::hub::HubError::InvalidId { reason, .. } => {
            ModelError::NotFound { path: model.to_owned(), reason }
        }
        other => other.into(),
    })
}

/// One model in the cache.
#[derive(Debug, Clone)]
pub struct CachedModel {
    /// Its id: `ORG/NAME` or `ORG/NAME:QUANT`, with `@COMMIT` when its snapshot is no
    /// branch's or tag's (an older one).
    pub id: String,
    /// The quant (a GGUF's), or the config's `torch_dtype` (safetensors).
    pub quant: String,
    /// Bytes of its files.
    pub bytes: u64,
    /// The architecture its config names (`llama`, `qwen3`, ...), when readable.
    pub family: Option<String>,
    /// Why pagoda cannot run it; `None` when it can.
    pub unsupported: Option<String>,
    /// The file or directory to open.
    pub path: PathBuf,
}

/// Every model in the Hugging Face cache at `cache_dir`: each GGUF (its split parts counted
/// as one) and each safetensors model of every snapshot.
pub fn cached_models(cache_dir: &Path) -> Vec<CachedModel> {
    let mut models = Vec::new();
    for snapshot in scan(cache_dir) {
        let listing: Vec<String> = snapshot.files.iter().map(|(f, _)| f.clone()).collect();
        let size_of = |files: &[String]| -> u64 {
            snapshot.files.iter().filter(|(f, _)| files.contains(f)).map(|(_, s)| s).sum()
        };
        let suffix = match snapshot.refs.iter().any(|r| r == "main") {
            true => String::new(),
            false => format!("@{}", snapshot.refs.first().unwrap_or(&snapshot.commit)),
        };
        let base = HubId::parse(&snapshot.repo);
        if let Ok(id) = &base
            && let Ok(Plan::Safetensors(_)) = plan(id, &listing)
        {
            let config = ModelConfig::from_hf_dir(&snapshot.dir);
            models.push(CachedModel {
                id: format!("{}{suffix}", snapshot.repo),
                quant: torch_dtype(&snapshot.dir),
                bytes: snapshot.files.iter().map(|(_, s)| s).sum(),
                family: hf_model_type(&snapshot.dir),
                unsupported: config.err().map(|e| e.to_string()),
                path: snapshot.dir.clone(),
            });
        }
        for file in gguf_models(&snapshot, &listing) {
            let parts = crate::hub::select::split_parts(&listing, &file);
            let tag = GgufName::parse(&file).map(|n| n.tag).unwrap_or_default();
            let path = snapshot.dir.join(&file);
            let (family, unsupported) = gguf_family(&path);
            let id = match tag.is_empty() {
                true => format!("{}/{file}{suffix}", snapshot.repo),
                false => format!("{}:{tag}{suffix}", snapshot.repo),
            };
            models.push(CachedModel { id, quant: tag, bytes: size_of(&parts), family, unsupported, path });
        }
    }
    models
}

/// The model GGUFs of a snapshot (first parts of split ones).
fn gguf_models(snapshot: &CachedSnapshot, listing: &[String]) -> Vec<String> {
    listing
        .iter()
        .filter(|f| GgufName::parse(f).is_some_and(|n| n.index == 1))
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap_or(f);
            !name.contains("mmproj") && !name.contains("imatrix")
        })
        .filter(|f| snapshot.dir.join(f).is_file())
        .cloned()
        .collect()
}

fn read_config(dir: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).ok()?).ok()
}

fn hf_model_type(dir: &Path) -> Option<String> {
    read_config(dir)?.get("model_type")?.as_str().map(str::to_owned)
}

fn torch_dtype(dir: &Path) -> String {
    read_config(dir)
        .and_then(|c| Some(c.get("torch_dtype").or(c.get("dtype"))?.as_str()?.to_owned()))
        .unwrap_or_default()
}

/// A GGUF's `general.architecture` and, when pagoda cannot run it, why.
fn gguf_family(path: &Path) -> (Option<String>, Option<String>) {
    match GgufFile::open(path) {
        Ok(gguf) => {
            let family = gguf.get_str("general.architecture").ok().flatten().map(str::to_owned);
            (family, ModelConfig::from_gguf(&gguf).err().map(|e| e.to_string()))
        }
        Err(error) => (None, Some(error.to_string())),
    }
}

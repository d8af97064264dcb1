//! Which files of a repository a model id needs: a safetensors model's config, tokenizer,
//! chat template and every shard its index names; or the GGUF whose name carries the quant,
//! chosen as llama.cpp's `-hf REPO:QUANT` chooses it, with all its split parts.

use super::error::HubError;
use super::id::{HubId, Selector};

/// The files an HF model directory is read from, besides its weights (those a repository
/// lacks are skipped; `config.json` is required).
pub const HF_METADATA_FILES: [&str; 6] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
];
/// A sharded safetensors model's index.
pub const SAFETENSORS_INDEX: &str = "model.safetensors.index.json";
/// An unsharded safetensors model.
pub const SAFETENSORS_SINGLE: &str = "model.safetensors";

/// What to fetch for an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// An HF model directory: these files, then the shards the index (if among them) names.
    Safetensors(Vec<String>),
    /// A GGUF model: its parts in order (one file unless split).
    Gguf(Vec<String>),
}

/// The plan for `id` over a commit's file `listing`.
pub fn plan(id: &HubId, listing: &[String]) -> Result<Plan, HubError> {
    let has = |name: &str| listing.iter().any(|f| f == name);
    let id_text = id.to_string();
    let gguf_list =
        || listing.iter().filter(|f| f.to_ascii_lowercase().ends_with(".gguf")).cloned().collect();
    match &id.selector {
        Selector::File(file) => {
            if !has(file) {
                return Err(HubError::FileNotFound { id: id_text, file: file.clone() });
            }
            Ok(Plan::Gguf(split_parts(listing, file)))
        }
        Selector::Quant(quant) => match best_gguf(listing, quant) {
            Some(file) => Ok(Plan::Gguf(split_parts(listing, &file))),
            None => Err(HubError::NoQuant { id: id_text, quant: quant.clone(), available: gguf_list() }),
        },
        Selector::Default => {
            if has("config.json") && (has(SAFETENSORS_INDEX) || has(SAFETENSORS_SINGLE)) {
                let weights = if has(SAFETENSORS_INDEX) { SAFETENSORS_INDEX } else { SAFETENSORS_SINGLE };
                let files = HF_METADATA_FILES.iter().copied().filter(|f| has(f)).chain([weights]);
                return Ok(Plan::Safetensors(files.map(str::to_owned).collect()));
            }
            match best_gguf(listing, "") {
                Some(file) => Ok(Plan::Gguf(split_parts(listing, &file))),
                None => Err(HubError::NoWeights { id: id_text, files: listing.to_vec() }),
            }
        }
    }
}

/// The shard files a `model.safetensors.index.json` names, in first-mention order.
pub fn index_shards(index: &str) -> Result<Vec<String>, String> {
    let json: serde_json::Value = serde_json::from_str(index).map_err(|e| e.to_string())?;
    let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or("no \"weight_map\" object")?;
    let mut shards: Vec<String> = Vec::new();
    for file in map.values() {
        let file = file.as_str().ok_or("a shard name is not a string")?;
        if file.is_empty() || file.contains(['/', '\\']) || file.starts_with('.') {
            return Err(format!("shard {file:?} is not a plain file name"));
        }
        if !shards.iter().any(|s| s == file) {
            shards.push(file.to_owned());
        }
    }
    Ok(shards)
}

/// A GGUF path taken apart as llama.cpp does: the name without `.gguf` and without the
/// split suffix, the quant tag at its end, and the part's index and count.
#[derive(Debug, PartialEq, Eq)]
pub struct GgufName {
    /// The path without `-0000i-of-0000n.gguf`.
    pub prefix: String,
    /// The quant at the end of the name (`Q4_K_M`), upper-cased; empty when none.
    pub tag: String,
    /// 1-based part index.
    pub index: u32,
    /// Number of parts.
    pub count: u32,
}

impl GgufName {
    /// Takes `path` apart; `None` unless it ends with `.gguf`.
    pub fn parse(path: &str) -> Option<Self> {
        let stem = path.strip_suffix(".gguf").or_else(|| path.strip_suffix(".GGUF"))?;
        let (mut prefix, mut index, mut count) = (stem, 1, 1);
        if let Some((head, tail)) = stem.rsplit_once("-of-")
            && let Some((head, part)) = head.rsplit_once('-')
            && tail.len() == 5
            && part.len() == 5
            && let (Ok(i), Ok(n)) = (part.parse::<u32>(), tail.parse::<u32>())
            && !head.is_empty()
        {
            (prefix, index, count) = (head, i, n);
        }
        let tag_start = prefix.rfind(['-', '.']).map(|i| i + 1);
        let tag = match tag_start {
            Some(i)
                if prefix[i..].chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && i < prefix.len() =>
            {
                prefix[i..].to_ascii_uppercase()
            }
            _ => String::new(),
        };
        Some(Self { prefix: prefix.to_owned(), tag, index, count })
    }
}

/// A GGUF that holds a model (not a projector, an importance matrix or a draft head).
fn is_model_gguf(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.ends_with(".gguf")
        && !["mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"].iter().any(|k| name.contains(k))
}

/// llama.cpp's choice for `REPO:TAG`: the first model GGUF (the first part of a split one)
/// whose path contains the tag followed by `.` or `-`, case-insensitively; with no tag,
/// `Q4_K_M`, then `Q8_0`, then the first model GGUF.
pub fn best_gguf(listing: &[String], tag: &str) -> Option<String> {
    let first_part = |f: &&String| GgufName::parse(f).is_some_and(|n| n.count <= 1 || n.index == 1);
    let matching = |tag: &str| {
        let tag = tag.to_ascii_uppercase();
        listing.iter().filter(first_part).find(|f| {
            let upper = f.to_ascii_uppercase();
            is_model_gguf(f) && (upper.contains(&format!("{tag}.")) || upper.contains(&format!("{tag}-")))
        })
    };
    if !tag.is_empty() {
        return matching(tag).cloned();
    }
    matching("Q4_K_M")
        .or_else(|| matching("Q8_0"))
        .or_else(|| listing.iter().filter(first_part).find(|f| is_model_gguf(f)))
        .cloned()
}

/// Every part of the split GGUF `file` belongs to, in order (just `file` when unsplit).
pub fn split_parts(listing: &[String], file: &str) -> Vec<String> {
    let Some(name) = GgufName::parse(file).filter(|n| n.count > 1) else {
        return vec![file.to_owned()];
    };
    let mut parts: Vec<(u32, String)> = listing
        .iter()
        .filter_map(|f| {
            let n = GgufName::parse(f)?;
            (n.count == name.count && n.prefix == name.prefix).then(|| (n.index, f.clone()))
        })
        .collect();
    parts.sort();
    parts.into_iter().map(|(_, f)| f).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_come_apart_as_llama_cpp_takes_them() {
        let n = GgufName::parse("dir/Model-Q4_K_M-00002-of-00003.gguf").unwrap();
        assert_eq!(
            n,
            GgufName { prefix: "dir/Model-Q4_K_M".into(), tag: "Q4_K_M".into(), index: 2, count: 3 }
        );
        assert_eq!(GgufName::parse("SmolLM2.q4_1.gguf").unwrap().tag, "Q4_1");
        assert_eq!(GgufName::parse("model.bin"), None);
    }

    #[test]
    fn quants_are_chosen_as_llama_cpp_chooses() {
        let files = listing(&[
            "README.md",
            "m-IQ4_XS.gguf",
            "m-Q4_K_M.gguf",
            "m-Q4_K_S.gguf",
            "m-Q8_0-00001-of-00002.gguf",
            "m-Q8_0-00002-of-00002.gguf",
            "mmproj-Q8_0.gguf",
        ]);
        assert_eq!(best_gguf(&files, "q4_k_s").as_deref(), Some("m-Q4_K_S.gguf"));
        assert_eq!(best_gguf(&files, "Q4_K").as_deref(), None);
        assert_eq!(best_gguf(&files, "").as_deref(), Some("m-Q4_K_M.gguf"));
        assert_eq!(best_gguf(&files, "Q8_0").as_deref(), Some("m-Q8_0-00001-of-00002.gguf"));
        assert_eq!(
            split_parts(&files, "m-Q8_0-00001-of-00002.gguf"),
            ["m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"]
        );
        let id = HubId::parse("o/n:Q5_K_M").unwrap();
        assert!(
            matches!(plan(&id, &files), Err(HubError::NoQuant { available, .. }) if available.len() == 6)
        );
    }

    #[test]
    fn safetensors_repositories_need_config_tokenizer_and_weights() {
        let files =
            listing(&["config.json", "tokenizer.json", "README.md", "model.safetensors", "m-Q4_0.gguf"]);
        let id = HubId::parse("o/n").unwrap();
        assert_eq!(
            plan(&id, &files).unwrap(),
            Plan::Safetensors(listing(&["config.json", "tokenizer.json", "model.safetensors"]))
        );
        assert_eq!(
            plan(&HubId::parse("o/n:Q4_0").unwrap(), &files).unwrap(),
            Plan::Gguf(listing(&["m-Q4_0.gguf"]))
        );
        assert!(matches!(plan(&id, &listing(&["README.md"])), Err(HubError::NoWeights { .. })));
        let index =
            r#"{"weight_map": {"a": "s-1.safetensors", "b": "s-2.safetensors", "c": "s-1.safetensors"}}"#;
        assert_eq!(index_shards(index).unwrap(), ["s-1.safetensors", "s-2.safetensors"]);
        assert!(index_shards(r#"{"weight_map": {"a": "../x"}}"#).is_err());
    }
}

//! Model ids on the Hub: `ORG/NAME`, `ORG/NAME:QUANT`, `ORG/NAME/FILE.gguf`, each with an
//! optional `@REVISION` (a branch, tag or commit).

use std::fmt;

use super::error::HubError;

/// Which files of a repository the id asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The safetensors model (config, tokenizer, every shard), else the GGUF llama.cpp picks
    /// by default (Q4_K_M, then Q8_0, then the first).
    Default,
    /// The GGUF whose name carries this quant (`Q4_K_M`), all its split parts.
    Quant(String),
    /// This file of the repository (a `.gguf`), all its split parts.
    File(String),
}

/// A parsed Hub model id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubId {
    /// `ORG/NAME`.
    pub repo: String,
    /// The branch, tag or commit; `None` is `main`.
    pub revision: Option<String>,
    /// Which files.
    pub selector: Selector,
}

/// The revision an id without `@REVISION` means.
pub const DEFAULT_REVISION: &str = "main";

impl HubId {
    /// Parses `ORG/NAME[:QUANT][@REVISION]` or `ORG/NAME/FILE.gguf[@REVISION]` (the quant may
    /// also follow the revision: `ORG/NAME@v2:Q4_K_M`).
    pub fn parse(text: &str) -> Result<Self, HubError> {
        let bad = |reason: &str| HubError::InvalidId { id: text.to_owned(), reason: reason.to_owned() };
        let (main, mut revision) = match text.split_once('@') {
            Some((main, revision)) => (main, Some(revision.to_owned())),
            None => (text, None),
        };
        let mut quant = None;
        if let Some(rev) = &revision
            && let Some((rev, q)) = rev.split_once(':')
        {
            quant = Some(q.to_owned());
            revision = Some(rev.to_owned());
        }
        let (main, q) = match main.split_once(':') {
            Some((main, q)) => (main, Some(q.to_owned())),
            None => (main, None),
        };
        if q.is_some() && quant.is_some() {
            return Err(bad("two quants"));
        }
        let quant = q.or(quant);
        let parts: Vec<&str> = main.split('/').collect();
        if parts.len() < 2 {
            return Err(bad("no ORG/ part"));
        }
        for part in &parts[..2] {
            check_name(part).map_err(|reason| bad(&reason))?;
        }
        let repo = format!("{}/{}", parts[0], parts[1]);
        let selector = match (parts.len(), quant) {
            (2, None) => Selector::Default,
            (2, Some(quant)) => {
                if quant.is_empty() || !quant.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(bad("a quant is letters, digits and `_`, e.g. Q4_K_M"));
                }
                Selector::Quant(quant.to_ascii_uppercase())
            }
            (_, Some(_)) => return Err(bad("a file and a quant")),
            (_, None) => {
                let file = parts[2..].join("/");
                if parts[2..].iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
                    return Err(bad("the file path has an empty, `.` or `..` part"));
                }
                if !file.to_ascii_lowercase().ends_with(".gguf") {
                    return Err(bad("a file named after ORG/NAME must be a .gguf"));
                }
                Selector::File(file)
            }
        };
        if let Some(rev) = &revision {
            let ok = !rev.is_empty()
                && !rev.starts_with('/')
                && !rev.ends_with('/')
                && !rev.contains("..")
                && rev.chars().all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
            if !ok {
                return Err(bad("a revision is a branch, tag or commit (letters, digits, `._-/`)"));
            }
        }
        Ok(Self { repo, revision, selector })
    }

    /// The revision asked for, `main` when none was.
    pub fn revision(&self) -> &str {
        self.revision.as_deref().unwrap_or(DEFAULT_REVISION)
    }
}

/// An organisation or repository name as the Hub allows them.
fn check_name(part: &str) -> Result<(), String> {
    if part.is_empty() || part.len() > 96 {
        return Err("ORG and NAME are 1 to 96 characters".into());
    }
    if !part.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
        return Err(format!("`{part}` holds characters other than letters, digits and `._-`"));
    }
    if part.starts_with(['.', '-'])
        || part.ends_with(['.', '-'])
        || part.contains("--")
        || part.contains("..")
    {
        return Err(format!("`{part}` starts or ends with `.` or `-`, or holds `--` or `..`"));
    }
    Ok(())
}

impl fmt::Display for HubId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repo)?;
        match &self.selector {
            Selector::Default => {}
            Selector::Quant(quant) => write!(f, ":{quant}")?,
            Selector::File(file) => write!(f, "/{file}")?,
        }
        match &self.revision {
            Some(revision) => write!(f, "@{revision}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(repo: &str, revision: Option<&str>, selector: Selector) -> HubId {
        HubId { repo: repo.into(), revision: revision.map(Into::into), selector }
    }

    #[test]
    fn parses_every_form() {
        assert_eq!(HubId::parse("Qwen/Qwen3-8B").unwrap(), id("Qwen/Qwen3-8B", None, Selector::Default));
        assert_eq!(
            HubId::parse("unsloth/gpt-oss-20b-GGUF:q4_k_m").unwrap(),
            id("unsloth/gpt-oss-20b-GGUF", None, Selector::Quant("Q4_K_M".into()))
        );
        assert_eq!(
            HubId::parse("org/name/sub/model-Q8_0.gguf@v1.0").unwrap(),
            id("org/name", Some("v1.0"), Selector::File("sub/model-Q8_0.gguf".into()))
        );
        for text in ["org/name:Q4_1@refs/pr/3", "org/name@refs/pr/3:Q4_1"] {
            assert_eq!(
                HubId::parse(text).unwrap(),
                id("org/name", Some("refs/pr/3"), Selector::Quant("Q4_1".into())),
                "{text}"
            );
        }
        assert_eq!(HubId::parse("org/name:Q4_1@dev").unwrap().to_string(), "org/name:Q4_1@dev");
        assert_eq!(HubId::parse("org/name").unwrap().revision(), "main");
    }

    #[test]
    fn refuses_malformed_ids() {
        for text in [
            "name",
            "model.gguf",
            "/abs/path.gguf",
            "./org/name",
            "org//name",
            "org/name/",
            "org/na me",
            "org/-name",
            "org/na--me",
            "org/name:",
            "org/name:Q4-K",
            "org/name:Q4@v:Q5",
            "org/name/file.bin",
            "org/name/../x.gguf",
            "org/name/f.gguf:Q4_0",
            "org/name@",
            "org/name@../x",
            "org/name@a b",
        ] {
            assert!(matches!(HubId::parse(text), Err(HubError::InvalidId { .. })), "{text}");
        }
    }
}

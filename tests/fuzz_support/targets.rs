//! The fuzz targets: each takes one mutated input through a loading or parsing path and
//! reports a short outcome (`ok` or the error, digits dropped) that tells inputs apart.

use std::path::PathBuf;

use pagoda::model::architecture::ModelConfig;
use pagoda::model::chat::ChatTemplate;
use pagoda::model::gguf::GgufFile;
use pagoda::model::weights::{LlamaWeights, WeightFile};
use pagoda::model::{ChatMessage, ModelFiles, Tokenizer};
use pagoda::server::limits::ServerLimits;
use pagoda::server::openai::{ChatCompletionRequest, CompletionRequest, PromptInput};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::{mutate, seeds};

/// Text the tokenizer targets encode and decode.
const SAMPLE: &str = "Hello, world! <|im_start|>user\n123 naïve 日本 \u{1F600}<|im_end|>";
/// Tokens worth splicing into chat templates (the last ones make values grow).
const JINJA: [&str; 21] = [
    "{{",
    "}}",
    "{%",
    "%}",
    "{% for m in messages %}",
    "{% endfor %}",
    "{% if true %}",
    "{% endif %}",
    "range(100000)",
    "'x' * 1000000",
    "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "loop.index",
    "| trim",
    "raise_exception('x')",
    "{% set ns = namespace(s='x' * 1000000) %}",
    "{% set ns.s = ns.s ~ ns.s %}",
    "{% set ns.s = ns.s|replace('x', 'xx') %}",
    "| indent(width=100000000)",
    "| tojson(indent=100000000)",
    "([ns.s] * 100)|join",
    "{% set ns.s %}{{ ns.s }}{{ ns.s }}{% endset %}",
];

/// One fuzz target.
pub trait Target {
    /// Its name on the command line.
    fn name(&self) -> &'static str;
    /// Its seed inputs.
    fn seeds(&self) -> Vec<Vec<u8>>;
    /// A mutation of `input`; `other` is another input to splice from.
    fn mutate(&self, rng: &mut ChaCha8Rng, input: &[u8], other: &[u8]) -> Vec<u8>;
    /// Runs `input`; `ok` or the error it met.
    fn run(&mut self, input: &[u8]) -> String;
}

/// Every target.
pub fn all() -> Vec<Box<dyn Target>> {
    vec![
        Box::new(Gguf),
        Box::new(GgufTokenizer),
        Box::new(HfDirectory::new()),
        Box::new(Chat),
        Box::new(ServerBody),
    ]
}

/// An error's outcome line: its text without digits, at most 100 bytes.
fn outcome<E: std::fmt::Display>(result: Result<(), E>) -> String {
    match result {
        Ok(()) => "ok".into(),
        Err(error) => error.to_string().chars().filter(|c| !c.is_ascii_digit()).take(100).collect(),
    }
}

fn conversations() -> [Vec<ChatMessage>; 2] {
    [
        vec![ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Hi!")],
        vec![
            ChatMessage::new("user", "a"),
            ChatMessage::new("assistant", "b"),
            ChatMessage::new("user", SAMPLE),
        ],
    ]
}

fn gguf_mutate(rng: &mut ChaCha8Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    if rng.random_bool(0.5)
        && let Some(mutated) = mutate::gguf(rng, input)
    {
        return mutated;
    }
    mutate::bytes(rng, input, other, &["GGUF", "general.alignment", "tokenizer.ggml."], 8192)
}

/// Tokenizes and detokenizes [`SAMPLE`].
fn exercise(tokenizer: &Tokenizer) -> Result<(), pagoda::model::tokenizer::TokenizerError> {
    let ids = tokenizer.encode_prompt(SAMPLE)?;
    tokenizer.decode(&ids, false)?;
    tokenizer.decode_bytes(&ids, true)?;
    for id in ids.iter().take(8) {
        tokenizer.token_bytes(*id);
        tokenizer.id_to_piece(*id);
    }
    Ok(())
}

/// Renders both conversations.
fn render(template: &ChatTemplate) -> Result<(), pagoda::model::chat::ChatError> {
    for conversation in conversations() {
        template.render(&conversation, true)?;
    }
    Ok(())
}

/// The GGUF reader (header, every metadata type, tensor infos, offsets, alignment), the
/// config it yields, and the weight set's shape checks.
struct Gguf;

impl Target for Gguf {
    fn name(&self) -> &'static str {
        "gguf"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        seeds::gguf_files()
    }

    fn mutate(&self, rng: &mut ChaCha8Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
        gguf_mutate(rng, input, other)
    }

    fn run(&mut self, input: &[u8]) -> String {
        let file = match GgufFile::from_bytes(input.to_vec()) {
            Ok(file) => file,
            Err(error) => return outcome::<_>(Err(error)),
        };
        for key in file.metadata_keys() {
            let _ = (file.get_int(key), file.get_float(key), file.get_str(key), file.get_bool(key));
            let _ = (file.get_str_array(key), file.get_int_array(key));
        }
        for info in file.tensor_infos() {
            let _ = file.tensor(&info.name).map(|view| view.data.len());
        }
        let config = match ModelConfig::from_gguf(&file) {
            Ok(config) => config,
            Err(error) => return outcome::<_>(Err(error)),
        };
        let weights = WeightFile::Gguf(file.into());
        outcome(LlamaWeights::from_file(&weights, &config).map(|_| ()))
    }
}

/// The GGUF tokenizer builder and chat template, on the reader's metadata.
struct GgufTokenizer;

impl Target for GgufTokenizer {
    fn name(&self) -> &'static str {
        "gguf-tokenizer"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        seeds::gguf_files()
    }

    fn mutate(&self, rng: &mut ChaCha8Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
        gguf_mutate(rng, input, other)
    }

    fn run(&mut self, input: &[u8]) -> String {
        let file = match GgufFile::from_bytes(input.to_vec()) {
            Ok(file) => file,
            Err(error) => return outcome::<_>(Err(error)),
        };
        let tokenizer = match Tokenizer::from_gguf(&file) {
            Ok(tokenizer) => tokenizer,
            Err(error) => return outcome::<_>(Err(error)),
        };
        if let Err(error) = exercise(&tokenizer) {
            return outcome::<_>(Err(error));
        }
        let bos = tokenizer.token_text(tokenizer.bos_token_id());
        let eos = tokenizer.token_text(tokenizer.eos_token_id());
        outcome(ChatTemplate::from_gguf(&file, &bos, &eos).and_then(|template| render(&template)))
    }
}

/// An HF directory (config.json, tokenizer.json, tokenizer_config.json, safetensors)
/// opened with one file mutated. Input: the file's index, then its bytes.
struct HfDirectory {
    dir: tempfile::TempDir,
    files: Vec<(String, Vec<u8>)>,
    /// The file a run mutated and has not restored yet (it panicked).
    dirty: Option<usize>,
}

impl HfDirectory {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let files = seeds::hf_files();
        for (name, bytes) in &files {
            std::fs::write(dir.path().join(name), bytes).expect("a tiny model file");
        }
        Self { dir, files, dirty: None }
    }

    fn path(&self, index: usize) -> PathBuf {
        self.dir.path().join(&self.files[index].0)
    }
}

impl Target for HfDirectory {
    fn name(&self) -> &'static str {
        "hf"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        self.files
            .iter()
            .enumerate()
            .map(|(index, (_, bytes))| [&[index as u8][..], bytes].concat())
            .collect()
    }

    fn mutate(&self, rng: &mut ChaCha8Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
        let (index, body) = input.split_first().expect("inputs start with a file index");
        let is_json = self.files.get(*index as usize).is_some_and(|(name, _)| name.ends_with(".json"));
        let mutated = match serde_json::from_slice(body) {
            Ok(value) if is_json && rng.random_bool(0.6) => {
                serde_json::to_vec(&mutate::json(rng, &value)).unwrap_or_default()
            }
            _ => mutate::bytes(
                rng,
                body,
                other.get(1..).unwrap_or_default(),
                &["\"", "{", "}", "[", "null"],
                4096,
            ),
        };
        [&[*index][..], &mutated].concat()
    }

    fn run(&mut self, input: &[u8]) -> String {
        let Some((&index, body)) = input.split_first() else {
            return "empty".into();
        };
        if let Some(dirty) = self.dirty.take() {
            std::fs::write(self.path(dirty), &self.files[dirty].1).expect("the file is restored");
        }
        let index = index as usize % self.files.len();
        let path = self.path(index);
        std::fs::write(&path, body).expect("the mutated file is written");
        self.dirty = Some(index);
        let result = ModelFiles::open(self.dir.path()).map_err(|e| e.to_string()).and_then(|model| {
            exercise(&model.tokenizer).map_err(|e| e.to_string())?;
            model.chat_template.as_ref().map_or(Ok(()), render).map_err(|e| e.to_string())
        });
        std::fs::write(&path, &self.files[index].1).expect("the file is restored");
        self.dirty = None;
        outcome(result)
    }
}

/// Chat-template compilation and rendering. Input: the template's text.
struct Chat;

impl Target for Chat {
    fn name(&self) -> &'static str {
        "chat"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        seeds::chat_templates().into_iter().map(String::into_bytes).collect()
    }

    fn mutate(&self, rng: &mut ChaCha8Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
        mutate::bytes(rng, input, other, &JINJA, usize::MAX)
    }

    fn run(&mut self, input: &[u8]) -> String {
        let source = String::from_utf8_lossy(input);
        outcome(ChatTemplate::new(&source, "<s>", "</s>").and_then(|template| render(&template)))
    }
}

/// The server's JSON bodies: parsing and every check before a request reaches the engine.
struct ServerBody;

impl Target for ServerBody {
    fn name(&self) -> &'static str {
        "server"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        seeds::request_bodies()
    }

    fn mutate(&self, rng: &mut ChaCha8Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
        match serde_json::from_slice(input) {
            Ok(value) if rng.random_bool(0.7) => {
                serde_json::to_vec(&mutate::json(rng, &value)).unwrap_or_default()
            }
            _ => mutate::bytes(
                rng,
                input,
                other,
                &["\"", "{", "}", "[", "]", "null", "1e999", "-0"],
                usize::MAX,
            ),
        }
    }

    fn run(&mut self, input: &[u8]) -> String {
        let limits = ServerLimits::default();
        let completion =
            serde_json::from_slice::<CompletionRequest>(input).map_err(|e| e.to_string()).and_then(|r| {
                r.check_unsupported().map_err(|e| e.message.clone())?;
                let prompts = match &r.prompt {
                    PromptInput::Text(_) | PromptInput::Tokens(_) => 1,
                    PromptInput::Texts(texts) => texts.len(),
                    PromptInput::TokenLists(lists) => lists.len(),
                };
                let params =
                    r.sampling.to_params(r.max_tokens.unwrap_or(16), r.logprobs).map_err(|e| e.message)?;
                let n = r.sampling.num_choices().map_err(|e| e.message)?;
                limits.check(prompts, n, &params).map_err(|e| e.message)
            });
        let chat =
            serde_json::from_slice::<ChatCompletionRequest>(input).map_err(|e| e.to_string()).and_then(|r| {
                for message in &r.messages {
                    message.to_chat_message().map_err(|e| e.message)?;
                }
                let logprobs = r.logprobs.then(|| r.top_logprobs.unwrap_or(0));
                let max_tokens = r.max_completion_tokens.or(r.max_tokens).unwrap_or(8192);
                let params = r.sampling.to_params(max_tokens, logprobs).map_err(|e| e.message)?;
                let n = r.sampling.num_choices().map_err(|e| e.message)?;
                limits.check(1, n, &params).map_err(|e| e.message)
            });
        format!("{} / {}", outcome(completion), outcome(chat))
    }
}

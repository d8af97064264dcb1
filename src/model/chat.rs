//! Chat templates (Jinja, rendered with minijinja the way HF transformers renders them:
//! `trim_blocks` and `lstrip_blocks` on, `raise_exception` available, Python string methods).
//!
//! A template comes from a stranger's model file, so rendering is bounded: at most
//! [`TEMPLATE_FUEL`] instructions, [`TEMPLATE_RECURSION_LIMIT`] levels of recursion and
//! [`MAX_RENDERED_BYTES`] of output; past any of them it stops with an error, whose
//! message is cut to [`MAX_ERROR_BYTES`]. minijinja caps one string repetition at 100 MB
//! but has no cap on intermediate values, so a template that keeps doubling a string can
//! still allocate a lot before its fuel runs out.

use std::path::Path;

use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};

use super::gguf::{GgufError, GgufFile};

const TEMPLATE_NAME: &str = "chat";
/// Instructions one rendering may execute (a real template needs a few hundred per message).
pub const TEMPLATE_FUEL: u64 = 5_000_000;
/// Levels of recursion (loops, macros, includes) one rendering may reach.
pub const TEMPLATE_RECURSION_LIMIT: usize = 200;
/// Bytes one rendering may produce.
pub const MAX_RENDERED_BYTES: usize = 16 << 20;
/// Longest error message a template's failure is reported with, in bytes.
pub const MAX_ERROR_BYTES: usize = 1024;
/// GGUF metadata key holding the chat template.
pub const GGUF_CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The message text.
    pub content: String,
    /// An assistant's tool calls, in OpenAI's shape (`{"id", "type": "function",
    /// "function": {"name", "arguments"}}`, the arguments as a JSON object).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<serde_json::Value>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }
}

/// Why a chat template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The model ships no chat template.
    #[error("the model has no chat template")]
    NoTemplate,
    /// The template does not parse.
    #[error("invalid chat template: {0}")]
    Syntax(String),
    /// Rendering failed (including the template's own `raise_exception`).
    #[error("chat template failed: {0}")]
    Render(String),
    /// Rendering ran more than [`TEMPLATE_FUEL`] instructions.
    #[error("chat template stopped: it ran more than {TEMPLATE_FUEL} instructions")]
    OutOfFuel,
    /// Rendering produced more than [`MAX_RENDERED_BYTES`].
    #[error("chat template stopped: its output exceeds {MAX_RENDERED_BYTES} bytes")]
    OutputTooLarge,
    /// Reading `tokenizer_config.json` failed.
    #[error("cannot read chat template: {0}")]
    Read(String),
    /// Reading GGUF metadata failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// A compiled chat template with the model's BOS and EOS texts.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    source: String,
}

impl ChatTemplate {
    /// Compile `source`; `bos_token` and `eos_token` are the texts the template may insert.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_recursion_limit(TEMPLATE_RECURSION_LIMIT);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, clip(&msg).to_owned()))
        });
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| ChatError::Syntax(e.to_string()))?;
        Ok(Self {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            source: source.to_owned(),
        })
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// True when the template reads a `tools` variable (so tool definitions reach the model
    /// through it).
    pub fn reads_tools(&self) -> bool {
        self.source.contains("tools")
    }

    /// The template from a GGUF file's `tokenizer.chat_template`.
    pub fn from_gguf(gguf: &GgufFile, bos_token: &str, eos_token: &str) -> Result<Self, ChatError> {
        let source = gguf.get_str(GGUF_CHAT_TEMPLATE_KEY)?.ok_or(ChatError::NoTemplate)?;
        Self::new(source, bos_token, eos_token)
    }

    /// The template of an HF directory: `chat_template.jinja`, else `chat_template` of
    /// `tokenizer_config.json` (a string, or a list of named templates where "default" wins).
    pub fn from_hf_dir(dir: impl AsRef<Path>, bos_token: &str, eos_token: &str) -> Result<Self, ChatError> {
        let dir = dir.as_ref();
        let jinja = dir.join("chat_template.jinja");
        if jinja.exists() {
            let source = std::fs::read_to_string(&jinja)
                .map_err(|e| ChatError::Read(format!("{}: {e}", jinja.display())))?;
            return Self::new(&source, bos_token, eos_token);
        }
        let config_path = dir.join("tokenizer_config.json");
        if !config_path.exists() {
            return Err(ChatError::NoTemplate);
        }
        let read_err = |e: String| ChatError::Read(format!("{}: {e}", config_path.display()));
        let text = std::fs::read_to_string(&config_path).map_err(|e| read_err(e.to_string()))?;
        let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| read_err(e.to_string()))?;
        let source = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template")?.as_str())
                .ok_or(ChatError::NoTemplate)?
                .to_owned(),
            _ => return Err(ChatError::NoTemplate),
        };
        Self::new(&source, bos_token, eos_token)
    }

    /// The prompt text for `messages`; with `add_generation_prompt`, ready for the
    /// assistant's reply.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, ChatError> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// Like [`Self::render`], with `tools` (OpenAI tool definitions) in the template's
    /// `tools` variable.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let template = self.env.get_template(TEMPLATE_NAME).map_err(|e| ChatError::Render(e.to_string()))?;
        let ctx = minijinja::context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        let mut out = BoundedWriter { bytes: Vec::new(), overflowed: false };
        match template.render_captured_to(ctx, &mut out) {
            Ok(_) => String::from_utf8(out.bytes).map_err(|e| ChatError::Render(e.to_string())),
            Err(_) if out.overflowed => Err(ChatError::OutputTooLarge),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(ChatError::OutOfFuel),
            Err(e) => Err(ChatError::Render(clip(&e.to_string()).to_owned())),
        }
    }
}

/// At most [`MAX_ERROR_BYTES`] of an error message (a template may raise one of megabytes).
fn clip(message: &str) -> &str {
    let mut end = message.len().min(MAX_ERROR_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// Collects rendered bytes and refuses any past [`MAX_RENDERED_BYTES`].
struct BoundedWriter {
    bytes: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for BoundedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_RENDERED_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("rendered output too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_exception_becomes_a_render_error() {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
        assert!(matches!(t.render(&[], false), Err(ChatError::Render(m)) if m.contains("no system role")));
    }

    #[test]
    fn python_string_methods_and_bos_work() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{{ m.content.strip() }}{% endfor %}",
            "<s>",
            "",
        )
        .unwrap();
        assert_eq!(t.render(&[ChatMessage::new("user", "  hi ")], false).unwrap(), "<s>hi");
    }

    #[test]
    fn endless_loops_huge_output_and_deep_recursion_stop_with_errors() {
        let user = [ChatMessage::new("user", "hi")];
        let endless = "{% for m in messages %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{% endfor %}";
        let t = ChatTemplate::new(endless, "", "").unwrap();
        assert!(matches!(t.render(&user, false), Err(ChatError::OutOfFuel)));
        let huge = "{% set s = 'x' * 10000000 %}{% for i in range(10) %}{{ s }}{% endfor %}";
        let t = ChatTemplate::new(huge, "", "").unwrap();
        assert!(matches!(t.render(&user, false), Err(ChatError::OutputTooLarge)));
        let raised = "{{ raise_exception('é' * 1000000) }}";
        let t = ChatTemplate::new(raised, "", "").unwrap();
        assert!(matches!(t.render(&user, false), Err(ChatError::Render(m)) if m.len() <= MAX_ERROR_BYTES));
        let recursive = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
        let t = ChatTemplate::new(recursive, "", "").unwrap();
        assert!(matches!(t.render(&user, false), Err(ChatError::Render(m)) if m.contains("recursion")));
    }

    #[test]
    fn syntax_errors_are_reported() {
        assert!(matches!(ChatTemplate::new("{% for %}", "", ""), Err(ChatError::Syntax(_))));
    }
}

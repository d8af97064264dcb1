//! Chat templates (Jinja, rendered with minijinja the way HF transformers renders them:
//! `trim_blocks` and `lstrip_blocks` on, `raise_exception` available, Python string methods).

use std::path::Path;

use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};

use super::gguf::{GgufError, GgufFile};

const TEMPLATE_NAME: &str = "chat";
/// GGUF metadata key holding the chat template.
pub const GGUF_CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into() }
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
}

impl ChatTemplate {
    /// Compile `source`; `bos_token` and `eos_token` are the texts the template may insert.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| ChatError::Syntax(e.to_string()))?;
        Ok(Self { env, bos_token: bos_token.to_owned(), eos_token: eos_token.to_owned() })
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
        let template = self.env.get_template(TEMPLATE_NAME).map_err(|e| ChatError::Render(e.to_string()))?;
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        template.render(ctx).map_err(|e| ChatError::Render(e.to_string()))
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
    fn syntax_errors_are_reported() {
        assert!(matches!(ChatTemplate::new("{% for %}", "", ""), Err(ChatError::Syntax(_))));
    }
}

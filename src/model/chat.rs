//! Chat templates (Jinja, rendered with minijinja the way HF transformers renders them:
//! `trim_blocks` and `lstrip_blocks` on, `raise_exception` and `strftime_now` available, Python string methods).
//!
//! A template comes from a stranger's model file, so rendering is bounded: at most
//! [`TEMPLATE_FUEL`] instructions, [`TEMPLATE_RECURSION_LIMIT`] levels of recursion,
//! [`MAX_RENDERED_BYTES`] of output, and strings and lists of at most
//! [`MAX_RENDERED_BYTES`] each and [`TEMPLATE_ALLOCATION_LIMIT`] held at once (each charged
//! before it is made: see `budget` for how), and values nested at most
//! [`MAX_VALUE_DEPTH`] deep, with no namespace or macro inside a namespace (so no value
//! holds itself, and none recurses deep enough to overflow the stack when displayed or
//! dropped); past any of them it stops with an error,
//! whose message is cut to [`MAX_ERROR_BYTES`]. Templates that use `autoescape`, the
//! reserved names `__pagoda*`, `in` within a chain of comparisons, a chain of more than
//! about 140 `+`, `*` or `~` in one expression, or a tag of more than 4096 tokens are
//! refused.
//!
//! When a template loads, `probe` finds what it renders itself ([`ChatCapabilities`]: a
//! system role, tools, tool calls and results, non-alternating turns); every rendering
//! then goes through `polyfill`, which writes what the template lacks into turns it
//! accepts and leaves a conversation that needs nothing untouched.

mod budget;
mod clock;
mod polyfill;
mod probe;
mod rewrite;
mod tool_format;

use std::path::Path;

use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};

pub use self::probe::ChatCapabilities;
pub use self::tool_format::{ParsedCall, ToolFormat};
use super::gguf::{GgufError, GgufFile};

const TEMPLATE_NAME: &str = "chat";
/// Instructions one rendering may execute (a real template needs a few hundred per message).
pub const TEMPLATE_FUEL: u64 = 5_000_000;
/// Levels of recursion (loops, macros, includes) one rendering may reach.
pub const TEMPLATE_RECURSION_LIMIT: usize = 200;
/// Bytes one rendering may produce, and the largest string or list it may make.
pub const MAX_RENDERED_BYTES: usize = 16 << 20;
/// Bytes of strings and lists one rendering may hold, output included: what it made,
/// less the strings of 4 KiB or more it dropped since.
pub const TEMPLATE_ALLOCATION_LIMIT: usize = 64 << 20;
/// How deep lists, maps and namespaces may nest in one rendering (real templates nest
/// theirs a few levels deep).
pub const MAX_VALUE_DEPTH: usize = 32;
/// Longest error message a template's failure is reported with, in bytes.
pub const MAX_ERROR_BYTES: usize = 1024;
/// GGUF metadata key holding the chat template.
pub const GGUF_CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// Extra variables a rendering passes to the template (vLLM's `chat_template_kwargs`:
/// `enable_thinking`, `reasoning_effort`, ...). They never replace the variables the
/// rendering sets itself (`messages`, `tools`, `add_generation_prompt`, `bos_token`,
/// `eos_token`).
pub type TemplateKwargs = serde_json::Map<String, serde_json::Value>;

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
    /// An assistant's reasoning, apart from its content (templates such as Qwen3's render it
    /// as `message.reasoning_content`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_content: None,
        }
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
    /// The conversation needs something the template does not render and no polyfill
    /// can write into the turns it accepts.
    #[error("the chat template does not support {0}")]
    Unsupported(&'static str),
    /// Rendering ran more than [`TEMPLATE_FUEL`] instructions.
    #[error("chat template stopped: it ran more than {TEMPLATE_FUEL} instructions")]
    OutOfFuel,
    /// Rendering produced more than [`MAX_RENDERED_BYTES`].
    #[error("chat template stopped: its output exceeds {MAX_RENDERED_BYTES} bytes")]
    OutputTooLarge,
    /// Rendering would have made a string or list over [`MAX_RENDERED_BYTES`], or held
    /// more than [`TEMPLATE_ALLOCATION_LIMIT`] bytes of them.
    #[error(
        "chat template stopped: it would make a value over {MAX_RENDERED_BYTES} bytes or hold over {TEMPLATE_ALLOCATION_LIMIT} bytes of values"
    )]
    MemoryLimit,
    /// Rendering would have nested values more than [`MAX_VALUE_DEPTH`] deep (or looked at
    /// too many to tell), or put a namespace or a macro in a namespace: displaying or
    /// dropping such a value could overflow the stack.
    #[error(
        "chat template stopped: it would nest values over {MAX_VALUE_DEPTH} deep, or put a namespace or a macro in a namespace"
    )]
    TooDeep,
    /// Reading `tokenizer_config.json` failed.
    #[error("cannot read chat template: {0}")]
    Read(String),
    /// Reading GGUF metadata failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// A compiled chat template with the model's BOS and EOS texts, and what it supports.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    source: String,
    capabilities: ChatCapabilities,
    tool_format: ToolFormat,
    clock: clock::TemplateClock,
}

impl ChatTemplate {
    /// Compile `source` and probe what it supports; `bos_token` and `eos_token` are the
    /// texts the template may insert.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatError> {
        let syntax = |e: minijinja::Error| ChatError::Syntax(e.to_string());
        let rewritten = rewrite::rewrite(TEMPLATE_NAME, source).map_err(syntax)?;
        let mut env = budget::environment();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_recursion_limit(TEMPLATE_RECURSION_LIMIT);
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, clip(&msg).to_owned()))
        });
        let clock = clock::TemplateClock::system();
        let template_clock = clock.clone();
        env.add_function("strftime_now", move |format: String| template_clock.strftime_now(&format));
        env.add_template_owned(TEMPLATE_NAME, rewritten).map_err(syntax)?;
        let mut template = Self {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            source: source.to_owned(),
            capabilities: ChatCapabilities::default(),
            tool_format: ToolFormat::Hermes,
            clock,
        };
        let none = TemplateKwargs::new();
        template.capabilities = ChatCapabilities::probe(&|messages, tools| {
            template.render_as_written(messages, tools, &none, false)
        });
        template.tool_format = ToolFormat::of(source, template.capabilities.tools);
        Ok(template)
    }

    /// Makes `strftime_now` (which renders the system time in UTC otherwise) render
    /// `unix_seconds` instead, for reproducible prompts.
    pub fn fix_clock(&self, unix_seconds: i64) {
        self.clock.fix(unix_seconds);
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// What the template renders itself, as probed when it loaded.
    pub fn capabilities(&self) -> ChatCapabilities {
        self.capabilities
    }

    /// How the model writes tool calls when offered tools through this template.
    pub fn tool_format(&self) -> ToolFormat {
        self.tool_format
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

    /// Like [`Self::render`], with `tools` (OpenAI tool definitions): in the template's
    /// `tools` variable where it renders them, else as pagoda's tool prompt. What the
    /// template does not support is polyfilled (see the module's documentation); a
    /// conversation that needs no polyfill renders exactly as the template alone renders it.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_with_kwargs(messages, tools, &TemplateKwargs::new(), add_generation_prompt)
    }

    /// Like [`Self::render_with_tools`], with `kwargs` as extra template variables.
    pub fn render_with_kwargs(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        kwargs: &TemplateKwargs,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let (messages, tools) = polyfill::polyfill(&self.capabilities, self.tool_format, messages, tools)?;
        self.render_as_written(&messages, tools, kwargs, add_generation_prompt)
    }

    /// `messages`, `tools` and `kwargs` rendered by the template alone.
    fn render_as_written(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        kwargs: &TemplateKwargs,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let template = self.env.get_template(TEMPLATE_NAME).map_err(|e| ChatError::Render(e.to_string()))?;
        let base = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            ..minijinja::Value::from_serialize(kwargs)
        };
        // Without tools the variable stays undefined, as transformers leaves it (templates
        // test `tools is defined`; a `none` would break `tools | length`).
        let ctx = match tools {
            Some(tools) => minijinja::context! { tools => tools, ..base },
            None => base,
        };
        let mut out = BoundedWriter { bytes: Vec::new(), overflowed: false };
        match template.render_captured_to(ctx, &mut out) {
            Ok(_) => String::from_utf8(out.bytes).map_err(|e| ChatError::Render(e.to_string())),
            Err(_) if out.overflowed => Err(ChatError::OutputTooLarge),
            Err(e) if budget::is_over_budget(&e) => Err(ChatError::MemoryLimit),
            Err(e) if budget::is_too_deep(&e) => Err(ChatError::TooDeep),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(ChatError::OutOfFuel),
            Err(e) => Err(ChatError::Render(clip(&e.to_string()).to_owned())),
        }
    }
}

/// At most [`MAX_ERROR_BYTES`] of an error message (a template may raise one of megabytes).
pub(crate) fn clip(message: &str) -> &str {
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

    /// Renders `source` for one user message.
    fn render(source: &str) -> Result<String, ChatError> {
        ChatTemplate::new(source, "", "")?.render(&[ChatMessage::new("user", "hi")], false)
    }

    /// Each of these makes 32 MiB to 200 MiB of strings or lists, and renders (or fails
    /// otherwise) without the budget; with it each stops before making them.
    #[test]
    fn templates_that_build_huge_values_stop_at_the_memory_limit() {
        let start = "{% set ns = namespace(s='x' * 1048576, l=[1]) %}";
        let text_1k = "t".repeat(1000);
        let text_in_a_capture =
            format!("{{% set s %}}{{% for i in range(100000) %}}{text_1k}{{% endfor %}}{{% endset %}}");
        let attacks = [
            ("~ doubling", "{% for i in range(6) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
            ("+ doubling", "{% for i in range(6) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
            ("'a' * 10**10", "{{ 'a' * 10**10 }}"),
            ("string repetition", "{% set s = 'a' * 50000000 %}"),
            ("repetition folded at load", "{% set s = ('x' * 90000000) ~ ('x' * 90000000) %}"),
            ("list repetition", "{% set l = ns.l * 1000000 %}{{ l|length }}"),
            (
                "list doubling",
                "{% for i in range(20) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}",
            ),
            ("indent width", "{% set s = 'a\nb'|indent(width=50000000) %}"),
            ("tojson indent", "{% set s = [[[1]]]|tojson(indent=20000000) %}"),
            (
                "replace growing",
                "{% for i in range(6) %}{% set ns.s = ns.s|replace('x', 'xx') %}{% endfor %}",
            ),
            (
                "str.replace growing",
                "{% for i in range(6) %}{% set ns.s = ns.s.replace('x', 'xx') %}{% endfor %}",
            ),
            ("join", "{% set s = ([ns.s] * 40)|join %}"),
            ("str.join", "{% set s = ''.join([ns.s] * 40) %}"),
            ("string of a list", "{% set s = ([ns.s] * 40)|string %}"),
            ("tojson of a list", "{% set s = ([ns.s] * 40)|tojson %}"),
            ("pprint of a list", "{% set s = ([ns.s] * 40)|pprint %}"),
            ("format width", "{% set s = '%50000000s'|format('x') %}"),
            ("str.format width", "{% set s = '{:>50000000}'.format('x') %}"),
            ("split", "{% set l = ns.s|split('x') %}"),
            ("list of characters", "{% set l = ns.s|list %}"),
            ("batch fill", "{% set l = [1]|batch(5000000, 0) %}"),
            (
                "macro doubling",
                "{% macro d(x) %}{{ x }}{{ x }}{% endmacro %}{% for i in range(7) %}{% set ns.s = d(ns.s) %}{% endfor %}",
            ),
            ("text in a capture", &text_in_a_capture),
            ("copies kept alive", "{% for i in range(80) %}{% set ns.l = ns.l + [ns.s|upper] %}{% endfor %}"),
            ("slices kept alive", "{% for i in range(80) %}{% set ns.l = ns.l + [ns.s[1:]] %}{% endfor %}"),
            ("a list looked for in a string", "{{ ([ns.s] * 40) in 'x' }}"),
            ("a list tested as a string", "{{ ([ns.s] * 40) is startingwith 'x' }}"),
        ];
        for (name, attack) in attacks {
            let rendered = render(&format!("{start}{attack}")).map(|s| s.len());
            assert!(matches!(rendered, Err(ChatError::MemoryLimit)), "{name}: {rendered:?}");
        }
    }

    #[test]
    fn the_budget_is_per_rendering_and_real_work_fits_it() {
        let source = "{% set ns = namespace(s='x' * 10000000) %}{% for i in range(4) %}{% set ns.t = ns.s ~ i %}{% endfor %}{{ ns.t|length }}";
        let t = ChatTemplate::new(source, "", "").unwrap();
        for _ in 0..3 {
            assert_eq!(t.render(&[], false).unwrap(), "10000001");
        }
    }

    /// Appending 40 pieces of 300 kB makes strings of 246 MB in all, of which the last
    /// version (12 MB) is held.
    #[test]
    fn a_prompt_built_by_appending_is_charged_what_it_holds() {
        let source = "{% set ns = namespace(out='') %}{% set piece = 'p' * 300000 %}\
            {% for i in range(40) %}{% set ns.out = ns.out ~ piece %}{% endfor %}{{ ns.out|length }}";
        assert_eq!(render(source).unwrap(), "12000000");
    }

    #[test]
    fn reserved_names_and_autoescape_are_refused() {
        for source in ["{{ __pagoda_op('~', 'a', 'b') }}", "{% autoescape true %}x{% endautoescape %}"] {
            assert!(matches!(ChatTemplate::new(source, "", ""), Err(ChatError::Syntax(_))), "{source}");
        }
    }

    /// Refuses system turns and turns out of user/assistant order, drops tool calls.
    const STRICT: &str = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}\
        {% if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('alternate') }}{% endif %}\
        <{{ m.role }}>{{ m.content }}{% endfor %}";

    #[test]
    fn probing_finds_what_a_template_refuses_or_drops() {
        let strict = ChatTemplate::new(STRICT, "", "").unwrap();
        assert_eq!(strict.capabilities(), ChatCapabilities::default());
        let lenient = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
        let caps = ChatTemplate::new(lenient, "", "").unwrap().capabilities();
        assert!(caps.system_role && caps.later_system && caps.tool_responses && caps.non_alternating);
        assert!(!caps.tools && !caps.tool_calls && !caps.parallel_tool_calls);
        assert_eq!(ChatTemplate::new(lenient, "", "").unwrap().tool_format(), ToolFormat::Hermes);
    }

    #[test]
    fn a_refused_system_turn_opens_the_first_user_turn() {
        let strict = ChatTemplate::new(STRICT, "", "").unwrap();
        let messages = [ChatMessage::new("system", "S"), ChatMessage::new("user", "U")];
        assert_eq!(strict.render(&messages, false).unwrap(), "<user>S\n\nU");
        let refused = strict.render(&[ChatMessage::new("assistant", "A")], false);
        assert!(matches!(refused, Err(ChatError::Unsupported(_))), "{refused:?}");
    }

    #[test]
    fn syntax_errors_are_reported() {
        assert!(matches!(ChatTemplate::new("{% for %}", "", ""), Err(ChatError::Syntax(_))));
    }

    #[test]
    fn template_kwargs_reach_the_template_but_never_replace_its_own_variables() {
        let source = "{% if enable_thinking is defined and enable_thinking is false %}off{% else %}on{% endif %}\
            /{{ reasoning_effort | default('medium') }}/{{ messages | length }}/{{ add_generation_prompt }}";
        let t = ChatTemplate::new(source, "", "").unwrap();
        let user = [ChatMessage::new("user", "hi")];
        let kwargs = |value: serde_json::Value| value.as_object().unwrap().clone();
        assert_eq!(t.render(&user, true).unwrap(), "on/medium/1/True");
        let off = kwargs(serde_json::json!({"enable_thinking": false, "reasoning_effort": "high"}));
        assert_eq!(t.render_with_kwargs(&user, None, &off, true).unwrap(), "off/high/1/True");
        let clash = kwargs(serde_json::json!({"messages": [], "add_generation_prompt": false}));
        assert_eq!(t.render_with_kwargs(&user, None, &clash, true).unwrap(), "on/medium/1/True");
    }
}

//! Reasoning output: splitting a reply into the model's reasoning and its answer, as vLLM's
//! `--reasoning-parser` does, both for a whole reply and delta by delta while it streams.
//!
//! - `qwen3` and `deepseek_r1` ([`think`]): the reasoning is what comes before `</think>`
//!   (a leading `<think>` is dropped), the answer what follows it. A reply with no
//!   `</think>` is all reasoning (it stopped while thinking), except under `qwen3` when
//!   the request turned thinking off (`enable_thinking: false`), where it is all answer.
//! - `gpt_oss` ([`harmony`]): gpt-oss's harmony messages; the `analysis` channel is the
//!   reasoning, the `final` channel and recipient-less `commentary` (preambles) the answer,
//!   several messages of a kind joined by a newline; tool calls (messages to
//!   `functions.NAME`) belong to neither and come apart ([`ReasoningStream::tool_calls`]).
//!
//! Streaming gives the same split as the whole reply, however it is cut into deltas: a
//! delta that ends inside a possible marker holds that text back until the marker is
//! complete or ruled out. Empty parts are `None`, as vLLM returns them.

mod harmony;
mod think;

use std::str::FromStr;

pub use self::harmony::HarmonyStream;
pub use self::think::ThinkStream;
use super::chat::ParsedCall;

/// Which reasoning format the model writes, by vLLM's `--reasoning-parser` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasoningParser {
    /// Qwen3: `<think>…</think>`, which `enable_thinking: false` turns off.
    Qwen3,
    /// DeepSeek R1: `<think>…</think>`, reasoning until `</think>`.
    DeepseekR1,
    /// gpt-oss's harmony channels (vLLM also calls it `openai_gptoss`).
    GptOss,
}

/// A `--reasoning-parser` name that is not one of [`ReasoningParser::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reasoning parser {0:?}; use qwen3, deepseek_r1 or gpt_oss")]
pub struct UnknownReasoningParser(pub String);

impl ReasoningParser {
    /// The names the parsers go by (`openai_gptoss` is vLLM's registered name for `gpt_oss`).
    pub const NAMES: [&'static str; 4] = ["qwen3", "deepseek_r1", "gpt_oss", "openai_gptoss"];

    /// The parser's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Qwen3 => "qwen3",
            Self::DeepseekR1 => "deepseek_r1",
            Self::GptOss => "gpt_oss",
        }
    }

    /// True when the reply's markers are special tokens the text must keep to be split
    /// (harmony's `<|channel|>`, `<|message|>`, `<|end|>`, ...); `<think>` and `</think>`
    /// are ordinary added tokens that detokenizing keeps anyway.
    pub fn needs_special_tokens(self) -> bool {
        self == Self::GptOss
    }

    /// A splitter for one streamed reply; `thinking` is what the request asked for.
    pub fn stream(self, thinking: Thinking) -> ReasoningStream {
        match self {
            Self::Qwen3 => ReasoningStream::Think(ThinkStream::new(thinking == Thinking::Enabled)),
            Self::DeepseekR1 => ReasoningStream::Think(ThinkStream::new(true)),
            Self::GptOss => ReasoningStream::Harmony(HarmonyStream::default()),
        }
    }

    /// `text`, a whole reply, split into reasoning and answer (and harmony's tool calls).
    pub fn split(self, text: &str, thinking: Thinking) -> Reply {
        let mut stream = self.stream(thinking);
        let mut whole = stream.push(text);
        whole.append(stream.finish());
        Reply { tool_calls: stream.tool_calls(), ..Reply::from(whole) }
    }
}

impl FromStr for ReasoningParser {
    type Err = UnknownReasoningParser;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "qwen3" => Ok(Self::Qwen3),
            "deepseek_r1" => Ok(Self::DeepseekR1),
            "gpt_oss" | "openai_gptoss" => Ok(Self::GptOss),
            other => Err(UnknownReasoningParser(other.to_owned())),
        }
    }
}

/// Whether the request lets the model think (`chat_template_kwargs.enable_thinking`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Thinking {
    /// The default: the model may think.
    #[default]
    Enabled,
    /// `enable_thinking: false`: the template closed the thinking block in the prompt.
    Disabled,
}

impl Thinking {
    /// What a request's template arguments ask for: disabled only by `enable_thinking: false`.
    pub fn from_template_kwargs(kwargs: &serde_json::Map<String, serde_json::Value>) -> Self {
        match kwargs.get("enable_thinking") {
            Some(serde_json::Value::Bool(false)) => Self::Disabled,
            _ => Self::Enabled,
        }
    }
}

/// Text of a reply sorted into reasoning and answer (each possibly empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    /// The reasoning.
    pub reasoning: String,
    /// The answer.
    pub content: String,
}

impl Split {
    /// True when it carries no text.
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty()
    }

    /// Appends `other` after this.
    pub fn append(&mut self, other: Split) {
        self.reasoning.push_str(&other.reasoning);
        self.content.push_str(&other.content);
    }
}

/// A whole reply's reasoning and answer; an empty part is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    /// The reasoning.
    pub reasoning: Option<String>,
    /// The answer.
    pub content: Option<String>,
    /// Tool calls the format writes apart from the answer (harmony's messages to
    /// `functions.NAME`), when it wrote some.
    pub tool_calls: Option<Vec<ParsedCall>>,
}

impl From<Split> for Reply {
    fn from(split: Split) -> Self {
        let some = |text: String| (!text.is_empty()).then_some(text);
        Self { reasoning: some(split.reasoning), content: some(split.content), tool_calls: None }
    }
}

/// Splits one reply delta by delta (see [`ReasoningParser::stream`]).
#[derive(Debug, Clone)]
pub enum ReasoningStream {
    /// `<think>…</think>`.
    Think(ThinkStream),
    /// Harmony channels.
    Harmony(HarmonyStream),
}

impl ReasoningStream {
    /// The reasoning and answer text that `delta` (the next piece of the reply) settles.
    pub fn push(&mut self, delta: &str) -> Split {
        match self {
            Self::Think(stream) => stream.push(delta),
            Self::Harmony(stream) => stream.push(delta),
        }
    }

    /// What was held back, at the end of the reply.
    pub fn finish(&mut self) -> Split {
        match self {
            Self::Think(stream) => stream.finish(),
            Self::Harmony(stream) => stream.finish(),
        }
    }

    /// The tool calls the reply wrote apart from its answer so far (harmony's), if any.
    pub fn tool_calls(&self) -> Option<Vec<ParsedCall>> {
        match self {
            Self::Think(_) => None,
            Self::Harmony(stream) => stream.tool_calls(),
        }
    }
}

/// The length of the longest end of `text` that is a proper start of `marker` (what must be
/// held back in case the next delta completes it), at a character boundary.
fn partial_marker_len(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way of cutting `text` in two and in single characters streams to `expected`.
    pub(super) fn assert_streams(parser: ReasoningParser, thinking: Thinking, text: &str, expected: &Reply) {
        let whole = Reply { tool_calls: None, ..parser.split(text, thinking) };
        assert_eq!(&whole, expected, "whole {text:?}");
        let chars: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
        for &cut in &chars {
            let mut stream = parser.stream(thinking);
            let mut got = stream.push(&text[..cut]);
            got.append(stream.push(&text[cut..]));
            got.append(stream.finish());
            assert_eq!(&Reply::from(got), expected, "{text:?} cut at {cut}");
        }
        let mut stream = parser.stream(thinking);
        let mut got = Split::default();
        for pair in chars.windows(2) {
            got.append(stream.push(&text[pair[0]..pair[1]]));
        }
        got.append(stream.finish());
        assert_eq!(&Reply::from(got), expected, "{text:?} one character a delta");
    }

    pub(super) fn reply(reasoning: Option<&str>, content: Option<&str>) -> Reply {
        let owned = |text: Option<&str>| text.map(str::to_owned);
        Reply { reasoning: owned(reasoning), content: owned(content), tool_calls: None }
    }

    #[test]
    fn names_are_vllms() {
        assert_eq!("qwen3".parse::<ReasoningParser>(), Ok(ReasoningParser::Qwen3));
        assert_eq!("deepseek_r1".parse::<ReasoningParser>(), Ok(ReasoningParser::DeepseekR1));
        assert_eq!("gpt_oss".parse::<ReasoningParser>(), Ok(ReasoningParser::GptOss));
        assert_eq!("openai_gptoss".parse::<ReasoningParser>(), Ok(ReasoningParser::GptOss));
        assert_eq!("qwen".parse::<ReasoningParser>(), Err(UnknownReasoningParser("qwen".into())));
        for name in ReasoningParser::NAMES {
            assert!(name.parse::<ReasoningParser>().is_ok(), "{name}");
        }
    }

    #[test]
    fn enable_thinking_false_alone_disables_thinking() {
        let kwargs = |value: serde_json::Value| value.as_object().unwrap().clone();
        let off = kwargs(serde_json::json!({"enable_thinking": false}));
        assert_eq!(Thinking::from_template_kwargs(&off), Thinking::Disabled);
        for on in [
            serde_json::json!({}),
            serde_json::json!({"enable_thinking": true}),
            serde_json::json!({"enable_thinking": "no"}),
        ] {
            assert_eq!(Thinking::from_template_kwargs(&kwargs(on)), Thinking::Enabled);
        }
    }

    #[test]
    fn partial_markers_are_held_at_character_boundaries() {
        assert_eq!(partial_marker_len("abc</thi", "</think>"), 5);
        assert_eq!(partial_marker_len("abc<", "</think>"), 1);
        assert_eq!(partial_marker_len("abc", "</think>"), 0);
        assert_eq!(partial_marker_len("</think>", "</think>"), 0);
        assert_eq!(partial_marker_len("é", "<"), 0);
    }
}

//! gpt-oss's harmony replies (the `gpt_oss` parser).
//!
//! A reply is a run of messages, each a header up to `<|message|>` (`<|channel|>NAME`, maybe
//! `<|start|>assistant` before it, a ` to=RECIPIENT` and a `<|constrain|>FORMAT`), then a body
//! up to `<|end|>`, `<|call|>` or `<|return|>`:
//!
//! ```text
//! <|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…<|return|>
//! ```
//!
//! As vLLM's `parse_chat_output` sorts them: `analysis` bodies are the reasoning; `final` bodies
//! and `commentary` without a recipient (preambles) are the answer; other channels are
//! neither. The bodies of a kind are joined by a newline (a finished empty message counts, an
//! unfinished one only once it has text). A reply with no header at all, which is not
//! harmony, is all answer. A message to `functions.NAME` is a call of tool NAME, its body the
//! arguments' JSON ([`HarmonyStream::tool_calls`]).

use super::{Split, partial_marker_len};
use crate::model::chat::ParsedCall;

/// What ends a header.
const MESSAGE: &str = "<|message|>";
/// What ends a body.
const TERMINATORS: [&str; 3] = ["<|end|>", "<|call|>", "<|return|>"];
/// What names a message's channel.
const CHANNEL: &str = "<|channel|>";
/// What a tool call's recipient starts with.
const FUNCTIONS: &str = "functions.";

/// Where a message's body goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Content,
    /// A tool call: the body goes to the last of [`HarmonyStream::calls`].
    Call,
    /// Calls of built-in tools and unknown channels.
    Neither,
}

/// Where the reply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In a header, before `<|message|>`.
    Header,
    /// In a body; `counted` once the message counts towards its kind's join.
    Body { kind: Kind, counted: bool },
}

/// Splits a harmony reply delta by delta.
#[derive(Debug, Clone)]
pub struct HarmonyStream {
    state: State,
    /// Text not yet settled: a header, or a possible terminator cut by the delta's end.
    held: String,
    /// Messages counted so far: reasoning, answer.
    counts: [usize; 2],
    /// True once a header was read.
    any_header: bool,
    /// The tool calls so far: name and arguments' text.
    calls: Vec<(String, String)>,
}

impl Default for HarmonyStream {
    fn default() -> Self {
        Self {
            state: State::Header,
            held: String::new(),
            counts: [0; 2],
            any_header: false,
            calls: Vec::new(),
        }
    }
}

impl HarmonyStream {
    /// What `delta` settles.
    pub fn push(&mut self, delta: &str) -> Split {
        self.held.push_str(delta);
        let mut out = Split::default();
        loop {
            match self.state {
                State::Header => {
                    let Some(at) = self.held.find(MESSAGE) else { return out };
                    let (kind, recipient) = kind_of(&self.held[..at]);
                    if let Some(name) = recipient.and_then(|r| r.strip_prefix(FUNCTIONS)) {
                        self.calls.push((name.to_owned(), String::new()));
                    }
                    self.held.drain(..at + MESSAGE.len());
                    self.any_header = true;
                    self.state = State::Body { kind, counted: false };
                }
                State::Body { kind, .. } => {
                    let end = TERMINATORS
                        .iter()
                        .filter_map(|&t| self.held.find(t).map(|at| (at, t.len())))
                        .min_by_key(|&(at, _)| at);
                    if let Some((at, len)) = end {
                        let body = self.held[..at].to_owned();
                        self.held.drain(..at + len);
                        self.emit(kind, &body, true, &mut out);
                        self.state = State::Header;
                        continue;
                    }
                    let keep =
                        TERMINATORS.iter().map(|t| partial_marker_len(&self.held, t)).max().unwrap_or(0);
                    let body: String = self.held.drain(..self.held.len() - keep).collect();
                    self.emit(kind, &body, false, &mut out);
                    return out;
                }
            }
        }
    }

    /// The held text, at the end of the reply: an unfinished body's, or a reply that never
    /// wrote a header as the answer.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        let mut out = Split::default();
        match self.state {
            State::Body { kind, .. } => self.emit(kind, &held, false, &mut out),
            State::Header if !self.any_header => out.content = held,
            State::Header => {}
        }
        out
    }

    /// The tool calls of the reply so far, their arguments parsed (empty arguments are `{}`);
    /// `None` when there are none or one's arguments are not a JSON object.
    pub fn tool_calls(&self) -> Option<Vec<ParsedCall>> {
        let parse = |(name, arguments): &(String, String)| {
            let arguments = match arguments.trim() {
                "" => serde_json::json!({}),
                text => serde_json::from_str(text).ok().filter(serde_json::Value::is_object)?,
            };
            Some(ParsedCall { name: name.clone(), arguments })
        };
        let calls: Vec<ParsedCall> = self.calls.iter().map(parse).collect::<Option<_>>()?;
        (!calls.is_empty()).then_some(calls)
    }

    /// Writes `body`, text of the current message of `kind`, to `out`: after a newline when the
    /// message is the second or later of its kind. A message counts once it has text, or when
    /// it ends (`ended`).
    fn emit(&mut self, kind: Kind, body: &str, ended: bool, out: &mut Split) {
        let State::Body { counted, .. } = &mut self.state else { return };
        let (count, text) = match kind {
            Kind::Reasoning => (&mut self.counts[0], &mut out.reasoning),
            Kind::Content => (&mut self.counts[1], &mut out.content),
            Kind::Call => {
                if let Some((_, arguments)) = self.calls.last_mut() {
                    arguments.push_str(body);
                }
                return;
            }
            Kind::Neither => return,
        };
        if !*counted && (ended || !body.is_empty()) {
            if *count > 0 {
                text.push('\n');
            }
            *count += 1;
            *counted = true;
        }
        text.push_str(body);
    }
}

/// Where the body after `header` goes, and the header's recipient.
fn kind_of(header: &str) -> (Kind, Option<&str>) {
    let word = |at: usize| {
        let rest = &header[at..];
        let end = rest.find(|c: char| c.is_whitespace() || c == '<').unwrap_or(rest.len());
        &rest[..end]
    };
    let channel = header.find(CHANNEL).map(|at| word(at + CHANNEL.len()));
    let recipient = header.find("to=").map(|at| word(at + 3)).filter(|r| !r.is_empty());
    let kind = match (channel, recipient) {
        (Some("analysis"), _) => Kind::Reasoning,
        (_, Some(to)) if to.starts_with(FUNCTIONS) => Kind::Call,
        (Some("final"), _) | (Some("commentary"), None) => Kind::Content,
        _ => Kind::Neither,
    };
    (kind, recipient)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_streams, reply};
    use super::super::{ReasoningParser, Thinking};
    use super::HarmonyStream;

    fn check(text: &str, reasoning: Option<&str>, content: Option<&str>) {
        assert_streams(ReasoningParser::GptOss, Thinking::Enabled, text, &reply(reasoning, content));
    }

    #[test]
    fn analysis_is_reasoning_and_final_is_the_answer() {
        check(
            "<|channel|>analysis<|message|>User asks capital. Paris.<|end|><|start|>assistant<|channel|>final<|message|>Paris.<|return|>",
            Some("User asks capital. Paris."),
            Some("Paris."),
        );
        check("<|channel|>analysis<|message|>Thinking <|en", Some("Thinking <|en"), None);
        check(
            "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>The <|end of it",
            Some("a"),
            Some("The <|end of it"),
        );
        check("<|channel|>analysis<|message|>a<|end|><|start|>assist", Some("a"), None);
        check("Plain text, no harmony.", None, Some("Plain text, no harmony."));
        check("<|channel|>final<|message|>é ü<|end|>", None, Some("é ü"));
    }

    #[test]
    fn messages_of_a_kind_join_with_newlines_and_tool_calls_are_neither() {
        check(
            "<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis<|message|>two<|end|>\
             <|start|>assistant<|channel|>commentary<|message|>Let me look.<|end|>\
             <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
            Some("one\ntwo"),
            Some("Let me look."),
        );
        check(
            "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>\
             <|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",
            Some("\nb"),
            None,
        );
        check(
            "<|channel|>final<|message|>x<|end|><|start|>assistant<|channel|>final<|message|><|end|>",
            None,
            Some("x\n"),
        );
        check(
            "<|channel|>final<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>",
            None,
            Some("x"),
        );
    }

    #[test]
    fn messages_to_functions_are_tool_calls_with_json_arguments() {
        let calls = |text: &str| {
            let mut stream = HarmonyStream::default();
            stream.push(text);
            stream.finish();
            stream.tool_calls()
        };
        let text = "<|channel|>analysis<|message|>Need weather.<|end|>\
            <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
        let got = calls(text).unwrap();
        assert_eq!((got.len(), got[0].name.as_str()), (1, "get_weather"));
        assert_eq!(got[0].arguments, serde_json::json!({"city": "Paris"}));
        let two = "<|start|>assistant to=functions.a<|channel|>commentary json<|message|><|call|>\
            <|start|>assistant<|channel|>commentary to=functions.b<|message|>{\"x\": 1}<|call|>";
        let got = calls(two).unwrap();
        assert_eq!((got[0].name.as_str(), &got[0].arguments), ("a", &serde_json::json!({})));
        assert_eq!((got[1].name.as_str(), &got[1].arguments), ("b", &serde_json::json!({"x": 1})));
        assert_eq!(calls("<|channel|>commentary to=functions.f<|message|>{not json<|call|>"), None);
        assert_eq!(calls("<|channel|>analysis to=browser.search<|message|>{}<|call|>"), None);
        assert_eq!(calls("<|channel|>final<|message|>Paris.<|return|>"), None);
    }
}

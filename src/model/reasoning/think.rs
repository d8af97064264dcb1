//! `<think>…</think>` replies (the `qwen3` and `deepseek_r1` parsers).
//!
//! As vLLM splits them: a `<think>` the reply opens with (after whitespace) is dropped, the
//! reasoning runs to the first `</think>`, and everything after it is the answer, later
//! markers included. A reply that never closes its thinking is all reasoning. When thinking
//! is off, the template closed the block in the prompt and the whole reply is the answer
//! (vLLM's streaming path, which sees the closed block in the prompt, does the same).

use super::{Split, partial_marker_len};

/// What opens the reasoning.
const START: &str = "<think>";
/// What ends the reasoning.
const END: &str = "</think>";

/// Where the reply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace so far, which may still lead to a `<think>` to drop.
    Opening,
    /// In the reasoning, before `</think>`.
    Reasoning,
    /// After `</think>` (or thinking off): the answer.
    Content,
}

/// Splits a `<think>` reply delta by delta.
#[derive(Debug, Clone)]
pub struct ThinkStream {
    state: State,
    /// Text not yet settled: a possible `<think>` or `</think>` cut by the delta's end.
    held: String,
}

impl ThinkStream {
    /// A reply that starts in its reasoning (`thinking`) or in its answer.
    pub fn new(thinking: bool) -> Self {
        Self { state: if thinking { State::Opening } else { State::Content }, held: String::new() }
    }

    /// What `delta` settles.
    pub fn push(&mut self, delta: &str) -> Split {
        self.held.push_str(delta);
        let mut out = Split::default();
        loop {
            match self.state {
                State::Opening => {
                    let trimmed = self.held.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(START) {
                        self.held = rest.to_owned();
                    } else if START.starts_with(trimmed) {
                        return out;
                    }
                    self.state = State::Reasoning;
                }
                State::Reasoning => {
                    if let Some(at) = self.held.find(END) {
                        out.reasoning.push_str(&self.held[..at]);
                        self.held.drain(..at + END.len());
                        self.state = State::Content;
                        continue;
                    }
                    let settled = self.held.len() - partial_marker_len(&self.held, END);
                    out.reasoning.extend(self.held.drain(..settled));
                    return out;
                }
                State::Content => {
                    out.content.push_str(&self.held);
                    self.held.clear();
                    return out;
                }
            }
        }
    }

    /// The held text, at the end of the reply: reasoning unless the answer had begun.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Opening | State::Reasoning => Split { reasoning: held, content: String::new() },
            State::Content => Split { reasoning: String::new(), content: held },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_streams, reply};
    use super::super::{ReasoningParser, Thinking};

    #[test]
    fn reasoning_ends_at_the_first_close_and_a_leading_open_is_dropped() {
        for parser in [ReasoningParser::Qwen3, ReasoningParser::DeepseekR1] {
            let on = Thinking::Enabled;
            let check = |text: &str, expected| assert_streams(parser, on, text, &expected);
            check("<think>\nI think.\n</think>\n\nParis", reply(Some("\nI think.\n"), Some("\n\nParis")));
            check("I think.</think>Paris", reply(Some("I think."), Some("Paris")));
            check("\n <think>a</think>b</think>c", reply(Some("a"), Some("b</think>c")));
            check("a <think> b</think>", reply(Some("a <think> b"), None));
            check("still thinking </thi", reply(Some("still thinking </thi"), None));
            check("<thi", reply(Some("<thi"), None));
            check("  ", reply(Some("  "), None));
            check("</think>Only the answer", reply(None, Some("Only the answer")));
            check("<think></think>", reply(None, None));
            check("", reply(None, None));
            check("é</think>ü<", reply(Some("é"), Some("ü<")));
        }
    }

    #[test]
    fn qwen3_with_thinking_off_is_all_answer_and_deepseek_r1_ignores_the_switch() {
        let off = Thinking::Disabled;
        assert_streams(ReasoningParser::Qwen3, off, "Paris", &reply(None, Some("Paris")));
        assert_streams(ReasoningParser::Qwen3, off, "a</think>b", &reply(None, Some("a</think>b")));
        assert_streams(ReasoningParser::DeepseekR1, off, "a</think>b", &reply(Some("a"), Some("b")));
        assert_streams(ReasoningParser::DeepseekR1, off, "Paris", &reply(Some("Paris"), None));
    }
}

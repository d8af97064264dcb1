//! What a chat template supports, found once when it loads: small conversations are
//! rendered and a feature counts as supported when the rendering succeeds and shows the
//! text that was put in for it (a template may raise an error for a feature, or drop it
//! without a word).

use std::fmt;

use serde_json::{Value, json};

use super::{ChatError, ChatMessage};

/// What a chat template renders itself; the rest is polyfilled (see [`super::ChatTemplate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChatCapabilities {
    /// A `system` message opening the conversation.
    pub system_role: bool,
    /// A `system` message after other turns.
    pub later_system: bool,
    /// Tool definitions in the `tools` variable.
    pub tools: bool,
    /// An assistant message's `tool_calls`.
    pub tool_calls: bool,
    /// An assistant message with more than one tool call.
    pub parallel_tool_calls: bool,
    /// `tool` messages (a call's result).
    pub tool_responses: bool,
    /// Turns that do not alternate user/assistant (two of the same role in a row).
    pub non_alternating: bool,
    /// A conversation whose first turn after the system message is the assistant's.
    pub assistant_first: bool,
}

/// Texts the probes put in, unlikely to be in any template.
const SYSTEM: &str = "pagoda-probe-system";
const USER: &str = "pagoda-probe-user";
const LATER_USER: &str = "pagoda-probe-later-user";
const ASSISTANT: &str = "pagoda-probe-assistant";
const LATER_ASSISTANT: &str = "pagoda-probe-later-assistant";
const TOOL: &str = "pagoda_probe_tool";
const CALL: &str = "pagoda_probe_call";
const SECOND_CALL: &str = "pagoda_probe_second_call";
const RESULT: &str = "pagoda-probe-result";

/// One rendering of the template as written, without `add_generation_prompt`.
pub(super) type RawRender<'a> = dyn Fn(&[ChatMessage], Option<&[Value]>) -> Result<String, ChatError> + 'a;

impl ChatCapabilities {
    /// A template that renders every feature itself (no polyfill applies).
    pub const ALL: Self = Self {
        system_role: true,
        later_system: true,
        tools: true,
        tool_calls: true,
        parallel_tool_calls: true,
        tool_responses: true,
        non_alternating: true,
        assistant_first: true,
    };

    /// Probes the template behind `render`. One that cannot render a lone user message
    /// within its budget (out of fuel or memory) supports nothing, and is not run again.
    pub(super) fn probe(render: &RawRender<'_>) -> Self {
        let user = || ChatMessage::new("user", USER);
        if render(&[user()], None).is_err_and(|error| !matches!(error, ChatError::Render(_))) {
            return Self::default();
        }
        let shows = |messages: &[ChatMessage], tools: Option<&[Value]>, needles: &[&str]| {
            render(messages, tools).is_ok_and(|out| needles.iter().all(|needle| out.contains(needle)))
        };
        let assistant = || ChatMessage::new("assistant", ASSISTANT);
        let system = || ChatMessage::new("system", SYSTEM);
        let tools = [json!({
            "type": "function",
            "function": {
                "name": TOOL,
                "description": "A probe.",
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
            },
        })];
        let supports_tools = shows(&[user()], Some(&tools), &[TOOL]);
        let offered = supports_tools.then_some(&tools[..]);
        let calls = |names: &[&str]| {
            let mut message = ChatMessage::new("assistant", "");
            message.tool_calls = (names.iter().enumerate())
                .map(|(at, name)| {
                    json!({
                        "id": format!("call_{at}"),
                        "type": "function",
                        "function": {"name": name, "arguments": {"x": "y"}},
                    })
                })
                .collect();
            message
        };
        let call = calls(&[CALL]);
        let supports_calls = shows(&[user(), call.clone()], offered, &[CALL]);
        let parallel_calls =
            supports_calls && shows(&[user(), calls(&[CALL, SECOND_CALL])], offered, &[CALL, SECOND_CALL]);
        let mut result = ChatMessage::new("tool", RESULT);
        result.tool_call_id = Some("call_0".into());
        let answered = if supports_calls { call } else { assistant() };
        Self {
            system_role: shows(&[system(), user()], None, &[SYSTEM, USER]),
            later_system: shows(
                &[user(), assistant(), system(), ChatMessage::new("user", LATER_USER)],
                None,
                &[SYSTEM, LATER_USER],
            ),
            tools: supports_tools,
            tool_calls: supports_calls,
            parallel_tool_calls: parallel_calls,
            tool_responses: shows(&[user(), answered, result], offered, &[RESULT]),
            non_alternating: shows(
                &[
                    user(),
                    ChatMessage::new("user", LATER_USER),
                    assistant(),
                    ChatMessage::new("assistant", LATER_ASSISTANT),
                ],
                None,
                &[USER, LATER_USER, ASSISTANT, LATER_ASSISTANT],
            ),
            assistant_first: shows(&[assistant(), user()], None, &[ASSISTANT, USER]),
        }
    }
}

impl fmt::Display for ChatCapabilities {
    /// One line: what the template renders itself, what is polyfilled, what is refused.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ASSISTANT_FIRST: &str = "assistant-first conversations";
        let features = [
            (self.system_role, "system role"),
            (self.later_system, "later system turns"),
            (self.tools, "tools"),
            (self.tool_calls, "tool calls"),
            (self.parallel_tool_calls, "parallel tool calls"),
            (self.tool_responses, "tool results"),
            (self.non_alternating, "non-alternating turns"),
        ];
        let (mut native, mut polyfilled) = (Vec::new(), Vec::new());
        for (supported, name) in features {
            if supported { native.push(name) } else { polyfilled.push(name) }
        }
        if self.assistant_first {
            native.push(ASSISTANT_FIRST);
        }
        write!(f, "native: {}", if native.is_empty() { "nothing".into() } else { native.join(", ") })?;
        if !polyfilled.is_empty() {
            write!(f, "; polyfilled: {}", polyfilled.join(", "))?;
        }
        if !self.assistant_first {
            write!(f, "; refused: {ASSISTANT_FIRST}")?;
        }
        Ok(())
    }
}

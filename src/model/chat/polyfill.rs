//! A conversation rewritten for what its chat template does not render itself (as found by
//! [`super::probe`]), the way llama.cpp's chat engine does it:
//!
//! - tools the template ignores become pagoda's tool prompt, which teaches the Hermes
//!   format, in the system text;
//! - a system text the template refuses opens the next user turn (or becomes one);
//! - tool calls the template drops (or refuses more than one of) are written into the
//!   assistant's text in the model's tool format, and tool results it refuses (or that answer
//!   calls written out) become user turns in `<tool_response>` tags;
//! - where the template wants user and assistant turns to alternate, turns of the same
//!   role in a row are merged.
//!
//! A conversation that needs none of it is left exactly as it is.

use std::borrow::Cow;

use serde_json::Value;

use super::probe::ChatCapabilities;
use super::tool_format::{ParsedCall, ToolFormat};
use super::{ChatError, ChatMessage};

/// Between texts that one turn now holds.
const JOIN: &str = "\n\n";

/// The messages and tools a template is given.
pub(super) type Given<'a> = (Cow<'a, [ChatMessage]>, Option<&'a [Value]>);

/// The messages and tools to give a template with `caps` (whose model writes calls in
/// `format`) for `messages` and `tools`; an error when it cannot express them at all.
pub(super) fn polyfill<'a>(
    caps: &ChatCapabilities,
    format: ToolFormat,
    messages: &'a [ChatMessage],
    tools: Option<&'a [Value]>,
) -> Result<Given<'a>, ChatError> {
    let prompt = tools.filter(|tools| !tools.is_empty() && !caps.tools).map(tool_prompt);
    let needed = prompt.is_some()
        || messages.iter().enumerate().any(|(at, m)| lacks(caps, at, m))
        || (!caps.non_alternating && messages.windows(2).any(|pair| same_turn(&pair[0], &pair[1])));
    let (messages, tools) = match needed {
        false => (Cow::Borrowed(messages), tools),
        true => {
            let mut out = with_prompt(messages, prompt);
            // results of calls written out as text cannot follow them as tool messages (a
            // template such as gpt-oss's names a result after its call)
            let mut after_text_calls = false;
            for message in &mut out {
                if message.role == "assistant" {
                    after_text_calls = calls_as_text(caps, message);
                }
                write_out_tools(caps, format, message, after_text_calls);
            }
            let mut out = fold_system(caps, out);
            if !caps.non_alternating {
                out = merge_turns(out);
            }
            (Cow::Owned(out), tools.filter(|_| caps.tools))
        }
    };
    let first_turn = messages.iter().find(|m| m.role != "system");
    if !caps.assistant_first && first_turn.is_some_and(|m| m.role == "assistant") {
        return Err(ChatError::Unsupported("a conversation whose first turn is the assistant's"));
    }
    Ok((messages, tools))
}

/// The system message that teaches a model whose template ignores `tools` to call them.
fn tool_prompt(tools: &[Value]) -> String {
    let signatures: Vec<String> = tools.iter().map(Value::to_string).collect();
    format!(
        "You can call functions to answer. These are the functions, as JSON signatures:\n<tools>\n{}\n</tools>\n\
         To call one, reply with nothing but\n<tool_call>\n{{\"name\": \"function name\", \"arguments\": {{...}}}}\n</tool_call>\n\
         (one block per call). Otherwise, answer in plain text.",
        signatures.join("\n")
    )
}

/// True when the template does not render `message`, the `at`-th, as it is.
fn lacks(caps: &ChatCapabilities, at: usize, message: &ChatMessage) -> bool {
    match message.role.as_str() {
        "system" if at == 0 => !caps.system_role,
        "system" => !caps.later_system,
        "tool" => !caps.tool_responses,
        "assistant" => calls_as_text(caps, message),
        _ => false,
    }
}

/// True when the template does not render the tool calls of `message` (an assistant's).
fn calls_as_text(caps: &ChatCapabilities, message: &ChatMessage) -> bool {
    match message.tool_calls.len() {
        0 => false,
        1 => !caps.tool_calls,
        _ => !caps.parallel_tool_calls,
    }
}

/// True when `a` and `b` are user turns, or assistant turns, in a row.
fn same_turn(a: &ChatMessage, b: &ChatMessage) -> bool {
    a.role == b.role && matches!(a.role.as_str(), "user" | "assistant")
}

/// `messages` with the tool `prompt` at the end of the opening system message (made when
/// there is none).
fn with_prompt(messages: &[ChatMessage], prompt: Option<String>) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    let Some(prompt) = prompt else {
        out.extend_from_slice(messages);
        return out;
    };
    match messages.first() {
        Some(first) if first.role == "system" => {
            out.extend_from_slice(messages);
            out[0].content = joined(&out[0].content, &prompt);
        }
        _ => {
            out.push(ChatMessage::new("system", prompt));
            out.extend_from_slice(messages);
        }
    }
    out
}

/// Writes an assistant's calls into its text, and a tool result as a user turn, where the
/// template does not render them (or, `after_text_calls`, the calls it answers were written
/// out).
fn write_out_tools(
    caps: &ChatCapabilities,
    format: ToolFormat,
    message: &mut ChatMessage,
    after_text_calls: bool,
) {
    if message.role == "assistant" && calls_as_text(caps, message) {
        let calls: Vec<String> = std::mem::take(&mut message.tool_calls)
            .iter()
            .map(|call| match ParsedCall::from_json(call.get("function").unwrap_or(call)) {
                Some(parsed) => format.write(&parsed),
                None => call.to_string(),
            })
            .collect();
        message.content = joined(message.content.trim(), &calls.join("\n"));
    } else if message.role == "tool" && (!caps.tool_responses || after_text_calls) {
        message.role = "user".into();
        message.content = format!("<tool_response>\n{}\n</tool_response>", message.content);
        message.tool_call_id = None;
    }
}

/// Moves each system text the template refuses to the start of the next user turn, or into
/// a user turn of its own when an assistant turn or the end comes first.
fn fold_system(caps: &ChatCapabilities, messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len());
    let mut pending: Option<String> = None;
    for (at, mut message) in messages.into_iter().enumerate() {
        if message.role == "system" && lacks(caps, at, &message) {
            pending = Some(match pending {
                Some(text) => joined(&text, &message.content),
                None => message.content,
            });
            continue;
        }
        if let Some(text) = pending.take() {
            if message.role == "user" {
                message.content = joined(&text, &message.content);
            } else {
                out.push(ChatMessage::new("user", text));
            }
        }
        out.push(message);
    }
    out.extend(pending.map(|text| ChatMessage::new("user", text)));
    out
}

/// Merges user turns, and assistant turns, that follow one another.
fn merge_turns(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    for message in messages {
        match out.last_mut() {
            Some(last) if same_turn(last, &message) => {
                last.content = joined(&last.content, &message.content);
                last.tool_calls.extend(message.tool_calls);
            }
            _ => out.push(message),
        }
    }
    out
}

/// `a` and `b` with a blank line between them, or whichever is not empty.
fn joined(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_owned(),
        (_, true) => a.to_owned(),
        _ => format!("{a}{JOIN}{b}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn m(role: &str, content: &str) -> ChatMessage {
        ChatMessage::new(role, content)
    }

    const NONE: ChatCapabilities = ChatCapabilities {
        system_role: false,
        later_system: false,
        tools: false,
        tool_calls: false,
        parallel_tool_calls: false,
        tool_responses: false,
        non_alternating: false,
        assistant_first: false,
    };

    const ALL: ChatCapabilities = ChatCapabilities::ALL;

    fn roles_and_texts(messages: &[ChatMessage]) -> Vec<(String, String)> {
        messages.iter().map(|m| (m.role.clone(), m.content.clone())).collect()
    }

    #[test]
    fn a_template_that_supports_everything_gets_the_conversation_as_it_is() {
        let tools = [json!({"type": "function", "function": {"name": "f"}})];
        let messages = [m("system", "s"), m("user", "a"), m("user", "b"), m("tool", "r")];
        let (out, offered) = polyfill(&ALL, ToolFormat::Hermes, &messages, Some(&tools)).unwrap();
        assert!(matches!(out, Cow::Borrowed(_)));
        assert_eq!(offered, Some(&tools[..]));
    }

    #[test]
    fn system_tools_calls_and_results_become_alternating_user_and_assistant_turns() {
        let tools = [json!({"type": "function", "function": {"name": "weather"}})];
        let mut call = m("assistant", "");
        call.tool_calls =
            vec![json!({"id": "1", "type": "function", "function": {"name": "weather", "arguments": {}}})];
        let messages =
            [m("system", "Be brief."), m("user", "Sky?"), call, m("tool", "sunny"), m("tool", "warm")];
        let (out, offered) = polyfill(&NONE, ToolFormat::Hermes, &messages, Some(&tools)).unwrap();
        assert_eq!(offered, None);
        let out = roles_and_texts(&out);
        assert_eq!(
            out.iter().map(|(role, _)| role.as_str()).collect::<Vec<_>>(),
            ["user", "assistant", "user"]
        );
        assert!(out[0].1.starts_with("Be brief.\n\nYou can call functions"), "{}", out[0].1);
        assert!(out[0].1.contains("<tools>\n{") && out[0].1.contains("\"weather\""), "{}", out[0].1);
        assert!(out[0].1.ends_with("plain text.\n\nSky?"));
        assert_eq!(ToolFormat::Hermes.parse(&out[1].1).unwrap()[0].name, "weather");
        assert_eq!(
            out[2].1,
            "<tool_response>\nsunny\n</tool_response>\n\n<tool_response>\nwarm\n</tool_response>"
        );
    }

    #[test]
    fn only_what_the_template_lacks_is_polyfilled() {
        let first_system_only = ChatCapabilities { later_system: false, ..ALL };
        let messages =
            [m("system", "s"), m("user", "a"), m("assistant", "b"), m("system", "t"), m("user", "c")];
        let (out, _) = polyfill(&first_system_only, ToolFormat::Hermes, &messages, None).unwrap();
        assert_eq!(
            roles_and_texts(&out),
            roles_and_texts(&[m("system", "s"), m("user", "a"), m("assistant", "b"), m("user", "t\n\nc")])
        );
        let tools = [json!({"type": "function", "function": {"name": "f"}})];
        let no_tools = ChatCapabilities { tools: false, ..ALL };
        let (out, offered) = polyfill(&no_tools, ToolFormat::Hermes, &messages[1..2], Some(&tools)).unwrap();
        assert_eq!((out[0].role.as_str(), out[1].content.as_str(), offered), ("system", "a", None));
    }

    #[test]
    fn a_system_text_before_an_assistant_turn_becomes_a_user_turn() {
        let messages = [m("system", "s"), m("assistant", "a"), m("user", "u")];
        let (out, _) = polyfill(&NONE, ToolFormat::Hermes, &messages, None).unwrap();
        assert_eq!(
            roles_and_texts(&out),
            roles_and_texts(&[m("user", "s"), m("assistant", "a"), m("user", "u")])
        );
    }

    #[test]
    fn an_assistant_first_turn_is_refused_where_the_template_refuses_it() {
        let messages = [m("assistant", "a"), m("user", "u")];
        let refused = polyfill(&NONE, ToolFormat::Hermes, &messages, None);
        assert!(matches!(refused, Err(ChatError::Unsupported(_))));
        assert!(polyfill(&ALL, ToolFormat::Hermes, &messages, None).is_ok());
    }
}

//! OpenAI tool calling on chat completions.
//!
//! The tools reach the model through its chat template's `tools` variable. A template that
//! does not read `tools` (the default model's) gets them as a system message that asks for
//! Hermes-style calls instead, and earlier assistant calls are written back into the
//! conversation as that text. The model's reply is parsed in the format its template
//! teaches ([`ToolFormat`]): Hermes/Qwen `<tool_call>{...}</tool_call>`, Llama 3.x bare JSON
//! `{"name", "parameters"}`, Mistral `[TOOL_CALLS][{...}]`. `tool_choice: "required"` or a
//! named function turns into a grammar of well-formed calls in that format, so the call
//! always parses and names a given tool with arguments valid under its schema.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::ApiError;
use crate::model::{ChatMessage, ChatTemplate};
use crate::structured::{Constraint, json_layout};

/// One entry of `tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function.
    pub function: FunctionDefinition,
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDefinition {
    /// Its name.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its arguments (an empty object schema when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// OpenAI's strict flag; arguments are always held to the schema when a call is forced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

impl FunctionDefinition {
    /// The schema of its arguments.
    fn parameters(&self) -> Value {
        self.parameters.clone().unwrap_or_else(|| json!({ "type": "object", "properties": {} }))
    }
}

/// What `tool_choice` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No call: the tools are left out of the prompt.
    None,
    /// The model decides; a call in its reply is parsed out.
    Auto,
    /// At least one call, enforced.
    Required,
    /// A call of this function, enforced.
    Function(String),
}

impl ToolChoice {
    /// Reads `tool_choice` (default `auto` with tools, `none` without); a 400 naming
    /// `tool_choice` when it is malformed or names a function not in `tools`.
    pub fn parse(value: Option<&Value>, tools: &[Tool]) -> Result<Self, ApiError> {
        let blame = |message: String| ApiError::bad_request(message, "tool_choice");
        let choice = match value {
            None | Some(Value::Null) if tools.is_empty() => Self::None,
            None | Some(Value::Null) => Self::Auto,
            Some(Value::String(mode)) => match mode.as_str() {
                "none" => Self::None,
                "auto" => Self::Auto,
                "required" => Self::Required,
                other => {
                    return Err(blame(format!(
                        "tool_choice {other:?} is not none, auto, required or a function"
                    )));
                }
            },
            Some(object) => {
                let name = object
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| blame("tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}".into()))?;
                Self::Function(name.to_owned())
            }
        };
        match &choice {
            Self::Function(name) if !tools.iter().any(|t| &t.function.name == name) => {
                Err(blame(format!("tool_choice names {name:?}, which is not among the tools")))
            }
            Self::Required | Self::Function(_) if tools.is_empty() => {
                Err(blame("tool_choice requires a tool call but no tools were given".into()))
            }
            _ => Ok(choice),
        }
    }
}

/// How a model writes its tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` per call (Hermes, Qwen, and
    /// pagoda's instructions for templates without tools).
    Hermes,
    /// One bare JSON object `{"name": ..., "parameters": {...}}` (Llama 3.x).
    Llama3Json,
    /// `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}` (Mistral).
    Mistral,
}

impl ToolFormat {
    /// The format `template` teaches its model; Hermes when it names none.
    pub fn of(template: Option<&ChatTemplate>) -> Self {
        let source = template.map_or("", ChatTemplate::source);
        if source.contains("[TOOL_CALLS]") {
            Self::Mistral
        } else if source.contains("<|python_tag|>") || source.contains("\"parameters\": ") {
            Self::Llama3Json
        } else {
            Self::Hermes
        }
    }

    /// The text that starts a call in this format.
    pub fn opener(self) -> &'static str {
        match self {
            Self::Hermes => "<tool_call>",
            Self::Llama3Json => "{",
            Self::Mistral => "[TOOL_CALLS]",
        }
    }

    /// The grammar of a reply made only of calls of `tools`: one, or with `parallel` up to
    /// one per tool offered (a small model would otherwise repeat a call until `max_tokens`).
    pub fn constraint(self, tools: &[&Tool], parallel: bool) -> Constraint {
        let max_calls = if parallel { tools.len().max(1) } else { 1 };
        let arguments_key = if self == Self::Llama3Json { "parameters" } else { "arguments" };
        let calls: Vec<Value> = tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "object",
                    "properties": {
                        "name": { "const": tool.function.name },
                        arguments_key: tool.function.parameters(),
                    },
                    "required": ["name", arguments_key],
                    "additionalProperties": false,
                })
            })
            .collect();
        let call = json!({ "anyOf": calls, "x-guidance": json_layout() });
        let lark = match self {
            Self::Hermes => {
                let more = max_calls - 1;
                format!(
                    "start: call (\"\\n\" call) ~ 0..{more}\ncall: \"<tool_call>\\n\" %json {call} \"\\n</tool_call>\"\n"
                )
            }
            Self::Llama3Json => format!("start: %json {call}\n"),
            Self::Mistral => {
                let array = json!({ "type": "array", "items": call, "minItems": 1, "maxItems": max_calls, "x-guidance": json_layout() });
                format!("start: %json {array}\n")
            }
        };
        Constraint::Grammar(lark)
    }

    /// The calls in a reply, or `None` when the reply is not made of calls in this format.
    pub fn parse(self, text: &str) -> Option<Vec<ParsedCall>> {
        let text = text.trim();
        let calls: Vec<Value> = match self {
            Self::Hermes => {
                let mut calls = Vec::new();
                let mut rest = text;
                while let Some(body) = rest.strip_prefix("<tool_call>") {
                    let (json, after) = body.split_once("</tool_call>")?;
                    calls.push(serde_json::from_str(json.trim()).ok()?);
                    rest = after.trim_start();
                }
                (rest.is_empty() && !calls.is_empty()).then_some(calls)?
            }
            Self::Llama3Json => {
                let text = text.strip_prefix("<|python_tag|>").unwrap_or(text);
                let calls = serde_json::Deserializer::from_str(text).into_iter::<Value>();
                calls.collect::<Result<Vec<_>, _>>().ok().filter(|calls| !calls.is_empty())?
            }
            Self::Mistral => {
                let text = text.strip_prefix("[TOOL_CALLS]").unwrap_or(text);
                serde_json::from_str::<Vec<Value>>(text.trim()).ok().filter(|calls| !calls.is_empty())?
            }
        };
        calls.iter().map(ParsedCall::from_json).collect()
    }

    /// The text of an earlier assistant call, for templates that do not render tool calls.
    fn write(self, call: &ParsedCall) -> String {
        match self {
            Self::Hermes => format!("<tool_call>\n{}\n</tool_call>", call.to_json("arguments")),
            Self::Llama3Json => call.to_json("parameters").to_string(),
            Self::Mistral => format!("[TOOL_CALLS][{}]", call.to_json("arguments")),
        }
    }
}

/// One call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    /// The function's name.
    pub name: String,
    /// Its arguments, as a JSON object.
    pub arguments: Value,
}

impl ParsedCall {
    /// A call from `{"name", "arguments" | "parameters"}`.
    pub(super) fn from_json(call: &Value) -> Option<Self> {
        let name = call.get("name")?.as_str()?.to_owned();
        let arguments =
            call.get("arguments").or_else(|| call.get("parameters")).cloned().unwrap_or(json!({}));
        let arguments = match arguments {
            Value::String(text) => serde_json::from_str(&text).ok()?,
            other => other,
        };
        Some(Self { name, arguments })
    }

    /// `{"name", key: arguments}`.
    pub(super) fn to_json(&self, key: &str) -> Value {
        json!({ "name": self.name, key: self.arguments })
    }

    /// The call in OpenAI's response shape, with id `id`.
    pub fn to_openai(&self, id: String) -> ToolCallOut {
        ToolCallOut {
            index: None,
            id,
            kind: "function",
            function: FunctionCallOut { name: self.name.clone(), arguments: self.arguments.to_string() },
        }
    }
}

/// A tool call in a response (`message.tool_calls[i]`, `delta.tool_calls[i]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallOut {
    /// Its place in the list (streamed deltas only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// `call_...`.
    pub id: String,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The call.
    pub function: FunctionCallOut,
}

/// The function part of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionCallOut {
    /// The function's name.
    pub name: String,
    /// Its arguments as JSON text.
    pub arguments: String,
}

/// The system message that teaches a model whose template ignores `tools` to call them.
fn tools_system_prompt(tools: &[Tool]) -> String {
    let signatures: Vec<String> = tools.iter().map(|t| json!(t).to_string()).collect();
    format!(
        "You can call functions to answer. These are the functions, as JSON signatures:\n<tools>\n{}\n</tools>\n\
         To call one, reply with nothing but\n<tool_call>\n{{\"name\": \"function name\", \"arguments\": {{...}}}}\n</tool_call>\n\
         (one block per call). Otherwise, answer in plain text.",
        signatures.join("\n")
    )
}

/// The conversation as the template should see it when tools are in play: unchanged when
/// the template reads `tools` (`template_reads_tools`); otherwise with the tools explained in
/// the system message and earlier calls written into the assistant messages as text.
pub fn conversation_for(
    template_reads_tools: bool,
    format: ToolFormat,
    messages: Vec<ChatMessage>,
    tools: &[Tool],
) -> Vec<ChatMessage> {
    if template_reads_tools {
        return messages;
    }
    let mut out = Vec::with_capacity(messages.len() + 1);
    let prompt = tools_system_prompt(tools);
    let mut messages = messages.into_iter().peekable();
    match messages.peek_mut() {
        Some(first) if first.role == "system" => first.content = format!("{}\n\n{prompt}", first.content),
        _ => out.push(ChatMessage::new("system", prompt)),
    }
    for mut message in messages {
        let calls: Vec<String> = message
            .tool_calls
            .iter()
            .filter_map(|call| ParsedCall::from_json(call.get("function")?))
            .map(|call| format.write(&call))
            .collect();
        if !calls.is_empty() {
            let text = [message.content.trim(), &calls.join("\n")].join("\n");
            message.content = text.trim().to_owned();
            message.tool_calls.clear();
        }
        out.push(message);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Tool {
        Tool {
            kind: "function".into(),
            function: FunctionDefinition {
                name: name.into(),
                description: None,
                parameters: Some(json!({"type": "object", "properties": {"city": {"type": "string"}}})),
                strict: None,
            },
        }
    }

    #[test]
    fn each_format_parses_its_calls_and_nothing_else() {
        let hermes = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": \"{}\"}</tool_call>";
        let calls = ToolFormat::Hermes.parse(hermes).unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0], ParsedCall { name: "f".into(), arguments: json!({"city": "Oslo"}) });
        assert_eq!(calls[1].arguments, json!({}));
        assert_eq!(ToolFormat::Hermes.parse("The weather is fine."), None);
        assert_eq!(ToolFormat::Hermes.parse("<tool_call>{\"name\": \"f\"</tool_call>"), None);
        let llama =
            ToolFormat::Llama3Json.parse("{\"name\": \"f\", \"parameters\": {\"city\": \"Rome\"}}").unwrap();
        assert_eq!(llama[0].arguments, json!({"city": "Rome"}));
        let mistral =
            ToolFormat::Mistral.parse("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]").unwrap();
        assert_eq!(mistral[0].name, "f");
    }

    #[test]
    fn tool_choice_names_only_given_tools() {
        let tools = [tool("f")];
        assert_eq!(ToolChoice::parse(None, &tools).unwrap(), ToolChoice::Auto);
        assert_eq!(ToolChoice::parse(None, &[]).unwrap(), ToolChoice::None);
        assert_eq!(ToolChoice::parse(Some(&json!("required")), &tools).unwrap(), ToolChoice::Required);
        let named = json!({"type": "function", "function": {"name": "f"}});
        assert_eq!(ToolChoice::parse(Some(&named), &tools).unwrap(), ToolChoice::Function("f".into()));
        let unknown = json!({"type": "function", "function": {"name": "nope"}});
        assert_eq!(
            ToolChoice::parse(Some(&unknown), &tools).unwrap_err().param.as_deref(),
            Some("tool_choice")
        );
        assert!(ToolChoice::parse(Some(&json!("sometimes")), &tools).is_err());
        assert!(ToolChoice::parse(Some(&json!("required")), &[]).is_err());
    }
}

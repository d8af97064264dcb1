//! OpenAI tool calling on chat completions.
//!
//! The tools go to the chat template with the conversation; where the template does not
//! render tools, calls or results, its rendering polyfills them (see [`crate::model::chat`]).
//! The model's reply is parsed in the format its template teaches ([`ToolFormat`]):
//! Hermes/Qwen `<tool_call>{...}</tool_call>` (also what pagoda's tool prompt teaches),
//! Llama 3.x bare JSON `{"name", "parameters"}`, Mistral `[TOOL_CALLS][{...}]`.
//! `tool_choice: "required"` or a named function turns into a grammar of well-formed calls
//! in that format, so the call always parses and names a given tool with arguments valid
//! under its schema.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::ApiError;
pub use crate::model::chat::{ParsedCall, ToolFormat};
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

/// The grammar of a reply made only of calls of `tools` in `format`: one, or with
/// `parallel` up to one per tool offered (a small model would otherwise repeat a call until
/// `max_tokens`).
pub fn call_grammar(format: ToolFormat, tools: &[&Tool], parallel: bool) -> Constraint {
    let max_calls = if parallel { tools.len().max(1) } else { 1 };
    let arguments_key = format.arguments_key();
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
    let lark = match format {
        ToolFormat::Hermes => {
            let more = max_calls - 1;
            format!(
                "start: call (\"\\n\" call) ~ 0..{more}\ncall: \"<tool_call>\\n\" %json {call} \"\\n</tool_call>\"\n"
            )
        }
        ToolFormat::Llama3Json => format!("start: %json {call}\n"),
        ToolFormat::Mistral => {
            let array = json!({ "type": "array", "items": call, "minItems": 1, "maxItems": max_calls, "x-guidance": json_layout() });
            format!("start: %json {array}\n")
        }
    };
    Constraint::Grammar(lark)
}

/// `tools` as the chat template receives them.
pub fn tool_values(tools: &[Tool]) -> Vec<Value> {
    tools.iter().map(|tool| json!(tool)).collect()
}

/// `call` in OpenAI's response shape, with id `id`.
pub fn call_out(call: &ParsedCall, id: String) -> ToolCallOut {
    ToolCallOut {
        index: None,
        id,
        kind: "function",
        function: FunctionCallOut { name: call.name.clone(), arguments: call.arguments.to_string() },
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

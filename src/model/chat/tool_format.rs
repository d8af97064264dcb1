//! How a model writes its tool calls: the format its chat template teaches, or, for a
//! template without tools, the one pagoda's tool prompt teaches (Hermes).

use serde_json::{Value, json};

/// How a model writes its tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` per call (Hermes, Qwen, and
    /// pagoda's tool prompt for templates without tools).
    Hermes,
    /// One bare JSON object `{"name": ..., "parameters": {...}}` (Llama 3.x).
    Llama3Json,
    /// `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}` (Mistral).
    Mistral,
}

impl ToolFormat {
    /// The format a template with `source` teaches its model when it renders tools
    /// (`renders_tools`); Hermes otherwise, or when it names none.
    pub fn of(source: &str, renders_tools: bool) -> Self {
        if !renders_tools {
            Self::Hermes
        } else if source.contains("[TOOL_CALLS]") {
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

    /// The name of the arguments' key in a call.
    pub fn arguments_key(self) -> &'static str {
        if self == Self::Llama3Json { "parameters" } else { "arguments" }
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

    /// The text of a call, as the model would have written it.
    pub fn write(self, call: &ParsedCall) -> String {
        let json = call.to_json(self.arguments_key());
        match self {
            Self::Hermes => format!("<tool_call>\n{json}\n</tool_call>"),
            Self::Llama3Json => json.to_string(),
            Self::Mistral => format!("[TOOL_CALLS][{json}]"),
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
    /// A call from `{"name", "arguments" | "parameters"}`, the arguments an object or the
    /// JSON text of one.
    pub fn from_json(call: &Value) -> Option<Self> {
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
    pub fn to_json(&self, key: &str) -> Value {
        json!({ "name": self.name, key: self.arguments })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn written_calls_parse_back() {
        let call = ParsedCall { name: "f".into(), arguments: json!({"city": "Oslo"}) };
        for format in [ToolFormat::Hermes, ToolFormat::Llama3Json, ToolFormat::Mistral] {
            assert_eq!(format.parse(&format.write(&call)), Some(vec![call.clone()]), "{format:?}");
        }
    }

    #[test]
    fn a_template_without_tools_is_taught_hermes() {
        assert_eq!(ToolFormat::of("[TOOL_CALLS]", false), ToolFormat::Hermes);
        assert_eq!(ToolFormat::of("[TOOL_CALLS]", true), ToolFormat::Mistral);
        assert_eq!(ToolFormat::of("<|python_tag|>", true), ToolFormat::Llama3Json);
    }
}

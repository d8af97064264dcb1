//! Request fields the server does not implement. None is dropped silently: a field whose
//! absence would change what the answer means (a decoding rule, another prompt, another
//! response shape) is refused with a 400 naming it unless it is given its neutral value; any
//! other unknown field is ignored and logged by name, as vLLM logs the fields it ignores.

use std::collections::BTreeMap;

use serde_json::Value;

use super::error::ApiError;

/// The endpoint a request came to: some fields mean something on one endpoint only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    ChatCompletions,
}

/// Fields (OpenAI's and vLLM's) that change the answer's meaning and that pagoda does not
/// implement, with the value that asks for nothing beyond pagoda's behaviour (besides `null`).
const REFUSED: &[(&str, Option<Value>)] = &[
    ("use_beam_search", Some(Value::Bool(false))),
    ("length_penalty", None),
    ("allowed_token_ids", None),
    ("bad_words", None),
    ("truncate_prompt_tokens", None),
    ("return_tokens_as_token_ids", Some(Value::Bool(false))),
    ("prompt_embeds", None),
    ("logits_processors", None),
    ("structural_tag", None),
    ("spaces_between_special_tokens", Some(Value::Bool(true))),
    ("functions", None),
    ("function_call", None),
    ("chat_template", None),
    ("chat_template_kwargs", None),
    ("continue_final_message", Some(Value::Bool(false))),
    ("documents", None),
    ("modalities", None),
    ("audio", None),
];

/// A field's neutral value on `endpoint` where it differs by endpoint.
fn endpoint_neutral(endpoint: Endpoint, name: &str) -> Option<Option<Value>> {
    match (endpoint, name) {
        // Completions add the model's BOS (vLLM's default there); chat prompts are templated.
        (Endpoint::Completions, "add_special_tokens") => Some(Some(Value::Bool(true))),
        (Endpoint::ChatCompletions, "add_special_tokens") => Some(Some(Value::Bool(false))),
        (Endpoint::ChatCompletions, "add_generation_prompt") => Some(Some(Value::Bool(true))),
        (Endpoint::ChatCompletions, "echo") => Some(Some(Value::Bool(false))),
        _ => None,
    }
}

/// Checks a request's unknown fields (`extra`, what its body held beyond the fields the
/// server reads): a 400 for the first one that would change the answer's meaning, else a
/// warning naming the ignored ones.
pub fn check(endpoint: Endpoint, extra: &BTreeMap<String, Value>) -> Result<(), ApiError> {
    let mut ignored = Vec::new();
    for (name, value) in extra {
        let neutral = endpoint_neutral(endpoint, name).or_else(|| {
            REFUSED.iter().find(|(refused, _)| *refused == name.as_str()).map(|(_, neutral)| neutral.clone())
        });
        match neutral {
            Some(neutral) if !value.is_null() && Some(value) != neutral.as_ref() => {
                return Err(ApiError::bad_request(
                    format!("{name} is not supported (it would change the answer, so it is not ignored)"),
                    name,
                ));
            }
            Some(_) => {}
            None => ignored.push(name.as_str()),
        }
    }
    if !ignored.is_empty() {
        tracing::warn!("The following fields were present in the request but ignored: {ignored:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(json: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn fields_that_change_the_answer_are_refused_by_name() {
        let error =
            check(Endpoint::Completions, &fields(serde_json::json!({"bad_words": ["x"]}))).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("bad_words"));
        let error =
            check(Endpoint::ChatCompletions, &fields(serde_json::json!({"add_generation_prompt": false})))
                .unwrap_err();
        assert_eq!(error.param.as_deref(), Some("add_generation_prompt"));
        let error = check(Endpoint::Completions, &fields(serde_json::json!({"add_special_tokens": false})))
            .unwrap_err();
        assert_eq!(error.param.as_deref(), Some("add_special_tokens"));
    }

    #[test]
    fn neutral_values_and_other_fields_pass() {
        let neutral = serde_json::json!({
            "use_beam_search": false,
            "bad_words": null,
            "add_special_tokens": true,
            "user": "someone",
            "metadata": {"a": 1},
        });
        assert_eq!(check(Endpoint::Completions, &fields(neutral)), Ok(()));
        let chat =
            serde_json::json!({"add_generation_prompt": true, "echo": false, "add_special_tokens": false});
        assert_eq!(check(Endpoint::ChatCompletions, &fields(chat)), Ok(()));
    }
}

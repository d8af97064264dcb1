//! The server reference: routes, request fields and error statuses, from the server's code.

use std::fmt::Write;
use std::path::Path;

use pagoda::sampling::MAX_LOGPROBS;
use pagoda::server::error::{ApiError, ERROR_STATUSES};
use pagoda::server::openai::CompletionRequest;

use super::rust_source::{Struct, parse_struct};

/// The request types the page documents: heading, source file under `src/server/`, type.
const REQUEST_TYPES: [(&str, &str, &str); 9] = [
    ("`POST /v1/completions`", "openai.rs", "CompletionRequest"),
    ("`POST /v1/chat/completions`", "openai.rs", "ChatCompletionRequest"),
    ("Sampling fields", "openai.rs", "SamplingFields"),
    ("Chat messages", "openai.rs", "RequestMessage"),
    ("Tools", "tools.rs", "Tool"),
    ("Tool functions", "tools.rs", "FunctionDefinition"),
    ("`stream_options`", "openai.rs", "StreamOptions"),
    ("`POST /tokenize`", "tokenize.rs", "TokenizeRequest"),
    ("`POST /detokenize`", "tokenize.rs", "DetokenizeRequest"),
];

/// A field's JSON type for its Rust type.
fn json_type(ty: &str) -> String {
    if let Some(inner) = ty.strip_prefix("Option<").and_then(|t| t.strip_suffix('>')) {
        return json_type(inner);
    }
    if let Some(inner) = ty.strip_prefix("Vec<").and_then(|t| t.strip_suffix('>')) {
        let items = json_type(inner);
        return match items.split_once("](") {
            Some((name, link)) => format!("array of {name}s]({link}"),
            None if items == "JSON" => "array of JSON values".to_owned(),
            None => format!("array of {items}s"),
        };
    }
    match ty {
        "bool" => "boolean",
        "f32" | "f64" => "number",
        "usize" | "i32" | "i64" | "u64" => "integer",
        "TokenId" => "token id",
        "String" => "string",
        "serde_json::Value" | "Value" => "JSON",
        "serde_json::Map<String, serde_json::Value>" => "object",
        "OneOrMany" => "string or array of strings",
        "PromptInput" => "string, array of strings, array of token ids, or array of arrays of token ids",
        "MessageContent" => "string or array of `{\"type\": \"text\", \"text\"}` parts",
        "StreamOptions" => "[`stream_options`](#stream_options)",
        "RequestMessage" => "[message](#chat-messages)",
        "Tool" => "[tool](#tools)",
        "FunctionDefinition" => "[function](#tool-functions)",
        other => panic!("no JSON type for the Rust type {other}: add it to json_type"),
    }
    .to_owned()
}

/// Doc text with the constants it names by intra-doc link given with their values.
fn with_values(doc: &str) -> String {
    doc.replace("`MAX_LOGPROBS`", &MAX_LOGPROBS.to_string())
}

/// One request type's section: its doc comment (unless it only repeats the heading) and a
/// table of its fields.
fn section(heading: &str, request: &Struct) -> String {
    let mut out = format!("\n## {heading}\n\n");
    if request.doc.trim_end_matches('.') != heading {
        let _ = write!(out, "{}\n\n", with_values(&request.doc));
    }
    out.push_str("| field | type | meaning |\n| --- | --- | --- |\n");
    for field in &request.fields {
        if field.flatten {
            let _ = writeln!(out, "| … | | every one of the [sampling fields](#sampling-fields) |");
        } else {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} |",
                field.name,
                json_type(&field.ty),
                with_values(&field.doc)
            );
        }
    }
    out
}

/// The routes of `router()` in `src/server/mod.rs`: method, path, whether the API key and
/// the drain gate guard it (the routes before `route_layer`).
fn routes(source: &str) -> Vec<(String, String, bool)> {
    let mut gated = true;
    let mut routes = Vec::new();
    for line in source.lines().map(str::trim) {
        if line.starts_with(".route_layer(") {
            gated = false;
        } else if let Some(rest) = line.strip_prefix(".route(\"") {
            let (path, handler) = rest.split_once("\", ").expect("route(path, handler)");
            let method = handler.split_once('(').expect("method(handler)").0.to_uppercase();
            routes.push((method, path.to_owned(), gated));
        }
    }
    routes
}

/// The page.
pub fn page(src: &Path) -> String {
    let read =
        |file: &str| std::fs::read_to_string(src.join("server").join(file)).expect("read server source");
    let mut page = format!(
        "# Server reference\n\n{}\n\nWhat `pagoda serve` accepts, field by field. The [server chapter](../server.md) \
         explains it with examples.\n\n## Routes\n\n| method | path | needs `--api-key`, closed while draining |\n\
         | --- | --- | --- |\n",
        super::GENERATED
    );
    for (method, path, gated) in routes(&read("mod.rs")) {
        let _ = writeln!(page, "| {method} | `{path}` | {} |", if gated { "yes" } else { "no" });
    }
    for (heading, file, name) in REQUEST_TYPES {
        page.push_str(&section(heading, &parse_struct(&read(file), name)));
    }
    // What the server answers for `"temperature": -1`.
    let request: CompletionRequest =
        serde_json::from_value(serde_json::json!({"prompt": "Hi", "temperature": -1})).expect("a request");
    let example = request.sampling.to_params(16, None).expect_err("a negative temperature").to_json();
    let _ = write!(
        page,
        "\n## Errors\n\nEvery error answers with an OpenAI-style body, e.g.\n\n```json\n{example}\n```\n\n\
         | status | `type` | when |\n| --- | --- | --- |\n"
    );
    for (status, when) in ERROR_STATUSES {
        let body: serde_json::Value =
            serde_json::from_str(&ApiError::new(status, "").to_json()).expect("JSON body");
        let reason = status.canonical_reason().unwrap_or_default();
        let _ = writeln!(
            page,
            "| {} {reason} | `{}` | {when} |",
            status.as_u16(),
            body["error"]["type"].as_str().unwrap_or_default()
        );
    }
    page.push_str(
        "\nA streamed request that fails after its first chunk ends with one `data:` event holding such a body, \
         then `data: [DONE]`.\n",
    );
    page
}

/// Every `StatusCode::NAME` the server's source answers with, `OK` aside.
pub fn statuses_in_source(src: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(src.join("server")).expect("list src/server") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let source = std::fs::read_to_string(&path).expect("read source");
            for (i, _) in source.match_indices("StatusCode::") {
                let name: String =
                    source[i + 12..].chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
                if !name.is_empty() && name != "OK" && !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// A status's constant name, e.g. `PAYLOAD_TOO_LARGE`.
pub fn constant_name(reason: &str) -> String {
    reason.to_uppercase().replace(' ', "_")
}

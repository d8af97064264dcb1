//! Reading the C side's arguments: strings, JSON documents and out-pointers.

use std::ffi::{CStr, c_char};

use pagoda::{ChatMessage, SamplingParams};
use serde_json::Value;

use crate::status::Failure;

/// A required NUL-terminated UTF-8 string.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that stays valid during the call.
pub unsafe fn required_str<'a>(ptr: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::null(name));
    }
    // SAFETY: non-NULL and NUL-terminated, as the caller promises.
    let bytes = unsafe { CStr::from_ptr(ptr) };
    bytes.to_str().map_err(|e| Failure::invalid(format!("`{name}` is not valid UTF-8: {e}")))
}

/// An optional string: NULL reads as empty.
///
/// # Safety
/// As [`required_str`].
pub unsafe fn optional_str<'a>(ptr: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() { Ok("") } else { unsafe { required_str(ptr, name) } }
}

/// Writes `value` through a required out-pointer.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub unsafe fn write_out<T>(out: *mut T, name: &str, value: T) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null(name));
    }
    // SAFETY: non-NULL and writable, as the caller promises.
    unsafe { out.write(value) };
    Ok(())
}

/// A request's options: its sampling parameters and the LoRA adapter it runs with.
#[derive(Debug, Default)]
pub struct RequestOptions {
    /// The sampling parameters.
    pub params: SamplingParams,
    /// The name of a loaded LoRA adapter; `None` runs the base model.
    pub lora: Option<String>,
}

/// A request's options from a JSON object: vLLM's sampling parameter names and `lora` (an
/// adapter's name); empty means the defaults, and so does a field set to `null`. A field
/// `SamplingParams` does not have is an error, not ignored.
pub fn request_options(json: &str) -> Result<RequestOptions, Failure> {
    if json.trim().is_empty() {
        return Ok(RequestOptions::default());
    }
    let value: Value =
        serde_json::from_str(json).map_err(|e| Failure::invalid(format!("sampling parameters: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(Failure::invalid("sampling parameters: expected a JSON object"));
    };
    let lora = match fields.remove("lora") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name),
        Some(other) => {
            return Err(Failure::invalid(format!(
                "sampling parameters: `lora`: expected an adapter's name (a string), got {other}"
            )));
        }
    };
    Ok(RequestOptions { params: sampling_params(fields)?, lora })
}

/// Sampling parameters from the fields of a JSON object.
fn sampling_params(mut fields: serde_json::Map<String, Value>) -> Result<SamplingParams, Failure> {
    let known = serde_json::to_value(SamplingParams::default()).unwrap_or_default();
    if let Some(unknown) = fields.keys().find(|key| known.get(key.as_str()).is_none()) {
        return Err(Failure::invalid(format!("sampling parameters: unknown field `{unknown}`")));
    }
    fields.retain(|_, value| !value.is_null());
    let params: SamplingParams = serde_path_to_error::deserialize(Value::Object(fields))
        .map_err(|e| Failure::invalid(format!("sampling parameters: `{}`: {}", e.path(), e.inner())))?;
    params.validate().map_err(|e| Failure::invalid(format!("sampling parameters: {e}")))?;
    Ok(params)
}

/// A conversation: a JSON array of `{"role", "content"}` objects.
pub fn chat_messages(json: &str) -> Result<Vec<ChatMessage>, Failure> {
    let messages: Vec<ChatMessage> =
        serde_json::from_str(json).map_err(|e| Failure::invalid(format!("chat messages: {e}")))?;
    if messages.is_empty() {
        return Err(Failure::invalid("chat messages: the conversation is empty"));
    }
    Ok(messages)
}

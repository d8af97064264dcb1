//! The engine calls: create, add requests, step with an output callback, abort, metrics, free.

use std::ffi::{CString, c_char, c_void};

use pagoda::{Engine, EngineError, Prompt, RequestOutput};

use crate::args::{chat_messages, optional_str, request_options, required_str, write_out};
use crate::handles::{self, EngineSlot, PagodaEngine};
use crate::options::EngineOptions;
use crate::output::{OwnedOutput, PagodaOutput};
use crate::status::{Failure, PagodaStatus, guard};

/// Receives each output of a step. `output` and everything it points to are valid only
/// during the call. It runs on the thread that called `pagoda_engine_step`, after the
/// engine's lock was released, so it may call back into the engine (to abort a request,
/// say). It must not unwind (no C++ exception or longjmp out of it).
pub type PagodaOutputCallback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, output: *const PagodaOutput)>;

/// Opens the model and builds an engine.
///
/// `options_json` is NULL, `""`, or a JSON object whose fields are the CLI's engine flags
/// with underscores, each optional: `model` (a GGUF file or a Hugging Face directory; the
/// default model when absent), `block_size`, `num_gpu_blocks`, `kv_cache_memory` (bytes),
/// `kv_offloading_size` (GiB of host memory for the host KV tier; 0, the default, is off),
/// `kv_cache_dtype` (`"auto"`, `"f16"`, `"f32"`), `enable_prefix_caching`, `max_num_seqs`,
/// `max_num_batched_tokens`, `max_model_len`, `enable_chunked_prefill`,
/// `scheduling_policy` (`"fcfs"`, `"priority"`), `speculative_config` (vLLM's object, e.g.
/// `{"method": "ngram", "num_speculative_tokens": 4}`), `executor` (`"wgpu"`, `"sim"`), `seed`,
/// `backend`, `adapter` (the GPU's), `disable_features` (`"f16,subgroup"`), `webgpu_limits`,
/// and LoRA's (vLLM's names): `enable_lora`, `max_loras` (default 1), `max_lora_rank`
/// (default 16), `max_cpu_loras` (default `max_loras`). An unknown field is an error. On
/// success `*out_engine` is the new handle, freed with `pagoda_engine_free`.
///
/// # Safety
/// `options_json` is NULL or a NUL-terminated string; `out_engine` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_engine_new(
    options_json: *const c_char,
    out_engine: *mut *mut PagodaEngine,
) -> PagodaStatus {
    guard(|| {
        if out_engine.is_null() {
            return Err(Failure::null("out_engine"));
        }
        let options = unsafe { optional_str(options_json, "options_json") }?;
        let config = EngineOptions::from_json(options)
            .and_then(EngineOptions::into_config)
            .map_err(Failure::invalid)?;
        let engine = Engine::new(config)?;
        unsafe { write_out(out_engine, "out_engine", handles::insert(engine)) }
    })
}

/// Frees an engine: its live requests end without further outputs. A handle freed twice,
/// or never created, is rejected with `PAGODA_STATUS_INVALID_HANDLE` (detected, not
/// undefined). A call still running on another thread finishes first.
#[unsafe(no_mangle)]
pub extern "C" fn pagoda_engine_free(engine: *mut PagodaEngine) -> PagodaStatus {
    guard(|| handles::remove(engine).map(drop))
}

/// Queues a text prompt (special tokens parsed, BOS added when the model wants it) with
/// sampling parameters as JSON (vLLM's names: `temperature`, `top_p`, `top_k`, `min_p`,
/// `seed`, `max_tokens`, `min_tokens`, `stop`, `stop_token_ids`, `ignore_eos`, penalties,
/// `logit_bias`, `prompt_logprobs` (its values come in the first output's
/// `prompt_logprobs_json`), ...; NULL or `""` for the defaults, a field set to `null` takes its
/// default), and `lora`, the name of a LoRA adapter loaded with `pagoda_engine_load_lora` to
/// run the request with (`PAGODA_STATUS_UNKNOWN_LORA` when none has that name,
/// `PAGODA_STATUS_LORA_NOT_ENABLED` on an engine without LoRA). `*out_request_id` receives the
/// request's id.
///
/// # Safety
/// `prompt` and `params_json` are NULL or NUL-terminated; `out_request_id` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_engine_add_text(
    engine: *mut PagodaEngine,
    prompt: *const c_char,
    params_json: *const c_char,
    out_request_id: *mut u64,
) -> PagodaStatus {
    guard(|| {
        require_out(out_request_id)?;
        let prompt = unsafe { required_str(prompt, "prompt") }?;
        let params = unsafe { optional_str(params_json, "params_json") }?;
        let id = add(engine, Prompt::Text(prompt.to_owned()), params)?;
        unsafe { write_out(out_request_id, "out_request_id", id) }
    })
}

/// Queues a prompt of token ids, used as given (each checked against the vocabulary).
///
/// # Safety
/// `token_ids` is NULL or points to `num_token_ids` ids; `params_json` is NULL or
/// NUL-terminated; `out_request_id` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_engine_add_tokens(
    engine: *mut PagodaEngine,
    token_ids: *const u32,
    num_token_ids: usize,
    params_json: *const c_char,
    out_request_id: *mut u64,
) -> PagodaStatus {
    guard(|| {
        require_out(out_request_id)?;
        if token_ids.is_null() {
            return Err(Failure::null("token_ids"));
        }
        // SAFETY: non-NULL and `num_token_ids` long, as the caller promises.
        let ids = unsafe { std::slice::from_raw_parts(token_ids, num_token_ids) }.to_vec();
        let params = unsafe { optional_str(params_json, "params_json") }?;
        let id = add(engine, Prompt::TokenIds(ids), params)?;
        unsafe { write_out(out_request_id, "out_request_id", id) }
    })
}

/// Queues a conversation, rendered with the model's chat template and an assistant turn
/// opened: `messages_json` is an array like `[{"role": "user", "content": "Hi"}]`.
///
/// # Safety
/// `messages_json` and `params_json` are NULL or NUL-terminated; `out_request_id` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_engine_add_chat(
    engine: *mut PagodaEngine,
    messages_json: *const c_char,
    params_json: *const c_char,
    out_request_id: *mut u64,
) -> PagodaStatus {
    guard(|| {
        require_out(out_request_id)?;
        let messages = chat_messages(unsafe { required_str(messages_json, "messages_json") }?)?;
        let params = unsafe { optional_str(params_json, "params_json") }?;
        let id = add(engine, Prompt::Chat(messages), params)?;
        unsafe { write_out(out_request_id, "out_request_id", id) }
    })
}

/// Refuses a NULL `out_request_id` before a request is added that nobody could name.
fn require_out(out_request_id: *mut u64) -> Result<(), Failure> {
    if out_request_id.is_null() { Err(Failure::null("out_request_id")) } else { Ok(()) }
}

/// Adds one request to the engine behind `handle`.
fn add(handle: *mut PagodaEngine, prompt: Prompt, params_json: &str) -> Result<u64, Failure> {
    let options = request_options(params_json)?;
    let slot = handles::get(handle)?;
    let mut hosted = handles::lock(&slot)?;
    let engine = &mut hosted.engine;
    let prompt_token_ids = engine.encode_prompt(&prompt)?;
    Ok(engine.add_tokens_request_with_lora(prompt_token_ids, options.params, options.lora.as_deref())?)
}

/// Runs one engine step (when any request is live) and calls `on_output` once per request
/// that produced text or tokens or finished, in order; outputs of aborts since the last
/// step come first. Steps taken on several threads deliver in step order. With
/// `on_output` NULL the outputs are dropped. If the step fails, every live request is ended
/// with `PAGODA_FINISH_REASON_ERROR` (delivered to `on_output`) and the failure is
/// returned. Stepping an engine from inside its own output callback is refused with
/// `PAGODA_STATUS_BUSY`.
///
/// # Safety
/// `on_output` is NULL or a function that may be called with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_engine_step(
    engine: *mut PagodaEngine,
    on_output: PagodaOutputCallback,
    user_data: *mut c_void,
) -> PagodaStatus {
    guard(|| {
        let slot = handles::get(engine)?;
        if slot.delivering_here() {
            return Err(Failure::new(
                PagodaStatus::Busy,
                "pagoda_engine_step was called from inside this engine's output callback",
            ));
        }
        let stepped = step(&slot)?;
        let _turn = slot.turn(stepped.ticket);
        if let Some(callback) = on_output {
            for output in stepped.outputs.into_iter().map(OwnedOutput::from) {
                let view = output.view();
                // SAFETY: the caller's callback, called as documented; `view` outlives the call.
                unsafe { callback(user_data, &view) };
            }
        }
        stepped.result
    })
}

/// What one step leaves to deliver once the engine's lock is released.
struct Stepped {
    ticket: u64,
    outputs: Vec<RequestOutput>,
    result: Result<(), Failure>,
}

/// Steps the engine under its lock.
fn step(slot: &EngineSlot) -> Result<Stepped, Failure> {
    let mut hosted = handles::lock(slot)?;
    let mut outputs = std::mem::take(&mut hosted.pending);
    let mut result = Ok(());
    if hosted.engine.has_unfinished_requests() {
        match hosted.engine.step() {
            Ok(stepped) => outputs.extend(stepped),
            Err(EngineError::StepFailed { source, outputs: ended }) => {
                let message = format!("a step failed ({source}); {} live requests ended", ended.len());
                outputs.extend(ended);
                result = Err(Failure::new(PagodaStatus::Device, message));
            }
            Err(error) => result = Err(error.into()),
        }
    }
    Ok(Stepped { ticket: hosted.take_ticket(), outputs, result })
}

/// Writes whether any request is waiting or running (or an abort's output is still to be
/// delivered): step while this is true.
///
/// # Safety
/// `out_unfinished` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_engine_has_unfinished(
    engine: *mut PagodaEngine,
    out_unfinished: *mut bool,
) -> PagodaStatus {
    guard(|| {
        let slot = handles::get(engine)?;
        let hosted = handles::lock(&slot)?;
        let unfinished = hosted.engine.has_unfinished_requests() || !hosted.pending.is_empty();
        unsafe { write_out(out_unfinished, "out_unfinished", unfinished) }
    })
}

/// Ends a live request and frees its KV blocks; its last output (finish reason
/// `PAGODA_FINISH_REASON_ABORT`, with any text held back) comes with the next step.
/// `PAGODA_STATUS_UNKNOWN_REQUEST` when no live request has this id.
#[unsafe(no_mangle)]
pub extern "C" fn pagoda_engine_abort(engine: *mut PagodaEngine, request_id: u64) -> PagodaStatus {
    guard(|| {
        let slot = handles::get(engine)?;
        let mut hosted = handles::lock(&slot)?;
        let output = hosted.engine.abort(request_id).ok_or_else(|| {
            Failure::new(PagodaStatus::UnknownRequest, format!("no live request has id {request_id}"))
        })?;
        hosted.pending.push(output);
        Ok(())
    })
}

/// Writes the engine's metrics as a JSON object (token counters, finish reasons, latency
/// histograms, the scheduler's gauges and counters) to `*out_json`; free it with
/// `pagoda_string_free`.
///
/// # Safety
/// `out_json` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_engine_metrics_json(
    engine: *mut PagodaEngine,
    out_json: *mut *mut c_char,
) -> PagodaStatus {
    guard(|| {
        if out_json.is_null() {
            return Err(Failure::null("out_json"));
        }
        let slot = handles::get(engine)?;
        let metrics = handles::lock(&slot)?.engine.metrics();
        let json = serde_json::to_string(&metrics).map_err(|e| Failure::invalid(format!("metrics: {e}")))?;
        let text = CString::new(json).map_err(|e| Failure::invalid(format!("metrics: {e}")))?;
        unsafe { write_out(out_json, "out_json", text.into_raw()) }
    })
}

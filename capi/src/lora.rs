//! LoRA adapters at runtime: loaded by name from a path, unloaded by name (vLLM's
//! `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`). A request picks one with the
//! `lora` field of its parameters.

use std::ffi::c_char;
use std::path::Path;

use crate::args::required_str;
use crate::handles::{self, PagodaEngine};
use crate::status::{PagodaStatus, guard};

/// Reads the LoRA adapter at `path` (a PEFT directory with `adapter_config.json` and
/// `adapter_model.safetensors`, or a llama.cpp LoRA GGUF) and makes it available to requests
/// as `name` (their parameters' `"lora": name`). Fails with `PAGODA_STATUS_LORA_NOT_ENABLED`
/// on an engine created without `"enable_lora": true`, `PAGODA_STATUS_NOT_FOUND` when nothing
/// is at `path`, `PAGODA_STATUS_MODEL` when the adapter cannot be read or does not fit the
/// model or `max_lora_rank`, and `PAGODA_STATUS_INVALID_ARGUMENT` when `name` is empty or
/// already loaded.
///
/// # Safety
/// `name` and `path` are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_engine_load_lora(
    engine: *mut PagodaEngine,
    name: *const c_char,
    path: *const c_char,
) -> PagodaStatus {
    guard(|| {
        let name = unsafe { required_str(name, "name") }?;
        let path = unsafe { required_str(path, "path") }?;
        let slot = handles::get(engine)?;
        let mut hosted = handles::lock(&slot)?;
        hosted.engine.load_lora(name, Path::new(path))?;
        Ok(())
    })
}

/// Forgets the LoRA adapter `name`. Fails with `PAGODA_STATUS_UNKNOWN_LORA` when none has
/// that name, `PAGODA_STATUS_BUSY` while requests that use it are live (abort them, or step
/// until they finish), and `PAGODA_STATUS_LORA_NOT_ENABLED` on an engine without LoRA.
///
/// # Safety
/// `name` is NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_engine_unload_lora(
    engine: *mut PagodaEngine,
    name: *const c_char,
) -> PagodaStatus {
    guard(|| {
        let name = unsafe { required_str(name, "name") }?;
        let slot = handles::get(engine)?;
        let mut hosted = handles::lock(&slot)?;
        hosted.engine.unload_lora(name)?;
        Ok(())
    })
}

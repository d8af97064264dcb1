//! pagoda's C ABI: a thin layer over [`pagoda::Engine`] for C, C++, Swift and C# hosts.
//!
//! `include/pagoda.h` is generated from this crate by cbindgen and states the contract:
//! status codes, the per-thread last error, who owns what, and the thread model. In short:
//! every call returns a [`PagodaStatus`]; no panic crosses the boundary; handles are
//! checked against a registry before use; strings pagoda returns are freed with
//! [`pagoda_string_free`]; output pointers live only during the callback that gets them.

mod args;
mod engine;
mod handles;
mod lora;
mod options;
mod output;
mod status;

use std::ffi::{CString, c_char};

pub use engine::*;
pub use handles::PagodaEngine;
pub use lora::{pagoda_engine_load_lora, pagoda_engine_unload_lora};
pub use output::{PagodaFinishReason, PagodaOutput};
pub use status::PagodaStatus;

/// pagoda's version, e.g. `"0.1.0"`: a static string, never freed.
#[unsafe(no_mangle)]
pub extern "C" fn pagoda_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The message of the last failed call on this thread, or `""` when the last call
/// succeeded. The string belongs to pagoda and stays valid until the next pagoda call on
/// this thread; it is never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn pagoda_last_error() -> *const c_char {
    status::last_error_ptr()
}

/// Frees a string that pagoda returned (e.g. by `pagoda_engine_metrics_json`). NULL is
/// ignored.
///
/// # Safety
/// `text` is NULL or a string pagoda returned and not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pagoda_string_free(text: *mut c_char) {
    if !text.is_null() {
        // SAFETY: pagoda made it with `CString::into_raw`, and it is freed once.
        drop(unsafe { CString::from_raw(text) });
    }
}

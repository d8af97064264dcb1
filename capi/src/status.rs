//! Status codes, the per-thread last error, and the guard every exported call runs in.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use pagoda::EngineError;
use pagoda::engine::lora::LoraError;

/// What every call returns: `PAGODA_STATUS_OK` (0), or why it failed. After a failure,
/// `pagoda_last_error()` on the same thread says what went wrong in words.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagodaStatus {
    /// The call succeeded.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// The engine handle is not one `pagoda_engine_new` returned, or was already freed.
    InvalidHandle = 2,
    /// An argument is malformed: invalid UTF-8, bad JSON, an unknown field, a value out of range.
    InvalidArgument = 3,
    /// The model, its tokenizer or its chat template could not be used, or a LoRA adapter
    /// could not be read or does not fit the model or the engine's LoRA limits.
    Model = 4,
    /// The GPU or the executor failed.
    Device = 5,
    /// The request was refused: empty, longer than the model or the KV cache allows, or the
    /// queue is full.
    Rejected = 6,
    /// No live request has this id.
    UnknownRequest = 7,
    /// pagoda panicked inside the call (a bug); the panic was caught at the boundary. An
    /// engine that panicked can only be freed.
    Panic = 8,
    /// The call is not allowed where it was made: stepping an engine from inside its own
    /// output callback, or unloading a LoRA adapter that live requests use.
    Busy = 9,
    /// The engine was created without LoRA (`"enable_lora": true` in its options).
    LoraNotEnabled = 10,
    /// No LoRA adapter of this name is loaded.
    UnknownLora = 11,
    /// Nothing exists at the path given (a LoRA adapter's).
    NotFound = 12,
}

/// A failed call: its status and the message `pagoda_last_error` will return.
#[derive(Debug)]
pub struct Failure {
    status: PagodaStatus,
    message: String,
}

impl Failure {
    /// A failure with `status` and `message`.
    pub fn new(status: PagodaStatus, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }

    /// A NULL pointer where `name` was required.
    pub fn null(name: &str) -> Self {
        Self::new(PagodaStatus::NullArgument, format!("`{name}` is NULL"))
    }

    /// A malformed argument.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(PagodaStatus::InvalidArgument, message)
    }
}

impl From<EngineError> for Failure {
    fn from(error: EngineError) -> Self {
        let status = match &error {
            EngineError::InvalidParams(_)
            | EngineError::Constraint(_)
            | EngineError::TokenOutOfVocab { .. }
            | EngineError::BiasOutOfVocab { .. }
            | EngineError::PromptLogprobsUnsupported
            | EngineError::Config(_)
            | EngineError::Sim(_)
            | EngineError::Lora(LoraError::NameTaken(_)) => PagodaStatus::InvalidArgument,
            EngineError::Lora(LoraError::NotEnabled) => PagodaStatus::LoraNotEnabled,
            EngineError::Lora(LoraError::Unknown(_)) => PagodaStatus::UnknownLora,
            EngineError::Lora(LoraError::NotFound(_)) => PagodaStatus::NotFound,
            EngineError::Lora(LoraError::Refused { .. }) => PagodaStatus::Model,
            EngineError::Lora(LoraError::InUse(_)) => PagodaStatus::Busy,
            EngineError::Rejected(_) | EngineError::Overloaded { .. } => PagodaStatus::Rejected,
            EngineError::Tokenizer(_) | EngineError::Chat(_) | EngineError::Model(_) => PagodaStatus::Model,
            EngineError::Executor(_)
            | EngineError::Gpu(_)
            | EngineError::Stopped
            | EngineError::StepFailed { .. }
            | EngineError::DeviceLost(_) => PagodaStatus::Device,
            EngineError::UnknownRequest(_) => PagodaStatus::UnknownRequest,
        };
        Self::new(status, error.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs one exported call: catches any panic, and turns a failure into its status code with
/// its message stored for `pagoda_last_error` (cleared on success, also when a nested call
/// inside an output callback failed).
pub fn guard(body: impl FnOnce() -> Result<(), Failure>) -> PagodaStatus {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            set_last_error("");
            return PagodaStatus::Ok;
        }
        Ok(Err(failure)) => failure,
        Err(payload) => {
            Failure::new(PagodaStatus::Panic, format!("pagoda panicked: {}", panic_message(&payload)))
        }
    };
    set_last_error(&failure.message);
    failure.status
}

/// The text of a caught panic.
fn panic_message(payload: &Box<dyn Any + Send>) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Stores `message` as this thread's last error (interior NULs become spaces).
fn set_last_error(message: &str) {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
}

/// This thread's last error message, as a pointer into thread-local storage.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

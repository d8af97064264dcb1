//! What a step hands the output callback: one request's new text and tokens.

use std::ffi::c_char;

use pagoda::{FinishReason, RequestOutput};

/// Why a request finished, or that it has not.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagodaFinishReason {
    /// Still running: more outputs follow.
    None = 0,
    /// EOS, a stop token or a stop string.
    Stop = 1,
    /// `max_tokens` or the model's length.
    Length = 2,
    /// Aborted by `pagoda_engine_abort`.
    Abort = 3,
    /// The step failed; the request was ended.
    Error = 4,
}

impl From<Option<FinishReason>> for PagodaFinishReason {
    fn from(reason: Option<FinishReason>) -> Self {
        match reason {
            None => Self::None,
            Some(FinishReason::Stop) => Self::Stop,
            Some(FinishReason::Length) => Self::Length,
            Some(FinishReason::Abort) => Self::Abort,
            Some(FinishReason::Error) => Self::Error,
        }
    }
}

/// One request's progress in one step. Every pointer in it is owned by pagoda and valid
/// only during the callback that receives it: copy what you keep.
#[repr(C)]
#[derive(Debug)]
pub struct PagodaOutput {
    /// The request, as `pagoda_engine_add_*` returned it.
    pub request_id: u64,
    /// New UTF-8 text, NUL-terminated (text held back at a possible stop string or inside a
    /// UTF-8 character comes in a later output).
    pub text: *const c_char,
    /// Bytes of `text`, the terminating NUL not counted.
    pub text_len: usize,
    /// New token ids.
    pub token_ids: *const u32,
    /// Number of `token_ids`.
    pub num_token_ids: usize,
    /// `PAGODA_FINISH_REASON_NONE` until the request's last output.
    pub finish_reason: PagodaFinishReason,
    /// Prompt length in tokens.
    pub num_prompt_tokens: usize,
    /// Tokens generated so far, these included.
    pub num_output_tokens: usize,
    /// Prompt tokens served by the prefix cache.
    pub num_cached_tokens: usize,
}

/// A [`RequestOutput`] with its text NUL-terminated, ready to be lent to C.
pub struct OwnedOutput {
    output: RequestOutput,
    text: Vec<u8>,
}

impl From<RequestOutput> for OwnedOutput {
    fn from(output: RequestOutput) -> Self {
        let mut text = Vec::with_capacity(output.new_text.len() + 1);
        text.extend_from_slice(output.new_text.as_bytes());
        text.push(0);
        Self { output, text }
    }
}

impl OwnedOutput {
    /// The C view, borrowing from `self`.
    pub fn view(&self) -> PagodaOutput {
        let output = &self.output;
        PagodaOutput {
            request_id: output.request_id,
            text: self.text.as_ptr().cast(),
            text_len: self.text.len() - 1,
            token_ids: output.new_token_ids.as_ptr(),
            num_token_ids: output.new_token_ids.len(),
            finish_reason: output.finish_reason.into(),
            num_prompt_tokens: output.num_prompt_tokens,
            num_output_tokens: output.num_output_tokens,
            num_cached_tokens: output.num_cached_tokens,
        }
    }
}

//! What a step hands the output callback: one request's new text and tokens.

use std::ffi::{CString, c_char};

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
    /// NULL, except on the first output of a request whose parameters set `prompt_logprobs`:
    /// NUL-terminated JSON, an array with one entry per prompt token, `null` for the first,
    /// then `{"token_id", "logprob", "rank", "top": [[id, logprob], ...]}`.
    pub prompt_logprobs_json: *const c_char,
}

/// A [`RequestOutput`] with its text NUL-terminated, ready to be lent to C.
pub struct OwnedOutput {
    output: RequestOutput,
    text: Vec<u8>,
    prompt_logprobs_json: Option<CString>,
}

impl From<RequestOutput> for OwnedOutput {
    fn from(output: RequestOutput) -> Self {
        let mut text = Vec::with_capacity(output.new_text.len() + 1);
        text.extend_from_slice(output.new_text.as_bytes());
        text.push(0);
        // serde_json escapes every control character, so the JSON holds no NUL.
        let prompt_logprobs_json = output
            .prompt_logprobs
            .as_ref()
            .and_then(|logprobs| serde_json::to_string(logprobs).ok())
            .and_then(|json| CString::new(json).ok());
        Self { output, text, prompt_logprobs_json }
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
            prompt_logprobs_json: self
                .prompt_logprobs_json
                .as_ref()
                .map_or(std::ptr::null(), |json| json.as_ptr()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use pagoda::sampling::PromptTokenLogprobs;

    use super::*;

    fn output(prompt_logprobs: Option<pagoda::sampling::PromptLogprobs>) -> RequestOutput {
        RequestOutput {
            request_id: 3,
            new_token_ids: vec![7],
            new_text: "x".into(),
            new_logprobs: Vec::new(),
            prompt_logprobs,
            finish_reason: None,
            num_prompt_tokens: 2,
            num_output_tokens: 1,
            num_cached_tokens: 0,
        }
    }

    #[test]
    fn prompt_logprobs_reach_c_as_json_on_the_output_that_carries_them() {
        let entry = PromptTokenLogprobs { token_id: 5, logprob: -0.5, rank: 2, top: vec![(9, -0.25)] };
        let owned = OwnedOutput::from(output(Some(vec![None, Some(entry)])));
        let view = owned.view();
        assert!(!view.prompt_logprobs_json.is_null());
        // SAFETY: non-NULL, NUL-terminated and owned by `owned`, which outlives this use.
        let json = unsafe { CStr::from_ptr(view.prompt_logprobs_json) }.to_str().unwrap();
        assert_eq!(json, r#"[null,{"token_id":5,"logprob":-0.5,"rank":2,"top":[[9,-0.25]]}]"#);
        assert!(OwnedOutput::from(output(None)).view().prompt_logprobs_json.is_null());
    }
}

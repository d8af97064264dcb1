//! The token masks of one step's constrained requests, computed beside the forward pass.

use std::collections::HashMap;
use std::thread::ScopedJoinHandle;

use crate::ids::RequestId;
use crate::structured::TokenMask;

/// The allowed-token masks of the requests that sample this step under a constraint: one
/// per position the request samples at (its last token's, then one after each proposal that
/// speculative decoding verifies, for as long as the proposals follow the grammar).
///
/// The engine computes them on another thread while the executor runs the model; the
/// executor asks for a mask only when it samples, so the two overlap.
#[derive(Debug, Default)]
pub struct StepMasks<'scope> {
    pending: Option<ScopedJoinHandle<'scope, HashMap<RequestId, Vec<TokenMask>>>>,
    ready: HashMap<RequestId, Vec<TokenMask>>,
}

impl<'scope> StepMasks<'scope> {
    /// No constrained request this step.
    pub fn none() -> Self {
        Self::default()
    }

    /// Masks a scoped thread is computing.
    pub fn pending(handle: ScopedJoinHandle<'scope, HashMap<RequestId, Vec<TokenMask>>>) -> Self {
        Self { pending: Some(handle), ready: HashMap::new() }
    }

    /// Masks computed already.
    pub fn ready(ready: HashMap<RequestId, Vec<TokenMask>>) -> Self {
        Self { pending: None, ready }
    }

    /// The masks of `request_id`'s sampled positions, in order, waiting for the computation
    /// on first use.
    pub fn get(&mut self, request_id: RequestId) -> Option<&[TokenMask]> {
        self.wait();
        self.ready.get(&request_id).map(Vec::as_slice)
    }

    /// Waits for the computation, if one is running.
    fn wait(&mut self) {
        if let Some(handle) = self.pending.take() {
            self.ready = handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
    }
}

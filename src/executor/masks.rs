//! The token masks of one step's constrained requests, computed beside the forward pass.

use std::collections::HashMap;
use std::thread::ScopedJoinHandle;

use crate::ids::RequestId;
use crate::structured::TokenMask;

/// The allowed-token masks of the requests that sample this step under a constraint.
///
/// The engine computes them on another thread while the executor runs the model; the
/// executor asks for a mask only when it samples, so the two overlap.
#[derive(Debug, Default)]
pub struct StepMasks<'scope> {
    pending: Option<ScopedJoinHandle<'scope, HashMap<RequestId, TokenMask>>>,
    ready: HashMap<RequestId, TokenMask>,
}

impl<'scope> StepMasks<'scope> {
    /// No constrained request this step.
    pub fn none() -> Self {
        Self::default()
    }

    /// Masks a scoped thread is computing.
    pub fn pending(handle: ScopedJoinHandle<'scope, HashMap<RequestId, TokenMask>>) -> Self {
        Self { pending: Some(handle), ready: HashMap::new() }
    }

    /// Masks computed already.
    pub fn ready(ready: HashMap<RequestId, TokenMask>) -> Self {
        Self { pending: None, ready }
    }

    /// The mask of `request_id`, waiting for the computation on first use.
    pub fn get(&mut self, request_id: RequestId) -> Option<&TokenMask> {
        self.wait();
        self.ready.get(&request_id)
    }

    /// Waits for the computation, if one is running.
    fn wait(&mut self) {
        if let Some(handle) = self.pending.take() {
            self.ready = handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
    }
}

//! Error scopes of every kind wgpu reports, so that a call's errors come back to its caller.
//!
//! wgpu's error scopes are per thread. What no scope catches goes to the device's
//! uncaptured-error handler, where whichever thread checks the device next would take it for
//! its own; a validation scope alone lets out-of-memory and internal errors (a driver refusing
//! a submit, a backend failing to compile a shader) through.

use super::GpuError;

/// Validation, out-of-memory and internal error scopes pushed on the calling thread, in that
/// order (dropped unpopped, as on an early return, they are popped innermost first as wgpu
/// requires).
pub(crate) struct ErrorScopes(Vec<wgpu::ErrorScopeGuard>);

impl ErrorScopes {
    /// Pushes the three scopes.
    pub(crate) fn push(device: &wgpu::Device) -> Self {
        let filters =
            [wgpu::ErrorFilter::Validation, wgpu::ErrorFilter::OutOfMemory, wgpu::ErrorFilter::Internal];
        Self(filters.into_iter().map(|filter| device.push_error_scope(filter)).collect())
    }

    /// Pops them (innermost first) and returns the error they caught, if any, after `what`: as
    /// a [`GpuError::OutOfMemory`], or as what `other` makes of the message.
    pub(crate) fn pop(mut self, what: &str, other: impl FnOnce(String) -> GpuError) -> Result<(), GpuError> {
        let mut next = || self.0.pop().and_then(|scope| pollster::block_on(scope.pop()));
        let (internal, memory, validation) = (next(), next(), next());
        match (memory, validation.or(internal)) {
            (Some(oom), _) => Err(GpuError::OutOfMemory(format!("{what}: {oom}"))),
            (None, Some(err)) => Err(other(format!("{what}: {err}"))),
            (None, None) => Ok(()),
        }
    }
}

impl Drop for ErrorScopes {
    fn drop(&mut self) {
        while let Some(scope) = self.0.pop() {
            drop(scope);
        }
    }
}

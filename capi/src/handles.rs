//! Engine handles: opaque pointers that are keys into a registry, never dereferenced.
//!
//! A handle's value is a number from a counter that never repeats, so a freed, foreign or
//! garbage handle is found missing in the registry and rejected with
//! `PAGODA_STATUS_INVALID_HANDLE` instead of being followed. Each engine sits behind its own
//! lock: calls on one engine from several threads run one at a time. Steps hand their
//! outputs to callbacks after that lock is released, in step order: each step takes a
//! ticket under the lock and delivers when its ticket's turn comes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};

use pagoda::{Engine, RequestOutput};

use crate::status::{Failure, PagodaStatus};

/// An engine as the C side sees it: an opaque type only ever used behind a pointer.
pub struct PagodaEngine {
    _opaque: [u8; 0],
}

/// One engine and the outputs it produced outside a step (aborts), delivered by the next step.
pub struct HostedEngine {
    /// The engine.
    pub engine: Engine,
    /// Outputs waiting for the next `pagoda_engine_step`.
    pub pending: Vec<RequestOutput>,
    /// The delivery ticket the next step takes.
    next_ticket: u64,
}

impl HostedEngine {
    /// Takes the next delivery ticket: call under the engine's lock, with the step's outputs.
    pub fn take_ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket - 1
    }
}

/// An engine and the order in which steps deliver their outputs.
pub struct EngineSlot {
    key: usize,
    hosted: Mutex<HostedEngine>,
    serving: Mutex<u64>,
    turn_changed: Condvar,
}

type Slot = Arc<EngineSlot>;

thread_local! {
    /// Engines whose outputs this thread is delivering right now (nested callbacks).
    static DELIVERING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

impl EngineSlot {
    /// True while this thread runs an output callback of this engine.
    pub fn delivering_here(&self) -> bool {
        DELIVERING.with(|keys| keys.borrow().contains(&self.key))
    }

    /// Waits until `ticket` is served, then holds the turn until the returned guard drops.
    pub fn turn(&self, ticket: u64) -> Turn<'_> {
        let mut serving = self.serving.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while *serving != ticket {
            serving = self.turn_changed.wait(serving).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        DELIVERING.with(|keys| keys.borrow_mut().push(self.key));
        Turn { slot: self }
    }
}

/// A step's turn to deliver its outputs; dropping it passes the turn on.
pub struct Turn<'a> {
    slot: &'a EngineSlot,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        DELIVERING.with(|keys| keys.borrow_mut().retain(|&key| key != self.slot.key));
        *self.slot.serving.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) += 1;
        self.slot.turn_changed.notify_all();
    }
}

static ENGINES: LazyLock<Mutex<HashMap<usize, Slot>>> = LazyLock::new(Mutex::default);
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(1);

/// The registry, whatever a panicking thread left it in (a map stays consistent).
fn engines() -> MutexGuard<'static, HashMap<usize, Slot>> {
    ENGINES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Registers `engine` and returns its new handle.
pub fn insert(engine: Engine) -> *mut PagodaEngine {
    let key = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
    let hosted = HostedEngine { engine, pending: Vec::new(), next_ticket: 0 };
    let slot =
        EngineSlot { key, hosted: Mutex::new(hosted), serving: Mutex::new(0), turn_changed: Condvar::new() };
    engines().insert(key, Arc::new(slot));
    std::ptr::without_provenance_mut(key)
}

/// The engine behind `handle`.
pub fn get(handle: *mut PagodaEngine) -> Result<Slot, Failure> {
    if handle.is_null() {
        return Err(Failure::null("engine"));
    }
    engines().get(&handle.addr()).cloned().ok_or_else(unknown_handle)
}

/// Removes `handle` from the registry; the engine is dropped once no call still uses it.
pub fn remove(handle: *mut PagodaEngine) -> Result<Slot, Failure> {
    if handle.is_null() {
        return Err(Failure::null("engine"));
    }
    engines().remove(&handle.addr()).ok_or_else(unknown_handle)
}

/// Locks one engine; an engine whose lock a panic poisoned is refused.
pub fn lock(slot: &EngineSlot) -> Result<MutexGuard<'_, HostedEngine>, Failure> {
    slot.hosted.lock().map_err(|_| {
        Failure::new(PagodaStatus::Panic, "this engine panicked in an earlier call and can only be freed")
    })
}

fn unknown_handle() -> Failure {
    Failure::new(PagodaStatus::InvalidHandle, "not a live engine handle (never created, or already freed)")
}

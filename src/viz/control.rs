//! Pause, single-step and speed, shared between the window and the thread that drives the
//! engine (or replays a trace). Plain atomics: neither side ever waits for the other.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Slowest pace, steps per second.
pub const MIN_SPEED: f32 = 0.5;
/// Fastest pace, steps per second.
pub const MAX_SPEED: f32 = 500.0;

/// Playback controls for a driven engine or a replay.
#[derive(Debug)]
pub struct SimControl {
    paused: AtomicBool,
    pending_steps: AtomicU64,
    speed_bits: AtomicU32,
    stopped: AtomicBool,
}

impl SimControl {
    /// Controls that start paused or not, at `speed` steps per second (clamped).
    pub fn new(paused: bool, speed: f32) -> Self {
        Self {
            paused: AtomicBool::new(paused),
            pending_steps: AtomicU64::new(0),
            speed_bits: AtomicU32::new(speed.clamp(MIN_SPEED, MAX_SPEED).to_bits()),
            stopped: AtomicBool::new(false),
        }
    }

    /// True while paused.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Pauses or resumes.
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    /// Asks for one more step while paused.
    pub fn request_step(&self) {
        self.pending_steps.fetch_add(1, Ordering::Relaxed);
    }

    /// True when the driver may run its next step now: not paused, or a single step was
    /// asked for (which this call consumes).
    pub fn take_step(&self) -> bool {
        if !self.is_paused() {
            return true;
        }
        self.pending_steps.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
    }

    /// Pace in steps per second.
    pub fn speed(&self) -> f32 {
        f32::from_bits(self.speed_bits.load(Ordering::Relaxed))
    }

    /// Sets the pace in steps per second (clamped to `MIN_SPEED..=MAX_SPEED`).
    pub fn set_speed(&self, steps_per_s: f32) {
        self.speed_bits.store(steps_per_s.clamp(MIN_SPEED, MAX_SPEED).to_bits(), Ordering::Relaxed);
    }

    /// Tells the driver to stop (the window closed).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// True once `stop` was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paused_driver_runs_exactly_the_requested_steps() {
        let control = SimControl::new(true, 10.0);
        assert!(!control.take_step());
        control.request_step();
        control.request_step();
        assert!(control.take_step());
        assert!(control.take_step());
        assert!(!control.take_step());
        control.set_paused(false);
        assert!(control.take_step());
        assert!(control.take_step());
    }

    #[test]
    fn speed_is_clamped() {
        let control = SimControl::new(false, 1e9);
        assert_eq!(control.speed(), MAX_SPEED);
        control.set_speed(0.0);
        assert_eq!(control.speed(), MIN_SPEED);
        control.set_speed(42.0);
        assert_eq!(control.speed(), 42.0);
    }
}

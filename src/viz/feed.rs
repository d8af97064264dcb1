//! The channel from the engine to the window. The engine side only sends (an unbounded
//! channel never blocks) and builds a full KV view only when the window asked for one since
//! the last step, so a live window costs the engine almost nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};

use crate::viz::model::StepRecord;
use crate::viz::state::VizState;

/// One message on the feed.
#[derive(Debug, Clone)]
pub enum FeedMessage {
    /// One engine step.
    Step(Box<StepRecord>),
    /// Nothing more will come.
    End,
}

/// The engine's end of the feed.
#[derive(Debug)]
pub struct VizFeed {
    tx: Sender<FeedMessage>,
    kv_wanted: Arc<AtomicBool>,
}

/// The window's end of the feed.
#[derive(Debug)]
pub struct FeedReceiver {
    rx: Receiver<FeedMessage>,
    kv_wanted: Arc<AtomicBool>,
}

/// A connected feed; the first step is asked to carry a KV view.
pub fn channel() -> (VizFeed, FeedReceiver) {
    let (tx, rx) = mpsc::channel();
    let kv_wanted = Arc::new(AtomicBool::new(true));
    (VizFeed { tx, kv_wanted: Arc::clone(&kv_wanted) }, FeedReceiver { rx, kv_wanted })
}

impl VizFeed {
    /// True when the window asked for a KV view since the last call; the caller then puts
    /// one in its next record.
    pub fn take_kv_request(&self) -> bool {
        self.kv_wanted.swap(false, Ordering::Relaxed)
    }

    /// Sends one step without waiting; false when the window is gone.
    pub fn send(&self, record: StepRecord) -> bool {
        self.tx.send(FeedMessage::Step(Box::new(record))).is_ok()
    }

    /// Says nothing more will come.
    pub fn end(&self) {
        // A closed window needs no end marker, so a failed send is fine.
        let _ = self.tx.send(FeedMessage::End);
    }
}

impl FeedReceiver {
    /// Asks the engine to put a KV view in its next record.
    pub fn request_kv(&self) {
        self.kv_wanted.store(true, Ordering::Relaxed);
    }

    /// Applies every record waiting in the channel to `state`; returns how many it applied.
    /// Marks the state ended on an end marker or when the engine side is gone.
    pub fn drain_into(&self, state: &mut VizState) -> usize {
        let mut applied = 0;
        loop {
            match self.rx.try_recv() {
                Ok(FeedMessage::Step(record)) => {
                    state.apply(*record);
                    applied += 1;
                }
                Ok(FeedMessage::End) | Err(TryRecvError::Disconnected) => {
                    state.ended = true;
                    return applied;
                }
                Err(TryRecvError::Empty) => return applied,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::viz::model::Counters;

    fn record(step: u64) -> StepRecord {
        StepRecord { step, time_s: step as f64, counters: Counters::default(), events: vec![], kv: None }
    }

    #[test]
    fn kv_requests_are_taken_once() {
        let (feed, receiver) = channel();
        assert!(feed.take_kv_request());
        assert!(!feed.take_kv_request());
        receiver.request_kv();
        assert!(feed.take_kv_request());
        assert!(!feed.take_kv_request());
    }

    #[test]
    fn drain_applies_in_order_and_sees_the_end() {
        let (feed, receiver) = channel();
        let mut state = VizState::default();
        assert!(feed.send(record(1)));
        assert!(feed.send(record(2)));
        assert_eq!(receiver.drain_into(&mut state), 2);
        assert_eq!(state.step, 2);
        assert!(!state.ended);
        feed.end();
        assert_eq!(receiver.drain_into(&mut state), 0);
        assert!(state.ended);
    }

    #[test]
    fn sending_to_a_closed_window_reports_it() {
        let (feed, receiver) = channel();
        drop(receiver);
        assert!(!feed.send(record(1)));
    }
}

//! The channel from the engine to the window. The engine side never blocks and sends at most
//! one message per window frame: when the window asks for its next frame, the engine hands
//! over everything since its previous message (the events, its counters and a full KV view).
//! A step the window did not ask about costs the engine one atomic load.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};

use crate::viz::model::StepRecord;
use crate::viz::source::{EngineReport, RecordBuilder};
use crate::viz::state::VizState;

/// One message on the feed.
#[derive(Debug, Clone)]
pub enum FeedMessage {
    /// One step, already a record (a replay, or a run being recorded).
    Record(Box<StepRecord>),
    /// What the engine did since its previous message, converted on the window's side so
    /// the engine does not pay for it.
    Engine(Box<EngineReport>),
    /// Nothing more will come.
    End,
}

/// The engine's end of the feed.
#[derive(Debug)]
pub struct VizFeed {
    tx: Sender<FeedMessage>,
    frame_wanted: Arc<AtomicBool>,
}

/// The window's end of the feed.
#[derive(Debug)]
pub struct FeedReceiver {
    rx: Receiver<FeedMessage>,
    frame_wanted: Arc<AtomicBool>,
    builder: RecordBuilder,
}

/// A connected feed; the window wants its first frame at once.
pub fn channel() -> (VizFeed, FeedReceiver) {
    let (tx, rx) = mpsc::channel();
    let frame_wanted = Arc::new(AtomicBool::new(true));
    (
        VizFeed { tx, frame_wanted: Arc::clone(&frame_wanted) },
        FeedReceiver { rx, frame_wanted, builder: RecordBuilder::default() },
    )
}

impl VizFeed {
    /// True when the window asked for a frame since the engine's last message; the engine
    /// then sends what it did since, with a KV view.
    pub fn wants_frame(&self) -> bool {
        self.frame_wanted.load(Ordering::Relaxed)
    }

    /// Sends one step record now; false when the window is gone. Do not mix with
    /// [`VizFeed::send_engine`] in one run: the window counts computed tokens from raw steps.
    pub fn send(&self, record: StepRecord) -> bool {
        self.frame_wanted.store(false, Ordering::Relaxed);
        self.tx.send(FeedMessage::Record(Box::new(record))).is_ok()
    }

    /// Sends what the engine did since its previous message; false when the window is gone.
    pub fn send_engine(&self, step: EngineReport) -> bool {
        self.frame_wanted.store(false, Ordering::Relaxed);
        self.tx.send(FeedMessage::Engine(Box::new(step))).is_ok()
    }

    /// Says nothing more will come.
    pub fn end(&self) {
        // A closed window needs no end marker, so a failed send is fine.
        let _ = self.tx.send(FeedMessage::End);
    }
}

impl FeedReceiver {
    /// Asks the engine for its next frame.
    pub fn request_frame(&self) {
        self.frame_wanted.store(true, Ordering::Relaxed);
    }

    /// Applies every record waiting in the channel to `state`; returns how many it applied.
    /// Marks the state ended on an end marker or when the engine side is gone.
    pub fn drain_into(&mut self, state: &mut VizState) -> usize {
        let mut applied = 0;
        loop {
            match self.rx.try_recv() {
                Ok(FeedMessage::Record(record)) => {
                    state.apply(*record);
                    applied += 1;
                }
                Ok(FeedMessage::Engine(step)) => {
                    state.apply(self.builder.build(&step));
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
    fn a_frame_request_stands_until_the_engine_sends() {
        let (feed, mut receiver) = channel();
        let mut state = VizState::default();
        assert!(feed.wants_frame());
        assert!(feed.wants_frame());
        assert!(feed.send(record(1)));
        assert!(!feed.wants_frame());
        receiver.request_frame();
        assert!(feed.wants_frame());
        assert_eq!(receiver.drain_into(&mut state), 1);
        assert_eq!(state.step, 1);
    }

    #[test]
    fn drain_applies_in_order_and_sees_the_end() {
        let (feed, mut receiver) = channel();
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

//! Recorded traces: one JSON [`StepRecord`] per line, each with a full KV view, so a replay
//! shows exactly what the live run showed.

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::viz::VizError;
use crate::viz::control::SimControl;
use crate::viz::feed::VizFeed;
use crate::viz::model::StepRecord;

/// Writes a trace line by line.
pub struct TraceWriter {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
}

impl TraceWriter {
    /// Creates (or truncates) the trace file.
    pub fn create(path: &Path) -> Result<Self, VizError> {
        let file = std::fs::File::create(path).map_err(|e| VizError::io(path, e))?;
        Ok(Self { path: path.to_path_buf(), out: BufWriter::new(file) })
    }

    /// Appends one step.
    pub fn write(&mut self, record: &StepRecord) -> Result<(), VizError> {
        serde_json::to_writer(&mut self.out, record).map_err(|e| VizError::TraceEncode(e.to_string()))?;
        self.out.write_all(b"\n").map_err(|e| VizError::io(&self.path, e))
    }

    /// Flushes what is buffered.
    pub fn finish(mut self) -> Result<(), VizError> {
        self.out.flush().map_err(|e| VizError::io(&self.path, e))
    }
}

/// Reads a whole trace; blank lines are skipped, a bad line is an error naming it.
pub fn read_trace(path: &Path) -> Result<Vec<StepRecord>, VizError> {
    let file = std::fs::File::open(path).map_err(|e| VizError::io(path, e))?;
    let mut records = Vec::new();
    for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| VizError::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(&line).map_err(|e| VizError::TraceLine {
            path: path.to_path_buf(),
            line: index + 1,
            message: e.to_string(),
        })?;
        records.push(record);
    }
    Ok(records)
}

/// Plays `records` into `feed` at the pace `control` sets (pause and single-step included),
/// then ends the feed. Returns early when the control is stopped or the window is gone.
pub fn replay(records: Vec<StepRecord>, feed: &VizFeed, control: &SimControl) {
    let mut next_due = Instant::now();
    for record in records {
        loop {
            if control.is_stopped() {
                return;
            }
            let now = Instant::now();
            if now >= next_due && control.take_step() {
                next_due = now + Duration::from_secs_f32(1.0 / control.speed());
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if !feed.send(record) {
            return;
        }
    }
    feed.end();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::snapshot::BlockState;
    use crate::viz::feed;
    use crate::viz::model::{BlockView, Counters, KvView, VizEvent};
    use crate::viz::state::VizState;

    fn record(step: u64) -> StepRecord {
        StepRecord {
            step,
            time_s: step as f64 * 0.25,
            counters: Counters { preemptions: step, ..Counters::default() },
            events: vec![VizEvent::Evict { block: 3, hash: u128::MAX - step as u128 }],
            kv: Some(KvView {
                block_size: 16,
                blocks: vec![BlockView {
                    id: 0,
                    state: BlockState::Null,
                    ref_cnt: 0,
                    hash: None,
                    owners: vec![],
                }],
                requests: vec![],
                running: vec![],
                waiting: vec![step],
            }),
        }
    }

    #[test]
    fn trace_round_trips_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut writer = TraceWriter::create(&path).unwrap();
        for step in 1..=3 {
            writer.write(&record(step)).unwrap();
        }
        writer.finish().unwrap();
        assert_eq!(read_trace(&path).unwrap(), vec![record(1), record(2), record(3)]);
    }

    #[test]
    fn bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let good = serde_json::to_string(&record(1)).unwrap();
        std::fs::write(&path, format!("{good}\n\n{{not json\n")).unwrap();
        match read_trace(&path) {
            Err(VizError::TraceLine { line, .. }) => assert_eq!(line, 3),
            other => panic!("expected a trace line error, got {other:?}"),
        }
    }

    #[test]
    fn replay_delivers_every_record_then_ends() {
        let (feed, mut receiver) = feed::channel();
        let control = SimControl::new(false, crate::viz::control::MAX_SPEED);
        replay(vec![record(1), record(2)], &feed, &control);
        let mut state = VizState::default();
        assert_eq!(receiver.drain_into(&mut state), 2);
        assert!(state.ended);
        assert_eq!(state.kv.waiting, vec![2]);
    }
}

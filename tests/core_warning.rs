//! The preemption warning, alone in its test binary: tracing caches callsite interest
//! globally, so a test running in parallel without a subscriber could hide the warning.

mod core_support;

use std::collections::HashMap;

use core_support::*;

#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn preemption_warning_is_rate_limited_and_says_what_to_raise() {
    let buffer = LogBuffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    let preemptions = tracing::subscriber::with_default(subscriber, || {
        let mut s = scheduler(1024, 7);
        let (_, mut executor) = sim();
        for id in 1..=3 {
            s.add_request(request(id, tokens(id as u32 * 100, 30), 30)).unwrap();
        }
        let mut generated = HashMap::new();
        while s.has_unfinished_requests() {
            sim_step(&mut s, &mut executor, &mut generated);
        }
        s.stats().num_preemptions
    });
    assert!(preemptions >= 2, "only {preemptions} preemptions");
    let log = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|line| line.contains("preempted")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    for flag in ["--num-gpu-blocks", "--kv-cache-memory", "--max-num-seqs", "--max-num-batched-tokens"] {
        assert!(warnings[0].contains(flag), "{}", warnings[0]);
    }
}

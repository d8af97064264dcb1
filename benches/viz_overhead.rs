//! Engine step time with the visualizer attached versus without: the same simulated
//! workload run to completion (a) bare and (b) with a probe recording the scheduler's
//! events and a feed to a consumer thread that, like the window, drains it and asks for a
//! frame sixty times a second. Only the engine's step loop is timed, by the engine
//! thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`; wall time off Unix); bare and attached
//! runs alternate so that changes in the machine's load hit both alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use pagoda::core::scheduler::Scheduler;
use pagoda::executor::sim::{SimConfig, SimExecutor};
use pagoda::executor::{ModelExecutor, StepMasks};
use pagoda::viz::feed::{self, FeedReceiver};
use pagoda::viz::presets;
use pagoda::viz::source::{HostLoad, SchedulerProbe};
use pagoda::viz::state::VizState;
use pagoda::workload::BuiltinWorkload;

fn loaded_engine() -> (Scheduler, SimExecutor) {
    let preset = presets::preset(BuiltinWorkload::MemoryPressure);
    let sim = SimConfig::default();
    let workload = BuiltinWorkload::MemoryPressure.generate(preset.num_requests, sim.vocab_size, 0);
    let mut scheduler = Scheduler::new(preset.scheduler, preset.cache).unwrap();
    for (request_id, arrival) in workload.numbered() {
        scheduler.add_request(arrival.request(request_id, sim.eos_token_id)).unwrap();
    }
    (scheduler, SimExecutor::new(sim).unwrap())
}

/// One engine step; returns false when everything finished.
fn step(scheduler: &mut Scheduler, executor: &mut SimExecutor) -> bool {
    let output = scheduler.schedule();
    let result = executor.execute(&output, &mut StepMasks::none()).unwrap();
    scheduler.update_from_output(&output, &result);
    scheduler.has_unfinished_requests()
}

/// A stopwatch over the calling thread's CPU time, so time the engine thread spends
/// descheduled (the window thread and the engine share two cores here) does not count;
/// wall time where there is no per-thread CPU clock.
struct Stopwatch(Duration);

#[cfg(unix)]
fn thread_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec for clock_gettime to write into.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID is not available");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(not(unix))]
fn thread_time() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

impl Stopwatch {
    fn start() -> Self {
        Self(thread_time())
    }

    fn elapsed(&self) -> Duration {
        thread_time() - self.0
    }
}

/// Engine time of one whole run, bare.
fn run_bare() -> Duration {
    let (mut scheduler, mut executor) = loaded_engine();
    let start = Stopwatch::start();
    while step(&mut scheduler, &mut executor) {}
    start.elapsed()
}

/// A thread that behaves like the window: drains the feed and asks for a frame at 60 Hz.
fn window_thread(receiver: FeedReceiver, done: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut receiver = receiver;
        let mut state = VizState::default();
        while !done.load(Ordering::Relaxed) {
            receiver.drain_into(&mut state);
            receiver.request_frame();
            std::thread::sleep(Duration::from_millis(16));
        }
        receiver.drain_into(&mut state);
        state.step
    })
}

/// Engine time of one whole run with the visualizer attached.
fn run_attached() -> Duration {
    let (mut scheduler, mut executor) = loaded_engine();
    let (feed, receiver) = feed::channel();
    let done = Arc::new(AtomicBool::new(false));
    let window = window_thread(receiver, Arc::clone(&done));
    let probe = SchedulerProbe::attach(&scheduler);
    let start = Stopwatch::start();
    loop {
        let more = step(&mut scheduler, &mut executor);
        if !more {
            feed.send_engine(probe.report(&scheduler, executor.elapsed_seconds(), HostLoad::default(), true));
            break;
        }
        if feed.wants_frame() {
            feed.send_engine(probe.report(&scheduler, executor.elapsed_seconds(), HostLoad::default(), true));
        }
    }
    let elapsed = start.elapsed();
    feed.end();
    done.store(true, Ordering::Relaxed);
    assert_eq!(window.join().unwrap(), scheduler.stats().num_steps);
    elapsed
}

/// The median of some durations.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

/// Bare and attached runs interleaved, so that drift in the machine's load hits both alike;
/// prints the medians and their ratio.
fn interleaved(pairs: usize) {
    let (mut bare, mut attached) = (Vec::new(), Vec::new());
    for _ in 0..pairs {
        bare.push(run_bare());
        attached.push(run_attached());
    }
    let (b, a) = (median(bare), median(attached));
    println!(
        "interleaved medians over {pairs} pairs: bare {b:?}, viz attached {a:?}, attached/bare = {:.3}",
        a.as_secs_f64() / b.as_secs_f64()
    );
}

fn overhead(c: &mut Criterion) {
    let (mut scheduler, mut executor) = loaded_engine();
    while step(&mut scheduler, &mut executor) {}
    let steps = scheduler.stats().num_steps;
    interleaved(60);
    let mut group = c.benchmark_group(format!("memory-pressure run ({steps} steps)"));
    group.sample_size(40);
    group.bench_function("bare", |b| b.iter_custom(|runs| (0..runs).map(|_| run_bare()).sum()));
    group.bench_function("viz attached", |b| b.iter_custom(|runs| (0..runs).map(|_| run_attached()).sum()));
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);

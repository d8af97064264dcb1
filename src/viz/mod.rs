//! The live KV-block visualizer (feature `viz`): a winit window that draws the block pool,
//! each running request's block table, the queues, counters with time plots and an event
//! log, fed by the engine over a channel that never blocks it; the same drawing rendered
//! offscreen to a PNG; and recorded traces that replay exactly.

pub mod control;
pub mod driver;
pub mod engines;
pub mod feed;
pub mod gpu;
pub mod model;
pub mod offscreen;
pub mod palette;
pub mod presets;
pub mod source;
pub mod state;
pub mod trace;
pub mod ui;
pub mod window;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use self::engines::{engine_config, sim_driver, wgpu_driver};
use crate::engine::ExecutorKind;
use crate::engine::args::EngineArgs;
use crate::viz::control::SimControl;
use crate::viz::driver::{Driver, LiveSinks};
use crate::viz::model::StepRecord;
use crate::viz::state::VizState;
use crate::viz::trace::TraceWriter;
use crate::viz::window::WindowOptions;
use crate::workload::BuiltinWorkload;

/// `pagoda viz`: watch the paged KV cache live, record or replay a trace, or render one
/// frame to a PNG with no display.
#[derive(Debug, Clone, clap::Args)]
pub struct VizArgs {
    /// Built-in workload: random, shared-prefix, memory-pressure, long-prompt or input-grounded (with the
    /// wgpu executor, the shape of the requests when no prompts file is given).
    #[arg(long, default_value = "shared-prefix")]
    pub workload: BuiltinWorkload,
    /// Seed of the workload's prompts, lengths and arrivals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Requests drawn from the workload (default: the workload's).
    #[arg(long)]
    pub num_requests: Option<usize>,
    /// Prompts for the wgpu executor, one JSON string per line, all arriving at once.
    #[arg(long, value_name = "FILE")]
    pub prompts_file: Option<PathBuf>,
    /// Tokens to generate per prompt of `--prompts-file` (greedy, stopping at EOS).
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Write every step (with a full KV view) to this JSON-lines trace.
    #[arg(long, value_name = "TRACE.jsonl")]
    pub record: Option<PathBuf>,
    /// Replay a recorded trace instead of running an engine.
    #[arg(long, value_name = "TRACE.jsonl", conflicts_with = "record")]
    pub replay: Option<PathBuf>,
    /// Render the frame at `--step` to this PNG offscreen (no window, no display needed).
    #[arg(long, value_name = "OUT.png")]
    pub snapshot: Option<PathBuf>,
    /// Step whose frame `--snapshot` renders.
    #[arg(long, default_value_t = 100, requires = "snapshot")]
    pub step: u64,
    /// Steps per second of the live run or replay (changeable in the window).
    #[arg(long, default_value_t = 30.0)]
    pub speed: f32,
    /// Start paused (press Play or Step in the window).
    #[arg(long)]
    pub paused: bool,
    /// Window or snapshot width, pixels.
    #[arg(long, default_value_t = 1280)]
    pub width: u32,
    /// Window or snapshot height, pixels.
    #[arg(long, default_value_t = 800)]
    pub height: u32,
    /// Close the window this many seconds after the run or replay ends.
    #[arg(long, value_name = "SECONDS")]
    pub close_after_end: Option<f64>,
    /// Model, cache, scheduler, executor and device: the flags every command shares, over
    /// the workload's preset (the simulated executor unless `--executor wgpu`).
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Runs `pagoda viz`: a snapshot, a replay, or a live run of the simulated or the real engine.
pub fn run(args: &VizArgs) -> Result<(), VizError> {
    if args.width == 0 || args.height == 0 {
        return Err(VizError::BadSize { width: args.width, height: args.height });
    }
    if let Some(path) = &args.replay {
        let records = trace::read_trace(path)?;
        return match &args.snapshot {
            Some(out) => snapshot_records(&records, args.step, args, out),
            None => replay_window(records, args),
        };
    }
    let config = engine_config(args)?;
    match config.executor {
        ExecutorKind::Sim => run_driver(sim_driver(args, &config)?, args),
        ExecutorKind::Wgpu => run_driver(wgpu_driver(args, &config)?, args),
    }
}

/// Runs `driver` as `args` say: to `--step` for a snapshot, or live in the window; records
/// a trace when `--record` is given.
pub fn run_driver(mut driver: Driver, args: &VizArgs) -> Result<(), VizError> {
    match &args.snapshot {
        Some(out) => {
            let records = driver::run_to_step(&mut driver, args.step, args.record.is_some())?;
            if let Some(path) = &args.record {
                let mut writer = TraceWriter::create(path)?;
                for record in &records {
                    writer.write(record)?;
                }
                writer.finish()?;
            }
            snapshot_records(&records, args.step, args, out)
        }
        None => {
            let recorder = args.record.as_deref().map(TraceWriter::create).transpose()?;
            run_live(driver, recorder, args)
        }
    }
}

/// Opens the window on this thread and drives `driver` on another, recording every step
/// when `recorder` is given, until the run ends and the window closes.
pub fn run_live(mut driver: Driver, recorder: Option<TraceWriter>, args: &VizArgs) -> Result<(), VizError> {
    let (feed, receiver) = feed::channel();
    let control = Arc::new(SimControl::new(args.paused, args.speed));
    let engine_control = Arc::clone(&control);
    let engine = std::thread::Builder::new()
        .name("pagoda-viz-engine".to_string())
        .spawn(move || {
            driver::drive_live(&mut driver, LiveSinks { feed: &feed, control: &engine_control, recorder })
        })
        .map_err(|e| VizError::Engine(e.to_string()))?;
    let shown = window::run_window(receiver, Some(Arc::clone(&control)), window_options(args));
    control.stop();
    let driven = engine.join().map_err(|_| VizError::Engine("the engine thread panicked".to_string()))?;
    shown.and(driven)
}

fn replay_window(records: Vec<StepRecord>, args: &VizArgs) -> Result<(), VizError> {
    let (feed, receiver) = feed::channel();
    let control = Arc::new(SimControl::new(args.paused, args.speed));
    let replay_control = Arc::clone(&control);
    let player = std::thread::Builder::new()
        .name("pagoda-viz-replay".to_string())
        .spawn(move || trace::replay(records, &feed, &replay_control))
        .map_err(|e| VizError::Engine(e.to_string()))?;
    let shown = window::run_window(receiver, Some(Arc::clone(&control)), window_options(args));
    control.stop();
    player.join().map_err(|_| VizError::Engine("the replay thread panicked".to_string()))?;
    shown
}

fn window_options(args: &VizArgs) -> WindowOptions {
    WindowOptions {
        width: args.width,
        height: args.height,
        close_after_end: args.close_after_end.map(|s| Duration::from_secs_f64(s.max(0.0))),
        ..WindowOptions::default()
    }
}

/// The visualizer's state after every record up to and including step `step`.
pub fn state_at_step(records: &[StepRecord], step: u64) -> VizState {
    let mut state = VizState::default();
    for record in records.iter().take_while(|r| r.step <= step) {
        state.apply(record.clone());
    }
    state
}

fn snapshot_records(records: &[StepRecord], step: u64, args: &VizArgs, out: &Path) -> Result<(), VizError> {
    let state = state_at_step(records, step);
    offscreen::snapshot_png(&state, args.width, args.height, out).map(|_| ())
}

/// Why the visualizer could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum VizError {
    /// No GPU adapter (not even a software one) was found.
    #[error("no graphics adapter found ({0}); install a Vulkan driver such as Mesa's lavapipe")]
    NoAdapter(String),
    /// The device failed or refused a request.
    #[error("graphics device error: {0}")]
    Device(String),
    /// A frame size of zero, or larger than the device allows.
    #[error("bad frame size {width}x{height}")]
    BadSize {
        /// Requested width.
        width: u32,
        /// Requested height.
        height: u32,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// Encoding the PNG failed.
    #[error("PNG encoding failed: {0}")]
    Png(String),
    /// A trace line is not a step record.
    #[error("{path}:{line}: not a trace record: {message}")]
    TraceLine {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// A line of a prompts file is not a prompt.
    #[error("{path}:{line}: {message}")]
    PromptLine {
        /// The prompts file.
        path: PathBuf,
        /// 1-based line number (0 for the file as a whole).
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The engine (scheduler or executor) failed while being driven.
    #[error("engine error: {0}")]
    Engine(String),
    /// The window or its event loop failed.
    #[error("window error: {0}")]
    Window(String),
    /// A step record could not be encoded.
    #[error("cannot encode a trace record: {0}")]
    TraceEncode(String),
}

impl VizError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io { path: path.to_path_buf(), source }
    }
}

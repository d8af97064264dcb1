//! The live KV-block visualizer (feature `viz`): a winit window that draws the block pool,
//! each running request's block table, the queues, counters with time plots and an event
//! log, fed by the engine over a channel that never blocks it; the same drawing rendered
//! offscreen to a PNG; and recorded traces that replay exactly.

pub mod control;
pub mod driver;
pub mod feed;
pub mod gpu;
pub mod model;
pub mod offscreen;
pub mod palette;
pub mod source;
pub mod state;
pub mod trace;
pub mod ui;
pub mod window;

use std::path::{Path, PathBuf};

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

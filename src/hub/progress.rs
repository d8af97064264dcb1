//! A download's progress: a bar per file on a terminal (bytes, rate, ETA), plain log lines
//! otherwise.

use std::time::{Duration, Instant};

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget};

use super::settings::ProgressStyle;

/// How often a log line reports a download still running.
const LINE_EVERY: Duration = Duration::from_secs(10);

/// One file's download progress.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    name: String,
    total: Option<u64>,
    done: u64,
    resumed_at: u64,
    started: Instant,
    last_line: Instant,
}

impl Progress {
    /// Starts reporting `name`, of `total` bytes (when known), `done` of them already on disk.
    pub fn start(style: ProgressStyle, name: &str, total: Option<u64>, done: u64) -> Self {
        let bar = (style == ProgressStyle::Bar).then(|| {
            let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
            if let Ok(template) = indicatif::ProgressStyle::with_template(
                "{msg} [{elapsed_precise}] [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
            ) {
                bar.set_style(template.progress_chars("=> "));
            }
            bar.set_message(name.to_owned());
            bar.set_position(done);
            bar
        });
        if bar.is_none() {
            let size = total.map_or_else(|| "unknown size".into(), |t| HumanBytes(t).to_string());
            let resume = if done > 0 { format!(", resuming at {}", HumanBytes(done)) } else { String::new() };
            tracing::info!(target: "pagoda::hub", "downloading {name} ({size}{resume})");
        }
        let now = Instant::now();
        Self { bar, name: name.into(), total, done, resumed_at: done, started: now, last_line: now }
    }

    /// `bytes` more arrived.
    pub fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        match &self.bar {
            Some(bar) => bar.set_position(self.done),
            None if self.last_line.elapsed() >= LINE_EVERY => {
                self.last_line = Instant::now();
                let total = self.total.map_or_else(|| "?".into(), |t| HumanBytes(t).to_string());
                let eta = match (self.total, self.rate()) {
                    (Some(t), r) if r > 0.0 => {
                        format!(", ETA {:.0} s", t.saturating_sub(self.done) as f64 / r)
                    }
                    _ => String::new(),
                };
                tracing::info!(
                    target: "pagoda::hub",
                    "{}: {} / {total}, {}/s{eta}",
                    self.name,
                    HumanBytes(self.done),
                    HumanBytes(self.rate() as u64)
                );
            }
            None => {}
        }
    }

    /// The download restarted from `done` bytes (a server that ignored the range).
    pub fn restart_at(&mut self, done: u64) {
        self.done = done;
        self.resumed_at = done;
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    /// The file is complete.
    pub fn finish(self) {
        match &self.bar {
            Some(bar) => bar.finish(),
            None => tracing::info!(
                target: "pagoda::hub",
                "downloaded {} ({} in {:.1} s, {}/s)",
                self.name,
                HumanBytes(self.done),
                self.started.elapsed().as_secs_f64(),
                HumanBytes(self.rate() as u64)
            ),
        }
    }

    /// Bytes per second since this run started.
    fn rate(&self) -> f64 {
        (self.done - self.resumed_at) as f64 / self.started.elapsed().as_secs_f64().max(1e-3)
    }
}

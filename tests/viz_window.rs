//! The real window under Xvfb: replay a recorded trace, screenshot the screen with `xwd`,
//! and check the picture is the offscreen frame's (same layout, same block colours).
//!
//! Needs `Xvfb` and `xwd` (Debian: `xvfb`, `x11-apps`); without them the test says so and
//! passes, unless `PAGODA_REQUIRE_XVFB=1` (set by `scripts/test.sh`, which installs them).

#![cfg(all(feature = "viz", target_os = "linux"))]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use pagoda::viz::driver::run_to_step;
use pagoda::viz::offscreen::{OffscreenRenderer, RgbaImage};
use pagoda::viz::trace::TraceWriter;
use pagoda::viz::ui::TOP_BAR_HEIGHT;
use pagoda::viz::{self, VizArgs};

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 800;
const TRACE_ENV: &str = "PAGODA_VIZ_WINDOW_TRACE";

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    viz: VizArgs,
}

fn cli(args: &[&str]) -> VizArgs {
    Cli::parse_from(std::iter::once("viz").chain(args.iter().copied())).viz
}

/// Kills and reaps a child process when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// An X server on a display nobody uses, and its number.
fn start_xvfb() -> (Reaped, u32) {
    let base = 100 + std::process::id() % 400;
    let display = (base..base + 50)
        .find(|n| !Path::new(&format!("/tmp/.X{n}-lock")).exists())
        .expect("a free X display number");
    let child = Command::new("Xvfb")
        .arg(format!(":{display}"))
        .args(["-screen", "0", &format!("{WIDTH}x{HEIGHT}x24"), "-nolisten", "tcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("Xvfb starts");
    let socket = PathBuf::from(format!("/tmp/.X11-unix/X{display}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "Xvfb did not open {}", socket.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    (Reaped(child), display)
}

/// The whole screen of `display`, read with `xwd` (32-bit ZPixmap).
fn screenshot(display: u32) -> Option<RgbaImage> {
    let out =
        Command::new("xwd").args(["-root", "-silent", "-display", &format!(":{display}")]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    parse_xwd(&out.stdout)
}

fn parse_xwd(data: &[u8]) -> Option<RgbaImage> {
    let field = |i: usize| data.get(i * 4..i * 4 + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let (header_size, width, height, byte_order) = (field(0)?, field(4)?, field(5)?, field(7)?);
    let (bits_per_pixel, bytes_per_line, ncolors) = (field(11)?, field(12)?, field(19)?);
    let (red_mask, green_mask, blue_mask) = (field(14)?, field(15)?, field(16)?);
    if bits_per_pixel != 32 {
        return None;
    }
    let start = header_size as usize + ncolors as usize * 12;
    let channel = |v: u32, mask: u32| ((v & mask) >> mask.trailing_zeros()) as u8;
    let mut pixels = Vec::with_capacity((width * height * 4) as usize);
    for y in 0..height as usize {
        for x in 0..width as usize {
            let i = start + y * bytes_per_line as usize + x * 4;
            let b: [u8; 4] = data.get(i..i + 4)?.try_into().ok()?;
            let v = if byte_order == 0 { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) };
            pixels.extend_from_slice(&[
                channel(v, red_mask),
                channel(v, green_mask),
                channel(v, blue_mask),
                255,
            ]);
        }
    }
    Some(RgbaImage { width, height, pixels })
}

fn close(a: [u8; 4], b: [u8; 4], tolerance: u8) -> bool {
    a.iter().zip(&b).take(3).all(|(x, y)| x.abs_diff(*y) <= tolerance)
}

/// What differs between the screenshot and the offscreen frame, or `None` when they match:
/// every block cell's centre within 6 per channel, and 97% of all pixels below the top bar
/// (which holds the playback controls only the window has) within 12.
fn mismatch(shot: &RgbaImage, reference: &RgbaImage, block_centres: &[(u32, u32)]) -> Option<String> {
    if (shot.width, shot.height) != (reference.width, reference.height) {
        return Some(format!("screen is {}x{}", shot.width, shot.height));
    }
    for (i, &(x, y)) in block_centres.iter().enumerate() {
        let (a, b) = (shot.pixel(x, y)?, reference.pixel(x, y)?);
        if !close(a, b, 6) {
            return Some(format!("block {i} at ({x}, {y}) is {a:?}, offscreen {b:?}"));
        }
    }
    let top = TOP_BAR_HEIGHT as u32 + 2;
    let total = (reference.height - top) * reference.width;
    let mut same = 0;
    for y in top..reference.height {
        for x in 0..reference.width {
            same += u32::from(close(shot.pixel(x, y)?, reference.pixel(x, y)?, 12));
        }
    }
    if (same as f64) < 0.97 * total as f64 {
        return Some(format!("only {same} of {total} pixels match"));
    }
    None
}

/// Runs in the child process: the window replaying the trace, closing soon after it ends.
#[test]
fn window_replay_child() {
    let Ok(trace) = std::env::var(TRACE_ENV) else { return };
    let args = cli(&["--replay", &trace, "--speed", "500", "--close-after-end", "60"]);
    viz::run(&args).expect("the window replays the trace");
}

#[test]
fn window_under_xvfb_matches_the_offscreen_frame() {
    if !on_path("Xvfb") || !on_path("xwd") {
        assert!(std::env::var("PAGODA_REQUIRE_XVFB").is_err(), "Xvfb and xwd are required but missing");
        eprintln!("skipped: Xvfb or xwd not installed (apt-get install xvfb x11-apps)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let args = cli(&["--workload", "memory-pressure"]);
    let mut driver = viz::sim_driver(&args, &viz::engine_config(&args).unwrap()).unwrap();
    let records = run_to_step(&mut driver, 160, true).unwrap();
    let mut writer = TraceWriter::create(&trace).unwrap();
    for record in &records {
        writer.write(record).unwrap();
    }
    writer.finish().unwrap();

    let mut final_state = viz::state_at_step(&records, u64::MAX);
    final_state.ended = true;
    let mut renderer = OffscreenRenderer::new(WIDTH, HEIGHT).unwrap();
    let (reference, layout) = renderer.render(&final_state, None).unwrap();
    let block_centres: Vec<(u32, u32)> =
        layout.block_rects.iter().map(|r| (r.center().x as u32, r.center().y as u32)).collect();
    assert_eq!(block_centres.len(), 160);

    let (_xvfb, display) = start_xvfb();
    let _window = Reaped(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "window_replay_child", "--nocapture", "--test-threads", "1"])
            .env(TRACE_ENV, &trace)
            .env("DISPLAY", format!(":{display}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = String::from("no screenshot yet");
    loop {
        if let Some(shot) = screenshot(display) {
            let mut colours: Vec<[u8; 4]> = shot.pixels.chunks(4).map(|p| [p[0], p[1], p[2], p[3]]).collect();
            colours.sort_unstable();
            colours.dedup();
            match mismatch(&shot, &reference, &block_centres) {
                None => {
                    assert!(colours.len() > 50, "the window looks blank: {} colours", colours.len());
                    if let Ok(out) = std::env::var("PAGODA_VIZ_SNAPSHOT_DIR") {
                        shot.save_png(&Path::new(&out).join("window.png")).unwrap();
                    }
                    return;
                }
                Some(why) => last = why,
            }
        }
        assert!(Instant::now() < deadline, "the window never showed the offscreen frame: {last}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

//! Offscreen frames on the local Vulkan driver (lavapipe in CI), checked by pixels.

#![cfg(feature = "viz")]

use pagoda::core::snapshot::BlockState;
use pagoda::viz::model::{BlockView, Counters, HostTierView, KvView, RequestPhase, RequestView, StepRecord};
use pagoda::viz::offscreen::{OffscreenRenderer, RgbaImage};
use pagoda::viz::palette;
use pagoda::viz::state::VizState;
use pagoda::viz::ui::host_tier_lines;

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 800;

fn rgb(c: egui::Color32) -> [u8; 3] {
    [c.r(), c.g(), c.b()]
}

/// The colour at the centre of a cell, exact.
fn centre(image: &RgbaImage, rect: egui::Rect) -> [u8; 3] {
    let p = image.pixel(rect.center().x as u32, rect.center().y as u32).expect("cell inside the frame");
    [p[0], p[1], p[2]]
}

/// The colour just inside a cell's top-right corner, where the shared mark goes.
fn corner(image: &RgbaImage, rect: egui::Rect) -> [u8; 3] {
    let p =
        image.pixel((rect.right() - 3.0) as u32, (rect.top() + 2.0) as u32).expect("cell inside the frame");
    [p[0], p[1], p[2]]
}

fn block(id: u32, state: BlockState, owners: Vec<u64>) -> BlockView {
    let ref_cnt = owners.len() as u32;
    let hash = matches!(state, BlockState::CachedFree | BlockState::Used).then_some(id as u128 * 7919);
    BlockView { id, state, ref_cnt, hash, owners }
}

fn request(id: u64, block_ids: Vec<u32>) -> RequestView {
    let n = block_ids.len() * 16;
    RequestView {
        id,
        phase: RequestPhase::Running,
        block_ids,
        num_prompt_tokens: n,
        num_tokens: n,
        num_computed_tokens: n,
        num_cached_tokens: 0,
        num_preemptions: 0,
        num_spec_tokens: 0,
        num_rejected_tokens: 0,
    }
}

#[test]
fn hand_built_pool_shows_each_state() {
    let mut blocks = vec![
        block(0, BlockState::Null, vec![]),
        block(1, BlockState::Used, vec![4, 9]),
        block(2, BlockState::Used, vec![4]),
        block(3, BlockState::Used, vec![9]),
        block(4, BlockState::CachedFree, vec![]),
    ];
    blocks.extend((5..64).map(|id| block(id, BlockState::Free, vec![])));
    let kv = KvView {
        block_size: 16,
        blocks,
        requests: vec![request(4, vec![1, 2]), request(9, vec![1, 3])],
        running: vec![4, 9],
        waiting: vec![],
    };
    let mut state = VizState::default();
    state.apply(StepRecord {
        step: 1,
        time_s: 0.01,
        counters: Counters::default(),
        events: vec![],
        kv: Some(kv),
    });
    let mut renderer = OffscreenRenderer::new(WIDTH, HEIGHT).expect("an adapter (lavapipe will do)");
    let (image, layout) = renderer.render(&state, None).unwrap();
    if let Ok(dir) = std::env::var("PAGODA_VIZ_SNAPSHOT_DIR") {
        image.save_png(&std::path::Path::new(&dir).join("hand_built.png")).unwrap();
    }
    let cells = &layout.block_rects;
    assert_eq!(cells.len(), 64);
    assert_eq!(centre(&image, cells[0]), rgb(palette::NULL_BLOCK));
    assert_eq!(centre(&image, cells[1]), rgb(palette::request_color(4)));
    assert_eq!(corner(&image, cells[1]), rgb(palette::SHARED_MARK));
    assert_eq!(centre(&image, cells[2]), rgb(palette::request_color(4)));
    assert_ne!(corner(&image, cells[2]), rgb(palette::SHARED_MARK));
    assert_eq!(centre(&image, cells[3]), rgb(palette::request_color(9)));
    assert_eq!(centre(&image, cells[4]), rgb(palette::CACHED_FREE_BLOCK));
    assert_eq!(centre(&image, cells[5]), rgb(palette::FREE_BLOCK));
    assert_eq!(centre(&image, cells[63]), rgb(palette::FREE_BLOCK));
    let rows: Vec<u64> = layout.table_rows.iter().map(|(id, _)| *id).collect();
    assert_eq!(rows, vec![4, 9]);
    let (_, row9) = &layout.table_rows[1];
    assert_eq!(centre(&image, row9[1]), rgb(palette::request_color(9)));
}

#[test]
fn the_host_tier_fills_its_bar_beside_the_pool() {
    let host = HostTierView {
        num_blocks: 100,
        num_used_blocks: 25,
        num_loaded_blocks: 7,
        num_stored_blocks: 30,
        num_evicted_blocks: 5,
    };
    let kv = KvView {
        block_size: 16,
        blocks: (0..32)
            .map(|id| block(id, if id == 0 { BlockState::Null } else { BlockState::Free }, vec![]))
            .collect(),
        ..KvView::default()
    };
    let mut state = VizState::default();
    state.apply(StepRecord {
        step: 1,
        time_s: 0.01,
        counters: Counters { host: Some(host), ..Counters::default() },
        events: vec![],
        kv: Some(kv),
    });
    let mut renderer = OffscreenRenderer::new(WIDTH, HEIGHT).expect("an adapter (lavapipe will do)");
    let (image, layout) = renderer.render(&state, None).unwrap();
    let bar = layout.host_bar.expect("the tier is on");
    let pool_right = layout.block_rects.iter().map(|r| r.right()).fold(0.0, f32::max);
    assert!(bar.left() > pool_right, "beside the pool: {bar:?} vs {pool_right}");
    let at = |fraction_from_bottom: f32| {
        let y = bar.bottom() - bar.height() * fraction_from_bottom;
        let p = image.pixel(bar.center().x as u32, y as u32).unwrap();
        [p[0], p[1], p[2]]
    };
    assert_eq!(at(0.1), rgb(palette::HOST_USED), "a quarter used: filled near the bottom");
    assert_eq!(at(0.5), rgb(palette::FREE_BLOCK), "and empty above it");
    assert_eq!(host_tier_lines(&host), ["25 / 100 blocks", "loaded 7", "stored 30", "evicted 5"]);
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    viz: pagoda::viz::VizArgs,
}

fn cli(args: &[&str]) -> pagoda::viz::VizArgs {
    use clap::Parser;
    Cli::parse_from(std::iter::once("viz").chain(args.iter().copied())).viz
}

fn read_png(path: &std::path::Path) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels)
}

#[test]
fn snapshot_of_a_run_equals_snapshot_of_its_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (live, replayed, trace) =
        (dir.path().join("live.png"), dir.path().join("replay.png"), dir.path().join("run.jsonl"));
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let args =
        ["--workload", "memory-pressure", "--snapshot", &s(&live), "--step", "90", "--record", &s(&trace)];
    pagoda::viz::run(&cli(&args)).unwrap();
    let records = pagoda::viz::trace::read_trace(&trace).unwrap();
    assert!(records.iter().all(|r| r.kv.is_some()), "a recorded trace has a KV view every step");
    // The engine's loop schedules one step ahead (async scheduling, on by default): taking
    // step 1's outputs already scheduled step 2, and each later record is one step more.
    assert_eq!(records.iter().map(|r| r.step).collect::<Vec<_>>(), (2..=90).collect::<Vec<u64>>());
    pagoda::viz::run(&cli(&["--replay", &s(&trace), "--snapshot", &s(&replayed), "--step", "90"])).unwrap();
    let (a, b) = (read_png(&live), read_png(&replayed));
    assert_eq!((a.0, a.1), (WIDTH, HEIGHT));
    assert!(a == b, "the replayed frame differs from the live one");
}

#[test]
fn bad_sizes_and_traces_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.png");
    let out = out.to_str().unwrap();
    assert!(matches!(
        pagoda::viz::run(&cli(&["--snapshot", out, "--width", "0"])),
        Err(pagoda::viz::VizError::BadSize { width: 0, .. })
    ));
    let missing = dir.path().join("missing.jsonl");
    assert!(matches!(
        pagoda::viz::run(&cli(&["--replay", missing.to_str().unwrap(), "--snapshot", out])),
        Err(pagoda::viz::VizError::Io { .. })
    ));
}

#[test]
fn the_real_model_on_wgpu_runs_prompts_from_a_file_to_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny");
    pagoda::model::testing::TinyLlama::new(7).write_hf_dir(&model).unwrap();
    let prompts = dir.path().join("prompts.jsonl");
    std::fs::write(&prompts, "\"hello world\"\n\n\"hello there, world\"\n").unwrap();
    let (out, trace) = (dir.path().join("real.png"), dir.path().join("real.jsonl"));
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let args = [
        "--executor",
        "wgpu",
        "--model",
        &s(&model),
        "--prompts-file",
        &s(&prompts),
        "--max-tokens",
        "3",
        "--num-gpu-blocks",
        "32",
        "--snapshot",
        &s(&out),
        "--step",
        "3",
        "--record",
        &s(&trace),
    ];
    pagoda::viz::run(&cli(&args)).unwrap();
    let records = pagoda::viz::trace::read_trace(&trace).unwrap();
    // One step ahead on wgpu too: the first record is step 2's, scheduled while step 1 ran.
    assert_eq!(records.iter().map(|r| r.step).collect::<Vec<_>>(), vec![2, 3]);
    assert!(records.iter().all(|r| r.counters.async_scheduling));
    let kv = records[0].kv.as_ref().unwrap();
    assert_eq!(kv.blocks.len(), 32);
    let mut ids: Vec<u64> = kv.requests.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1]);
    let (width, height, _) = read_png(&out);
    assert_eq!((width, height), (WIDTH, HEIGHT));
}

#[test]
fn engine_flags_reach_the_visualizer_and_a_failed_step_fails_its_live_requests() {
    use pagoda::viz::driver::run_to_step;
    let args =
        cli(&["--workload", "memory-pressure", "--num-gpu-blocks", "100", "--sim-fault", "5:transient"]);
    let config = pagoda::viz::engine_config(&args).unwrap();
    assert_eq!(config.cache.num_gpu_blocks, 100);
    assert_eq!(config.executor, pagoda::ExecutorKind::Sim);
    let mut driver = pagoda::viz::sim_driver(&args, &config).unwrap();
    // One step ahead: step 5 fails when its outputs are taken, with step 6 in flight; both
    // are undone and the record is step 6's.
    let records = run_to_step(&mut driver, 6, false).unwrap();
    assert_eq!(records.iter().map(|r| r.step).collect::<Vec<_>>(), (2..=6).collect::<Vec<u64>>());
    let kv = records.last().unwrap().kv.as_ref().unwrap();
    assert!(kv.requests.is_empty(), "every request live at the failed step ended with it");
    run_to_step(&mut driver, u64::MAX, false).unwrap();
    assert!(driver.is_done(), "later arrivals still run");

    let lost = cli(&["--workload", "memory-pressure", "--sim-fault", "5:device-lost"]);
    let mut driver = pagoda::viz::sim_driver(&lost, &pagoda::viz::engine_config(&lost).unwrap()).unwrap();
    assert!(run_to_step(&mut driver, 10, false).is_err());
}

/// The visualizer runs the engine's loop: with async scheduling (the default) each step is
/// scheduled while the one before it runs, the run generates what the serial loop does, and
/// the engine's host time per step can hide behind the running step; the serial loop's cannot.
#[test]
fn the_visualizer_runs_the_engines_loop_one_step_ahead() {
    use pagoda::viz::driver::run_to_step;
    let run = |extra: &[&str]| {
        // Real-time simulated steps (4 ms and more), so a step runs while the host schedules.
        let mut flags = vec!["--workload", "shared-prefix", "--num-requests", "4", "--sim-realtime"];
        flags.extend_from_slice(extra);
        let args = cli(&flags);
        let mut driver = pagoda::viz::sim_driver(&args, &pagoda::viz::engine_config(&args).unwrap()).unwrap();
        let mut records = run_to_step(&mut driver, 1, false).unwrap();
        records.extend(run_to_step(&mut driver, u64::MAX, false).unwrap());
        assert!(driver.is_done());
        (driver.async_scheduling(), records)
    };
    let (ahead, async_records) = run(&[]);
    let (serial, serial_records) = run(&["--no-async-scheduling"]);
    assert!(ahead && !serial);
    assert_eq!(async_records[0].step, 2, "step 2 is scheduled before step 1's outputs are taken");
    assert_eq!(serial_records[0].step, 1);
    let (a, s) = (async_records.last().unwrap().counters, serial_records.last().unwrap().counters);
    assert_eq!((a.num_finished, a.generated_tokens), (4, s.generated_tokens));
    assert_eq!(s.num_finished, 4);
    assert!(a.async_scheduling && !s.async_scheduling);
    assert!(a.host_steps > 0 && s.host_steps > 0);
    // How much is hidden depends on the machine (on two busy cores the executor's thread
    // often waits for a core while the host works); that some is, and that the serial loop
    // hides next to none of it, does not.
    assert!(a.host_hidden_s > 0.0, "one step ahead, the host works while a step runs: {a:?}");
    let (s_hidden, s_exposed) = s.host_us_per_step();
    assert!(s_hidden < s_exposed, "the serial loop leaves the executor idle while the host works: {s:?}");
}

//! Offscreen frames after known scheduler steps, checked by pixels: owner colours, the
//! shared mark, free vs cached-free, and a preemption victim's blocks recoloured; and a live
//! run at full speed delivering every step's events to a window that asks for frames.

#![cfg(feature = "viz")]

use std::collections::HashMap;

use pagoda::core::output::{ModelRunnerOutput, SchedulerOutput};
use pagoda::core::scheduler::Scheduler;
use pagoda::core::snapshot::BlockState;
use pagoda::executor::{ExecutorError, ModelExecutor, StepMasks};
use pagoda::viz::control::{MAX_SPEED, SimControl};
use pagoda::viz::driver::{Driver, LiveSinks, drive_live, run_to_step};
use pagoda::viz::feed;
use pagoda::viz::model::{StepRecord, VizEvent};
use pagoda::viz::offscreen::{OffscreenRenderer, RgbaImage};
use pagoda::viz::palette;
use pagoda::viz::state::VizState;
use pagoda::viz::ui::FrameLayout;
use pagoda::workload::Arrival;
use pagoda::{CacheConfig, RequestId, SchedulerConfig, TokenId};

/// Samples token 7 for every request whose known tokens are all computed after a step.
#[derive(Default)]
struct ConstantExecutor {
    known_tokens: HashMap<RequestId, usize>,
}

impl ModelExecutor for ConstantExecutor {
    fn execute(
        &mut self,
        output: &SchedulerOutput,
        _masks: &mut StepMasks<'_>,
    ) -> Result<ModelRunnerOutput, ExecutorError> {
        for id in &output.finished_req_ids {
            self.known_tokens.remove(id);
        }
        for new in &output.scheduled_new_reqs {
            self.known_tokens.insert(new.req_id, new.prompt_token_ids.len());
        }
        let mut result = ModelRunnerOutput::default();
        let starts = output
            .scheduled_new_reqs
            .iter()
            .map(|r| (r.req_id, r.num_computed_tokens))
            .chain(output.scheduled_cached_reqs.iter().map(|r| (r.req_id, r.num_computed_tokens)));
        for (id, start) in starts {
            let scheduled = output.num_scheduled_tokens[&id];
            let known = self
                .known_tokens
                .get_mut(&id)
                .ok_or_else(|| ExecutorError::InvalidBatch(format!("unknown {id}")))?;
            if start + scheduled >= *known {
                result.sampled_token_ids.insert(id, vec![7]);
                *known += 1;
            }
        }
        Ok(result)
    }
}

fn request(id: RequestId, prompt: Vec<TokenId>, max_tokens: usize) -> (RequestId, Arrival) {
    (
        id,
        Arrival {
            time_s: 0.0,
            prompt_token_ids: prompt,
            max_tokens,
            priority: 0,
            ignore_eos: true,
            follows: None,
        },
    )
}

fn driver(num_gpu_blocks: usize, arrivals: Vec<(RequestId, Arrival)>) -> Driver {
    let cache = CacheConfig { block_size: 4, num_gpu_blocks, ..CacheConfig::default() };
    let sched = SchedulerConfig {
        max_num_batched_tokens: 64,
        max_num_seqs: 8,
        max_model_len: 64,
        ..SchedulerConfig::default()
    };
    Driver::new(
        Scheduler::new(sched, cache).unwrap(),
        ConstantExecutor::default(),
        Box::new(|_| 0.0),
        arrivals,
        None,
    )
}

fn render(records: &[StepRecord]) -> (RgbaImage, FrameLayout) {
    let mut state = VizState::default();
    for record in records.iter().cloned() {
        state.apply(record);
    }
    let mut renderer = OffscreenRenderer::new(1280, 800).expect("an adapter (lavapipe will do)");
    let (image, layout) = renderer.render(&state, None).unwrap();
    if let Ok(dir) = std::env::var("PAGODA_VIZ_SNAPSHOT_DIR") {
        let step = records.last().map_or(0, |r| r.step);
        image
            .save_png(
                &std::path::Path::new(&dir)
                    .join(format!("frame_{}_step{step}.png", layout.block_rects.len())),
            )
            .unwrap();
    }
    (image, layout)
}

fn rgb(c: egui::Color32) -> [u8; 3] {
    [c.r(), c.g(), c.b()]
}

fn centre(image: &RgbaImage, layout: &FrameLayout, block: u32) -> [u8; 3] {
    let rect = layout.block_rects[block as usize];
    let p = image.pixel(rect.center().x as u32, rect.center().y as u32).unwrap();
    [p[0], p[1], p[2]]
}

fn corner(image: &RgbaImage, layout: &FrameLayout, block: u32) -> [u8; 3] {
    let rect = layout.block_rects[block as usize];
    let p = image.pixel((rect.right() - 3.0) as u32, (rect.top() + 2.0) as u32).unwrap();
    [p[0], p[1], p[2]]
}

#[test]
fn shared_prefix_and_cached_free_blocks_after_the_first_step() {
    let prefix: Vec<TokenId> = (10..18).collect();
    let mut longer = prefix.clone();
    longer.extend([50, 51]);
    let mut d =
        driver(16, vec![request(1, prefix, 20), request(2, longer, 20), request(3, vec![90, 91, 92, 93], 1)]);
    let records = run_to_step(&mut d, 1, false).unwrap();
    assert_eq!(records.len(), 1);
    let kv = records[0].kv.as_ref().unwrap();
    let state_of = |id: usize| (kv.blocks[id].state, kv.blocks[id].ref_cnt, kv.blocks[id].owners.clone());
    assert_eq!(state_of(0), (BlockState::Null, 0, vec![]));
    assert_eq!(state_of(1), (BlockState::Used, 2, vec![1, 2]));
    assert_eq!(state_of(2), (BlockState::Used, 2, vec![1, 2]));
    assert_eq!(state_of(3), (BlockState::Used, 1, vec![2]));
    assert_eq!(state_of(4), (BlockState::CachedFree, 0, vec![]));
    assert_eq!(state_of(5), (BlockState::Free, 0, vec![]));
    assert!(records[0].events.contains(&VizEvent::CacheHit {
        request: 2,
        blocks: vec![1, 2],
        num_tokens: 8
    }));
    assert!(records[0].events.contains(&VizEvent::Finish { request: 3 }));

    let (image, layout) = render(&records);
    assert_eq!(layout.block_rects.len(), 16);
    assert_eq!(centre(&image, &layout, 0), rgb(palette::NULL_BLOCK));
    for shared in [1, 2] {
        assert_eq!(centre(&image, &layout, shared), rgb(palette::request_color(1)));
        assert_eq!(corner(&image, &layout, shared), rgb(palette::SHARED_MARK));
    }
    assert_eq!(centre(&image, &layout, 3), rgb(palette::request_color(2)));
    assert_ne!(corner(&image, &layout, 3), rgb(palette::SHARED_MARK));
    assert_eq!(centre(&image, &layout, 4), rgb(palette::CACHED_FREE_BLOCK));
    for free in 5..16 {
        assert_eq!(centre(&image, &layout, free), rgb(palette::FREE_BLOCK));
    }
    let rows: Vec<RequestId> = layout.table_rows.iter().map(|(id, _)| *id).collect();
    assert_eq!(rows, vec![1, 2]);
}

#[test]
fn preemption_victims_blocks_lose_its_colour() {
    // Four usable blocks of four tokens; two six-token prompts fill them. Decoding position
    // 8 needs a third block each, so at step 4 request 1 preempts request 2 (the newest).
    let mut d = driver(5, vec![request(1, (100..106).collect(), 20), request(2, (200..206).collect(), 20)]);
    let before = run_to_step(&mut d, 3, false).unwrap();
    let kv = before.last().unwrap().kv.as_ref().unwrap();
    let victim_blocks: Vec<u32> = kv.request(2).unwrap().block_ids.clone();
    assert_eq!(victim_blocks.len(), 2);
    let (image, layout) = render(&before);
    for &block in &victim_blocks {
        assert_eq!(centre(&image, &layout, block), rgb(palette::request_color(2)));
    }

    let after = run_to_step(&mut d, 4, false).unwrap();
    let record = after.last().unwrap();
    assert_eq!(record.step, 4);
    let preempt = record.events.iter().find_map(|e| match e {
        VizEvent::Preempt { request, needed_by, blocks } => Some((*request, *needed_by, blocks.clone())),
        _ => None,
    });
    assert_eq!(preempt, Some((2, 1, victim_blocks.clone())));
    let kv = record.kv.as_ref().unwrap();
    assert_eq!(kv.waiting, vec![2]);
    assert_eq!(kv.request(2).unwrap().num_preemptions, 1);
    let mut all = before.clone();
    all.extend(after.iter().cloned());
    let (image, layout) = render(&all);
    for &block in &victim_blocks {
        assert_ne!(centre(&image, &layout, block), rgb(palette::request_color(2)), "block {block}");
        let expected = match kv.blocks[block as usize].state {
            BlockState::Used => rgb(palette::request_color(1)),
            BlockState::CachedFree => rgb(palette::CACHED_FREE_BLOCK),
            BlockState::Free => rgb(palette::FREE_BLOCK),
            BlockState::Null => unreachable!("the null block is never a victim's"),
        };
        assert_eq!(centre(&image, &layout, block), expected, "block {block}");
    }
    assert!(
        victim_blocks.iter().any(|&b| kv.blocks[b as usize].owners == vec![1]),
        "request 1 took a victim block"
    );
}

#[test]
fn a_live_run_at_full_speed_delivers_every_event_to_the_window() {
    let arrivals = (1..=4).map(|id| request(id, (0..10 + id as u32).collect(), 12)).collect();
    let mut driver = driver(64, arrivals);
    let (feed, mut receiver) = feed::channel();
    let control = SimControl::new(false, MAX_SPEED);
    let state = std::thread::scope(|scope| {
        let window = scope.spawn(move || {
            let mut state = VizState::default();
            while !state.ended {
                receiver.drain_into(&mut state);
                receiver.request_frame();
                std::thread::sleep(std::time::Duration::from_millis(40));
            }
            state
        });
        drive_live(&mut driver, LiveSinks { feed: &feed, control: &control, recorder: None }).unwrap();
        window.join().unwrap()
    });
    assert_eq!(state.step, driver.scheduler().stats().num_steps);
    let finished: Vec<RequestId> = state
        .events
        .iter()
        .filter_map(|(_, event)| match event {
            VizEvent::Finish { request } => Some(*request),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 4, "{finished:?}");
    for id in 1..=4 {
        assert!(finished.contains(&id));
        assert!(
            state
                .events
                .iter()
                .any(|(_, e)| matches!(e, VizEvent::Allocate { request, .. } if *request == id))
        );
    }
    assert_eq!(state.counters.num_finished, 4);
}

//! Offscreen frames on the local Vulkan driver (lavapipe in CI), checked by pixels.

#![cfg(feature = "viz")]

use pagoda::viz::model::{BlockState, BlockView, Counters, KvView, RequestPhase, RequestView, StepRecord};
use pagoda::viz::offscreen::{OffscreenRenderer, RgbaImage};
use pagoda::viz::palette;
use pagoda::viz::state::VizState;

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

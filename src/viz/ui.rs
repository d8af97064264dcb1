//! The drawing code, shared by the window and the offscreen snapshot: a top bar (title,
//! legend, playback controls), the block pool grid, each running request's block table, the
//! waiting queue, counters with time plots, the event log and a details line for the block
//! under the pointer; beside the pool, the host KV tier's fill and traffic when it is on.

use egui::{
    Align2, Color32, CornerRadius, FontId, Frame, Id, Margin, Pos2, Rect, RichText, Sense, Shape, Stroke,
    StrokeKind, Ui, Vec2, pos2, vec2,
};

use crate::core::snapshot::BlockState;
use crate::ids::{BlockId, RequestId};
use crate::viz::control::{MAX_SPEED, MIN_SPEED, SimControl};
use crate::viz::model::{BlockView, HostTierView, KvView, RequestPhase, RequestView, VizEvent};
use crate::viz::palette;
use crate::viz::state::{BlockMark, Sample, VizState};

/// Height of the top bar, points.
pub const TOP_BAR_HEIGHT: f32 = 40.0;
/// Width of the counters and events panel, points.
pub const SIDE_PANEL_WIDTH: f32 = 360.0;
/// Height of the details line at the bottom, points.
pub const DETAILS_HEIGHT: f32 = 30.0;
/// Largest block cell in the pool grid, points.
pub const MAX_CELL: f32 = 28.0;
/// Gap between grid cells, points.
pub const CELL_GAP: f32 = 2.0;
/// Width of the host tier's column beside the pool grid, points.
pub const HOST_COLUMN_WIDTH: f32 = 150.0;

/// Where things were drawn in the last frame, in points; tests probe pixels through it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrameLayout {
    /// The cell of each block in the pool grid, indexed by block id.
    pub block_rects: Vec<Rect>,
    /// Each drawn running-request row: the request and the cells of its block table.
    pub table_rows: Vec<(RequestId, Vec<Rect>)>,
    /// The host tier's fill bar (filled from the bottom), when the tier is on.
    pub host_bar: Option<Rect>,
}

/// UI state that outlives a frame.
#[derive(Debug, Clone, Default)]
pub struct UiState {
    /// The block clicked last, shown in the details line when the pointer is elsewhere.
    pub selected: Option<BlockId>,
    /// The block under the pointer in the last frame.
    pub hovered: Option<BlockId>,
}

/// Sets the dark look the visualizer uses; call once per context.
pub fn install_style(ctx: &egui::Context) {
    let mut visuals = egui::Visuals::dark();
    visuals.panel_fill = palette::PANEL;
    visuals.window_fill = palette::PANEL;
    visuals.extreme_bg_color = palette::BACKGROUND;
    visuals.override_text_color = Some(palette::TEXT);
    ctx.set_visuals(visuals);
}

/// Draws one whole frame into `ui` (the root of an egui pass) and says where things went.
/// `control` adds pause/step/speed to the top bar when something is being driven.
pub fn draw(
    ui: &mut Ui,
    state: &VizState,
    ui_state: &mut UiState,
    control: Option<&SimControl>,
) -> FrameLayout {
    let mut layout = FrameLayout::default();
    egui::Panel::top("pagoda-top")
        .exact_size(TOP_BAR_HEIGHT)
        .frame(Frame::NONE.fill(palette::PANEL).inner_margin(Margin::symmetric(10, 6)))
        .show(ui, |ui| top_bar(ui, state, control));
    egui::Panel::right("pagoda-side")
        .exact_size(SIDE_PANEL_WIDTH)
        .resizable(false)
        .frame(Frame::NONE.fill(palette::PANEL).inner_margin(Margin::same(10)))
        .show(ui, |ui| side_panel(ui, state));
    egui::Panel::bottom("pagoda-details")
        .exact_size(DETAILS_HEIGHT)
        .frame(Frame::NONE.fill(palette::PANEL).inner_margin(Margin::symmetric(10, 6)))
        .show(ui, |ui| details_line(ui, &state.kv, ui_state.hovered.or(ui_state.selected)));
    egui::CentralPanel::default()
        .frame(Frame::NONE.fill(palette::BACKGROUND).inner_margin(Margin::same(12)))
        .show(ui, |ui| central(ui, state, ui_state, &mut layout));
    layout
}

fn top_bar(ui: &mut Ui, state: &VizState, control: Option<&SimControl>) {
    ui.horizontal_centered(|ui| {
        ui.label(RichText::new("pagoda").strong().size(17.0).color(Color32::WHITE));
        ui.label(RichText::new("paged KV cache").size(14.0).color(palette::TEXT_DIM));
        ui.add_space(12.0);
        let status = if state.ended { "  (ended)" } else { "" };
        ui.label(
            RichText::new(format!("step {}   t = {:.3} s{status}", state.step, state.time_s)).monospace(),
        );
        ui.add_space(12.0);
        for (color, name) in [
            (palette::FREE_BLOCK, "free"),
            (palette::CACHED_FREE_BLOCK, "cached-free"),
            (palette::NULL_BLOCK, "null"),
        ] {
            legend_chip(ui, color, name);
        }
        legend_shared(ui);
        if let Some(control) = control {
            ui.add_space(16.0);
            playback_controls(ui, control);
        }
    });
}

fn legend_chip(ui: &mut Ui, color: Color32, name: &str) {
    let (rect, _) = ui.allocate_exact_size(vec2(12.0, 12.0), Sense::hover());
    ui.painter().rect_filled(rect, CornerRadius::same(2), color);
    ui.painter().rect_stroke(
        rect,
        CornerRadius::same(2),
        Stroke::new(1.0, palette::TEXT_DIM),
        StrokeKind::Inside,
    );
    ui.label(RichText::new(name).size(12.0).color(palette::TEXT_DIM));
}

fn legend_shared(ui: &mut Ui) {
    let (rect, _) = ui.allocate_exact_size(vec2(12.0, 12.0), Sense::hover());
    ui.painter().rect_filled(rect, CornerRadius::same(2), palette::request_color(1));
    paint_shared_mark(ui.painter(), rect);
    ui.label(RichText::new("shared (ref > 1)").size(12.0).color(palette::TEXT_DIM));
}

fn playback_controls(ui: &mut Ui, control: &SimControl) {
    let paused = control.is_paused();
    if ui.button(if paused { "Play" } else { "Pause" }).clicked() {
        control.set_paused(!paused);
    }
    if ui.add_enabled(paused, egui::Button::new("Step")).clicked() {
        control.request_step();
    }
    let mut speed = control.speed();
    if ui
        .add(egui::Slider::new(&mut speed, MIN_SPEED..=MAX_SPEED).logarithmic(true).text("steps/s"))
        .changed()
    {
        control.set_speed(speed);
    }
}

fn central(ui: &mut Ui, state: &VizState, ui_state: &mut UiState, layout: &mut FrameLayout) {
    let area = ui.available_rect_before_wrap();
    let kv = &state.kv;
    let painter = ui.painter().clone();
    let heading_font = FontId::proportional(14.0);
    let small = FontId::proportional(12.0);
    painter.text(
        area.left_top(),
        Align2::LEFT_TOP,
        format!(
            "Block pool   {} blocks x {} tokens   usage {:.1}%",
            kv.blocks.len(),
            kv.block_size,
            state.counters.kv_usage * 100.0
        ),
        heading_font.clone(),
        palette::TEXT,
    );
    let host_width = if state.counters.host.is_some() { HOST_COLUMN_WIDTH } else { 0.0 };
    let grid_area = Rect::from_min_max(
        pos2(area.left(), area.top() + 24.0),
        pos2(area.right() - host_width, area.top() + 24.0 + area.height() * 0.5),
    );
    if let Some(host) = &state.counters.host {
        let column = Rect::from_min_max(pos2(grid_area.right() + 12.0, area.top()), grid_area.right_bottom());
        layout.host_bar = Some(host_column(&painter, column, host));
    }
    layout.block_rects = grid_cells(grid_area, kv.blocks.len());
    let grid_response = ui.interact(grid_area, Id::unique("pagoda-grid"), Sense::click());
    ui_state.hovered = grid_response
        .hover_pos()
        .and_then(|p| layout.block_rects.iter().position(|r| r.contains(p)))
        .map(|i| i as BlockId);
    if grid_response.clicked() {
        ui_state.selected = ui_state.hovered;
    }
    let focus = ui_state.hovered.or(ui_state.selected);
    for (block, rect) in kv.blocks.iter().zip(&layout.block_rects) {
        paint_block(&painter, *rect, block, state.mark(block.id), focus == Some(block.id));
    }

    let tooltip_anchor = match (ui_state.hovered, grid_response.hover_pos()) {
        (Some(id), Some(pointer)) => Some((id, pointer)),
        _ => ui_state
            .selected
            .and_then(|id| layout.block_rects.get(id as usize).map(|rect| (id, rect.right_bottom()))),
    };
    if let Some((id, anchor)) = tooltip_anchor {
        block_tooltip(ui.ctx(), ui.ctx().content_rect(), kv, id, anchor);
    }

    let grid_bottom = layout.block_rects.iter().map(|r| r.bottom()).fold(grid_area.top(), f32::max);
    let mut y = grid_bottom + 16.0;
    painter.text(
        pos2(area.left(), y),
        Align2::LEFT_TOP,
        format!("Running ({})   block tables", kv.running.len()),
        heading_font.clone(),
        palette::TEXT,
    );
    y += 22.0;
    let waiting_reserve = 64.0;
    let row_height = 16.0;
    let running: Vec<&RequestView> = kv.running.iter().filter_map(|id| kv.request(*id)).collect();
    for (shown, request) in running.iter().enumerate() {
        if y + row_height > area.bottom() - waiting_reserve {
            painter.text(
                pos2(area.left(), y),
                Align2::LEFT_TOP,
                format!("+ {} more", running.len() - shown),
                small.clone(),
                palette::TEXT_DIM,
            );
            y += row_height;
            break;
        }
        let cells = table_row(
            &painter,
            Rect::from_min_size(pos2(area.left(), y), vec2(area.width(), row_height - 3.0)),
            request,
            kv,
        );
        layout.table_rows.push((request.id, cells));
        y += row_height;
    }
    y += 10.0;
    painter.text(
        pos2(area.left(), y),
        Align2::LEFT_TOP,
        format!("Waiting ({})", kv.waiting.len()),
        heading_font,
        palette::TEXT,
    );
    y += 22.0;
    waiting_chips(&painter, Rect::from_min_max(pos2(area.left(), y), area.right_bottom()), kv);
}

/// The host tier's column: its heading, a bar filled from the bottom as its slots are
/// used, and [`host_tier_lines`] under it; returns the bar.
fn host_column(painter: &egui::Painter, column: Rect, host: &HostTierView) -> Rect {
    let small = FontId::proportional(12.0);
    painter.text(
        column.left_top(),
        Align2::LEFT_TOP,
        "Host tier (CPU)",
        FontId::proportional(14.0),
        palette::TEXT,
    );
    let lines = host_tier_lines(host);
    let text_height = 16.0 * lines.len() as f32;
    let bar = Rect::from_min_max(
        pos2(column.left(), column.top() + 24.0),
        pos2(column.left() + 36.0, (column.bottom() - text_height - 6.0).max(column.top() + 40.0)),
    );
    painter.rect_filled(bar, CornerRadius::same(2), palette::FREE_BLOCK);
    let usage = if host.num_blocks == 0 { 0.0 } else { host.num_used_blocks as f32 / host.num_blocks as f32 };
    let filled =
        Rect::from_min_max(pos2(bar.left(), bar.bottom() - bar.height() * usage), bar.right_bottom());
    painter.rect_filled(filled, CornerRadius::same(2), palette::HOST_USED);
    for (i, line) in lines.iter().enumerate() {
        let at = pos2(column.left(), bar.bottom() + 6.0 + 16.0 * i as f32);
        painter.text(at, Align2::LEFT_TOP, line, small.clone(), palette::TEXT_DIM);
    }
    bar
}

/// The host tier's numbers as the column prints them: slots used, then blocks loaded,
/// stored and evicted so far.
pub fn host_tier_lines(host: &HostTierView) -> Vec<String> {
    vec![
        format!("{} / {} blocks", host.num_used_blocks, host.num_blocks),
        format!("loaded {}", host.num_loaded_blocks),
        format!("stored {}", host.num_stored_blocks),
        format!("evicted {}", host.num_evicted_blocks),
    ]
}

/// Lays out `count` square cells row by row inside `area`, as large as fits (at most
/// `MAX_CELL`).
pub fn grid_cells(area: Rect, count: usize) -> Vec<Rect> {
    if count == 0 {
        return Vec::new();
    }
    let mut cell = MAX_CELL;
    let mut columns;
    loop {
        columns = (((area.width() + CELL_GAP) / (cell + CELL_GAP)).floor() as usize).max(1);
        let rows = count.div_ceil(columns);
        if rows as f32 * (cell + CELL_GAP) <= area.height() || cell <= 3.0 {
            break;
        }
        cell -= 1.0;
    }
    (0..count)
        .map(|i| {
            let (row, column) = (i / columns, i % columns);
            Rect::from_min_size(
                pos2(
                    area.left() + column as f32 * (cell + CELL_GAP),
                    area.top() + row as f32 * (cell + CELL_GAP),
                ),
                Vec2::splat(cell),
            )
        })
        .collect()
}

/// The fill of a block cell: its owner's colour (the lowest owner id when shared), or the
/// colour of its free state.
pub fn block_fill(block: &BlockView) -> Color32 {
    match block.state {
        BlockState::Null => palette::NULL_BLOCK,
        BlockState::Free => palette::FREE_BLOCK,
        BlockState::CachedFree => palette::CACHED_FREE_BLOCK,
        BlockState::Used => {
            block.owners.iter().min().map_or(palette::FREE_BLOCK, |&id| palette::request_color(id))
        }
    }
}

fn paint_block(
    painter: &egui::Painter,
    rect: Rect,
    block: &BlockView,
    mark: Option<BlockMark>,
    focused: bool,
) {
    let radius = if rect.width() >= 8.0 { CornerRadius::same(2) } else { CornerRadius::ZERO };
    painter.rect_filled(rect, radius, block_fill(block));
    if block.state == BlockState::CachedFree {
        painter.rect_stroke(rect, radius, Stroke::new(1.0, palette::CACHED_FREE_DOT), StrokeKind::Inside);
    }
    if block.ref_cnt > 1 {
        paint_shared_mark(painter, rect);
    }
    let outline = match mark {
        Some(BlockMark::Hit) => Some(palette::HIT),
        Some(BlockMark::Evicted) => Some(palette::EVICT),
        Some(BlockMark::Preempted) => Some(palette::PREEMPT),
        None => None,
    };
    if let Some(color) = outline {
        painter.rect_stroke(rect.expand(1.0), radius, Stroke::new(2.0, color), StrokeKind::Inside);
    }
    if focused {
        painter.rect_stroke(
            rect.expand(2.0),
            radius,
            Stroke::new(2.0, palette::HIGHLIGHT),
            StrokeKind::Outside,
        );
    }
}

/// The white triangle in a shared block's top-right corner, 45% of the cell's side.
pub fn paint_shared_mark(painter: &egui::Painter, rect: Rect) {
    let side = rect.width() * 0.45;
    let corner = rect.right_top();
    painter.add(Shape::convex_polygon(
        vec![corner, pos2(corner.x, corner.y + side), pos2(corner.x - side, corner.y)],
        palette::SHARED_MARK,
        Stroke::NONE,
    ));
}

fn table_row(painter: &egui::Painter, rect: Rect, request: &RequestView, kv: &KvView) -> Vec<Rect> {
    let color = palette::request_color(request.id);
    let label_width = 56.0;
    let stats_width = 300.0;
    painter.rect_filled(
        Rect::from_min_size(rect.left_top(), vec2(4.0, rect.height())),
        CornerRadius::ZERO,
        color,
    );
    painter.text(
        pos2(rect.left() + 8.0, rect.center().y),
        Align2::LEFT_CENTER,
        format!("r{}", request.id),
        FontId::monospace(12.0),
        color,
    );
    let cells_left = rect.left() + label_width;
    let cells_width = (rect.width() - label_width - stats_width).max(20.0);
    let n = request.block_ids.len();
    let cell = if n == 0 { 10.0 } else { ((cells_width + 1.0) / n as f32 - 1.0).clamp(1.0, 10.0) };
    let block_size = kv.block_size.max(1);
    let cached_blocks = request.num_cached_tokens / block_size;
    let mut cells = Vec::with_capacity(n);
    for (i, &block_id) in request.block_ids.iter().enumerate() {
        let cell_rect = Rect::from_min_size(
            pos2(cells_left + i as f32 * (cell + 1.0), rect.top()),
            vec2(cell, rect.height()),
        );
        let filled = request.num_tokens.saturating_sub(i * block_size).min(block_size);
        let fill_fraction = filled as f32 / block_size as f32;
        painter.rect_filled(cell_rect, CornerRadius::ZERO, palette::FREE_BLOCK);
        let filled_rect = Rect::from_min_size(cell_rect.min, vec2(cell * fill_fraction, cell_rect.height()));
        painter.rect_filled(filled_rect, CornerRadius::ZERO, color);
        if kv.blocks.get(block_id as usize).is_some_and(|b| b.ref_cnt > 1) {
            paint_shared_mark(painter, cell_rect);
        }
        if i < cached_blocks {
            let bar = Rect::from_min_max(
                pos2(cell_rect.left(), cell_rect.bottom() - 2.0),
                cell_rect.right_bottom(),
            );
            painter.rect_filled(bar, CornerRadius::ZERO, palette::HIT);
        }
        cells.push(cell_rect);
    }
    paint_proposed_slots(painter, &cells, request, block_size);
    let preempted = if request.num_preemptions > 0 {
        format!("   preempted {}x", request.num_preemptions)
    } else {
        String::new()
    };
    let speculated = match (request.num_spec_tokens, request.num_rejected_tokens) {
        (0, 0) => String::new(),
        (proposed, rejected) => format!("   +{proposed} prop {rejected} rej"),
    };
    painter.text(
        pos2(rect.right() - stats_width + 8.0, rect.center().y),
        Align2::LEFT_CENTER,
        format!(
            "{:>4} tok {:>3} blk {:>4} hit{preempted}{speculated}",
            request.num_tokens, n, request.num_cached_tokens
        ),
        FontId::monospace(11.0),
        if request.num_preemptions > 0 { palette::PREEMPT } else { palette::TEXT_DIM },
    );
    cells
}

/// The token ranges of a request's speculative slots within its blocks: the proposals its
/// next step verifies (past its known tokens) and the ones its latest verification rejected
/// (the slots after its computed tokens that were rolled back), as (first token, end).
pub fn speculative_slots(request: &RequestView) -> ((usize, usize), (usize, usize)) {
    let proposed = (request.num_tokens, request.num_tokens + request.num_spec_tokens);
    let rejected = request.num_computed_tokens;
    (proposed, (rejected, rejected + request.num_rejected_tokens))
}

/// Marks a request's proposed slots (a bar on top of their cells) and the slots its latest
/// verification rejected (a bar underneath) in its row's `cells`.
fn paint_proposed_slots(painter: &egui::Painter, cells: &[Rect], request: &RequestView, block_size: usize) {
    let (proposed, rejected) = speculative_slots(request);
    for ((start, end), color, top) in
        [(proposed, palette::PROPOSED, true), (rejected, palette::REJECTED, false)]
    {
        for token in start..end {
            let Some(cell) = cells.get(token / block_size) else { break };
            let width = cell.width() / block_size as f32;
            let left = cell.left() + (token % block_size) as f32 * width;
            let (y0, y1) =
                if top { (cell.top(), cell.top() + 3.0) } else { (cell.bottom() - 3.0, cell.bottom()) };
            painter.rect_filled(
                Rect::from_min_max(pos2(left, y0), pos2(left + width, y1)),
                CornerRadius::ZERO,
                color,
            );
        }
    }
}

fn waiting_chips(painter: &egui::Painter, area: Rect, kv: &KvView) {
    let font = FontId::monospace(12.0);
    let (chip_w, chip_h, gap) = (64.0, 20.0, 6.0);
    let per_row = (((area.width() + gap) / (chip_w + gap)).floor() as usize).max(1);
    let rows = (((area.height() + gap) / (chip_h + gap)).floor() as usize).max(1);
    let capacity = per_row * rows;
    for (i, &id) in kv.waiting.iter().enumerate() {
        let origin = pos2(
            area.left() + (i % per_row) as f32 * (chip_w + gap),
            area.top() + (i / per_row) as f32 * (chip_h + gap),
        );
        if i + 1 == capacity && kv.waiting.len() > capacity {
            painter.text(
                origin,
                Align2::LEFT_TOP,
                format!("+{}", kv.waiting.len() - i),
                font.clone(),
                palette::TEXT_DIM,
            );
            break;
        }
        let rect = Rect::from_min_size(origin, vec2(chip_w, chip_h));
        let color = palette::request_color(id);
        let preempted = kv.request(id).is_some_and(|r| r.phase == RequestPhase::Preempted);
        painter.rect_filled(rect, CornerRadius::same(4), color.gamma_multiply(0.35));
        let border = if preempted { Stroke::new(2.0, palette::PREEMPT) } else { Stroke::new(1.0, color) };
        painter.rect_stroke(rect, CornerRadius::same(4), border, StrokeKind::Inside);
        let text = if preempted { format!("r{id} P") } else { format!("r{id}") };
        painter.text(rect.center(), Align2::CENTER_CENTER, text, font.clone(), Color32::WHITE);
    }
}

struct Plot {
    title: &'static str,
    value: String,
    color: Color32,
    series: Vec<f64>,
    second: Option<(Color32, Vec<f64>)>,
    fixed_max: Option<f64>,
}

fn side_panel(ui: &mut Ui, state: &VizState) {
    let c = &state.counters;
    let series = |f: &dyn Fn(&Sample) -> f64| state.history.iter().map(f).collect::<Vec<f64>>();
    let plots = [
        Plot {
            title: "KV usage",
            value: format!("{:.1}%", c.kv_usage * 100.0),
            color: Color32::from_rgb(120, 180, 255),
            series: series(&|s| s.counters.kv_usage),
            second: None,
            fixed_max: Some(1.0),
        },
        Plot {
            title: "prefix hit rate",
            value: format!("{:.1}%", c.prefix_hit_rate() * 100.0),
            color: palette::HIT,
            series: series(&|s| s.counters.prefix_hit_rate()),
            second: None,
            fixed_max: Some(1.0),
        },
        Plot {
            title: "preemptions",
            value: c.preemptions.to_string(),
            color: palette::PREEMPT,
            series: series(&|s| s.counters.preemptions as f64),
            second: None,
            fixed_max: None,
        },
        Plot {
            title: "recomputed tokens",
            value: c.recomputed_tokens.to_string(),
            color: palette::EVICT,
            series: series(&|s| s.counters.recomputed_tokens as f64),
            second: None,
            fixed_max: None,
        },
        Plot {
            title: "proposals accepted",
            value: format!("{} / {}", c.spec_accepted_tokens, c.spec_draft_tokens),
            color: palette::PROPOSED,
            series: series(&|s| s.counters.spec_accepted_tokens as f64),
            second: Some((palette::REJECTED, series(&|s| s.counters.spec_draft_tokens as f64))),
            fixed_max: None,
        },
        Plot {
            title: "running / waiting",
            value: format!("{} / {}", c.num_running, c.num_waiting),
            color: Color32::from_rgb(200, 160, 255),
            series: series(&|s| s.counters.num_running as f64),
            second: Some((palette::TEXT_DIM, series(&|s| s.counters.num_waiting as f64))),
            fixed_max: None,
        },
        Plot {
            title: "host us/step hidden / exposed",
            value: {
                let (hidden, exposed) = c.host_us_per_step();
                format!("{hidden:.0} / {exposed:.0}")
            },
            color: palette::HOST_HIDDEN,
            series: series(&|s| s.counters.host_us_per_step().0),
            second: Some((palette::HOST_EXPOSED, series(&|s| s.counters.host_us_per_step().1))),
            fixed_max: None,
        },
        Plot {
            title: "tokens/s generated",
            value: format!("{:.0}", state.tokens_per_s()),
            color: Color32::from_rgb(255, 220, 120),
            series: series(&|s| s.tokens_per_s),
            second: None,
            fixed_max: None,
        },
    ];
    for plot in &plots {
        counter_row(ui, plot);
    }
    ui.add_space(6.0);
    ui.label(
        RichText::new(format!(
            "finished {}   generated {} tok   async scheduling {}",
            c.num_finished,
            c.generated_tokens,
            if c.async_scheduling { "on" } else { "off" }
        ))
        .size(12.0)
        .color(palette::TEXT_DIM),
    );
    ui.separator();
    ui.label(RichText::new("Events").size(14.0));
    event_log(ui, state);
}

fn counter_row(ui: &mut Ui, plot: &Plot) {
    let (rect, _) = ui.allocate_exact_size(vec2(ui.available_width(), 38.0), Sense::hover());
    let painter = ui.painter();
    painter.text(
        rect.left_top(),
        Align2::LEFT_TOP,
        plot.title,
        FontId::proportional(12.0),
        palette::TEXT_DIM,
    );
    painter.text(
        pos2(rect.left(), rect.top() + 15.0),
        Align2::LEFT_TOP,
        &plot.value,
        FontId::monospace(15.0),
        plot.color,
    );
    let plot_rect = Rect::from_min_max(
        pos2(rect.left() + 150.0, rect.top() + 2.0),
        pos2(rect.right(), rect.bottom() - 4.0),
    );
    painter.rect_filled(plot_rect, CornerRadius::same(2), palette::BACKGROUND);
    let mut max = plot.fixed_max.unwrap_or(0.0);
    if plot.fixed_max.is_none() {
        for v in plot.series.iter().chain(plot.second.iter().flat_map(|(_, s)| s.iter())) {
            max = max.max(*v);
        }
    }
    if let Some((color, values)) = &plot.second {
        sparkline(painter, plot_rect, values, max, *color);
    }
    sparkline(painter, plot_rect, &plot.series, max, plot.color);
}

fn sparkline(painter: &egui::Painter, rect: Rect, values: &[f64], max: f64, color: Color32) {
    if values.len() < 2 || max <= 0.0 {
        return;
    }
    let step = rect.width() / (crate::viz::state::HISTORY_LEN - 1) as f32;
    let start = rect.right() - step * (values.len() - 1) as f32;
    let points: Vec<Pos2> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            pos2(start + i as f32 * step, rect.bottom() - 2.0 - (rect.height() - 4.0) * (*v / max) as f32)
        })
        .collect();
    painter.line(points, Stroke::new(1.5, color));
}

fn event_log(ui: &mut Ui, state: &VizState) {
    let rect = ui.available_rect_before_wrap();
    let painter = ui.painter_at(rect);
    let line = 16.0;
    let font = FontId::monospace(11.5);
    for (i, (step, event)) in state.events.iter().rev().enumerate() {
        let y = rect.top() + i as f32 * line;
        if y + line > rect.bottom() {
            break;
        }
        let (color, text) = describe_event(event);
        painter.text(
            pos2(rect.left(), y),
            Align2::LEFT_TOP,
            format!("{step:>5}"),
            font.clone(),
            palette::TEXT_DIM,
        );
        painter.text(pos2(rect.left() + 46.0, y), Align2::LEFT_TOP, text, font.clone(), color);
    }
}

/// The colour and one-line text of an event in the log.
pub fn describe_event(event: &VizEvent) -> (Color32, String) {
    let blocks =
        |b: &[BlockId]| if b.len() == 1 { "1 block".to_string() } else { format!("{} blocks", b.len()) };
    match event {
        VizEvent::Allocate { request, blocks: b } => {
            (palette::request_color(*request), format!("alloc    r{request} +{}", blocks(b)))
        }
        VizEvent::CacheHit { request, blocks: b, num_tokens } => {
            (palette::HIT, format!("hit      r{request} {} ({num_tokens} tok)", blocks(b)))
        }
        VizEvent::Evict { block, hash } => {
            (palette::EVICT, format!("evict    #{block} {}", short_hash(*hash)))
        }
        VizEvent::Free { request, blocks: b } => {
            (palette::TEXT_DIM, format!("free     r{request} {}", blocks(b)))
        }
        VizEvent::Preempt { request, needed_by, blocks: b } => {
            (palette::PREEMPT, format!("PREEMPT  r{request} for r{needed_by}, released {}", blocks(b)))
        }
        VizEvent::Resume { request, hit_blocks, num_cached_tokens } => (
            palette::HIT,
            format!("resume   r{request} re-hit {} ({num_cached_tokens} tok)", blocks(hit_blocks)),
        ),
        VizEvent::Finish { request } => (palette::request_color(*request), format!("finish   r{request}")),
        VizEvent::InvalidBlocks { blocks: b } => (palette::EVICT, format!("invalid  {}", blocks(b))),
    }
}

/// The first 8 hex digits of a block hash.
pub fn short_hash(hash: u128) -> String {
    format!("{:08x}", (hash >> 96) as u32)
}

/// The details of one block: id, state, ref count, hash prefix, owners with token ranges.
pub fn describe_block(kv: &KvView, id: BlockId) -> Option<String> {
    let block = kv.blocks.get(id as usize)?;
    let state = state_name(block.state);
    let hash = block.hash.map_or_else(|| "none".to_string(), short_hash);
    let mut text = format!("block {id}   {state}   ref_cnt {}   hash {hash}", block.ref_cnt);
    let mut owners = block.owners.clone();
    owners.sort_unstable();
    for owner in owners {
        text.push_str(&format!("   r{owner}"));
        if let Some((start, end)) = token_range(kv, owner, id) {
            text.push_str(&format!(" tokens {start}..{end}"));
        }
    }
    Some(text)
}

/// The lines of a block's tooltip: id and state, ref count, hash prefix, then each owner
/// with the tokens the block holds for it.
pub fn block_tooltip_lines(kv: &KvView, id: BlockId) -> Option<Vec<String>> {
    let block = kv.blocks.get(id as usize)?;
    let mut lines = vec![
        format!("block {id}  {}", state_name(block.state)),
        format!("ref_cnt {}", block.ref_cnt),
        format!("hash {}", block.hash.map_or_else(|| "none".to_string(), short_hash)),
    ];
    let mut owners = block.owners.clone();
    owners.sort_unstable();
    if owners.is_empty() {
        lines.push("no owner".to_string());
    }
    for owner in owners {
        lines.push(match token_range(kv, owner, id) {
            Some((start, end)) => format!("r{owner}  tokens {start}..{end}"),
            None => format!("r{owner}"),
        });
    }
    Some(lines)
}

/// Paints a block's tooltip above everything, just below and right of `anchor`, kept
/// inside `bounds`.
fn block_tooltip(ctx: &egui::Context, bounds: Rect, kv: &KvView, id: BlockId, anchor: Pos2) {
    let Some(lines) = block_tooltip_lines(kv, id) else { return };
    let painter =
        ctx.layer_painter(egui::LayerId::new(egui::Order::Tooltip, Id::unique("pagoda-block-tooltip")));
    let galley = painter.layout_no_wrap(lines.join("\n"), FontId::monospace(12.0), palette::TEXT);
    let size = galley.size() + vec2(16.0, 12.0);
    let mut origin = anchor + vec2(14.0, 14.0);
    origin.x = origin.x.min(bounds.right() - size.x).max(bounds.left());
    origin.y = origin.y.min(bounds.bottom() - size.y).max(bounds.top());
    let rect = Rect::from_min_size(origin, size);
    let border = kv.blocks.get(id as usize).map_or(palette::TEXT_DIM, block_fill);
    painter.rect_filled(rect, CornerRadius::same(4), palette::PANEL);
    painter.rect_stroke(rect, CornerRadius::same(4), Stroke::new(1.5, border), StrokeKind::Inside);
    painter.galley(origin + vec2(8.0, 6.0), galley, palette::TEXT);
}

fn state_name(state: BlockState) -> &'static str {
    match state {
        BlockState::Null => "null",
        BlockState::Free => "free",
        BlockState::CachedFree => "cached-free",
        BlockState::Used => "used",
    }
}

/// The tokens block `id` holds for request `owner`: its place in the owner's block table
/// times the block size, up to the owner's length.
fn token_range(kv: &KvView, owner: RequestId, id: BlockId) -> Option<(usize, usize)> {
    let request = kv.request(owner)?;
    let index = request.block_ids.iter().position(|&b| b == id)?;
    let start = index * kv.block_size;
    Some((start, request.num_tokens.min(start + kv.block_size)))
}

fn details_line(ui: &mut Ui, kv: &KvView, focus: Option<BlockId>) {
    let text = focus
        .and_then(|id| describe_block(kv, id))
        .unwrap_or_else(|| "hover or click a block for its details".to_string());
    ui.label(RichText::new(text).monospace().size(12.0));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv_with_shared_block() -> KvView {
        KvView {
            block_size: 16,
            blocks: vec![
                BlockView { id: 0, state: BlockState::Null, ref_cnt: 0, hash: None, owners: vec![] },
                BlockView {
                    id: 1,
                    state: BlockState::Used,
                    ref_cnt: 2,
                    hash: Some(0xabcd_ef01 << 96),
                    owners: vec![7, 3],
                },
                BlockView { id: 2, state: BlockState::Used, ref_cnt: 1, hash: None, owners: vec![7] },
            ],
            requests: vec![
                RequestView {
                    id: 3,
                    phase: RequestPhase::Running,
                    block_ids: vec![1],
                    num_prompt_tokens: 16,
                    num_tokens: 16,
                    num_computed_tokens: 16,
                    num_cached_tokens: 0,
                    num_preemptions: 0,
                    num_spec_tokens: 0,
                    num_rejected_tokens: 0,
                },
                RequestView {
                    id: 7,
                    phase: RequestPhase::Running,
                    block_ids: vec![1, 2],
                    num_prompt_tokens: 20,
                    num_tokens: 21,
                    num_computed_tokens: 20,
                    num_cached_tokens: 16,
                    num_preemptions: 0,
                    num_spec_tokens: 0,
                    num_rejected_tokens: 0,
                },
            ],
            running: vec![3, 7],
            waiting: vec![],
        }
    }

    #[test]
    fn grid_fits_the_area_in_block_order() {
        let area = Rect::from_min_size(pos2(10.0, 20.0), vec2(300.0, 100.0));
        let cells = grid_cells(area, 100);
        assert_eq!(cells.len(), 100);
        assert!(cells.iter().all(|c| area.contains_rect(*c)));
        assert_eq!(cells[0].min, pos2(10.0, 20.0));
        assert!(cells[1].left() > cells[0].left());
        assert_eq!(cells[0].width(), cells[99].width());
    }

    #[test]
    fn shared_block_takes_its_lowest_owner_colour() {
        let kv = kv_with_shared_block();
        assert_eq!(block_fill(&kv.blocks[1]), palette::request_color(3));
        assert_eq!(block_fill(&kv.blocks[0]), palette::NULL_BLOCK);
    }

    #[test]
    fn block_details_name_owners_and_token_ranges() {
        let kv = kv_with_shared_block();
        assert_eq!(
            describe_block(&kv, 1).as_deref(),
            Some("block 1   used   ref_cnt 2   hash abcdef01   r3 tokens 0..16   r7 tokens 0..16")
        );
        assert_eq!(
            describe_block(&kv, 2).as_deref(),
            Some("block 2   used   ref_cnt 1   hash none   r7 tokens 16..21")
        );
        assert_eq!(describe_block(&kv, 9), None);
    }

    #[test]
    fn tooltip_lines_name_id_ref_count_hash_owners_and_ranges() {
        let kv = kv_with_shared_block();
        assert_eq!(
            block_tooltip_lines(&kv, 1),
            Some(vec![
                "block 1  used".to_string(),
                "ref_cnt 2".to_string(),
                "hash abcdef01".to_string(),
                "r3  tokens 0..16".to_string(),
                "r7  tokens 0..16".to_string(),
            ])
        );
        assert_eq!(
            block_tooltip_lines(&kv, 0),
            Some(vec![
                "block 0  null".to_string(),
                "ref_cnt 0".to_string(),
                "hash none".to_string(),
                "no owner".to_string(),
            ])
        );
        assert_eq!(block_tooltip_lines(&kv, 9), None);
    }
}

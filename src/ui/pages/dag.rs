//! The task DAG as server-drawn SVG: one column per wave (the `parallel_group`
//! the gate checked), one node per task, an edge per `depends_on`. Each node
//! carries its status as a class *and* as text; abandoned nodes add their
//! category, review tasks say "review". Beyond [`MAX_DRAWN_NODES`] the picture
//! is one box per wave with its counts, each opening that wave alone.

use std::collections::BTreeMap;

use maud::{Markup, html};

use super::class_word;
use crate::service::dashboard::TaskListView;

/// Above this many tasks a full drawing is unreadable: summarise per wave.
pub const MAX_DRAWN_NODES: usize = 300;

const NODE_W: i64 = 190;
const NODE_H: i64 = 46;
const GAP_X: i64 = 70;
const GAP_Y: i64 = 14;
const HEAD: i64 = 34;
const PAD: i64 = 10;
/// Columns of the grid a single opened wave is drawn in.
const WAVE_GRID_COLUMNS: usize = 4;

/// What the node's status line says: `done`, `abandoned: blocked`, ...
pub fn status_text(status: &str, category: Option<&str>) -> String {
    match category {
        Some(c) => format!("{status}: {c}"),
        None => status.to_owned(),
    }
}

/// Task indices per wave, waves ascending, tasks in list order.
pub fn waves(view: &TaskListView) -> BTreeMap<i64, Vec<usize>> {
    let mut waves: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, t) in view.list.tasks.iter().enumerate() {
        waves.entry(t.parallel_group).or_default().push(i);
    }
    waves
}

/// `text` cut to at most `max` monospace cells, with "…" when cut. A character
/// outside ASCII counts as two cells (CJK and emoji are drawn double-wide), so a
/// shortened id never runs past its node into the label beside it.
fn shorten(text: &str, max: usize) -> String {
    let cells = |c: char| if c.is_ascii() { 1 } else { 2 };
    if text.chars().map(cells).sum::<usize>() <= max {
        return text.to_owned();
    }
    let mut used = 1; // the ellipsis
    let mut s = String::new();
    for c in text.chars() {
        used += cells(c);
        if used > max {
            break;
        }
        s.push(c);
    }
    s.push('…');
    s
}

/// Cells the id line holds: the whole node, or what "review" leaves beside it.
const ID_CELLS: usize = 24;
const ID_CELLS_BESIDE_REVIEW: usize = 16;

fn node(view: &TaskListView, i: usize, x: i64, y: i64) -> Markup {
    let task = &view.list.tasks[i];
    let status = task.status.as_str();
    let category = task.abandon_category.map(|c| c.as_str());
    let label = status_text(status, category);
    let review = task.reviews.is_some();
    let base = format!("{} ({})", task.task_id, task.assigned_persona);
    let tooltip = format!("{base}: {label}{}", if review { ", review" } else { "" });
    html! {
        a href={ "#task-" (i) } {
            g class={ "node st-" (class_word(status)) } data-task=(task.task_id) data-status=(status)
              data-base=(base) data-review=[review.then_some("1")]
              transform={ "translate(" (x) "," (y) ")" } {
                title { (tooltip) }
                rect width=(NODE_W) height=(NODE_H) rx="6" {}
                text.tid x="8" y="18" {
                    (shorten(&task.task_id, if review { ID_CELLS_BESIDE_REVIEW } else { ID_CELLS }))
                }
                text.st x="8" y="36" { (label) }
                @if review {
                    text.review x=(NODE_W - 8) y="18" text-anchor="end" { "review" }
                }
            }
        }
    }
}

/// The whole graph (small lists).
pub fn full(view: &TaskListView) -> Markup {
    let waves = waves(view);
    let mut position = vec![(0i64, 0i64); view.list.tasks.len()];
    let mut tallest = 0usize;
    for (col, tasks) in waves.values().enumerate() {
        tallest = tallest.max(tasks.len());
        for (row, &i) in tasks.iter().enumerate() {
            position[i] = (
                PAD + col as i64 * (NODE_W + GAP_X),
                HEAD + row as i64 * (NODE_H + GAP_Y),
            );
        }
    }
    let width = PAD * 2 + waves.len().max(1) as i64 * (NODE_W + GAP_X) - GAP_X;
    let height = HEAD + tallest.max(1) as i64 * (NODE_H + GAP_Y) + PAD;
    html! {
        svg.dag xmlns="http://www.w3.org/2000/svg" role="group" aria-label="Task graph by wave"
            viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height) {
            @for (col, wave) in waves.keys().enumerate() {
                @let x = PAD + col as i64 * (NODE_W + GAP_X);
                @let active = view.active_wave == Some(*wave);
                g class={ "wave" @if active { " active" } } data-wave=(wave) {
                    rect.wave-bg x=(x - 4) y="4" width=(NODE_W + 8) height=(height - 8) rx="8" {}
                    text.wave-label x=(x) y="24" { "wave " (wave) @if active { " (active)" } }
                }
            }
            g.edges aria-hidden="true" {
                @for (i, deps) in view.depends_on.iter().enumerate() {
                    @for &d in deps {
                        @let (x1, y1) = (position[d].0 + NODE_W, position[d].1 + NODE_H / 2);
                        @let (x2, y2) = (position[i].0, position[i].1 + NODE_H / 2);
                        @let mid = (x1 + x2) / 2;
                        path d={ "M" (x1) "," (y1) " C" (mid) "," (y1) " " (mid) "," (y2) " " (x2) "," (y2) } {}
                    }
                }
            }
            g.nodes {
                @for tasks in waves.values() {
                    @for &i in tasks { (node(view, i, position[i].0, position[i].1)) }
                }
            }
        }
    }
}

/// One wave alone, in a grid (its tasks depend only on earlier waves).
pub fn one_wave(view: &TaskListView, wave: i64) -> Markup {
    let tasks: Vec<usize> = waves(view).remove(&wave).unwrap_or_default();
    let rows = tasks.len().div_ceil(WAVE_GRID_COLUMNS).max(1) as i64;
    let columns = tasks.len().clamp(1, WAVE_GRID_COLUMNS) as i64;
    let width = PAD * 2 + columns * (NODE_W + GAP_Y) - GAP_Y;
    let height = HEAD + rows * (NODE_H + GAP_Y) + PAD;
    html! {
        svg.dag xmlns="http://www.w3.org/2000/svg" role="group" aria-label={ "Tasks of wave " (wave) }
            viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height) {
            text.wave-label x=(PAD) y="24" { "wave " (wave) @if view.active_wave == Some(wave) { " (active)" } }
            g.nodes {
                @for (k, &i) in tasks.iter().enumerate() {
                    @let x = PAD + (k % WAVE_GRID_COLUMNS) as i64 * (NODE_W + GAP_Y);
                    @let y = HEAD + (k / WAVE_GRID_COLUMNS) as i64 * (NODE_H + GAP_Y);
                    (node(view, i, x, y))
                }
            }
        }
    }
}

/// One box per wave with its status counts; each box opens its wave.
pub fn summary(view: &TaskListView) -> Markup {
    let waves = waves(view);
    const BOX_W: i64 = 200;
    const LINE: i64 = 18;
    let lines = 2 + super::TASK_ORDER.len() as i64;
    let box_h = lines * LINE + 12;
    let width = PAD * 2 + waves.len().max(1) as i64 * (BOX_W + GAP_X) - GAP_X;
    let height = box_h + PAD * 2;
    html! {
        svg.dag.summary xmlns="http://www.w3.org/2000/svg" role="group"
            aria-label="Task graph summarised per wave"
            viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height) {
            @for (col, (wave, tasks)) in waves.iter().enumerate() {
                @let x = PAD + col as i64 * (BOX_W + GAP_X);
                @let active = view.active_wave == Some(*wave);
                @if col > 0 {
                    path.wave-edge d={ "M" (x - GAP_X) "," (PAD + box_h / 2) " L" (x) "," (PAD + box_h / 2) } {}
                }
                a href={ "?wave=" (wave) } {
                    g class={ "wave-box" @if active { " active" } } data-wave=(wave) transform={ "translate(" (x) "," (PAD) ")" } {
                        title { "Open wave " (wave) }
                        rect width=(BOX_W) height=(box_h) rx="8" {}
                        text.wave-label x="10" y=(LINE) { "wave " (wave) @if active { " (active)" } }
                        text x="10" y=(2 * LINE) { (tasks.len()) " tasks" }
                        @for (k, word) in super::TASK_ORDER.iter().enumerate() {
                            @let n = tasks.iter().filter(|&&i| view.list.tasks[i].status.as_str() == *word).count();
                            text class={ "count st-" (word) } x="10" y=((3 + k as i64) * LINE) { (word) ": " (n) }
                        }
                    }
                }
            }
        }
    }
}

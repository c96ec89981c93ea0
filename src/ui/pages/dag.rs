//! The task DAG as server-drawn SVG: one column per wave (the `parallel_group`
//! the gate checked), one node per task, an edge per `depends_on`. Each node
//! carries its status as a class *and* as text; abandoned nodes add their
//! category, review tasks say "review". Beyond [`MAX_DRAWN_NODES`] the picture
//! is one box per wave with its counts, each opening that wave alone.

use std::collections::BTreeMap;

use maud::{Markup, html};

use super::class_word;
use crate::domain::dispatch::{AbandonCategory, TaskStatus};
use crate::service::dashboard::{TaskListView, WaveSummary};

/// Above this many tasks a full drawing is unreadable: summarise per wave.
pub const MAX_DRAWN_NODES: usize = crate::service::dashboard::DRAWN_WHOLE_TASKS as usize;

const NODE_W: i64 = 190;
const NODE_H: i64 = 46;
/// Between columns: the vertical lanes edges run in.
const GAP_X: i64 = 70;
/// Between rows: the horizontal channels edges cross other columns in.
const GAP_Y: i64 = 20;
const HEAD: i64 = 34;
const PAD: i64 = 10;
/// Columns of the grid a single opened wave is drawn in.
const WAVE_GRID_COLUMNS: usize = 4;

/// A node's place on the drawing's grid: every column and row has the same
/// pitch, so the gaps between them form lanes no node stands in.
#[derive(Clone, Copy)]
struct Cell {
    col: i64,
    row: i64,
}

impl Cell {
    fn x(self) -> i64 {
        PAD + self.col * (NODE_W + GAP_X)
    }
    fn y(self) -> i64 {
        HEAD + self.row * (NODE_H + GAP_Y)
    }
}

/// An edge from `from`'s right side to `to`'s left side along the gaps only
/// (no edge passes behind a node). Into the next column it
/// turns once in the lane between them; further, it climbs into the channel
/// above `to`'s row, crosses the columns in between there, and comes down in
/// the lane before `to`. Lanes are offset a little per edge so parallel edges
/// stay apart.
fn route(from: Cell, to: Cell) -> String {
    let lane = ((from.row * 3 + to.row * 5 + from.col) % 5 - 2) * 5;
    let (x1, y1) = (from.x() + NODE_W, from.y() + NODE_H / 2);
    let (x2, y2) = (to.x(), to.y() + NODE_H / 2);
    let out = x1 + GAP_X / 2 + lane;
    if to.col == from.col + 1 {
        return format!("M{x1},{y1} H{out} V{y2} H{x2}");
    }
    let channel = to.y() - GAP_Y / 2;
    let into = x2 - GAP_X / 2 + lane;
    format!("M{x1},{y1} H{out} V{channel} H{into} V{y2} H{x2}")
}

/// Edges drawn: `(dependency, dependent)` task indices with their cells. The
/// indices let app.js highlight a node's neighbours and name them.
fn edges(drawn: &[(usize, usize, Cell, Cell)]) -> Markup {
    html! {
        g.edges aria-hidden="true" {
            @for &(d, i, from, to) in drawn {
                path data-from=(d) data-to=(i) d=(route(from, to)) {}
            }
        }
    }
}

/// What the node's status line says: `done`, `abandoned: blocked`, ...
pub fn status_text(status: TaskStatus, category: Option<AbandonCategory>) -> String {
    match category {
        Some(c) => format!("{status}: {c}"),
        None => status.to_string(),
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
    let label = status_text(task.status, task.abandon_category);
    let review = task.reviews.is_some();
    let base = format!("{} ({})", task.task_id, task.assigned_persona);
    let tooltip = format!("{base}: {label}{}", if review { ", review" } else { "" });
    html! {
        a href={ "#task-" (i) } {
            g class={ "node st-" (class_word(status)) } data-i=(i) data-task=(task.task_id) data-status=(status)
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

/// A task of another wave beside an opened wave: the dependency or dependent
/// the wave's edges come from or go to. Not a `.node` (those are the wave's
/// own), it links to the task's page.
fn outside(view: &TaskListView, i: usize, cell: Cell) -> Markup {
    let task = &view.list.tasks[i];
    let status = task.status.as_str();
    let label = status_text(task.status, task.abandon_category);
    let base = format!("{} (wave {})", task.task_id, task.parallel_group);
    html! {
        a href=(super::task_href(view.list.id, &task.task_id)) {
            g class={ "ext st-" (class_word(status)) } data-i=(i) data-task=(task.task_id) data-status=(status)
              data-base=(base) transform={ "translate(" (cell.x()) "," (cell.y()) ")" } {
                title { (base) ": " (label) }
                rect width=(NODE_W) height=(NODE_H) rx="6" {}
                text.tid x="8" y="18" { (shorten(&task.task_id, ID_CELLS)) }
                text x="8" y="36" { "wave " (task.parallel_group) ": " tspan.st { (label) } }
            }
        }
    }
}

fn size(columns: i64, rows: i64) -> (i64, i64) {
    (
        PAD * 2 + columns.max(1) * (NODE_W + GAP_X) - GAP_X,
        HEAD + rows.max(1) * (NODE_H + GAP_Y) + PAD,
    )
}

/// The whole graph (small lists): one column per wave.
pub fn full(view: &TaskListView) -> Markup {
    let waves = waves(view);
    let mut cell = vec![Cell { col: 0, row: 0 }; view.list.tasks.len()];
    let mut tallest = 0usize;
    for (col, tasks) in waves.values().enumerate() {
        tallest = tallest.max(tasks.len());
        for (row, &i) in tasks.iter().enumerate() {
            cell[i] = Cell {
                col: col as i64,
                row: row as i64,
            };
        }
    }
    let (width, height) = size(waves.len() as i64, tallest as i64);
    let drawn: Vec<_> = view
        .depends_on
        .iter()
        .enumerate()
        .flat_map(|(i, deps)| deps.iter().map(move |&d| (d, i)))
        .map(|(d, i)| (d, i, cell[d], cell[i]))
        .collect();
    html! {
        svg.dag xmlns="http://www.w3.org/2000/svg" role="group" aria-label="Task graph by wave"
            viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height) {
            @for (col, wave) in waves.keys().enumerate() {
                @let x = Cell { col: col as i64, row: 0 }.x();
                @let active = view.active_wave == Some(*wave);
                g class={ "wave" @if active { " active" } } data-wave=(wave) {
                    rect.wave-bg x=(x - 4) y="4" width=(NODE_W + 8) height=(height - 8) rx="8" {}
                    text.wave-label x=(x) y="24" { "wave " (wave) @if active { " (active)" } }
                }
            }
            (edges(&drawn))
            g.nodes {
                @for tasks in waves.values() {
                    @for &i in tasks { (node(view, i, cell[i].x(), cell[i].y())) }
                }
            }
        }
    }
}

/// One wave alone, in a grid, with the tasks of other waves its edges come
/// from (left) and go to (right). `status` keeps only the wave's tasks in that
/// status, and the edges and outside tasks they have.
pub fn one_wave(view: &TaskListView, wave: i64, status: Option<TaskStatus>) -> Markup {
    let tasks = &view.list.tasks;
    let shown: Vec<usize> = waves(view)
        .remove(&wave)
        .unwrap_or_default()
        .into_iter()
        .filter(|&i| status.is_none_or(|s| tasks[i].status == s))
        .collect();
    let is_shown = {
        let mut v = vec![false; tasks.len()];
        shown.iter().for_each(|&i| v[i] = true);
        v
    };
    let mut needs: Vec<usize> = Vec::new();
    let mut needed_by: Vec<usize> = Vec::new();
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (i, deps) in view.depends_on.iter().enumerate() {
        for &d in deps {
            match (is_shown[d], is_shown[i]) {
                (false, true) => {
                    needs.push(d);
                    pairs.push((d, i));
                }
                (true, false) => {
                    needed_by.push(i);
                    pairs.push((d, i));
                }
                (true, true) => pairs.push((d, i)),
                (false, false) => {}
            }
        }
    }
    needs.sort_unstable();
    needs.dedup();
    needed_by.sort_unstable();
    needed_by.dedup();
    let first_grid_col = i64::from(!needs.is_empty());
    let grid_cols = shown.len().clamp(1, WAVE_GRID_COLUMNS) as i64;
    let last_col = first_grid_col + grid_cols;
    let mut cell: std::collections::HashMap<usize, Cell> = std::collections::HashMap::new();
    for (k, &i) in shown.iter().enumerate() {
        let col = first_grid_col + (k % WAVE_GRID_COLUMNS) as i64;
        cell.insert(
            i,
            Cell {
                col,
                row: (k / WAVE_GRID_COLUMNS) as i64,
            },
        );
    }
    for (row, &i) in needs.iter().enumerate() {
        cell.insert(
            i,
            Cell {
                col: 0,
                row: row as i64,
            },
        );
    }
    for (row, &i) in needed_by.iter().enumerate() {
        cell.insert(
            i,
            Cell {
                col: last_col,
                row: row as i64,
            },
        );
    }
    let rows = (shown.len().div_ceil(WAVE_GRID_COLUMNS))
        .max(needs.len())
        .max(needed_by.len()) as i64;
    let columns = last_col + i64::from(!needed_by.is_empty());
    let (width, height) = size(columns, rows);
    let drawn: Vec<_> = pairs
        .iter()
        .map(|&(d, i)| (d, i, cell[&d], cell[&i]))
        .collect();
    let grid_x = Cell {
        col: first_grid_col,
        row: 0,
    }
    .x();
    html! {
        svg.dag xmlns="http://www.w3.org/2000/svg" role="group" aria-label={ "Tasks of wave " (wave) }
            viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height) {
            @if !needs.is_empty() {
                text.wave-label x=(PAD) y="24" { "needs (earlier waves)" }
            }
            text.wave-label x=(grid_x) y="24" {
                "wave " (wave) @if view.active_wave == Some(wave) { " (active)" }
                @if let Some(s) = status { ": " (s) " only" }
            }
            @if !needed_by.is_empty() {
                text.wave-label x=(Cell { col: last_col, row: 0 }.x()) y="24" { "needed by (later waves)" }
            }
            (edges(&drawn))
            g.nodes {
                @for &i in &shown { (node(view, i, cell[&i].x(), cell[&i].y())) }
            }
            g.outside {
                @for &i in needs.iter().chain(&needed_by) { (outside(view, i, cell[&i])) }
            }
        }
    }
}

/// One box per wave with its status counts; each box opens its wave.
pub fn summary(waves: &[WaveSummary], active_wave: Option<i64>) -> Markup {
    const BOX_W: i64 = 200;
    const LINE: i64 = 18;
    let lines = 2 + TaskStatus::ALL.len() as i64;
    let box_h = lines * LINE + 12;
    let width = PAD * 2 + waves.len().max(1) as i64 * (BOX_W + GAP_X) - GAP_X;
    let height = box_h + PAD * 2;
    html! {
        svg.dag.summary xmlns="http://www.w3.org/2000/svg" role="group"
            aria-label="Task graph summarised per wave"
            viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height) {
            @for (col, w) in waves.iter().enumerate() {
                @let wave = w.wave;
                @let x = PAD + col as i64 * (BOX_W + GAP_X);
                @let active = active_wave == Some(wave);
                @if col > 0 {
                    path.wave-edge d={ "M" (x - GAP_X) "," (PAD + box_h / 2) " L" (x) "," (PAD + box_h / 2) } {}
                }
                a href={ "?wave=" (wave) } {
                    g class={ "wave-box" @if active { " active" } } data-wave=(wave) transform={ "translate(" (x) "," (PAD) ")" } {
                        title { "Open wave " (wave) }
                        rect width=(BOX_W) height=(box_h) rx="8" {}
                        text.wave-label x="10" y=(LINE) { "wave " (wave) @if active { " (active)" } }
                        text x="10" y=(2 * LINE) { (w.total()) " tasks" }
                        @for (k, state) in TaskStatus::ALL.into_iter().enumerate() {
                            text class={ "count st-" (state) } x="10" y=((3 + k as i64) * LINE) { (state) ": " (w.count(state)) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cell, NODE_H, NODE_W, route};

    /// The corners a route passes through.
    fn points(d: &str) -> Vec<(i64, i64)> {
        let (mut x, mut y) = (0, 0);
        let mut out = Vec::new();
        for part in d.split_whitespace() {
            let (cmd, arg) = part.split_at(1);
            match cmd {
                "M" => {
                    let (a, b) = arg.split_once(',').unwrap();
                    (x, y) = (a.parse().unwrap(), b.parse().unwrap());
                }
                "H" => x = arg.parse().unwrap(),
                "V" => y = arg.parse().unwrap(),
                other => panic!("unexpected command {other}"),
            }
            out.push((x, y));
        }
        out
    }

    /// No edge enters a node: on a 6×6 grid, every route between columns,
    /// near or far, stays in the gaps.
    #[test]
    fn routes_never_pass_through_a_node() {
        let cells: Vec<Cell> = (0..6)
            .flat_map(|col| (0..6).map(move |row| Cell { col, row }))
            .collect();
        for &from in &cells {
            for &to in cells.iter().filter(|c| c.col > from.col) {
                let corners = points(&route(from, to));
                for pair in corners.windows(2) {
                    let ((ax, ay), (bx, by)) = (pair[0], pair[1]);
                    assert!(ax == bx || ay == by, "diagonal segment");
                    for node in &cells {
                        let (x, y) = (node.x(), node.y());
                        let across = ax.min(bx) < x + NODE_W && ax.max(bx) > x;
                        let down = ay.min(by) < y + NODE_H && ay.max(by) > y;
                        assert!(
                            !(across && down),
                            "{}: segment {:?} enters node ({}, {})",
                            route(from, to),
                            pair,
                            node.col,
                            node.row
                        );
                    }
                }
            }
        }
    }
}

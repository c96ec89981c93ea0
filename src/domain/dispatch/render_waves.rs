//! The graph of a list too large to draw task by task
//! (`GET /v1/task-lists/{id}/graph` on a list of more than 10,000 tasks,
//! docs/api.md "Large lists"): one node per wave with its tasks counted by
//! status, edges joining consecutive waves in the order the barrier runs them.
//! The text is made of numbers and fixed words only, so nothing needs escaping.

use std::fmt::{self, Display, Formatter, Write};

use super::TaskStatus;
use super::render::{GraphFormat, WaveId, colors, mermaid_status_classes};

/// Waves a summary draws at most; the tasks of later waves are one more node.
/// Keeps the drawing under Mermaid's default limit of 500 edges.
pub const MAX_SUMMARY_WAVES: usize = 400;

/// One wave's tasks by status, in [`TaskStatus::ALL`] order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaveTally {
    pub wave: i64,
    pub counts: [u64; 5],
}

/// What a summarised graph draws.
#[derive(Clone, Copy, Debug)]
pub struct WaveSummaryGraph<'a> {
    /// Tasks of the list.
    pub total: u64,
    /// The first waves, ascending (at most [`MAX_SUMMARY_WAVES`]).
    pub waves: &'a [WaveTally],
    /// The tasks of the waves after the last drawn one by status, when some
    /// waves were left out.
    pub later: Option<[u64; 5]>,
}

/// Renders the summary: a comment saying what it is, a node per wave (class
/// and colours of the status that matters most, see [`shown_status`]), the
/// later waves as one node, edges between consecutive nodes.
pub fn render_wave_summary(format: GraphFormat, graph: &WaveSummaryGraph) -> String {
    let mut nodes: Vec<WaveBox> = graph
        .waves
        .iter()
        .map(|w| WaveBox {
            title: format!("Wave {}", w.wave),
            id: format!("w_{}", WaveId(w.wave)),
            counts: w.counts,
        })
        .collect();
    if let Some(counts) = graph.later {
        let title = match graph.waves.last() {
            Some(last) => format!("After wave {}", last.wave),
            None => "Every wave".to_owned(),
        };
        nodes.push(WaveBox {
            title,
            id: "w_later".to_owned(),
            counts,
        });
    }
    let summary = SummaryText {
        total: graph.total,
        nodes: &nodes,
    };
    let mut out = String::new();
    let _ = match format {
        GraphFormat::Mermaid => summary.mermaid(&mut out),
        GraphFormat::Dot => summary.dot(&mut out),
    };
    out
}

/// The status a wave is drawn in: running while any runs, else pending while any
/// waits, else failed if any failed, else abandoned if any was, else done.
pub fn shown_status(counts: &[u64; 5]) -> TaskStatus {
    [
        TaskStatus::Running,
        TaskStatus::Pending,
        TaskStatus::Failed,
        TaskStatus::Abandoned,
    ]
    .into_iter()
    .find(|s| counts[s.index()] > 0)
    .unwrap_or(TaskStatus::Done)
}

struct WaveBox {
    title: String,
    id: String,
    counts: [u64; 5],
}

/// `N tasks` and `status: n, …` (statuses with none left out), the two lines of
/// a node's label after its title.
struct Counts<'a>(&'a [u64; 5]);

impl Counts<'_> {
    /// `1 task`, `N tasks`.
    fn total(&self) -> String {
        match self.0.iter().sum::<u64>() {
            1 => "1 task".to_owned(),
            n => format!("{n} tasks"),
        }
    }
}

impl Display for Counts<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for s in TaskStatus::ALL {
            let n = self.0[s.index()];
            if n > 0 {
                if !first {
                    f.write_str(", ")?;
                }
                write!(f, "{s}: {n}")?;
                first = false;
            }
        }
        Ok(())
    }
}

struct SummaryText<'a> {
    total: u64,
    nodes: &'a [WaveBox],
}

impl SummaryText<'_> {
    fn comment(&self) -> String {
        format!(
            "{} tasks in one node per wave, counted by status; edges join consecutive \
             waves. GET /v1/task-lists/{{id}}?limit= pages the tasks.",
            self.total
        )
    }

    fn edges(&self) -> impl Iterator<Item = (&str, &str)> {
        self.nodes
            .windows(2)
            .map(|pair| (pair[0].id.as_str(), pair[1].id.as_str()))
    }

    fn mermaid(&self, f: &mut String) -> fmt::Result {
        writeln!(f, "flowchart LR")?;
        writeln!(f, "  %% {}", self.comment())?;
        for n in self.nodes {
            let counts = Counts(&n.counts);
            writeln!(
                f,
                "  {}[\"{}<br/>{}<br/>{counts}\"]:::st_{}",
                n.id,
                n.title,
                counts.total(),
                shown_status(&n.counts)
            )?;
        }
        for (from, to) in self.edges() {
            writeln!(f, "  {from} --> {to}")?;
        }
        // The same classes as a graph drawn task by task.
        mermaid_status_classes(f)
    }

    fn dot(&self, f: &mut String) -> fmt::Result {
        writeln!(f, "digraph tasks {{")?;
        writeln!(f, "  // {}", self.comment())?;
        writeln!(f, "  rankdir=LR;")?;
        writeln!(f, "  node [shape=box, style=\"rounded,filled\"];")?;
        for n in self.nodes {
            let counts = Counts(&n.counts);
            let status = shown_status(&n.counts);
            let (fill, stroke) = colors(status);
            writeln!(
                f,
                "  {} [label=\"{}\\n{}\\n{counts}\", class=\"{status}\", fillcolor=\"{fill}\", color=\"{stroke}\"];",
                n.id,
                n.title,
                counts.total(),
            )?;
        }
        for (from, to) in self.edges() {
            writeln!(f, "  {from} -> {to};")?;
        }
        writeln!(f, "}}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::render::tests::MERMAID_CLASS_LINES;
    use super::*;

    fn tally(wave: i64, counts: [u64; 5]) -> WaveTally {
        WaveTally { wave, counts }
    }

    #[test]
    fn mermaid_draws_a_node_per_wave_and_the_later_waves() {
        let waves = [tally(1, [0, 2, 9_998, 0, 0]), tally(-2, [7, 0, 0, 0, 0])];
        let out = render_wave_summary(
            GraphFormat::Mermaid,
            &WaveSummaryGraph {
                total: 10_012,
                waves: &waves,
                later: Some([3, 0, 0, 1, 1]),
            },
        );
        let expected = "\
flowchart LR
  %% 10012 tasks in one node per wave, counted by status; edges join consecutive waves. GET /v1/task-lists/{id}?limit= pages the tasks.
  w_1[\"Wave 1<br/>10000 tasks<br/>running: 2, done: 9998\"]:::st_running
  w_neg_2[\"Wave -2<br/>7 tasks<br/>pending: 7\"]:::st_pending
  w_later[\"After wave -2<br/>5 tasks<br/>pending: 3, failed: 1, abandoned: 1\"]:::st_pending
  w_1 --> w_neg_2
  w_neg_2 --> w_later
"
        .to_owned()
            + MERMAID_CLASS_LINES;
        assert_eq!(out, expected);
    }

    #[test]
    fn dot_draws_the_same_nodes_without_later_waves_when_all_fit() {
        let waves = [tally(1, [0, 0, 4, 1, 0]), tally(2, [0, 0, 0, 0, 3])];
        let out = render_wave_summary(
            GraphFormat::Dot,
            &WaveSummaryGraph {
                total: 8,
                waves: &waves,
                later: None,
            },
        );
        let expected = r##"digraph tasks {
  // 8 tasks in one node per wave, counted by status; edges join consecutive waves. GET /v1/task-lists/{id}?limit= pages the tasks.
  rankdir=LR;
  node [shape=box, style="rounded,filled"];
  w_1 [label="Wave 1\n5 tasks\ndone: 4, failed: 1", class="failed", fillcolor="#fee2e2", color="#dc2626"];
  w_2 [label="Wave 2\n3 tasks\nabandoned: 3", class="abandoned", fillcolor="#fef3c7", color="#d97706"];
  w_1 -> w_2;
}
"##;
        assert_eq!(out, expected);
    }

    #[test]
    fn a_wave_shows_the_status_that_matters_most() {
        assert_eq!(shown_status(&[1, 1, 1, 1, 1]), TaskStatus::Running);
        assert_eq!(shown_status(&[1, 0, 1, 1, 1]), TaskStatus::Pending);
        assert_eq!(shown_status(&[0, 0, 1, 1, 1]), TaskStatus::Failed);
        assert_eq!(shown_status(&[0, 0, 1, 0, 1]), TaskStatus::Abandoned);
        assert_eq!(shown_status(&[0, 0, 1, 0, 0]), TaskStatus::Done);
    }
}

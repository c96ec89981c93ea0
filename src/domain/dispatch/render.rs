//! Text rendering of a task list's DAG, waves as ranks
//! (`GET /v1/task-lists/{id}/graph?format=mermaid|dot`).
//!
//! Task ids and personas are planner-supplied and may contain anything, so they
//! never become graph identifiers: node ids are generated (`n0, n1, …` by slice
//! position) and the text only appears inside escaped labels. Output is a pure
//! function of the input (waves ascending, nodes and edges in index order).

use std::collections::{BTreeMap, HashSet};
use std::fmt::{self, Display, Formatter, Write};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::TaskStatus;

/// `?format=` of the graph endpoint.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum GraphFormat {
    /// Mermaid `flowchart` (renders inline on GitHub and in most docs tools).
    #[default]
    Mermaid,
    /// Graphviz DOT.
    Dot,
}

crate::domain::wire_strings!(GraphFormat, "graph format", {
    Mermaid => "mermaid",
    Dot => "dot",
});

impl GraphFormat {
    /// Both formats are served as text (docs/spec/api.md).
    pub const fn content_type(self) -> &'static str {
        "text/plain; charset=utf-8"
    }
}

/// One task to draw; `depends_on` holds positions in the same `nodes` slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphNode<'a> {
    pub task_id: &'a str,
    pub persona: &'a str,
    pub wave: i64,
    pub status: TaskStatus,
    pub depends_on: &'a [usize],
}

/// Renders the DAG. Edges run dependency → dependent. Out-of-range dependency
/// indices are dropped and duplicates drawn once; cycles and self-loops in corrupt
/// data are drawn as they are (the picture should show the data, not hide it).
pub fn render_graph(format: GraphFormat, nodes: &[GraphNode]) -> String {
    match format {
        GraphFormat::Mermaid => Mermaid(nodes).to_string(),
        GraphFormat::Dot => Dot(nodes).to_string(),
    }
}

/// Fill and stroke colours, shared by both formats so they look alike.
pub(super) const fn colors(status: TaskStatus) -> (&'static str, &'static str) {
    match status {
        TaskStatus::Pending => ("#f3f4f6", "#6b7280"),
        TaskStatus::Running => ("#dbeafe", "#2563eb"),
        TaskStatus::Done => ("#dcfce7", "#16a34a"),
        TaskStatus::Failed => ("#fee2e2", "#dc2626"),
        TaskStatus::Abandoned => ("#fef3c7", "#d97706"),
    }
}

/// Node indices grouped by wave, both ascending.
/// Mermaid's `classDef` line for each status, always all five so the output's
/// shape does not depend on the data. Prefixed class names: bare `done`/`end`-like
/// words risk clashing with Mermaid keywords.
pub(super) fn mermaid_status_classes(f: &mut impl Write) -> fmt::Result {
    for s in TaskStatus::ALL {
        let (fill, stroke) = colors(s);
        write!(
            f,
            "  classDef st_{s} fill:{fill},stroke:{stroke},color:#111827"
        )?;
        if s == TaskStatus::Abandoned {
            f.write_str(",stroke-dasharray:5 5")?;
        }
        f.write_char('\n')?;
    }
    Ok(())
}

fn by_wave(nodes: &[GraphNode]) -> BTreeMap<i64, Vec<usize>> {
    let mut waves: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        waves.entry(n.wave).or_default().push(i);
    }
    waves
}

/// `(dependency, dependent)` pairs in index order, valid and de-duplicated.
fn edges<'a>(nodes: &'a [GraphNode<'a>]) -> impl Iterator<Item = (usize, usize)> + 'a {
    nodes.iter().enumerate().flat_map(move |(i, n)| {
        let mut seen = HashSet::new();
        n.depends_on
            .iter()
            .copied()
            .filter(move |&d| d < nodes.len() && seen.insert(d))
            .map(move |d| (d, i))
    })
}

/// A wave number as an identifier fragment: `-1` is not a legal id character.
pub(super) struct WaveId(pub(super) i64);

impl Display for WaveId {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.0 < 0 {
            // unsigned_abs: i64::MIN has no positive i64 counterpart.
            write!(f, "neg_{}", self.0.unsigned_abs())
        } else {
            write!(f, "{}", self.0)
        }
    }
}

struct Mermaid<'a>(&'a [GraphNode<'a>]);

impl Display for Mermaid<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let nodes = self.0;
        // LR matches DOT's rankdir=LR: waves read left to right.
        writeln!(f, "flowchart LR")?;
        for (wave, members) in by_wave(nodes) {
            writeln!(f, "  subgraph wave_{} [\"Wave {wave}\"]", WaveId(wave))?;
            for i in members {
                if let Some(n) = nodes.get(i) {
                    writeln!(
                        f,
                        "    n{i}[\"{}<br/>{}\"]:::st_{}",
                        MermaidText(n.task_id),
                        MermaidText(n.persona),
                        n.status
                    )?;
                }
            }
            writeln!(f, "  end")?;
        }
        for (d, i) in edges(nodes) {
            writeln!(f, "  n{d} --> n{i}")?;
        }
        mermaid_status_classes(f)
    }
}

/// Text inside a quoted Mermaid label. Everything but letters, digits and a few
/// inert punctuation marks becomes a numeric entity `#NN;`, which Mermaid turns
/// into an HTML character reference: quotes, brackets, `<script>`, `#`, `;`,
/// pipes and newlines can then neither end the label nor inject markup.
struct MermaidText<'a>(&'a str);

impl Display for MermaidText<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_alphanumeric() || matches!(c, ' ' | '-' | '_' | '.' | '/' | ':' | ',') {
                f.write_char(c)?;
            } else {
                write!(f, "#{};", u32::from(c))?;
            }
        }
        Ok(())
    }
}

struct Dot<'a>(&'a [GraphNode<'a>]);

impl Display for Dot<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let nodes = self.0;
        writeln!(f, "digraph tasks {{")?;
        writeln!(f, "  rankdir=LR;")?;
        writeln!(f, "  node [shape=box, style=\"rounded,filled\"];")?;
        for (wave, members) in by_wave(nodes) {
            // A cluster draws the wave's box and title; rank=same keeps its tasks
            // in one column even when edges would pull them apart.
            writeln!(f, "  subgraph cluster_wave_{} {{", WaveId(wave))?;
            writeln!(f, "    label=\"Wave {wave}\";")?;
            for &i in &members {
                if let Some(n) = nodes.get(i) {
                    let (fill, stroke) = colors(n.status);
                    let style = match n.status {
                        TaskStatus::Abandoned => ", style=\"rounded,filled,dashed\"",
                        _ => "",
                    };
                    writeln!(
                        f,
                        "    n{i} [label=\"{}\\n{}\", class=\"{}\", fillcolor=\"{fill}\", color=\"{stroke}\"{style}];",
                        DotText(n.task_id),
                        DotText(n.persona),
                        n.status
                    )?;
                }
            }
            f.write_str("    { rank=same;")?;
            for i in members {
                write!(f, " n{i};")?;
            }
            writeln!(f, " }}")?;
            writeln!(f, "  }}")?;
        }
        for (d, i) in edges(nodes) {
            writeln!(f, "  n{d} -> n{i};")?;
        }
        writeln!(f, "}}")
    }
}

/// Text inside a DOT double-quoted string. Backslash is doubled (otherwise `\N`,
/// `\G`, `\l` … are label escapes), `"` is escaped, line breaks become `\n` (a CRLF
/// pair is one break), and other control characters, which DOT has no escape for,
/// become U+FFFD so they stay visible without corrupting the file.
struct DotText<'a>(&'a str);

impl Display for DotText<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut chars = self.0.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                '\r' => {
                    chars.next_if_eq(&'\n');
                    f.write_str("\\n")?;
                }
                c if c.is_control() => f.write_char('\u{FFFD}')?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::TaskStatus::*;
    use super::*;

    /// The `classDef` lines that end every Mermaid drawing, task by task or wave
    /// by wave.
    pub(in crate::domain::dispatch) const MERMAID_CLASS_LINES: &str =
        "  classDef st_pending fill:#f3f4f6,stroke:#6b7280,color:#111827
  classDef st_running fill:#dbeafe,stroke:#2563eb,color:#111827
  classDef st_done fill:#dcfce7,stroke:#16a34a,color:#111827
  classDef st_failed fill:#fee2e2,stroke:#dc2626,color:#111827
  classDef st_abandoned fill:#fef3c7,stroke:#d97706,color:#111827,stroke-dasharray:5 5
";

    const NASTY: &str = "a\"b]c\nd<script>alert(1)</script>\\N;#|";

    fn sample<'a>() -> Vec<GraphNode<'a>> {
        vec![
            GraphNode {
                task_id: "t-1",
                persona: "dev",
                wave: 1,
                status: Done,
                depends_on: &[],
            },
            GraphNode {
                task_id: NASTY,
                persona: "re\"view",
                wave: 2,
                status: Running,
                depends_on: &[0, 0, 9],
            },
            GraphNode {
                task_id: "t-3",
                persona: "dev",
                wave: 2,
                status: Pending,
                depends_on: &[0],
            },
            GraphNode {
                task_id: "t-4",
                persona: "qa",
                wave: 3,
                status: Abandoned,
                depends_on: &[1, 2],
            },
        ]
    }

    #[test]
    fn mermaid_full_output() {
        let out = render_graph(GraphFormat::Mermaid, &sample());
        let expected = "\
flowchart LR
  subgraph wave_1 [\"Wave 1\"]
    n0[\"t-1<br/>dev\"]:::st_done
  end
  subgraph wave_2 [\"Wave 2\"]
    n1[\"a#34;b#93;c#10;d#60;script#62;alert#40;1#41;#60;/script#62;#92;N#59;#35;#124;<br/>re#34;view\"]:::st_running
    n2[\"t-3<br/>dev\"]:::st_pending
  end
  subgraph wave_3 [\"Wave 3\"]
    n3[\"t-4<br/>qa\"]:::st_abandoned
  end
  n0 --> n1
  n0 --> n2
  n1 --> n3
  n2 --> n3
"
        .to_owned()
            + MERMAID_CLASS_LINES;
        assert_eq!(out, expected);
    }

    #[test]
    fn mermaid_labels_cannot_break_out() {
        let out = render_graph(GraphFormat::Mermaid, &sample());
        assert!(!out.contains("<script"), "{out}");
        assert_eq!(out.lines().count(), 20, "a raw newline leaked into a label");
        for line in out
            .lines()
            .filter(|l| l.trim_start().starts_with('n') && l.contains('['))
        {
            // Exactly the two delimiting quotes and one `[`/`]` pair per node line.
            assert_eq!(line.matches('"').count(), 2, "{line}");
            assert_eq!(line.matches(']').count(), 1, "{line}");
        }
    }

    #[test]
    fn dot_full_output() {
        let out = render_graph(GraphFormat::Dot, &sample());
        let expected = r##"digraph tasks {
  rankdir=LR;
  node [shape=box, style="rounded,filled"];
  subgraph cluster_wave_1 {
    label="Wave 1";
    n0 [label="t-1\ndev", class="done", fillcolor="#dcfce7", color="#16a34a"];
    { rank=same; n0; }
  }
  subgraph cluster_wave_2 {
    label="Wave 2";
    n1 [label="a\"b]c\nd<script>alert(1)</script>\\N;#|\nre\"view", class="running", fillcolor="#dbeafe", color="#2563eb"];
    n2 [label="t-3\ndev", class="pending", fillcolor="#f3f4f6", color="#6b7280"];
    { rank=same; n1; n2; }
  }
  subgraph cluster_wave_3 {
    label="Wave 3";
    n3 [label="t-4\nqa", class="abandoned", fillcolor="#fef3c7", color="#d97706", style="rounded,filled,dashed"];
    { rank=same; n3; }
  }
  n0 -> n1;
  n0 -> n2;
  n1 -> n3;
  n2 -> n3;
}
"##;
        assert_eq!(out, expected);
    }

    #[test]
    fn dot_escapes_line_breaks_and_controls() {
        assert_eq!(
            DotText("a\r\nb\rc\td\u{7}").to_string(),
            "a\\nb\\nc\u{FFFD}d\u{FFFD}"
        );
        assert_eq!(DotText("\\\"").to_string(), "\\\\\\\"");
    }

    #[test]
    fn negative_and_extreme_waves_get_safe_ids() {
        let nodes = [
            GraphNode {
                task_id: "x",
                persona: "p",
                wave: i64::MIN,
                status: Failed,
                depends_on: &[0],
            },
            GraphNode {
                task_id: "y",
                persona: "p",
                wave: -1,
                status: Pending,
                depends_on: &[],
            },
        ];
        let m = render_graph(GraphFormat::Mermaid, &nodes);
        assert!(
            m.contains("subgraph wave_neg_9223372036854775808 [\"Wave -9223372036854775808\"]"),
            "{m}"
        );
        assert!(m.contains("subgraph wave_neg_1 [\"Wave -1\"]"), "{m}");
        assert!(m.contains("n0 --> n0"), "self-loop drawn as data: {m}");
        let d = render_graph(GraphFormat::Dot, &nodes);
        assert!(d.contains("subgraph cluster_wave_neg_1 {"), "{d}");
    }

    #[test]
    fn empty_graph_is_valid_and_deterministic() {
        assert_eq!(
            render_graph(GraphFormat::Dot, &[]),
            "digraph tasks {\n  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\"];\n}\n"
        );
        assert!(render_graph(GraphFormat::Mermaid, &[]).starts_with("flowchart LR\n  classDef"));
        assert_eq!(
            render_graph(GraphFormat::Mermaid, &sample()),
            render_graph(GraphFormat::Mermaid, &sample())
        );
    }

    #[test]
    fn format_strings() {
        assert_eq!(GraphFormat::parse("dot"), Some(GraphFormat::Dot));
        assert_eq!(GraphFormat::parse("mermaid"), Some(GraphFormat::Mermaid));
        assert_eq!(GraphFormat::parse("svg"), None);
        for g in GraphFormat::ALL {
            assert_eq!(serde_json::to_value(g).unwrap(), g.as_str());
        }
    }
}

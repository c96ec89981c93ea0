//! The directed-graph toolkit shared by task-list gating and loop plans, on top of
//! `petgraph`.
//!
//! Nodes are dense indices `0..node_count`; callers keep their own id ↔ index tables.
//! The standard algorithms are petgraph's iterative ones — `kosaraju_scc` and
//! `toposort` — never the recursive `tarjan_scc`, so a 100,000-node chain from a
//! client cannot overflow the call stack. What is specific to plangate lives here:
//! the closed walk that a cycle report shows, and longest-path levels.
//!
//! Edge direction is the caller's choice and only matters for reading results: gating
//! adds `task → dependency` edges (so a cycle walk reads along `depends_on`), loop plans
//! add `dependency → task` edges (so [`DiGraph::longest_path_levels`] gives roots level 1).

use std::cmp::Ordering;
use std::collections::VecDeque;

use petgraph::algo::{kosaraju_scc, toposort};
use petgraph::graph::NodeIndex;

type Inner = petgraph::graph::DiGraph<(), (), u32>;

/// Errors building a graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("edge {from} -> {to} names a node outside 0..{node_count}")]
    NodeOutOfRange {
        from: usize,
        to: usize,
        node_count: usize,
    },
}

/// The graph has a cycle, so no topological order exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("graph has a cycle through node {node}; no topological order exists")]
pub struct CycleDetected {
    /// A node on a cycle.
    pub node: usize,
}

/// A directed graph (a petgraph adjacency list without weights).
#[derive(Debug, Clone)]
pub struct DiGraph {
    graph: Inner,
}

/// Strongly connected components: `component_of[v]` numbers `v`'s component.
///
/// Components are numbered in a reverse topological order of the condensation (the
/// order `kosaraju_scc` returns them in): for an edge `u → v` between components,
/// `component_of[v] < component_of[u]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Components {
    pub component_of: Vec<usize>,
    pub count: usize,
}

impl Components {
    /// Members of every component, each list in ascending node order.
    pub fn members(&self) -> Vec<Vec<usize>> {
        let mut members = vec![Vec::new(); self.count];
        for (node, &component) in self.component_of.iter().enumerate() {
            members[component].push(node);
        }
        members
    }
}

/// One reported cycle: a strongly connected component of two or more nodes, or a
/// self-loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// A closed walk: each node has an edge to the next and the last has an edge back
    /// to the first. It starts at the lowest-ranked member and passes through every
    /// member of the component; a node appears more than once only when no simple
    /// cycle covers the component (see [`DiGraph::cycles_in`] for the one exception).
    pub path: Vec<usize>,
    /// Every node of the component (ascending); `[v]` for a self-loop.
    pub members: Vec<usize>,
}

const UNSET: usize = usize::MAX;

/// Work allowed for one component's walk, beyond a few passes over it. Some
/// components need a walk quadratic in their size (a long chain whose every node
/// has a side loop back to the start); the budget keeps a hostile list from buying
/// seconds of CPU, and such a walk is cut short (its members are still listed).
const WALK_EXTRA_WORK: usize = 2_000_000;

impl DiGraph {
    /// Builds a graph from one successor list per node.
    pub fn from_adjacency(adjacency: &[Vec<usize>]) -> Result<Self, GraphError> {
        let edges = adjacency
            .iter()
            .enumerate()
            .flat_map(|(from, successors)| successors.iter().map(move |&to| (from, to)));
        Self::from_edges(adjacency.len(), edges)
    }

    /// Builds a graph from `(from, to)` pairs.
    pub fn from_edges(
        node_count: usize,
        edges: impl IntoIterator<Item = (usize, usize)>,
    ) -> Result<Self, GraphError> {
        let edges = edges.into_iter();
        let mut graph = Inner::with_capacity(node_count, edges.size_hint().0);
        for _ in 0..node_count {
            graph.add_node(());
        }
        for (from, to) in edges {
            if from >= node_count || to >= node_count {
                return Err(GraphError::NodeOutOfRange {
                    from,
                    to,
                    node_count,
                });
            }
            graph.add_edge(NodeIndex::new(from), NodeIndex::new(to), ());
        }
        Ok(Self { graph })
    }

    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    pub fn edge_count(&self) -> usize {
        self.graph.edge_count()
    }

    /// Successors of `node`, in no particular order (empty for an out-of-range node).
    pub fn successors(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        let neighbors =
            (node < self.node_count()).then(|| self.graph.neighbors(NodeIndex::new(node)));
        neighbors.into_iter().flatten().map(NodeIndex::index)
    }

    /// Whether the edge `from → to` exists.
    pub fn has_edge(&self, from: usize, to: usize) -> bool {
        from < self.node_count()
            && to < self.node_count()
            && self
                .graph
                .contains_edge(NodeIndex::new(from), NodeIndex::new(to))
    }

    /// petgraph's iterative Kosaraju.
    pub fn strongly_connected_components(&self) -> Components {
        let components = kosaraju_scc(&self.graph);
        let mut component_of = vec![UNSET; self.node_count()];
        for (number, members) in components.iter().enumerate() {
            for member in members {
                component_of[member.index()] = number;
            }
        }
        Components {
            component_of,
            count: components.len(),
        }
    }

    /// Every cycle: one per strongly connected component of two or more nodes, plus
    /// one per self-loop (a self-loop inside a larger component is reported too, as
    /// its own cycle of one). Each walk starts at the member that `rank` puts first.
    ///
    /// Cycles are ordered by their smallest member index; a component's cycle comes
    /// before a self-loop on the same node.
    pub fn cycles(&self, rank: impl FnMut(usize, usize) -> Ordering) -> Vec<Cycle> {
        self.cycles_in(&self.strongly_connected_components(), rank)
    }

    /// [`DiGraph::cycles`] for callers that already hold the components (they must
    /// come from [`DiGraph::strongly_connected_components`] of this graph).
    ///
    /// Each component's walk covers all its members unless covering them would take
    /// more than a few linear passes plus [`WALK_EXTRA_WORK`] steps; only hostile,
    /// very large components get there, and their walk then stops early and closes.
    pub fn cycles_in(
        &self,
        components: &Components,
        mut rank: impl FnMut(usize, usize) -> Ordering,
    ) -> Vec<Cycle> {
        // Only components of two or more nodes get a member list: allocating one per
        // singleton would cost an allocation per node.
        let mut size = vec![0usize; components.count];
        for &component in &components.component_of {
            size[component] += 1;
        }
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); components.count];
        for (node, &component) in components.component_of.iter().enumerate() {
            if size[component] >= 2 {
                members[component].push(node);
            }
        }
        let mut cycles = Vec::new();
        // Scratch: a node's position inside its component's member list.
        let mut local_of = vec![UNSET; self.node_count()];
        for members in members.into_iter().filter(|members| !members.is_empty()) {
            let path =
                self.covering_walk(&members, &components.component_of, &mut local_of, &mut rank);
            cycles.push(Cycle { path, members });
        }
        for edge in self.graph.raw_edges() {
            if edge.source() == edge.target() {
                let node = edge.source().index();
                cycles.push(Cycle {
                    path: vec![node],
                    members: vec![node],
                });
            }
        }
        // `members` is ascending, so `members[0]` is the smallest index; on a tie the
        // larger component (listed first) precedes the self-loop.
        cycles.sort_by_key(|cycle| {
            let smallest = cycle.members.first().copied().unwrap_or_default();
            (smallest, usize::MAX - cycle.members.len())
        });
        cycles.dedup(); // a node with two self-loop edges is one cycle
        cycles
    }

    /// A closed walk through every member of one component (two or more nodes),
    /// starting at the lowest-ranked member.
    ///
    /// Greedy: from where the walk is, go to the nearest member not yet visited
    /// (breadth-first over the component's edges, successors tried in rank order), and
    /// repeat; then return to the start along a shortest path. Each node keeps a cursor
    /// past its visited successors, so the common step "an unvisited successor exists"
    /// costs amortised O(1) and a simple cycle through the component comes out as
    /// that cycle. `local_of` is scratch space, all `UNSET` on entry and on return.
    fn covering_walk(
        &self,
        members: &[usize],
        component_of: &[usize],
        local_of: &mut [usize],
        rank: &mut impl FnMut(usize, usize) -> Ordering,
    ) -> Vec<usize> {
        let component = component_of[members[0]];
        for (local, &node) in members.iter().enumerate() {
            local_of[node] = local;
        }
        // Successors inside the component, in local numbering, in rank order; no
        // self-loops (they are reported on their own).
        let successors: Vec<Vec<usize>> = members
            .iter()
            .map(|&node| {
                let mut next: Vec<usize> = self
                    .successors(node)
                    .filter(|&s| s != node && component_of[s] == component)
                    .collect();
                next.sort_unstable_by(|&a, &b| rank(a, b));
                next.dedup();
                next.into_iter().map(|s| local_of[s]).collect()
            })
            .collect();
        for &node in members {
            local_of[node] = UNSET;
        }
        let edge_count: usize = successors.iter().map(Vec::len).sum();
        let start = (0..members.len())
            .min_by(|&a, &b| rank(members[a], members[b]))
            .unwrap_or(0);

        let mut walker = Walker {
            successors: &successors,
            visited: vec![false; members.len()],
            cursor: vec![0; members.len()],
            parent: vec![UNSET; members.len()],
            budget: 4 * (members.len() + edge_count) + WALK_EXTRA_WORK,
        };
        walker.visited[start] = true;
        let mut unvisited = members.len() - 1;
        let mut walk = vec![start];
        let mut here = start;
        while unvisited > 0 {
            let Some(steps) = walker.path_to(here, |walker, node| !walker.visited[node]) else {
                break; // budget spent: close the walk as it is
            };
            for &node in &steps {
                if !walker.visited[node] {
                    walker.visited[node] = true;
                    unvisited -= 1;
                }
            }
            here = steps.last().copied().unwrap_or(here);
            walk.extend(steps);
        }
        // Back to the start; the closing edge itself is implied.
        walker.budget = usize::MAX;
        if let Some(mut back) = walker.path_to(here, |_, node| node == start) {
            back.pop();
            walk.extend(back);
        }
        walk.into_iter().map(|local| members[local]).collect()
    }

    /// Longest-path levels: nodes without incoming edges are level 1, and every edge
    /// `u → v` forces `level[v] >= level[u] + 1`.
    pub fn longest_path_levels(&self) -> Result<Vec<usize>, CycleDetected> {
        let order = toposort(&self.graph, None).map_err(|cycle| CycleDetected {
            node: cycle.node_id().index(),
        })?;
        let mut level = vec![1usize; self.node_count()];
        for node in order {
            let next = level[node.index()] + 1;
            for successor in self.graph.neighbors(node) {
                level[successor.index()] = level[successor.index()].max(next);
            }
        }
        Ok(level)
    }
}

/// Breadth-first searches inside one component for [`DiGraph::covering_walk`].
struct Walker<'a> {
    successors: &'a [Vec<usize>],
    visited: Vec<bool>,
    /// `successors[v][..cursor[v]]` are all visited (visits are never undone).
    cursor: Vec<usize>,
    /// Scratch for one search, all `UNSET` between searches.
    parent: Vec<usize>,
    /// Steps left; a search that runs out answers `None`.
    budget: usize,
}

impl Walker<'_> {
    /// The shortest path from `from` (exclusive) to the nearest node that `wanted`
    /// accepts (inclusive); `wanted` is asked of successors only.
    fn path_to(
        &mut self,
        from: usize,
        wanted: impl Fn(&Self, usize) -> bool,
    ) -> Option<Vec<usize>> {
        let mut queue = VecDeque::from([from]);
        let mut touched = vec![from];
        self.parent[from] = from;
        let mut found = None;
        'search: while let Some(node) = queue.pop_front() {
            // Unvisited successors first, through the cursor (amortised O(1)).
            while let Some(&next) = self.successors[node].get(self.cursor[node]) {
                if !self.visited[next] {
                    break;
                }
                self.cursor[node] += 1;
            }
            if let Some(&next) = self.successors[node].get(self.cursor[node])
                && wanted(self, next)
            {
                found = Some((node, next));
                break 'search;
            }
            for &next in &self.successors[node] {
                if self.budget == 0 {
                    break 'search;
                }
                self.budget -= 1;
                if wanted(self, next) {
                    found = Some((node, next));
                    break 'search;
                }
                if self.parent[next] == UNSET {
                    self.parent[next] = node;
                    touched.push(next);
                    queue.push_back(next);
                }
            }
        }
        let path = found.map(|(mut node, last)| {
            let mut path = vec![last];
            while node != from {
                path.push(node);
                node = self.parent[node];
            }
            path.reverse();
            path
        });
        for node in touched {
            self.parent[node] = UNSET;
        }
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(node_count: usize, edges: &[(usize, usize)]) -> DiGraph {
        DiGraph::from_edges(node_count, edges.iter().copied()).unwrap()
    }

    /// A closed walk along real edges (a set of edges: `has_edge` is linear in the
    /// out-degree, too slow for the 50,000-edge hub below in a debug build).
    fn assert_is_closed_walk(graph: &DiGraph, path: &[usize]) {
        assert!(!path.is_empty());
        let edges: std::collections::HashSet<(usize, usize)> = (0..graph.node_count())
            .flat_map(|from| graph.successors(from).map(move |to| (from, to)))
            .collect();
        for pair in path.windows(2) {
            assert!(
                edges.contains(&(pair[0], pair[1])),
                "missing edge {pair:?} in {path:?}"
            );
        }
        let (first, last) = (path[0], path[path.len() - 1]);
        assert!(
            edges.contains(&(last, first)),
            "no closing edge in {path:?}"
        );
    }

    /// The one cycle of `g`, by node order.
    fn only_cycle(g: &DiGraph) -> Cycle {
        let mut cycles = g.cycles(|a, b| a.cmp(&b));
        assert_eq!(cycles.len(), 1);
        cycles.remove(0)
    }

    fn distinct(path: &[usize]) -> Vec<usize> {
        let mut nodes = path.to_vec();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    #[test]
    fn out_of_range_edges_are_rejected() {
        assert_eq!(
            DiGraph::from_edges(2, [(0, 2)]).unwrap_err(),
            GraphError::NodeOutOfRange {
                from: 0,
                to: 2,
                node_count: 2
            }
        );
        let g = DiGraph::from_adjacency(&[vec![1], vec![]]).unwrap();
        assert!(g.has_edge(0, 1) && !g.has_edge(1, 0) && !g.has_edge(0, 9));
        assert_eq!(g.successors(9).count(), 0);
        assert_eq!(g.edge_count(), 1);
    }

    #[test]
    fn components_of_a_dag_are_singletons_in_reverse_topological_order() {
        let g = graph(3, &[(0, 1), (1, 2)]);
        let components = g.strongly_connected_components();
        assert_eq!(components.count, 3);
        assert!(components.component_of[2] < components.component_of[1]);
        assert!(components.component_of[1] < components.component_of[0]);
        assert!(g.cycles(|a, b| a.cmp(&b)).is_empty());
    }

    #[test]
    fn component_with_tail_excludes_the_tail() {
        // 3 depends on the cycle 0 -> 1 -> 2 -> 0 but is not on it.
        let g = graph(4, &[(3, 0), (0, 1), (1, 2), (2, 0)]);
        let cycle = only_cycle(&g);
        assert_eq!(cycle.members, vec![0, 1, 2]);
        assert_eq!(cycle.path, vec![0, 1, 2]);
    }

    #[test]
    fn a_chord_does_not_shorten_the_walk() {
        // a -> b -> c -> a plus the chord a -> c: the walk must still visit b.
        let g = graph(3, &[(0, 1), (1, 2), (2, 0), (0, 2)]);
        let cycle = only_cycle(&g);
        assert_eq!(cycle.path, vec![0, 1, 2]);
        // The same when the chord is tried first.
        let cycles = g.cycles(|a, b| (a == 2).cmp(&(b == 2)).reverse().then(a.cmp(&b)));
        assert_eq!(cycles[0].path[0], 2);
        assert_eq!(distinct(&cycles[0].path), vec![0, 1, 2]);
        assert_is_closed_walk(&g, &cycles[0].path);
    }

    #[test]
    fn a_figure_eight_is_walked_through_its_hub_twice() {
        // 0 -> 1 -> 0 and 1 -> 2 -> 3 -> 1: no simple cycle covers it.
        let g = graph(4, &[(0, 1), (1, 0), (1, 2), (2, 3), (3, 1)]);
        let cycle = only_cycle(&g);
        assert_eq!(cycle.members, vec![0, 1, 2, 3]);
        assert_eq!(cycle.path, vec![0, 1, 2, 3, 1]);
        assert_is_closed_walk(&g, &cycle.path);
        // Starting at the lowest-ranked member, here 3.
        let cycles = g.cycles(|a, b| (a == 3).cmp(&(b == 3)).reverse().then(a.cmp(&b)));
        assert_eq!(cycles[0].path[0], 3);
        assert_eq!(distinct(&cycles[0].path), vec![0, 1, 2, 3]);
        assert_is_closed_walk(&g, &cycles[0].path);
    }

    #[test]
    fn self_loops_are_cycles_of_one_even_inside_a_component() {
        let g = graph(3, &[(0, 0), (1, 2), (2, 1), (2, 2), (2, 2)]);
        let cycles = g.cycles(|a, b| a.cmp(&b));
        let paths: Vec<_> = cycles.iter().map(|c| c.path.clone()).collect();
        assert_eq!(paths, vec![vec![0], vec![1, 2], vec![2]]);
    }

    #[test]
    fn hundred_thousand_node_chain_and_ring_need_no_recursion() {
        let n = 100_000;
        let chain = graph(n, &(0..n - 1).map(|v| (v, v + 1)).collect::<Vec<_>>());
        assert_eq!(chain.strongly_connected_components().count, n);
        assert_eq!(chain.longest_path_levels().unwrap()[n - 1], n);

        let ring = graph(n, &(0..n).map(|v| (v, (v + 1) % n)).collect::<Vec<_>>());
        let cycle = only_cycle(&ring);
        assert_eq!(cycle.path, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn a_big_star_is_walked_in_linear_time() {
        // Hub 0 <-> every other node: the walk is 0, 1, 0, 2, 0, 3, ...
        let n = 50_000;
        let edges: Vec<_> = (1..n).flat_map(|v| [(0, v), (v, 0)]).collect();
        let g = graph(n, &edges);
        let cycle = only_cycle(&g);
        assert_eq!(cycle.path.len(), 2 * (n - 1));
        assert_eq!(&cycle.path[..4], &[0, 1, 0, 2]);
        assert_is_closed_walk(&g, &cycle.path);
    }

    #[test]
    fn a_hostile_component_stops_within_its_budget() {
        // A chain 0 -> 1 -> ... -> m with a side node s_i per chain node: i -> s_i -> 0.
        // Covering it needs a walk of about m²/2 steps; the budget closes it early.
        let m = 40_000;
        let mut edges: Vec<_> = (0..m).map(|v| (v, v + 1)).collect();
        edges.extend((0..=m).flat_map(|v| [(v, m + 1 + v), (m + 1 + v, 0)]));
        let g = graph(2 * m + 2, &edges);
        let cycle = only_cycle(&g);
        assert_eq!(cycle.members.len(), 2 * m + 2);
        assert_is_closed_walk(&g, &cycle.path);
        assert!(cycle.path.len() < 10 * WALK_EXTRA_WORK);
    }

    #[test]
    fn many_small_components_stay_linear() {
        let pairs = 50_000;
        let edges: Vec<_> = (0..pairs)
            .flat_map(|p| [(2 * p, 2 * p + 1), (2 * p + 1, 2 * p)])
            .collect();
        let g = graph(2 * pairs, &edges);
        let cycles = g.cycles(|a, b| b.cmp(&a));
        assert_eq!(cycles.len(), pairs);
        assert_eq!(cycles[0].path, vec![1, 0]);
    }

    #[test]
    fn levels() {
        let g = graph(4, &[(0, 2), (1, 2), (2, 3), (0, 3)]);
        assert_eq!(g.longest_path_levels().unwrap(), vec![1, 1, 2, 3]);
        let cyclic = graph(3, &[(0, 1), (1, 0), (1, 2)]);
        assert!(cyclic.longest_path_levels().is_err());
    }
}

//! The directed-graph toolkit shared by task-list gating and loop plans.
//!
//! Nodes are dense indices `0..node_count`; callers keep their own id ↔ index tables.
//! Every algorithm here is iterative (explicit stacks and queues), so a 100,000-node
//! chain cannot overflow the call stack, and runs in O(nodes + edges).
//!
//! Edge direction is the caller's choice and only matters for reading results: gating
//! adds `task → dependency` edges (so a cycle path reads along `depends_on`), loop plans
//! add `dependency → task` edges (so [`DiGraph::longest_path_levels`] gives roots level 1).

use std::cmp::Ordering;
use std::collections::VecDeque;

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
#[error("graph has a cycle through {unordered_nodes} node(s); no topological order exists")]
pub struct CycleDetected {
    /// Nodes left over by Kahn's algorithm: on a cycle or downstream of one.
    pub unordered_nodes: usize,
}

/// A directed graph in compressed adjacency form (one `Vec` for all edges).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiGraph {
    /// Successors of node `v` are `targets[offsets[v]..offsets[v + 1]]`.
    offsets: Vec<usize>,
    targets: Vec<usize>,
}

/// Strongly connected components: `component_of[v]` numbers `v`'s component.
///
/// Components are numbered in Tarjan completion order, i.e. a reverse topological
/// order of the condensation: for an edge `u → v` between components,
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
    /// A simple cycle in path order: each node has an edge to the next and the last
    /// has an edge back to the first. Starts at the lowest-ranked member.
    pub path: Vec<usize>,
    /// Every node of the component (ascending); `[v]` for a self-loop.
    pub members: Vec<usize>,
}

const UNSET: usize = usize::MAX;

impl DiGraph {
    /// Builds a graph from one successor list per node.
    pub fn from_adjacency(adjacency: &[Vec<usize>]) -> Result<Self, GraphError> {
        let edges = adjacency
            .iter()
            .enumerate()
            .flat_map(|(from, successors)| successors.iter().map(move |&to| (from, to)));
        Self::from_edges(adjacency.len(), edges)
    }

    /// Builds a graph from `(from, to)` pairs; successor order follows edge order.
    pub fn from_edges(
        node_count: usize,
        edges: impl IntoIterator<Item = (usize, usize)>,
    ) -> Result<Self, GraphError> {
        let edges: Vec<(usize, usize)> = edges.into_iter().collect();
        let mut offsets = vec![0usize; node_count + 1];
        for &(from, to) in &edges {
            if from >= node_count || to >= node_count {
                return Err(GraphError::NodeOutOfRange {
                    from,
                    to,
                    node_count,
                });
            }
            offsets[from + 1] += 1;
        }
        for node in 0..node_count {
            offsets[node + 1] += offsets[node];
        }
        // Counting sort by source keeps each node's successors in edge order.
        let mut next_slot = offsets.clone();
        let mut targets = vec![0usize; edges.len()];
        for (from, to) in edges {
            targets[next_slot[from]] = to;
            next_slot[from] += 1;
        }
        Ok(Self { offsets, targets })
    }

    pub fn node_count(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn edge_count(&self) -> usize {
        self.targets.len()
    }

    /// Successors of `node` (empty for an out-of-range node).
    pub fn successors(&self, node: usize) -> &[usize] {
        match (self.offsets.get(node), self.offsets.get(node + 1)) {
            (Some(&start), Some(&end)) => &self.targets[start..end],
            _ => &[],
        }
    }

    /// Whether the edge `from → to` exists (linear in `from`'s out-degree).
    pub fn has_edge(&self, from: usize, to: usize) -> bool {
        self.successors(from).contains(&to)
    }

    pub fn has_self_loop(&self, node: usize) -> bool {
        self.has_edge(node, node)
    }

    /// Tarjan's algorithm with an explicit call stack.
    pub fn strongly_connected_components(&self) -> Components {
        let node_count = self.node_count();
        let mut order = vec![UNSET; node_count]; // discovery number
        let mut low_link = vec![0usize; node_count];
        let mut component_of = vec![UNSET; node_count];
        let mut tarjan_stack: Vec<usize> = Vec::new();
        // (node, position of the next successor to explore)
        let mut call_stack: Vec<(usize, usize)> = Vec::new();
        let mut next_order = 0usize;
        let mut count = 0usize;

        for root in 0..node_count {
            if order[root] != UNSET {
                continue;
            }
            order[root] = next_order;
            low_link[root] = next_order;
            next_order += 1;
            tarjan_stack.push(root);
            call_stack.push((root, self.offsets[root]));

            while let Some(frame) = call_stack.last_mut() {
                let node = frame.0;
                if frame.1 < self.offsets[node + 1] {
                    let successor = self.targets[frame.1];
                    frame.1 += 1;
                    if order[successor] == UNSET {
                        order[successor] = next_order;
                        low_link[successor] = next_order;
                        next_order += 1;
                        tarjan_stack.push(successor);
                        call_stack.push((successor, self.offsets[successor]));
                    } else if component_of[successor] == UNSET {
                        // Still on the Tarjan stack: part of the component being built.
                        low_link[node] = low_link[node].min(order[successor]);
                    }
                    continue;
                }
                call_stack.pop();
                if let Some(&(parent, _)) = call_stack.last() {
                    low_link[parent] = low_link[parent].min(low_link[node]);
                }
                if low_link[node] == order[node] {
                    while let Some(member) = tarjan_stack.pop() {
                        component_of[member] = count;
                        if member == node {
                            break;
                        }
                    }
                    count += 1;
                }
            }
        }
        Components {
            component_of,
            count,
        }
    }

    /// Every cycle: one per strongly connected component of two or more nodes, plus
    /// one per self-loop (a self-loop inside a larger component is reported too, as
    /// its own cycle of one). Each path starts at the member that `rank` puts first.
    ///
    /// Cycles are ordered by their smallest member index; a component's cycle comes
    /// before a self-loop on the same node.
    pub fn cycles(&self, rank: impl FnMut(usize, usize) -> Ordering) -> Vec<Cycle> {
        self.cycles_in(&self.strongly_connected_components(), rank)
    }

    /// [`DiGraph::cycles`] for callers that already hold the components (they must
    /// come from [`DiGraph::strongly_connected_components`] of this graph).
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
        let mut parent = vec![UNSET; self.node_count()];
        for members in members.into_iter().filter(|members| !members.is_empty()) {
            let Some(start) = members.iter().copied().min_by(|&a, &b| rank(a, b)) else {
                continue;
            };
            let path = self.cycle_through(start, &components.component_of, &mut parent);
            cycles.push(Cycle { path, members });
        }
        for node in 0..self.node_count() {
            if self.has_self_loop(node) {
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
        cycles
    }

    /// Shortest cycle of length ≥ 2 through `start` inside its component (breadth-first
    /// search, so the path is simple). `parent` is scratch space of `node_count`
    /// entries, all `UNSET` on entry and on return — reusing it keeps the total work
    /// linear over all components.
    fn cycle_through(
        &self,
        start: usize,
        component_of: &[usize],
        parent: &mut [usize],
    ) -> Vec<usize> {
        let component = component_of[start];
        let mut visited = vec![start];
        let mut queue = VecDeque::from([start]);
        parent[start] = start;
        let mut closing_node = None;
        'search: while let Some(node) = queue.pop_front() {
            for &successor in self.successors(node) {
                if component_of[successor] != component {
                    continue;
                }
                if successor == start {
                    if node != start {
                        closing_node = Some(node);
                        break 'search;
                    }
                    continue; // a self-loop is reported separately
                }
                if parent[successor] == UNSET {
                    parent[successor] = node;
                    visited.push(successor);
                    queue.push_back(successor);
                }
            }
        }
        let mut path = Vec::new();
        if let Some(mut node) = closing_node {
            while node != start {
                path.push(node);
                node = parent[node];
            }
        }
        path.push(start);
        path.reverse();
        for node in visited {
            parent[node] = UNSET;
        }
        path
    }

    /// Kahn's algorithm: every edge `u → v` has `u` before `v`. Among ready nodes the
    /// lowest index goes first, so the order is deterministic.
    pub fn topological_order(&self) -> Result<Vec<usize>, CycleDetected> {
        let node_count = self.node_count();
        let mut in_degree = vec![0usize; node_count];
        for &target in &self.targets {
            in_degree[target] += 1;
        }
        let mut ready: VecDeque<usize> = (0..node_count).filter(|&v| in_degree[v] == 0).collect();
        let mut order = Vec::with_capacity(node_count);
        while let Some(node) = ready.pop_front() {
            order.push(node);
            for &successor in self.successors(node) {
                in_degree[successor] -= 1;
                if in_degree[successor] == 0 {
                    ready.push_back(successor);
                }
            }
        }
        if order.len() == node_count {
            Ok(order)
        } else {
            Err(CycleDetected {
                unordered_nodes: node_count - order.len(),
            })
        }
    }

    /// Longest-path levels: nodes without incoming edges are level 1, and every edge
    /// `u → v` forces `level[v] >= level[u] + 1`.
    pub fn longest_path_levels(&self) -> Result<Vec<usize>, CycleDetected> {
        let order = self.topological_order()?;
        let mut level = vec![1usize; self.node_count()];
        for node in order {
            for &successor in self.successors(node) {
                level[successor] = level[successor].max(level[node] + 1);
            }
        }
        Ok(level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(node_count: usize, edges: &[(usize, usize)]) -> DiGraph {
        DiGraph::from_edges(node_count, edges.iter().copied()).unwrap()
    }

    fn assert_is_cycle(graph: &DiGraph, path: &[usize]) {
        assert!(!path.is_empty());
        for pair in path.windows(2) {
            assert!(
                graph.has_edge(pair[0], pair[1]),
                "missing edge {pair:?} in {path:?}"
            );
        }
        let (first, last) = (path[0], path[path.len() - 1]);
        assert!(graph.has_edge(last, first), "no closing edge in {path:?}");
        let mut distinct = path.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), path.len(), "path repeats a node: {path:?}");
    }

    #[test]
    fn out_of_range_edges_are_rejected() {
        assert_eq!(
            DiGraph::from_edges(2, [(0, 2)]),
            Err(GraphError::NodeOutOfRange {
                from: 0,
                to: 2,
                node_count: 2
            })
        );
        assert!(DiGraph::from_adjacency(&[vec![1], vec![]]).is_ok());
    }

    #[test]
    fn successors_keep_edge_order() {
        let g = DiGraph::from_adjacency(&[vec![2, 1], vec![], vec![0]]).unwrap();
        assert_eq!(g.successors(0), &[2, 1]);
        assert_eq!(g.successors(2), &[0]);
        assert_eq!(g.successors(9), &[] as &[usize]);
        assert_eq!(g.edge_count(), 3);
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
        let cycles = g.cycles(|a, b| a.cmp(&b));
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].members, vec![0, 1, 2]);
        assert_eq!(cycles[0].path, vec![0, 1, 2]);
    }

    #[test]
    fn cycle_path_starts_at_lowest_rank_and_is_a_real_cycle() {
        // Figure eight: 0 -> 1 -> 0 and 1 -> 2 -> 3 -> 1; rank prefers node 3.
        let g = graph(4, &[(0, 1), (1, 0), (1, 2), (2, 3), (3, 1)]);
        let cycles = g.cycles(|a, b| (a == 3).cmp(&(b == 3)).reverse().then(a.cmp(&b)));
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].members, vec![0, 1, 2, 3]);
        assert_eq!(cycles[0].path[0], 3);
        assert_is_cycle(&g, &cycles[0].path);
    }

    #[test]
    fn self_loops_are_cycles_of_one_even_inside_a_component() {
        let g = graph(3, &[(0, 0), (1, 2), (2, 1), (2, 2)]);
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
        let cycles = ring.cycles(|a, b| a.cmp(&b));
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].path.len(), n);
        assert_is_cycle(&ring, &cycles[0].path);
    }

    #[test]
    fn many_small_components_stay_linear() {
        // 50,000 two-cycles: a per-component O(n) reset would take ~10^10 steps.
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
    fn topological_order_and_levels() {
        let g = graph(4, &[(0, 2), (1, 2), (2, 3), (0, 3)]);
        assert_eq!(g.topological_order().unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(g.longest_path_levels().unwrap(), vec![1, 1, 2, 3]);
        let cyclic = graph(3, &[(0, 1), (1, 0), (1, 2)]);
        assert_eq!(
            cyclic.longest_path_levels(),
            Err(CycleDetected { unordered_nodes: 3 })
        );
    }
}

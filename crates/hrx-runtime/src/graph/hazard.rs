//! Hazard derivation: which recorded operations must wait for which, and the
//! fewest barriers that order them. Pure logic, no Vulkan.
//!
//! Every operation declares the byte ranges it reads and writes. Two
//! operations `i < j` conflict when they touch intersecting byte ranges of one
//! allocation and at least one of them writes: read-after-write,
//! write-after-read or write-after-write. A barrier placed before operation
//! `p` orders everything recorded before `p` with everything from `p` on, so
//! it covers a conflict `(i, j)` exactly when `i < p <= j`.
//!
//! Placement is the classic greedy stab of intervals by their right ends:
//! walking the operations in order, a barrier goes before `j` only when `j`
//! conflicts with an operation recorded since the last barrier. That gives
//! the minimum number of barriers, each placed as late as possible, so
//! independent operations between barriers run concurrently.
//!
//! Edges are reported in a reduced form: when `j` writes a range that covers
//! an earlier access of `i` completely, `i` is forgotten, because any later
//! operation conflicting with `i` also conflicts with `j`, and the barrier
//! chain `i -> j -> k` orders it (each barrier's second scope holds `j`'s
//! stage, which is in the next barrier's first scope). This keeps the edge
//! list near linear for graphs that reuse one scratch buffer many times.

use std::ops::Range;

/// The kind of a dependency between two operations of a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hazard {
    /// The later operation reads bytes the earlier one wrote.
    ReadAfterWrite,
    /// The later operation overwrites bytes the earlier one read.
    WriteAfterRead,
    /// Both operations write the same bytes; the later write must win.
    WriteAfterWrite,
}

/// A dependency between two operations, named by their recording index
/// (the count of `copy`, `fill` and `dispatch` calls before them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Edge {
    /// The earlier operation.
    pub from: usize,
    /// The later operation, which must wait for `from`.
    pub to: usize,
    /// What the two operations do to their common bytes.
    pub hazard: Hazard,
}

/// A barrier that [`prepare`](crate::Graph::prepare) inserted, for
/// introspection and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Barrier {
    before: usize,
    edges: Vec<Edge>,
}

impl Barrier {
    /// The index of the operation the barrier is recorded before.
    pub fn before(&self) -> usize {
        self.before
    }

    /// The dependencies this barrier serves directly, sorted. Every edge's
    /// `from` lies before the barrier and its `to` at or after it.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }
}

/// How one operation touches one byte range of one allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Use {
    /// The allocation's process-unique id.
    pub allocation: u64,
    /// Bytes from the allocation's start.
    pub range: Range<u64>,
    /// Whether the operation reads these bytes.
    pub reads: bool,
    /// Whether the operation writes these bytes.
    pub writes: bool,
}

/// One earlier access still able to conflict with later operations.
struct Prior {
    op: usize,
    allocation: u64,
    range: Range<u64>,
    reads: bool,
    writes: bool,
}

fn intersects(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

fn covers(outer: &Range<u64>, inner: &Range<u64>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// Derive the (reduced) dependency edges of `ops`, sorted by `to`, then
/// `from`, then hazard, without duplicates.
pub(crate) fn edges<U: AsRef<[Use]>>(ops: &[U]) -> Vec<Edge> {
    let mut live: Vec<Prior> = Vec::new();
    let mut edges = Vec::new();
    for (j, uses) in ops.iter().enumerate() {
        let uses = uses.as_ref();
        let first = edges.len();
        for u in uses.iter().filter(|u| !u.range.is_empty()) {
            for p in live
                .iter()
                .filter(|p| p.allocation == u.allocation && intersects(&p.range, &u.range))
            {
                let kinds = [
                    (p.writes && u.reads, Hazard::ReadAfterWrite),
                    (p.reads && u.writes, Hazard::WriteAfterRead),
                    (p.writes && u.writes, Hazard::WriteAfterWrite),
                ];
                for (_, hazard) in kinds.into_iter().filter(|(hit, _)| *hit) {
                    edges.push(Edge {
                        from: p.op,
                        to: j,
                        hazard,
                    });
                }
            }
        }
        edges[first..].sort_unstable();
        let mut kept = first;
        for k in first..edges.len() {
            if k == first || edges[k] != edges[kept - 1] {
                edges[kept] = edges[k];
                kept += 1;
            }
        }
        edges.truncate(kept);
        // Forget accesses that a write of `j` covers completely: they
        // conflict with `j`, and so does anything that would conflict with them.
        live.retain(|p| {
            !uses.iter().any(|u| {
                u.writes
                    && u.allocation == p.allocation
                    && !u.range.is_empty()
                    && covers(&u.range, &p.range)
            })
        });
        live.extend(
            uses.iter()
                .filter(|u| !u.range.is_empty() && (u.reads || u.writes))
                .map(|u| Prior {
                    op: j,
                    allocation: u.allocation,
                    range: u.range.clone(),
                    reads: u.reads,
                    writes: u.writes,
                }),
        );
    }
    edges
}

/// Place the fewest barriers covering `edges` (sorted by `to`, as
/// [`edges`] returns them) and give each edge to the first barrier after its
/// `from`, which is at or before its `to`.
pub(crate) fn place(edges: &[Edge]) -> Vec<Barrier> {
    let mut barriers: Vec<Barrier> = Vec::new();
    let mut last = 0;
    for edge in edges {
        if edge.from >= last {
            last = edge.to;
            barriers.push(Barrier {
                before: edge.to,
                edges: Vec::new(),
            });
        }
    }
    for edge in edges {
        let at = barriers.partition_point(|b| b.before <= edge.from);
        // Every edge is covered: the barrier at or before `to` is after `from`.
        if let Some(barrier) = barriers.get_mut(at) {
            barrier.edges.push(*edge);
        }
    }
    for barrier in &mut barriers {
        barrier.edges.sort_unstable();
    }
    barriers
}

/// Derive edges and place barriers in one step.
pub(crate) fn plan<U: AsRef<[Use]>>(ops: &[U]) -> Vec<Barrier> {
    place(&edges(ops))
}

#[cfg(test)]
mod tests;

//! Uniformity: barriers need workgroup-uniform control flow, subgroup
//! collectives and cooperative-matrix ops subgroup-uniform control flow.
//! This is the only uniformity check: naga's (which has no subgroup
//! level) is off in `emit::validate`.
//!
//! Lattice, from top: workgroup-uniform > subgroup-uniform > divergent.
//! Constants, launch arguments, config values, workgroup id/size/count and
//! subgroup size/count are workgroup-uniform; the subgroup id and the
//! results of subgroup reduce and broadcast are subgroup-uniform; dispatch
//! and workitem ids, the lane id, shuffles, loads and atomics are
//! divergent; anything else is the meet of its operands. An `scf.if` runs
//! its regions under the meet of the enclosing control and its condition;
//! an `scf.for` under the meet with its bounds. Results of `scf` ops meet
//! the condition (or bounds) with the yielded values.
//!
//! Every rule is "at most the level of that", so the levels are the
//! greatest solution of a set of `level(a) <= level(b)` edges plus fixed
//! ceilings. One walk collects the edges (values and region controls are
//! the nodes), a worklist lowers each node at most twice along them, and a
//! second walk reports. The cost is linear in the kernel's size, also for
//! long chains of loop-carried values, which a round-based fixpoint needs
//! one whole-kernel round per link to settle.

use crate::diag::{Diagnostics, codes};
use crate::front::span::Span;
use crate::ir::{BarrierKind, Block, Kernel, OpKind, SubgroupQuery, ValueId, WorkItemKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Divergent,
    Subgroup,
    Workgroup,
}

/// A node of the constraint graph: a value (ids `0..values`) or the control
/// level of a region (ids from `values` up, in walk order).
type Node = usize;

/// The constraint graph of one kernel and, once solved, its levels.
struct Graph {
    level: Vec<Level>,
    /// `(from, to)`: `level[to] <= level[from]`.
    edges: Vec<(Node, Node)>,
}

impl Graph {
    fn value(id: ValueId) -> Node {
        id.index()
    }

    fn new_region(&mut self) -> Node {
        self.level.push(Level::Workgroup);
        self.level.len() - 1
    }

    fn ceiling(&mut self, node: Node, to: Level) {
        if let Some(l) = self.level.get_mut(node) {
            *l = (*l).min(to);
        }
    }

    fn edge(&mut self, from: Node, to: Node) {
        self.edges.push((from, to));
    }

    fn edges_from(&mut self, from: &[ValueId], to: Node) {
        for f in from {
            self.edge(Self::value(*f), to);
        }
    }

    /// Collect the constraints of `block`, run under the control node
    /// `control`.
    fn collect(&mut self, block: &Block, control: Node) {
        for op in &block.ops {
            let results = &op.results;
            match &op.kind {
                OpKind::IndexConstant(_)
                | OpKind::ScalarConstant(_)
                | OpKind::ConfigValue(_)
                | OpKind::CoopZero
                | OpKind::Barrier(_) => {}
                OpKind::WorkItem(kind, _) => {
                    if matches!(kind, WorkItemKind::DispatchId | WorkItemKind::WorkitemId) {
                        self.ceil_all(results, Level::Divergent);
                    }
                }
                OpKind::Subgroup(q) => match q {
                    SubgroupQuery::Size | SubgroupQuery::Count => {}
                    SubgroupQuery::Id => self.ceil_all(results, Level::Subgroup),
                    SubgroupQuery::LaneId => self.ceil_all(results, Level::Divergent),
                },
                OpKind::ViewLoad { .. }
                | OpKind::VectorLoad { .. }
                | OpKind::AtomicRmw { .. }
                | OpKind::SubgroupShuffle(..)
                | OpKind::CoopLoad { .. }
                | OpKind::CoopStore { .. } => self.ceil_all(results, Level::Divergent),
                OpKind::CoopMma(a, b, c) => {
                    for r in results {
                        self.edges_from(&[*a, *b, *c], Self::value(*r));
                    }
                }
                OpKind::SubgroupReduce(..) | OpKind::SubgroupBroadcast(..) => {
                    self.ceil_all(results, Level::Subgroup);
                }
                OpKind::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    let branches = [Some(then), otherwise.as_ref()];
                    for branch in branches.into_iter().flatten() {
                        let inner = self.new_region();
                        self.edge(control, inner);
                        self.edge(Self::value(*cond), inner);
                        self.collect(branch, inner);
                        for (r, y) in results.iter().zip(yielded(branch)) {
                            self.edge(Self::value(*y), Self::value(*r));
                        }
                    }
                    for r in results {
                        self.edge(Self::value(*cond), Self::value(*r));
                    }
                }
                OpKind::For {
                    iv,
                    lower,
                    upper,
                    step,
                    iter_args,
                    body,
                } => {
                    let bounds = [*lower, *upper, *step];
                    self.edges_from(&bounds, Self::value(*iv));
                    let yields = yielded(body);
                    for (i, (arg, init)) in iter_args.iter().enumerate() {
                        let arg = Self::value(*arg);
                        self.edges_from(&bounds, arg);
                        self.edge(Self::value(*init), arg);
                        if let Some(y) = yields.get(i) {
                            self.edge(Self::value(*y), arg);
                        }
                    }
                    for (r, (arg, _)) in results.iter().zip(iter_args) {
                        self.edge(Self::value(*arg), Self::value(*r));
                    }
                    let inner = self.new_region();
                    self.edge(control, inner);
                    self.edges_from(&bounds, inner);
                    self.collect(body, inner);
                }
                other => {
                    let from = operands(other);
                    for r in results {
                        self.edges_from(&from, Self::value(*r));
                    }
                }
            }
        }
    }

    fn ceil_all(&mut self, results: &[ValueId], to: Level) {
        for r in results {
            self.ceiling(Self::value(*r), to);
        }
    }

    /// Lower every node to the greatest levels the edges allow: each node
    /// drops at most twice, so the worklist handles each edge at most
    /// three times.
    fn solve(&mut self) {
        let nodes = self.level.len();
        let mut start = vec![0usize; nodes + 1];
        for (from, _) in &self.edges {
            if let Some(s) = start.get_mut(from + 1) {
                *s += 1;
            }
        }
        for i in 0..nodes {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut targets = vec![0usize; self.edges.len()];
        for (from, to) in &self.edges {
            if let Some(slot) = fill.get_mut(*from) {
                targets[*slot] = *to;
                *slot += 1;
            }
        }
        let mut work: Vec<Node> = (0..nodes)
            .filter(|n| self.level[*n] < Level::Workgroup)
            .collect();
        while let Some(node) = work.pop() {
            let level = self.level[node];
            for to in &targets[start[node]..start[node + 1]] {
                if let Some(l) = self.level.get_mut(*to)
                    && level < *l
                {
                    *l = level;
                    work.push(*to);
                }
            }
        }
    }
}

pub(super) fn check(kernel: &Kernel, diags: &mut Diagnostics) {
    let values = kernel.value_types.len();
    let mut graph = Graph {
        level: vec![Level::Workgroup; values],
        edges: Vec::new(),
    };
    let top = graph.new_region();
    graph.collect(&kernel.body, top);
    graph.solve();
    let mut report = Reporter {
        level: &graph.level,
        next_region: values + 1,
        diags,
    };
    report.block(&kernel.body, Level::Workgroup);
}

/// The second walk: the same regions in the same order, reporting ops
/// whose control or operands are not uniform enough.
struct Reporter<'a> {
    level: &'a [Level],
    next_region: Node,
    diags: &'a mut Diagnostics,
}

impl Reporter<'_> {
    fn get(&self, id: ValueId) -> Level {
        self.level
            .get(id.index())
            .copied()
            .unwrap_or(Level::Divergent)
    }

    fn meet(&self, ids: &[ValueId]) -> Level {
        ids.iter()
            .map(|i| self.get(*i))
            .min()
            .unwrap_or(Level::Workgroup)
    }

    fn region(&mut self) -> Level {
        let level = self
            .level
            .get(self.next_region)
            .copied()
            .unwrap_or(Level::Divergent);
        self.next_region += 1;
        level
    }

    /// Cooperative matrix ops run across the whole subgroup.
    fn coop_control(&mut self, span: Span, control: Level) {
        if control < Level::Subgroup {
            self.diags.error(
                span,
                codes::DIVERGENT_COLLECTIVE,
                "cooperative matrix op in divergent control flow: an enclosing `scf.if` condition or `scf.for` bound is not subgroup-uniform",
            );
        }
    }

    fn block(&mut self, block: &Block, control: Level) {
        for op in &block.ops {
            match &op.kind {
                OpKind::CoopLoad { indices, .. } | OpKind::CoopStore { indices, .. } => {
                    self.coop_control(op.span, control);
                    if self.meet(indices) < Level::Subgroup {
                        self.diags.error(
                            op.span,
                            codes::DIVERGENT_LANE,
                            "cooperative matrix load/store position must be subgroup-uniform (derive it from workgroup or subgroup ids, not lane or workitem ids)",
                        );
                    }
                }
                OpKind::CoopMma(..) => self.coop_control(op.span, control),
                OpKind::Barrier(BarrierKind::Subgroup) if control < Level::Subgroup => {
                    self.diags.error(
                        op.span,
                        codes::DIVERGENT_BARRIER,
                        "`kernel.barrier<subgroup>` in divergent control flow: an enclosing `scf.if` condition or `scf.for` bound is not subgroup-uniform, so some invocations of a subgroup could skip it",
                    );
                }
                OpKind::Barrier(BarrierKind::Subgroup) => {}
                OpKind::Barrier(_) if control < Level::Workgroup => {
                    self.diags.error(
                        op.span,
                        codes::DIVERGENT_BARRIER,
                        "`kernel.barrier` in divergent control flow: an enclosing `scf.if` condition or `scf.for` bound is not workgroup-uniform, so some invocations could skip it",
                    );
                }
                OpKind::SubgroupReduce(..) | OpKind::SubgroupBroadcast(..) => {
                    if control < Level::Subgroup {
                        self.diags.error(
                            op.span,
                            codes::DIVERGENT_COLLECTIVE,
                            "subgroup collective in divergent control flow: an enclosing `scf.if` condition or `scf.for` bound is not subgroup-uniform",
                        );
                    }
                    if let OpKind::SubgroupBroadcast(_, lane) = &op.kind
                        && self.get(*lane) < Level::Subgroup
                    {
                        self.diags.error(
                            op.span,
                            codes::DIVERGENT_LANE,
                            "`kernel.subgroup.broadcast` needs a subgroup-uniform lane",
                        );
                    }
                }
                OpKind::If {
                    then, otherwise, ..
                } => {
                    let branches = [Some(then), otherwise.as_ref()];
                    for branch in branches.into_iter().flatten() {
                        let inner = self.region();
                        self.block(branch, inner);
                    }
                }
                OpKind::For { body, .. } => {
                    let inner = self.region();
                    self.block(body, inner);
                }
                _ => {}
            }
        }
    }
}

fn yielded(block: &Block) -> &[ValueId] {
    match block.ops.last().map(|op| &op.kind) {
        Some(OpKind::Yield(v)) => v,
        _ => &[],
    }
}

/// Operands of the ops whose level is the meet of their operands.
fn operands(kind: &OpKind) -> Vec<ValueId> {
    match kind {
        OpKind::IndexBinary(_, a, b)
        | OpKind::IndexCmp(_, a, b)
        | OpKind::ScalarBinary(_, a, b)
        | OpKind::CmpF(_, a, b)
        | OpKind::CmpI(_, a, b)
        | OpKind::VectorExtract(a, b) => vec![*a, *b],
        OpKind::IndexMadd(a, b, c) | OpKind::ScalarFma(a, b, c) | OpKind::Select(a, b, c) => {
            vec![*a, *b, *c]
        }
        OpKind::IndexCast { value, .. }
        | OpKind::Convert { value, .. }
        | OpKind::ScalarUnary(_, value)
        | OpKind::VectorSplat(value)
        | OpKind::UnpackF16(value) => {
            vec![*value]
        }
        OpKind::BufferView {
            buffer,
            byte_offset,
            ..
        } => vec![*buffer, *byte_offset],
        OpKind::Alloca { bytes, .. } => vec![*bytes],
        _ => Vec::new(),
    }
}

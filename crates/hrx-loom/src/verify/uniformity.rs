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
//! the condition (or bounds) with the yielded values. Loop-carried values
//! are solved by iterating to the greatest fixpoint (each value can only
//! drop twice, so this terminates).

use crate::diag::{Diagnostics, codes};
use crate::ir::{Block, Kernel, OpKind, SubgroupQuery, ValueId, WorkItemKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Divergent,
    Subgroup,
    Workgroup,
}

struct Solver<'a> {
    level: Vec<Level>,
    changed: bool,
    report: Option<&'a mut Diagnostics>,
}

pub(super) fn check(kernel: &Kernel, diags: &mut Diagnostics) {
    let mut s = Solver {
        level: vec![Level::Workgroup; kernel.value_types.len()],
        changed: true,
        report: None,
    };
    let mut rounds = 0usize;
    while s.changed && rounds <= 2 * kernel.value_types.len() + 2 {
        s.changed = false;
        s.block(&kernel.body, Level::Workgroup);
        rounds += 1;
    }
    s.report = Some(diags);
    s.block(&kernel.body, Level::Workgroup);
}

impl Solver<'_> {
    fn get(&self, id: ValueId) -> Level {
        self.level
            .get(id.index())
            .copied()
            .unwrap_or(Level::Divergent)
    }

    fn lower(&mut self, id: ValueId, to: Level) {
        if let Some(l) = self.level.get_mut(id.index())
            && to < *l
        {
            *l = to;
            self.changed = true;
        }
    }

    fn meet(&self, ids: &[ValueId]) -> Level {
        ids.iter()
            .map(|i| self.get(*i))
            .min()
            .unwrap_or(Level::Workgroup)
    }

    fn yielded(block: &Block) -> &[ValueId] {
        match block.ops.last().map(|op| &op.kind) {
            Some(OpKind::Yield(v)) => v,
            _ => &[],
        }
    }

    fn error(&mut self, span: crate::front::span::Span, code: &'static str, msg: &str) {
        if let Some(d) = self.report.as_deref_mut() {
            d.error(span, code, msg);
        }
    }

    /// Cooperative matrix ops run across the whole subgroup.
    fn coop_control(&mut self, span: crate::front::span::Span, control: Level) {
        if control < Level::Subgroup {
            self.error(
                span,
                codes::DIVERGENT_COLLECTIVE,
                "cooperative matrix op in divergent control flow: an enclosing `scf.if` condition or `scf.for` bound is not subgroup-uniform",
            );
        }
    }

    fn block(&mut self, block: &Block, control: Level) {
        for op in &block.ops {
            let level = match &op.kind {
                OpKind::IndexConstant(_) | OpKind::ScalarConstant(_) | OpKind::ConfigValue(_) => {
                    Level::Workgroup
                }
                OpKind::WorkItem(kind, _) => match kind {
                    WorkItemKind::DispatchId | WorkItemKind::WorkitemId => Level::Divergent,
                    _ => Level::Workgroup,
                },
                OpKind::Subgroup(q) => match q {
                    SubgroupQuery::Size | SubgroupQuery::Count => Level::Workgroup,
                    SubgroupQuery::Id => Level::Subgroup,
                    SubgroupQuery::LaneId => Level::Divergent,
                },
                OpKind::ViewLoad { .. } | OpKind::VectorLoad { .. } | OpKind::AtomicRmw { .. } => {
                    Level::Divergent
                }
                OpKind::SubgroupShuffle(..) => Level::Divergent,
                OpKind::CoopLoad { indices, .. } | OpKind::CoopStore { indices, .. } => {
                    self.coop_control(op.span, control);
                    if self.meet(indices) < Level::Subgroup {
                        self.error(
                            op.span,
                            codes::DIVERGENT_LANE,
                            "cooperative matrix load/store position must be subgroup-uniform (derive it from workgroup or subgroup ids, not lane or workitem ids)",
                        );
                    }
                    Level::Divergent
                }
                OpKind::CoopMma(a, b, c) => {
                    self.coop_control(op.span, control);
                    self.meet(&[*a, *b, *c])
                }
                OpKind::CoopZero => Level::Workgroup,
                OpKind::Barrier(_) => {
                    if control < Level::Workgroup {
                        self.error(
                            op.span,
                            codes::DIVERGENT_BARRIER,
                            "`kernel.barrier` in divergent control flow: an enclosing `scf.if` condition or `scf.for` bound is not workgroup-uniform, so some invocations could skip it",
                        );
                    }
                    continue;
                }
                OpKind::SubgroupReduce(_, x) | OpKind::SubgroupBroadcast(x, _) => {
                    if control < Level::Subgroup {
                        self.error(
                            op.span,
                            codes::DIVERGENT_COLLECTIVE,
                            "subgroup collective in divergent control flow: an enclosing `scf.if` condition or `scf.for` bound is not subgroup-uniform",
                        );
                    }
                    if let OpKind::SubgroupBroadcast(_, lane) = &op.kind
                        && self.get(*lane) < Level::Subgroup
                    {
                        self.error(
                            op.span,
                            codes::DIVERGENT_LANE,
                            "`kernel.subgroup.broadcast` needs a subgroup-uniform lane",
                        );
                    }
                    let _ = x;
                    Level::Subgroup
                }
                OpKind::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    let c = self.get(*cond);
                    let inner = control.min(c);
                    self.block(then, inner);
                    let mut out = vec![c; op.results.len()];
                    for (o, y) in out.iter_mut().zip(Self::yielded(then)) {
                        *o = (*o).min(self.get(*y));
                    }
                    if let Some(e) = otherwise {
                        self.block(e, inner);
                        for (o, y) in out.iter_mut().zip(Self::yielded(e)) {
                            *o = (*o).min(self.get(*y));
                        }
                    }
                    for (r, l) in op.results.iter().zip(out) {
                        self.lower(*r, l);
                    }
                    continue;
                }
                OpKind::For {
                    iv,
                    lower,
                    upper,
                    step,
                    iter_args,
                    body,
                } => {
                    let bounds = self.meet(&[*lower, *upper, *step]);
                    self.lower(*iv, bounds);
                    let yields = Self::yielded(body).to_vec();
                    for (i, (arg, init)) in iter_args.iter().enumerate() {
                        let y = yields.get(i).map_or(Level::Workgroup, |y| self.get(*y));
                        let l = self.get(*init).min(y).min(bounds);
                        self.lower(*arg, l);
                    }
                    self.block(body, control.min(bounds));
                    for (r, (arg, _)) in op.results.iter().zip(iter_args) {
                        let l = self.get(*arg);
                        self.lower(*r, l);
                    }
                    continue;
                }
                other => self.meet(&operands(other)),
            };
            for r in &op.results {
                self.lower(*r, level);
            }
        }
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

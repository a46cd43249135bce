//! `kernel.*` ops: coordinates, subgroup queries and collectives, barriers.

use super::{E_UNSUPPORTED, Lowerer, R, Val};
use crate::ir::{
    Axis, BarrierKind, Op, OpKind, ReduceOp, ShuffleMode, SubgroupQuery, WorkItemKind,
};
use naga::{
    Barrier, BuiltIn, CollectiveOperation, Expression, FunctionArgument, GatherMode, Handle,
    ScalarKind, Statement, SubgroupOperation, TypeInner, VectorSize,
};

impl Lowerer<'_> {
    /// The entry-point argument carrying `builtin`, added on first use.
    fn builtin(&mut self, builtin: BuiltIn, vec3: bool) -> Handle<Expression> {
        let index = match self.builtins.get(&builtin) {
            Some(&i) => i,
            None => {
                let inner = if vec3 {
                    TypeInner::Vector {
                        size: VectorSize::Tri,
                        scalar: naga::Scalar::U32,
                    }
                } else {
                    TypeInner::Scalar(naga::Scalar::U32)
                };
                let ty = super::builder::ty(&mut self.module.types, inner);
                let i = self.arguments.len() as u32;
                self.arguments.push(FunctionArgument {
                    name: Some(format!("{builtin:?}").to_lowercase()),
                    ty,
                    binding: Some(naga::Binding::BuiltIn(builtin)),
                });
                self.builtins.insert(builtin, i);
                i
            }
        };
        self.fb.expr(Expression::FunctionArgument(index))
    }

    /// Whether the target supports subgroup operations at all.
    fn need_subgroups(&mut self, op: &Op) -> R<()> {
        let ops = self.target.subgroup_ops;
        if ops.basic && ops.arithmetic && ops.shuffle && ops.shuffle_relative {
            return Ok(());
        }
        let msg = format!(
            "target `{}` lacks the subgroup operations this op needs",
            self.target.name
        );
        Err(self.fail(op.span, E_UNSUPPORTED, msg))
    }

    pub(super) fn kernel_op(&mut self, op: &Op) -> R<()> {
        let span = op.span;
        let value = match &op.kind {
            OpKind::WorkItem(kind, axis) => {
                let component = match axis {
                    Axis::X => 0,
                    Axis::Y => 1,
                    Axis::Z => 2,
                };
                let builtin = match kind {
                    WorkItemKind::DispatchId => BuiltIn::GlobalInvocationId,
                    WorkItemKind::WorkgroupId => BuiltIn::WorkGroupId,
                    WorkItemKind::WorkitemId => BuiltIn::LocalInvocationId,
                    WorkItemKind::WorkgroupCount => BuiltIn::NumWorkGroups,
                    // Fixed at compile time: a constant, not an input.
                    WorkItemKind::WorkgroupSize => {
                        let size = self.workgroup_size[component as usize];
                        let v = self.lit_u32(size);
                        let r = self.result(&op.results, span)?;
                        self.set(r, Val::Expr(v));
                        return Ok(());
                    }
                };
                let base = self.builtin(builtin, true);
                self.fb.expr(Expression::AccessIndex {
                    base,
                    index: component,
                })
            }
            OpKind::Subgroup(q @ (SubgroupQuery::Id | SubgroupQuery::LaneId))
                if self.workgroup_size[1] > 1 || self.workgroup_size[2] > 1 =>
            {
                // How invocations of a 2-D or 3-D workgroup map to
                // subgroups is not portable, so naga (and WGSL) refuse these
                // built-ins there.
                let name = if *q == SubgroupQuery::Id {
                    "id"
                } else {
                    "lane.id"
                };
                let msg = format!(
                    "kernel.subgroup.{name} needs a one-dimensional workgroup; this kernel's is {} x {} x {}",
                    self.workgroup_size[0], self.workgroup_size[1], self.workgroup_size[2]
                );
                return Err(self.fail(op.span, super::E_UNSUPPORTED, msg));
            }
            OpKind::Subgroup(q) => {
                self.need_subgroups(op)?;
                let builtin = match q {
                    SubgroupQuery::Size => BuiltIn::SubgroupSize,
                    SubgroupQuery::Id => BuiltIn::SubgroupId,
                    SubgroupQuery::LaneId => BuiltIn::SubgroupInvocationId,
                    SubgroupQuery::Count => BuiltIn::NumSubgroups,
                };
                self.builtin(builtin, false)
            }
            OpKind::Barrier(kind) => {
                // `kernel.barrier<workgroup>` orders workgroup memory at
                // workgroup scope (GLSL's `barrier()`). naga's STORAGE flag
                // widens the memory scope to Device (the runtime enables
                // `vulkanMemoryModelDeviceScope`), which costs more on
                // GPUs, so only `<storage>` asks for it.
                // `<subgroup>` (naga's SUB_GROUP flag) narrows the
                // execution and memory scopes to the subgroup; WORK_GROUP
                // keeps workgroup memory in its semantics.
                let flags = match kind {
                    BarrierKind::Workgroup => Barrier::WORK_GROUP,
                    BarrierKind::Subgroup => {
                        self.need_subgroups(op)?;
                        Barrier::WORK_GROUP | Barrier::SUB_GROUP
                    }
                    BarrierKind::Storage => Barrier::WORK_GROUP | Barrier::STORAGE,
                };
                self.fb.stmt(Statement::ControlBarrier(flags));
                return Ok(());
            }
            OpKind::SubgroupReduce(r, x) => {
                self.need_subgroups(op)?;
                let kind = self.kind_of(*x, span)?;
                let arg = self.val(*x, span)?;
                let (sop, want) = match r {
                    ReduceOp::AddF | ReduceOp::AddI => (SubgroupOperation::Add, kind),
                    ReduceOp::MaxNumF => (SubgroupOperation::Max, kind),
                    ReduceOp::MinNumF => (SubgroupOperation::Min, kind),
                    ReduceOp::MaxSI => (SubgroupOperation::Max, ScalarKind::Sint),
                    ReduceOp::MinSI => (SubgroupOperation::Min, ScalarKind::Sint),
                    ReduceOp::MaxUI => (SubgroupOperation::Max, ScalarKind::Uint),
                    ReduceOp::MinUI => (SubgroupOperation::Min, ScalarKind::Uint),
                };
                let arg = if want == kind {
                    arg
                } else {
                    self.bitcast(arg, want)
                };
                let t = self.ty_of(*x, span)?;
                let mut rt = t.clone();
                if want != kind {
                    rt = match want {
                        ScalarKind::Sint => crate::ir::Type::I32,
                        _ => crate::ir::Type::U32,
                    };
                }
                let ty = self.value_type(&rt, span)?;
                let result = self.fb.expr(Expression::SubgroupOperationResult { ty });
                self.fb.stmt(Statement::SubgroupCollectiveOperation {
                    op: sop,
                    collective_op: CollectiveOperation::Reduce,
                    argument: arg,
                    result,
                });
                if want == kind {
                    result
                } else {
                    self.bitcast(result, kind)
                }
            }
            OpKind::SubgroupShuffle(mode, x, lane) => {
                self.need_subgroups(op)?;
                let lane = self.val(*lane, span)?;
                let mode = match mode {
                    ShuffleMode::Xor => GatherMode::ShuffleXor(lane),
                    ShuffleMode::Up => GatherMode::ShuffleUp(lane),
                    ShuffleMode::Down => GatherMode::ShuffleDown(lane),
                    ShuffleMode::Index => GatherMode::Shuffle(lane),
                };
                self.gather(mode, *x, span)?
            }
            OpKind::SubgroupBroadcast(x, lane) => {
                self.need_subgroups(op)?;
                // SPIR-V 1.3 broadcast needs a constant lane; a dynamic
                // (uniform) lane is an indexed shuffle, same result.
                let mode = match self.known.get(lane.index()).copied().flatten() {
                    Some(c) => GatherMode::Broadcast(self.lit_u32(c)),
                    None => GatherMode::Shuffle(self.val(*lane, span)?),
                };
                self.gather(mode, *x, span)?
            }
            _ => {
                let msg = format!("op {:?} cannot appear in a kernel body", op.kind);
                return Err(self.bug(span, msg));
            }
        };
        let r = self.result(&op.results, span)?;
        self.set(r, Val::Expr(value));
        Ok(())
    }

    fn gather(
        &mut self,
        mode: GatherMode,
        x: crate::ir::ValueId,
        span: crate::front::span::Span,
    ) -> R<Handle<Expression>> {
        let argument = self.val(x, span)?;
        let t = self.ty_of(x, span)?;
        let ty = self.value_type(&t, span)?;
        let result = self.fb.expr(Expression::SubgroupOperationResult { ty });
        self.fb.stmt(Statement::SubgroupGather {
            mode,
            argument,
            result,
        });
        Ok(result)
    }
}

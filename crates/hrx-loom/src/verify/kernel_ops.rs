//! Rules for `kernel.*` ops: coordinates, subgroup queries and collectives,
//! barriers.

use super::builder::Builder;
use super::ops::Built;
use super::words;
use crate::diag::codes;
use crate::front::ast::{self, Ident, TypeExpr};
use crate::ir::{BarrierKind, OpKind, ReduceOp, Scalar, Type};

impl Builder<'_> {
    pub(super) fn kernel_op(
        &mut self,
        op: &ast::Op,
        operands: &[Ident],
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
    ) -> Option<Built> {
        let name = op.name.text.as_str();
        let tag = op.tag.as_ref();
        if let Some(kind) = words::workitem(name) {
            let tag = tag?;
            let Some(axis) = words::axis(&tag.text) else {
                return self.unknown_word(tag, "axis", "x y z");
            };
            self.index_result(op, operands, types, to)?;
            return Built::new(OpKind::WorkItem(kind, axis), vec![Some(Type::Index)]);
        }
        if let Some(query) = words::subgroup_query(name) {
            self.index_result(op, operands, types, to)?;
            return Built::new(OpKind::Subgroup(query), vec![Some(Type::Index)]);
        }
        let ty = self.one_type(op, types, to)?;
        let numeric = ty.element().is_some() || matches!(ty, Type::Index | Type::Offset);
        match name {
            "kernel.subgroup.reduce" => {
                let tag = tag?;
                let Some(r) = words::reduce_op(&tag.text) else {
                    return self.unknown_word(tag, "reduction", words::REDUCE_OPS);
                };
                let elem = ty.element();
                let ok = match r {
                    ReduceOp::AddF | ReduceOp::MaxNumF | ReduceOp::MinNumF => {
                        elem.is_some_and(Scalar::is_float)
                    }
                    ReduceOp::AddI => matches!(elem, Some(Scalar::I32 | Scalar::U32)),
                    ReduceOp::MaxSI | ReduceOp::MinSI => elem == Some(Scalar::I32),
                    ReduceOp::MaxUI | ReduceOp::MinUI => elem == Some(Scalar::U32),
                };
                if !ok {
                    let msg = format!(
                        "reduction `{}` does not accept {}",
                        tag.text,
                        self.show(&ty)
                    );
                    self.error(tag.span, codes::UNSUPPORTED_TYPE, msg);
                    return None;
                }
                let ids = self.operands(op, operands, 1)?;
                self.all_typed(operands, &ids, &ty);
                Built::new(OpKind::SubgroupReduce(r, ids[0]?), vec![Some(ty)])
            }
            "kernel.subgroup.shuffle" | "kernel.subgroup.broadcast" => {
                if !numeric {
                    self.unsupported(op, &ty, "a numeric scalar or vector");
                    return None;
                }
                let mode = match tag {
                    Some(tag) => match words::shuffle_mode(&tag.text) {
                        Some(m) => Some(m),
                        None => {
                            return self.unknown_word(tag, "shuffle mode", words::SHUFFLE_MODES);
                        }
                    },
                    None => None,
                };
                let ids = self.operands(op, operands, 2)?;
                self.check_type(&operands[0], ids[0], &ty);
                self.check_type(&operands[1], ids[1], &Type::Index);
                let (x, lane) = (ids[0]?, ids[1]?);
                let kind = match mode {
                    Some(m) => OpKind::SubgroupShuffle(m, x, lane),
                    None => OpKind::SubgroupBroadcast(x, lane),
                };
                Built::new(kind, vec![Some(ty)])
            }
            _ => {
                self.error(
                    op.name.span,
                    codes::UNKNOWN_OP,
                    format!("unknown op `{name}`"),
                );
                None
            }
        }
    }

    /// No operands, `: index`.
    fn index_result(
        &mut self,
        op: &ast::Op,
        operands: &[Ident],
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
    ) -> Option<()> {
        self.operands(op, operands, 0)?;
        let ty = self.one_type(op, types, to)?;
        if ty != Type::Index {
            self.unsupported(op, &ty, "index");
            return None;
        }
        Some(())
    }

    /// `kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)`,
    /// `kernel.barrier<subgroup> scope(subgroup) ordering(acq_rel)`, or
    /// `kernel.barrier<storage> scope(device) ordering(acq_rel)`.
    pub(super) fn barrier(&mut self, op: &ast::Op, attrs: &[(Ident, Ident)]) -> Option<Built> {
        let kind = match op.tag.as_ref().map(|t| t.text.as_str()) {
            None | Some("workgroup") => BarrierKind::Workgroup,
            Some("subgroup") => BarrierKind::Subgroup,
            Some("storage") => BarrierKind::Storage,
            Some(_) => {
                let tag = op.tag.as_ref()?;
                return self.unknown_word(tag, "barrier kind", "workgroup subgroup storage");
            }
        };
        for (name, arg) in attrs {
            let expected = match (name.text.as_str(), kind) {
                ("scope", BarrierKind::Workgroup) => "workgroup",
                ("scope", BarrierKind::Subgroup) => "subgroup",
                ("scope", BarrierKind::Storage) => "device",
                ("ordering", _) => "acq_rel",
                _ => return self.unknown_word(name, "barrier attribute", "scope ordering"),
            };
            if arg.text != expected {
                return self.unknown_word(arg, &format!("barrier {}", name.text), expected);
            }
        }
        Built::new(OpKind::Barrier(kind), Vec::new())
    }
}

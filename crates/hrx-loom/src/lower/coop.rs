//! Cooperative matrices: `coopmat` values and the `coop.*` ops, lowered to
//! naga's cooperative-matrix IR (`SPV_KHR_cooperative_matrix`).
//!
//! A load or store addresses the matrix's first element through the view
//! (a pointer to one array element) and uses the view's row length as the
//! stride, so a matrix tile is read straight out of a larger row-major
//! array. The target must report the shape (E0604 otherwise).

use super::{E_UNSUPPORTED, Lowerer, R, Val, types};
use crate::front::span::Span;
use crate::ir::{CoopMatType, CoopRole, Op, OpKind, Scalar, Type, ValueId};
use hrx_core::{CooperativeMatrixShape, ScalarKind};
use naga::{CooperativeData, CooperativeRole, CooperativeSize, Expression, Statement, TypeInner};

/// naga's form of a loom cooperative matrix type.
pub(super) fn coop_inner(m: &CoopMatType) -> Option<TypeInner> {
    Some(TypeInner::CooperativeMatrix {
        columns: size(m.cols)?,
        rows: size(m.rows)?,
        scalar: types::scalar(m.elem),
        role: role(m.role),
    })
}

fn size(n: u32) -> Option<CooperativeSize> {
    match n {
        8 => Some(CooperativeSize::Eight),
        16 => Some(CooperativeSize::Sixteen),
        _ => None,
    }
}

fn role(r: CoopRole) -> CooperativeRole {
    match r {
        CoopRole::A => CooperativeRole::A,
        CoopRole::B => CooperativeRole::B,
        CoopRole::C => CooperativeRole::C,
    }
}

fn kind(s: Scalar) -> Option<ScalarKind> {
    match s {
        Scalar::F16 => Some(ScalarKind::F16),
        Scalar::F32 => Some(ScalarKind::F32),
        _ => None,
    }
}

/// Whether some shape of the target has a matrix of type `m` in its role.
fn offered(shapes: &[CooperativeMatrixShape], m: &CoopMatType) -> bool {
    let Some(elem) = kind(m.elem) else {
        return false;
    };
    shapes.iter().any(|s| match m.role {
        CoopRole::A => s.m == m.rows && s.k == m.cols && s.input == elem,
        CoopRole::B => s.k == m.rows && s.n == m.cols && s.input == elem,
        CoopRole::C => s.m == m.rows && s.n == m.cols && s.accumulator == elem,
    })
}

/// The target's shapes, spelled for a diagnostic.
fn listing(shapes: &[CooperativeMatrixShape]) -> String {
    shapes
        .iter()
        .map(|s| {
            format!("{}x{}x{} {:?}->{:?}", s.m, s.n, s.k, s.input, s.accumulator).to_lowercase()
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Lowerer<'_> {
    /// Every cooperative matrix type and multiply-add the kernel uses must
    /// be one the target reports.
    pub(super) fn check_coop(&mut self) -> R<()> {
        let kernel = self.kernel;
        let uses = kernel
            .value_types
            .iter()
            .any(|t| matches!(t, Type::CoopMat(_)));
        if !uses {
            return Ok(());
        }
        let shapes = self.target.cooperative_matrix.clone();
        if shapes.is_empty() {
            let msg = format!(
                "kernel @{} uses cooperative matrices, but target `{}` has no VK_KHR_cooperative_matrix shapes; use a kernel without coop ops there",
                kernel.name, self.target.name
            );
            return Err(self.fail(kernel.span, E_UNSUPPORTED, msg));
        }
        let mut failed = false;
        kernel.body.for_each_op(|op| {
            let problem = match &op.kind {
                OpKind::CoopMma(a, b, c) => {
                    let mat = |v: &ValueId| match kernel.ty(*v) {
                        Some(Type::CoopMat(m)) => Some(*m),
                        _ => None,
                    };
                    match (mat(a), mat(b), mat(c)) {
                        (Some(a), Some(b), Some(c)) => {
                            let exact = shapes.iter().any(|s| {
                                s.m == a.rows
                                    && s.k == a.cols
                                    && s.n == b.cols
                                    && Some(s.input) == kind(a.elem)
                                    && Some(s.accumulator) == kind(c.elem)
                            });
                            (!exact).then(|| {
                                format!(
                                    "`coop.mma` of shape {}x{}x{} with {:?} factors and a {:?} accumulator",
                                    a.rows, b.cols, a.cols, a.elem, c.elem
                                )
                                .to_lowercase()
                            })
                        }
                        _ => None,
                    }
                }
                OpKind::CoopLoad { .. } | OpKind::CoopZero => {
                    op.results.first().and_then(|r| match kernel.ty(*r) {
                        Some(Type::CoopMat(m)) if !offered(&shapes, m) => {
                            Some(format!("a {}x{} {:?} matrix in role {:?}", m.rows, m.cols, m.elem, m.role).to_lowercase())
                        }
                        _ => None,
                    })
                }
                _ => None,
            };
            if let Some(what) = problem {
                let msg = format!(
                    "target `{}` does not offer {what}; it offers (m x n x k input->accumulator): {}",
                    self.target.name,
                    listing(&shapes)
                );
                self.diags.error(op.span, E_UNSUPPORTED, msg);
                failed = true;
            }
        });
        if failed { Err(super::Fail) } else { Ok(()) }
    }

    /// Lower one `coop.*` op.
    pub(super) fn coop_op(&mut self, op: &Op) -> R<()> {
        let span = op.span;
        match &op.kind {
            OpKind::CoopZero => {
                let r = self.result(&op.results, span)?;
                let t = self.ty_of(r, span)?;
                let ty = self.value_type(&t, span)?;
                let v = self.fb.expr(Expression::ZeroValue(ty));
                self.set(r, Val::Expr(v));
            }
            OpKind::CoopMma(a, b, c) => {
                let r = self.result(&op.results, span)?;
                let (a, b, c) = (
                    self.val(*a, span)?,
                    self.val(*b, span)?,
                    self.val(*c, span)?,
                );
                let v = self.fb.expr(Expression::CooperativeMultiplyAdd { a, b, c });
                self.set(r, Val::Expr(v));
            }
            OpKind::CoopLoad {
                view,
                indices,
                col_major,
            } => {
                let r = self.result(&op.results, span)?;
                let Type::CoopMat(m) = self.ty_of(r, span)? else {
                    return Err(self.bug(span, "coop.load without a coopmat result"));
                };
                let data = self.coop_data(*view, indices, *col_major, span)?;
                let (Some(rows), Some(columns)) = (size(m.rows), size(m.cols)) else {
                    return Err(self.bug(span, "bad cooperative matrix size"));
                };
                // The result type must exist in the arena for the SPIR-V
                // writer to declare the extension.
                self.value_type(&Type::CoopMat(m), span)?;
                let v = self.fb.expr(Expression::CooperativeLoad {
                    columns,
                    rows,
                    role: role(m.role),
                    data,
                });
                self.set(r, Val::Expr(v));
            }
            OpKind::CoopStore {
                value,
                view,
                indices,
                col_major,
            } => {
                let target = self.val(*value, span)?;
                let data = self.coop_data(*view, indices, *col_major, span)?;
                self.fb.stmt(Statement::CooperativeStore { target, data });
            }
            _ => return Err(self.bug(span, "not a coop op")),
        }
        Ok(())
    }

    /// Pointer to the first element, the view's row length as the stride.
    fn coop_data(
        &mut self,
        view: ValueId,
        indices: &[ValueId],
        col_major: bool,
        span: Span,
    ) -> R<CooperativeData> {
        let (pointer, stride) = self.coop_pointer(view, indices, span)?;
        Ok(CooperativeData {
            pointer,
            stride,
            row_major: !col_major,
        })
    }
}

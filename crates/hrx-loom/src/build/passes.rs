//! Passes over built code: [`Fragment`]s (parameterised op sequences such
//! as an activation function), inlined with fresh names
//! ([`Builder::inline`], the rename pass) and rewritten for vectors
//! ([`vectorize`]).
//!
//! Both passes work on the syntax tree, before verification, so whatever
//! they produce is verified like any kernel: a pass can make a kernel
//! fail to compile, never compile to something unchecked.

use super::Builder;
use super::value::{Num, Ty, Value, ident, type_expr};
use crate::front::ast::{DimExpr, Form, Ident, LiteralTok, Op, TypeExpr, TypeKind};
use crate::front::span::Span;
use crate::ir::Scalar;
use hrx_core::{Error, Result};
use std::collections::{HashMap, HashSet};

/// A straight or structured op sequence over parameters, producing
/// results: built once, inlined into any number of kernels.
#[derive(Clone, Debug, PartialEq)]
pub struct Fragment {
    params: Vec<(String, Ty)>,
    ops: Vec<Op>,
    results: Vec<(String, Ty)>,
}

impl Fragment {
    /// A fragment over parameters of types `params`: `body` builds its ops
    /// from the parameter values and returns its results.
    pub fn build(
        params: &[Ty],
        body: impl FnOnce(&mut Builder, &[Value<Num>]) -> Vec<Value<Num>>,
    ) -> Fragment {
        let mut b = Builder::new();
        let args: Vec<Value<Num>> = params
            .iter()
            .enumerate()
            .map(|(i, t)| b.define(&format!("p{i}"), t.clone()))
            .collect();
        let results = body(&mut b, &args);
        let slot = |b: &Builder, v: Value<Num>| (b.name(v).to_string(), b.ty(v).clone());
        Fragment {
            params: args.iter().map(|v| slot(&b, *v)).collect(),
            results: results.iter().map(|v| slot(&b, *v)).collect(),
            ops: b.take_function(),
        }
    }

    /// A fragment of one parameter and one result.
    pub fn unary(ty: Ty, body: impl FnOnce(&mut Builder, Value<Num>) -> Value<Num>) -> Fragment {
        Fragment::build(&[ty], |b, p| vec![body(b, p[0])])
    }

    /// The ops (for inspection and tests).
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Parameter types.
    pub fn param_types(&self) -> impl Iterator<Item = &Ty> {
        self.params.iter().map(|(_, t)| t)
    }

    /// Result types.
    pub fn result_types(&self) -> impl Iterator<Item = &Ty> {
        self.results.iter().map(|(_, t)| t)
    }
}

impl Builder {
    /// Append `fragment` with its parameters bound to `args`, every value it
    /// defines renamed to a fresh name of this function (the rename pass):
    /// the fragment's results, as values of this builder. A missing
    /// argument leaves its parameter unbound, which the verifier reports.
    pub fn inline(&mut self, fragment: &Fragment, args: &[Value<Num>]) -> Vec<Value<Num>> {
        let mut names: HashMap<String, String> = fragment
            .params
            .iter()
            .zip(args)
            .map(|((p, _), a)| (p.clone(), self.name(*a).to_string()))
            .collect();
        let mut ops = fragment.ops.clone();
        for op in &mut ops {
            self.rename_op(op, &mut names);
        }
        if let Some(region) = self.regions.last_mut() {
            region.extend(ops);
        }
        fragment
            .results
            .iter()
            .map(|(name, ty)| {
                let name = names.get(name).cloned().unwrap_or_else(|| name.clone());
                self.values.push(super::Slot {
                    name,
                    ty: ty.clone(),
                });
                Value::new((self.values.len() - 1) as u32)
            })
            .collect()
    }

    fn rename_op(&mut self, op: &mut Op, names: &mut HashMap<String, String>) {
        let fresh = |b: &mut Builder, id: &mut Ident, names: &mut HashMap<String, String>| {
            let new = b.fresh_name(&id.text);
            names.insert(id.text.clone(), new.clone());
            id.text = new;
        };
        visit_uses(op, &mut |id| {
            if let Some(n) = names.get(&id.text) {
                id.text = n.clone();
            }
        });
        match &mut op.form {
            Form::For {
                iv,
                iter_args,
                body,
                ..
            } => {
                fresh(self, iv, names);
                for a in iter_args.iter_mut() {
                    fresh(self, &mut a.name, names);
                }
                for inner in &mut body.ops {
                    self.rename_op(inner, names);
                }
            }
            Form::If {
                then, otherwise, ..
            } => {
                for inner in then
                    .ops
                    .iter_mut()
                    .chain(otherwise.iter_mut().flat_map(|r| r.ops.iter_mut()))
                {
                    self.rename_op(inner, names);
                }
            }
            _ => {}
        }
        for r in &mut op.results {
            fresh(self, r, names);
        }
    }
}

/// Call `f` on every value an op's header uses (operands, bounds, initial
/// values, view extents in its types), not on those inside its regions.
fn visit_uses(op: &mut Op, f: &mut dyn FnMut(&mut Ident)) {
    fn ty(t: &mut TypeExpr, f: &mut dyn FnMut(&mut Ident)) {
        match &mut t.kind {
            TypeKind::View { dims, elem } => {
                for d in dims {
                    if let DimExpr::Dynamic(id) = d {
                        f(id);
                    }
                }
                ty(elem, f);
            }
            TypeKind::Vector { elem, .. } | TypeKind::CoopMat { elem, .. } => ty(elem, f),
            TypeKind::Named(_) => {}
        }
    }
    match &mut op.form {
        Form::Constant { ty: t, .. } | Form::ConfigValue { ty: t, .. } => ty(t, f),
        Form::Operands {
            operands,
            types,
            to,
        } => {
            operands.iter_mut().for_each(&mut *f);
            types.iter_mut().chain(to.iter_mut()).for_each(|t| ty(t, f));
        }
        Form::Compare {
            operands, ty: t, ..
        } => {
            operands.iter_mut().for_each(&mut *f);
            ty(t, f);
        }
        Form::Access {
            value,
            base,
            indices,
            types,
            to,
        } => {
            value.iter_mut().for_each(&mut *f);
            f(base);
            indices.iter_mut().for_each(&mut *f);
            types.iter_mut().chain(to.iter_mut()).for_each(|t| ty(t, f));
        }
        Form::Alloca { bytes, ty: t, .. } => {
            f(bytes);
            ty(t, f);
        }
        Form::LaunchConfig {
            workgroups,
            workgroup_size,
            ty: t,
        } => {
            workgroups
                .iter_mut()
                .chain(workgroup_size.iter_mut())
                .for_each(&mut *f);
            ty(t, f);
        }
        Form::Barrier { .. } | Form::Bare => {}
        Form::If { cond, results, .. } => {
            f(cond);
            results.iter_mut().for_each(|t| ty(t, f));
        }
        Form::For {
            lower,
            upper,
            step,
            iter_args,
            results,
            ..
        } => {
            f(lower);
            f(upper);
            f(step);
            for a in iter_args.iter_mut() {
                f(&mut a.init);
                ty(&mut a.ty, f);
            }
            results.iter_mut().for_each(|t| ty(t, f));
        }
    }
}

/// Float ops that act lane by lane on vectors, with their operand type as
/// the one type they carry.
const LANEWISE: &[&str] = &[
    "scalar.addf",
    "scalar.subf",
    "scalar.mulf",
    "scalar.divf",
    "scalar.maxnumf",
    "scalar.minnumf",
    "scalar.fmaf",
    "scalar.negf",
    "scalar.absf",
    "scalar.expf",
    "scalar.logf",
    "scalar.sqrtf",
    "scalar.rsqrtf",
    "scalar.tanhf",
];

/// `fragment`, written over float scalars, rewritten to act on
/// `vector<lanes x elem>`: parameters and results become vectors, each
/// float constant a constant and a `vector.splat`, each lane-wise float op
/// changes its type. Fragments holding anything else (compares, integer
/// or conversion ops, selects, loops) have no such form: the error names
/// the first op in the way.
pub fn vectorize(fragment: &Fragment, lanes: u8) -> Result<Fragment> {
    let refuse = |what: &str| {
        Err(Error::Message(format!(
            "vectorize: {what} has no {lanes}-lane form"
        )))
    };
    let widen = |t: &Ty| match t {
        Ty::Scalar(s) if s.is_float() => Ok(Ty::vector(lanes, *s)),
        other => Err(Error::Message(format!(
            "vectorize: a value of type {other:?} has no {lanes}-lane form"
        ))),
    };
    let no_names = |_: u32| String::new();
    let mut taken: HashSet<String> = fragment
        .params
        .iter()
        .map(|(n, _)| n.clone())
        .chain(
            fragment
                .ops
                .iter()
                .flat_map(|o| o.results.iter().map(|r| r.text.clone())),
        )
        .collect();
    let mut ops = Vec::with_capacity(fragment.ops.len() * 2);
    for op in &fragment.ops {
        let name = op.name.text.as_str();
        match &op.form {
            Form::Constant { value, ty } if scalar_of(ty).is_some_and(Scalar::is_float) => {
                let elem = scalar_of(ty).unwrap_or(Scalar::F32);
                let [result] = op.results.as_slice() else {
                    return refuse(&format!("`{name}` with {} results", op.results.len()));
                };
                let lane = (1..)
                    .map(|i| {
                        format!(
                            "{}_s{}",
                            result.text,
                            if i == 1 { String::new() } else { i.to_string() }
                        )
                    })
                    .find(|n| !taken.contains(n))
                    .unwrap_or_default();
                taken.insert(lane.clone());
                let scalar_ty = type_expr(&Ty::Scalar(elem), &no_names);
                ops.push(Op {
                    results: vec![ident(lane.clone())],
                    form: Form::Constant {
                        value: LiteralTok {
                            span: Span::default(),
                            ..value.clone()
                        },
                        ty: scalar_ty.clone(),
                    },
                    ..op.clone()
                });
                ops.push(Op {
                    results: vec![result.clone()],
                    name: ident("vector.splat"),
                    tag: None,
                    form: Form::Operands {
                        operands: vec![ident(lane)],
                        types: vec![scalar_ty],
                        to: Some(type_expr(&Ty::vector(lanes, elem), &no_names)),
                    },
                    span: Span::default(),
                });
            }
            Form::Operands {
                operands,
                types,
                to: None,
            } if LANEWISE.contains(&name) && types.len() == 1 => {
                let Some(elem) = scalar_of(&types[0]).filter(|s| s.is_float()) else {
                    return refuse(&format!(
                        "`{name}` over {}",
                        crate::front::printer::ty(&types[0])
                    ));
                };
                ops.push(Op {
                    form: Form::Operands {
                        operands: operands.clone(),
                        types: vec![type_expr(&Ty::vector(lanes, elem), &no_names)],
                        to: None,
                    },
                    ..op.clone()
                });
            }
            _ => return refuse(&format!("`{name}`")),
        }
    }
    let widen_all = |list: &[(String, Ty)]| -> Result<Vec<(String, Ty)>> {
        list.iter()
            .map(|(n, t)| Ok((n.clone(), widen(t)?)))
            .collect()
    };
    Ok(Fragment {
        params: widen_all(&fragment.params)?,
        ops,
        results: widen_all(&fragment.results)?,
    })
}

/// The scalar a written type names, if it is one.
fn scalar_of(t: &TypeExpr) -> Option<Scalar> {
    match &t.kind {
        TypeKind::Named(n) => match n.as_str() {
            "f32" => Some(Scalar::F32),
            "f16" => Some(Scalar::F16),
            "i32" => Some(Scalar::I32),
            "u32" => Some(Scalar::U32),
            _ => None,
        },
        _ => None,
    }
}

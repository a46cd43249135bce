//! Host-side evaluation of index arithmetic: the launch region (workload
//! values to a grid) and compile-time quantities (workgroup size, alloca
//! sizes) given config values.
//!
//! Values are 32-bit patterns, as on the device. Unlike the device, the host
//! refuses to wrap: an overflowing add, subtract or multiply, and a division
//! or remainder by zero, make the value (and everything computed from it)
//! fail with an [`EvalError`], because a wrapped grid is never what the
//! author meant.

use super::{IndexBinary, IntPredicate, Kernel, Literal, Op, OpKind, ValueId};
use crate::front::span::Span;

/// Why a value could not be computed on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalError {
    /// What went wrong, naming the value.
    pub message: String,
    /// The op that failed (or the launch config).
    pub span: Span,
}

/// The result of a launch region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchGrid {
    /// Workgroup counts x, y, z.
    pub workgroups: [u32; 3],
    /// Workgroup size x, y, z.
    pub workgroup_size: [u32; 3],
}

#[derive(Clone, Debug)]
enum Slot {
    Unknown,
    Known(u32),
    Failed(EvalError),
}

/// Every value of a kernel that index arithmetic could compute.
#[derive(Clone, Debug)]
pub struct Evaluation {
    slots: Vec<Slot>,
}

impl Evaluation {
    /// The 32-bit value of `id`, or why it has none (it fails, or it is not
    /// host-computable: it depends on device state or missing workload).
    pub fn get(&self, kernel: &Kernel, id: ValueId) -> Result<u32, EvalError> {
        match self.slots.get(id.index()) {
            Some(Slot::Known(v)) => Ok(*v),
            Some(Slot::Failed(e)) => Err(e.clone()),
            _ => Err(EvalError {
                message: format!(
                    "%{} is not computable on the host",
                    kernel.value_names.get(id.index()).map_or("?", |s| s)
                ),
                span: kernel.launch_config.span,
            }),
        }
    }
}

/// The bit pattern of a config literal, as index arithmetic sees it.
pub(crate) fn literal_bits(lit: Literal) -> u32 {
    match lit {
        Literal::Bool(b) => u32::from(b),
        // Literals are range-checked for their type before they get here; a
        // negative i32 keeps its two's complement bits.
        Literal::Int(i) => i as u32,
        Literal::Float(f) => (f as f32).to_bits(),
    }
}

impl Kernel {
    /// Evaluate every host-computable value. `workload` gives the workload
    /// arguments (all unknown when `None`); `config` gives a config key's
    /// value (callers fall back to the declaration's default).
    pub fn evaluate(
        &self,
        workload: Option<&[u32]>,
        config: &dyn Fn(&str) -> Option<Literal>,
    ) -> Evaluation {
        let mut slots = vec![Slot::Unknown; self.value_types.len()];
        if let Some(values) = workload {
            for (arg, v) in self.workload_args.iter().zip(values) {
                if let Some(s) = slots.get_mut(arg.id.index()) {
                    *s = Slot::Known(*v);
                }
            }
        }
        // Program order guarantees operands are visited before their uses;
        // an explicit stack keeps deep nesting off the call stack.
        let mut stack: Vec<std::slice::Iter<'_, Op>> =
            vec![self.body.ops.iter(), self.launch.iter()];
        while let Some(top) = stack.last_mut() {
            let Some(op) = top.next() else {
                stack.pop();
                continue;
            };
            match &op.kind {
                OpKind::If {
                    then, otherwise, ..
                } => {
                    if let Some(b) = otherwise {
                        stack.push(b.ops.iter());
                    }
                    stack.push(then.ops.iter());
                }
                OpKind::For { body, .. } => stack.push(body.ops.iter()),
                kind => {
                    if let Some(slot) = self.eval_op(kind, op, &slots, config)
                        && let Some(r) = op.results.first().and_then(|r| slots.get_mut(r.index()))
                    {
                        *r = slot;
                    }
                }
            }
        }
        Evaluation { slots }
    }

    fn eval_op(
        &self,
        kind: &OpKind,
        op: &Op,
        slots: &[Slot],
        config: &dyn Fn(&str) -> Option<Literal>,
    ) -> Option<Slot> {
        let get = |id: &ValueId| -> Result<u32, Option<EvalError>> {
            match slots.get(id.index()) {
                Some(Slot::Known(v)) => Ok(*v),
                Some(Slot::Failed(e)) => Err(Some(e.clone())),
                _ => Err(None),
            }
        };
        let name = op
            .results
            .first()
            .and_then(|r| self.value_names.get(r.index()))
            .map_or("?", |s| s.as_str());
        let fail = |what: &str| {
            Slot::Failed(EvalError {
                message: format!("%{name}: {what}"),
                span: op.span,
            })
        };
        let computed: Result<Result<u32, &str>, Option<EvalError>> = (|| {
            Ok(match kind {
                OpKind::IndexConstant(v) => Ok(*v),
                OpKind::ScalarConstant(lit) => Ok(literal_bits(*lit)),
                OpKind::ConfigValue(key) => match config(key) {
                    Some(lit) => Ok(literal_bits(lit)),
                    None => Err("config value is not set"),
                },
                OpKind::IndexCast { value, .. } => Ok(get(value)?),
                OpKind::IndexBinary(b, x, y) => binary(*b, get(x)?, get(y)?),
                OpKind::IndexMadd(a, b, c) => {
                    let (a, b, c) = (get(a)?, get(b)?, get(c)?);
                    a.checked_mul(b)
                        .and_then(|p| p.checked_add(c))
                        .ok_or("index.madd overflows 32 bits")
                }
                OpKind::IndexCmp(p, x, y) => Ok(u32::from(compare(*p, get(x)?, get(y)?))),
                _ => return Err(None),
            })
        })();
        match computed {
            Ok(Ok(v)) => Some(Slot::Known(v)),
            Ok(Err(what)) => Some(fail(what)),
            Err(Some(e)) => Some(Slot::Failed(e)),
            Err(None) => None,
        }
    }

    /// Evaluate the launch region: workload values to the grid.
    pub fn launch_grid(
        &self,
        workload: &[u32],
        config: &dyn Fn(&str) -> Option<Literal>,
    ) -> Result<LaunchGrid, EvalError> {
        if workload.len() != self.workload_args.len() {
            return Err(EvalError {
                message: format!(
                    "@{} takes {} workload values, {} given",
                    self.name,
                    self.workload_args.len(),
                    workload.len()
                ),
                span: self.span,
            });
        }
        let eval = self.evaluate(Some(workload), config);
        let lc = &self.launch_config;
        let mut grid = LaunchGrid {
            workgroups: [0; 3],
            workgroup_size: [0; 3],
        };
        for axis in 0..3 {
            grid.workgroups[axis] = eval.get(self, lc.workgroups[axis])?;
            grid.workgroup_size[axis] = eval.get(self, lc.workgroup_size[axis])?;
        }
        Ok(grid)
    }

    /// The workgroup size under a specialization (no workload needed).
    pub fn workgroup_size(
        &self,
        config: &dyn Fn(&str) -> Option<Literal>,
    ) -> Result<[u32; 3], EvalError> {
        let eval = self.evaluate(None, config);
        let mut size = [0; 3];
        for (axis, id) in self.launch_config.workgroup_size.iter().enumerate() {
            size[axis] = eval.get(self, *id)?;
        }
        Ok(size)
    }
}

fn binary(op: IndexBinary, a: u32, b: u32) -> Result<u32, &'static str> {
    match op {
        IndexBinary::Add => a.checked_add(b).ok_or("index.add overflows 32 bits"),
        IndexBinary::Sub => a.checked_sub(b).ok_or("index.sub goes below zero"),
        IndexBinary::Mul => a.checked_mul(b).ok_or("index.mul overflows 32 bits"),
        IndexBinary::Div => a.checked_div(b).ok_or("index.div by zero"),
        IndexBinary::Rem => a.checked_rem(b).ok_or("index.rem by zero"),
        IndexBinary::Min => Ok(a.min(b)),
        IndexBinary::Max => Ok(a.max(b)),
    }
}

fn compare(p: IntPredicate, a: u32, b: u32) -> bool {
    let (sa, sb) = (a as i32, b as i32);
    match p {
        IntPredicate::Eq => a == b,
        IntPredicate::Ne => a != b,
        IntPredicate::Ult => a < b,
        IntPredicate::Ule => a <= b,
        IntPredicate::Ugt => a > b,
        IntPredicate::Uge => a >= b,
        IntPredicate::Slt => sa < sb,
        IntPredicate::Sle => sa <= sb,
        IntPredicate::Sgt => sa > sb,
        IntPredicate::Sge => sa >= sb,
    }
}

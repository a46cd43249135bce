//! Reductions over one axis (sum, max, mean) and argmax over the last axis.

use super::{
    Ops,
    indexing::coalesce,
    operand::{check_inputs, check_output, operand},
    registry::KernelKey,
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

const REDUCE: &str = include_str!("../../kernels/reduce.loom");
const ARGMAX: &str = include_str!("../../kernels/argmax.loom");

/// A reduction over one axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The sum (0 over an empty axis).
    Sum,
    /// The maximum (-inf over an empty axis; NaN elements are skipped).
    Max,
    /// The mean (NaN over an empty axis).
    Mean,
}

fn index(v: usize) -> ScalarValue {
    ScalarValue::Index(v as u64)
}

/// `desc` seen as `[outer, axis, inner]`: extents and strides.
fn split(desc: &TensorDesc, axis: usize, operation: &str) -> Result<[(usize, usize); 3]> {
    let (shape, strides) = (desc.shape(), desc.strides());
    let merge = |range: std::ops::Range<usize>| {
        coalesce(&shape[range.clone()], &[strides[range].to_vec()], 1)
            .map(|(d, s)| (d[0], s[0][0]))
            .ok_or_else(|| {
                Error::Unsupported(format!("{operation}: the axes around {axis} do not merge"))
            })
    };
    Ok([
        merge(0..axis)?,
        (shape[axis], strides[axis]),
        merge(axis + 1..shape.len())?,
    ])
}

impl Ops {
    /// Record `out = reduction(a)` over `axis` (removed from the shape).
    /// f32; `a` may be strided.
    pub fn record_reduce(
        &self,
        graph: &mut Graph,
        reduction: Reduction,
        a: &DeviceTensor,
        axis: usize,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("{reduction:?} of {} over axis {axis}", a.desc()).to_lowercase();
        let operation = operation.as_str();
        let shape = reduced_shape(a.desc(), axis, operation)?;
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a])?;
        if a.desc().dtype() != DType::F32 {
            return Err(Error::Unsupported(format!("{operation}: f32 only")));
        }
        check_output(runtime, operation, out, DType::F32, &shape)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        // Axes that do not merge (e.g. a padded inner axis) are packed first.
        // An empty input reads nothing, so its strides do not matter: plan
        // it as if contiguous.
        let packed;
        let planned;
        let (a, plan) = if a.desc().is_empty() {
            planned = TensorDesc::new(DType::F32, a.desc().shape().to_vec())?;
            (a, &planned)
        } else {
            let a = match split(a.desc(), axis, operation) {
                Ok(_) => a,
                Err(_) => {
                    packed = self.record_contiguous(graph, a)?;
                    &packed
                }
            };
            (a, a.desc())
        };
        let [(_, so), (len, sk), (inner, si)] = split(plan, axis, operation)?;
        let target = self.registry.target()?;
        let ko = operand(out, &target, operation)?;
        // An empty axis reads nothing: bind the zeros in place of `a`.
        let ka = if a.desc().is_empty() {
            super::operand::Operand {
                view: self.registry.zeros()?,
                offset: 0,
                len: 4,
            }
        } else {
            operand(a, &target, operation)?
        };
        let (init, step, finish) = match reduction {
            Reduction::Sum => (
                "0.0",
                "      %acc2 = scalar.addf %acc, %x : f32",
                "    %res = scalar.addf %total, %init : f32",
            ),
            Reduction::Max => (
                "-inf",
                "      %acc2 = scalar.maxnumf %acc, %x : f32",
                "    %res = scalar.maxnumf %total, %init : f32",
            ),
            Reduction::Mean => (
                "0.0",
                "      %acc2 = scalar.addf %acc, %x : f32",
                "    %res = scalar.divf %total, %nf : f32",
            ),
        };
        let kernel = self.registry.kernel(KernelKey {
            template: REDUCE,
            substitutions: vec![
                ("INIT", init.into()),
                ("STEP", step.into()),
                ("FINISH", finish.into()),
            ],
            symbol: "reduce",
            config: Vec::new(),
        })?;
        let n = out.desc().elements();
        let scalars: Vec<ScalarValue> = [n, len, inner.max(1), so, sk, si]
            .map(index)
            .into_iter()
            .chain(ka.scalars())
            .chain(ko.scalars())
            .collect();
        kernel.record(graph, operation, &[ka.view, ko.view], &scalars, &[n as u64])
    }

    /// `reduction(a)` over `axis`, run eagerly.
    pub fn reduce(
        &self,
        reduction: Reduction,
        a: &DeviceTensor,
        axis: usize,
    ) -> Result<DeviceTensor> {
        let operation = format!("{reduction:?} of {} over axis {axis}", a.desc()).to_lowercase();
        let desc = TensorDesc::new(DType::F32, reduced_shape(a.desc(), axis, &operation)?)?;
        self.eager(&[a], desc, |g, out| {
            self.record_reduce(g, reduction, a, axis, out)
        })
    }

    /// Record `out = argmax(a)` over the last axis (first index of the
    /// largest value), as i32 with the last axis removed. f32 input with a
    /// non-empty last axis.
    pub fn record_argmax(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("argmax of {}", a.desc());
        let operation = operation.as_str();
        let rank = a.desc().rank();
        if rank == 0 || a.desc().shape()[rank - 1] == 0 {
            return Err(Error::Message(format!(
                "{operation}: the last axis must be non-empty"
            )));
        }
        let shape = reduced_shape(a.desc(), rank - 1, operation)?;
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a])?;
        if a.desc().dtype() != DType::F32 {
            return Err(Error::Unsupported(format!("{operation}: f32 only")));
        }
        check_output(runtime, operation, out, DType::I32, &shape)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let packed;
        let a = match split(a.desc(), rank - 1, operation) {
            Ok(_) => a,
            Err(_) => {
                packed = self.record_contiguous(graph, a)?;
                &packed
            }
        };
        let [(rows, srow), (cols, scol), _] = split(a.desc(), rank - 1, operation)?;
        let target = self.registry.target()?;
        let (ka, ko) = (
            operand(a, &target, operation)?,
            operand(out, &target, operation)?,
        );
        let kernel = self.registry.kernel(KernelKey {
            template: ARGMAX,
            substitutions: Vec::new(),
            symbol: "argmax",
            config: Vec::new(),
        })?;
        let scalars: Vec<ScalarValue> = [rows, cols, srow, scol]
            .map(index)
            .into_iter()
            .chain(ka.scalars())
            .chain(ko.scalars())
            .collect();
        kernel.record(
            graph,
            operation,
            &[ka.view, ko.view],
            &scalars,
            &[rows as u64],
        )
    }

    /// Argmax over the last axis, run eagerly.
    pub fn argmax(&self, a: &DeviceTensor) -> Result<DeviceTensor> {
        let operation = format!("argmax of {}", a.desc());
        let rank = a.desc().rank();
        let axis = rank
            .checked_sub(1)
            .ok_or_else(|| Error::Message(format!("{operation}: a scalar has no last axis")))?;
        let desc = TensorDesc::new(DType::I32, reduced_shape(a.desc(), axis, &operation)?)?;
        self.eager(&[a], desc, |g, out| self.record_argmax(g, a, out))
    }
}

fn reduced_shape(desc: &TensorDesc, axis: usize, operation: &str) -> Result<Vec<usize>> {
    if axis >= desc.rank() {
        return Err(Error::Message(format!(
            "{operation}: axis {axis} is out of range for rank {}",
            desc.rank()
        )));
    }
    let mut shape = desc.shape().to_vec();
    shape.remove(axis);
    Ok(shape)
}

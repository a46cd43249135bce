//! Reductions over one axis (sum, max, mean) and argmax over the last axis.
//!
//! Argmax takes one of two kernels: rows shorter than `LONG_ROW` (256; or
//! a device without subgroup arithmetic) the serial one, a work item per
//! row; longer rows the row-parallel one, a workgroup per row (see
//! `argmax_kernel`). Both give the first index
//! of the largest value, NaN never winning.

pub(super) mod argmax_kernel;
pub(super) mod kernel;
pub(super) mod top_k;
pub(super) mod top_k_kernel;

use crate::ops::{
    Ops,
    indexing::coalesce,
    operand::{Operand, check_inputs, check_output, operand},
    registry::{Generator, Kernel, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor, TensorDesc};
use argmax_kernel::ArgmaxShape;
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::{BufferView, Graph};

const ARGMAX: &str = include_str!("../../../kernels/argmax.loom");

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

fn reduce_key(reduction: Reduction, config: Vec<(&'static str, u64)>) -> KernelKey {
    KernelKey {
        source: KernelSource::Built(Generator::new(format!("reduce {reduction:?}"), move || {
            kernel::reduce(reduction)
        })),
        symbol: "reduce",
        config,
    }
}

fn argmax_key(config: Vec<(&'static str, u64)>) -> KernelKey {
    KernelKey {
        source: KernelSource::Text(ARGMAX),
        symbol: "argmax",
        config,
    }
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

/// One kernel launch with every fallible preparation done, so that
/// recording it fails only where the graph itself refuses it.
struct Dispatch {
    kernel: Kernel,
    views: [BufferView; 2],
    scalars: Vec<ScalarValue>,
    workload: u64,
}

impl Dispatch {
    fn new(kernel: Kernel, input: Operand, out: Operand, sizes: &[usize], workload: usize) -> Self {
        let scalars = sizes
            .iter()
            .map(|&v| index(v))
            .chain(input.scalars())
            .chain(out.scalars())
            .collect();
        Dispatch {
            kernel,
            views: [input.view, out.view],
            scalars,
            workload: workload as u64,
        }
    }

    fn record(&self, graph: &mut Graph, operation: &str) -> Result<()> {
        self.kernel.record(
            graph,
            operation,
            &self.views,
            &self.scalars,
            &[self.workload],
        )
    }
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
        self.check_reduction(operation, a, out, DType::F32, &shape)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let packed = self.packing(a, axis, operation)?;
        let config = self.grid_config("reduce.wg", "reduce.max_groups")?;
        let dispatch = self.reduce_dispatch(
            reduction,
            packed.as_ref().unwrap_or(a),
            axis,
            out,
            config,
            operation,
        )?;
        self.record_after_packing(graph, a, packed.as_ref(), |g, _| {
            dispatch.record(g, operation)
        })
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
        self.check_reduction(operation, a, out, DType::I32, &shape)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let packed = self.packing(a, rank - 1, operation)?;
        let config = self.grid_config("argmax.wg", "argmax.max_groups")?;
        let dispatch =
            self.argmax_dispatch(packed.as_ref().unwrap_or(a), out, config, operation)?;
        self.record_after_packing(graph, a, packed.as_ref(), |g, _| {
            dispatch.record(g, operation)
        })
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

    /// The checks every reduction makes: `a` and `out` in this domain, `a`
    /// f32, `out` a contiguous `dtype` tensor of `shape`.
    fn check_reduction(
        &self,
        operation: &str,
        a: &DeviceTensor,
        out: &DeviceTensor,
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a])?;
        if a.desc().dtype() != DType::F32 {
            return Err(Error::Unsupported(format!("{operation}: f32 only")));
        }
        check_output(runtime, operation, out, dtype, shape)
    }

    /// Storage for a packed copy of `a` when the axes around `axis` do not
    /// merge (e.g. a padded inner axis); the copy itself is left to
    /// [`Ops::record_after_packing`]. An empty input reads nothing, so it is never
    /// packed.
    fn packing(
        &self,
        a: &DeviceTensor,
        axis: usize,
        operation: &str,
    ) -> Result<Option<DeviceTensor>> {
        if a.desc().is_empty() || split(a.desc(), axis, operation).is_ok() {
            return Ok(None);
        }
        self.packing_storage(a).map(Some)
    }

    /// The reduce kernel's launch for a non-empty `out`; `a`'s axes around
    /// `axis` merge (or `a` is empty).
    fn reduce_dispatch(
        &self,
        reduction: Reduction,
        a: &DeviceTensor,
        axis: usize,
        out: &DeviceTensor,
        config: Vec<(&'static str, u64)>,
        operation: &str,
    ) -> Result<Dispatch> {
        let target = self.registry.target()?;
        // An empty input (an empty axis, as `out` is not empty) reads
        // nothing: plan it as if contiguous and bind the zeros in its place.
        let (plan, ka) = if a.desc().is_empty() {
            let plan = TensorDesc::new(DType::F32, a.desc().shape().to_vec())?;
            let zeros = Operand {
                view: self.registry.zeros()?,
                offset: 0,
                len: 4,
            };
            (plan, zeros)
        } else {
            (a.desc().clone(), operand(a, &target, operation)?)
        };
        let [(_, so), (len, sk), (inner, si)] = split(&plan, axis, operation)?;
        let ko = operand(out, &target, operation)?;
        let kernel = self.registry.kernel(reduce_key(reduction, config))?;
        let n = out.desc().elements();
        let sizes = [n, len, inner.max(1), so, sk, si];
        Ok(Dispatch::new(kernel, ka, ko, &sizes, n))
    }

    /// The argmax kernel's launch for a non-empty `a` and `out`; `a`'s
    /// axes before the last merge. The row-parallel kernel for long rows
    /// (its shape from the target), else the serial one with `config`.
    fn argmax_dispatch(
        &self,
        a: &DeviceTensor,
        out: &DeviceTensor,
        config: Vec<(&'static str, u64)>,
        operation: &str,
    ) -> Result<Dispatch> {
        let target = self.registry.target()?;
        let cols = a.desc().shape()[a.desc().rank() - 1];
        let key = match ArgmaxShape::for_rows(&target, cols) {
            Some(shape) => shape.key(),
            None => argmax_key(config),
        };
        self.argmax_launch(a, out, key, operation)
    }

    /// The launch of either argmax kernel (they share their arguments:
    /// `rows, cols, srow, scol`, then the operands).
    fn argmax_launch(
        &self,
        a: &DeviceTensor,
        out: &DeviceTensor,
        key: KernelKey,
        operation: &str,
    ) -> Result<Dispatch> {
        let [(rows, srow), (cols, scol), _] = split(a.desc(), a.desc().rank() - 1, operation)?;
        let target = self.registry.target()?;
        let (ka, ko) = (
            operand(a, &target, operation)?,
            operand(out, &target, operation)?,
        );
        let kernel = self.registry.kernel(key)?;
        Ok(Dispatch::new(
            kernel,
            ka,
            ko,
            &[rows, cols, srow, scol],
            rows,
        ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;
    use hrx_loom::{Compiler, Specialization};
    use hrx_runtime::Runtime;

    /// The config for a device of at most 64 invocations a workgroup and 4
    /// workgroups a dispatch (what `grid_config` picks for such a target).
    fn small(kernel: &str) -> Vec<(&'static str, u64)> {
        match kernel {
            "reduce" => vec![("reduce.wg", 64), ("reduce.max_groups", 4)],
            _ => vec![("argmax.wg", 64), ("argmax.max_groups", 4)],
        }
    }

    fn keys() -> Vec<KernelKey> {
        [Reduction::Sum, Reduction::Max, Reduction::Mean]
            .map(|r| reduce_key(r, small("reduce")))
            .into_iter()
            .chain([argmax_key(small("argmax"))])
            .collect()
    }

    /// Neither kernel hard-codes a workgroup or grid the target cannot take.
    #[test]
    fn kernels_fit_a_target_with_small_limits() {
        let mut target = Target::lavapipe();
        target.max_workgroup_invocations = 64;
        target.max_workgroup_count[0] = 4;
        let compiler = Compiler::for_target(None, &target).unwrap();
        for key in keys() {
            let module = compiler.module(&key.source()).unwrap();
            let spec = key.config.iter().fold(
                Specialization::new(format!("@{}", key.symbol)),
                |s, &(k, v)| s.with_config(k, v),
            );
            let artifact = module.compile(&spec).unwrap();
            assert_eq!(artifact.workgroup_size(), [64, 1, 1], "{}", key.symbol);
            assert_eq!(artifact.launch(&[100]).unwrap(), [2, 1, 1]);
            assert_eq!(artifact.launch(&[1 << 24]).unwrap(), [4, 1, 1]);
        }
    }

    /// Run `dispatch` writing `out` (first filled with a pattern no result
    /// has: NaN as f32, -1 as i32) after `a`'s producer; the first output
    /// that differs from `want`.
    fn first_wrong(
        rt: &Runtime,
        a: &DeviceTensor,
        mut out: DeviceTensor,
        dispatch: &Dispatch,
        want: &[f64],
    ) -> Option<(usize, f64)> {
        let mut graph = rt.graph();
        graph.fill(out.binding().unwrap(), u32::MAX).unwrap();
        dispatch.record(&mut graph, "test").unwrap();
        let done = graph
            .prepare()
            .unwrap()
            .submit_after(&[a.completion().clone()]);
        out.set_producer(done.unwrap());
        let got = out.to_values().unwrap();
        assert_eq!(got.len(), want.len());
        got.into_iter()
            .zip(want)
            .enumerate()
            // Within an ulp or two: a device may divide (mean) by
            // multiplying with the reciprocal. The poison is a NaN, so an
            // unwritten output still fails.
            .find(|(_, (g, w))| {
                let off = (g - *w).abs();
                off.is_nan() || off > 1e-6 * w.abs().max(1.0)
            })
            .map(|(i, (g, _))| (i, g))
    }

    /// With the grid capped at 4 workgroups of 64, each invocation reaches
    /// several of the 1,000 outputs through the grid-stride loop.
    #[test]
    fn a_capped_grid_reaches_every_output() {
        let rt = Runtime::from_env().unwrap();
        let ops = Ops::new(&rt);
        let (rows, cols) = (1000, 3);
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect();
        let values: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
        let a = DeviceTensor::from_values(&rt, DType::F32, vec![rows, cols], &values).unwrap();
        let output = |dtype| {
            ops.output(TensorDesc::new(dtype, vec![rows]).unwrap())
                .unwrap()
        };
        for reduction in [Reduction::Sum, Reduction::Max, Reduction::Mean] {
            let out = output(DType::F32);
            let d = ops
                .reduce_dispatch(reduction, &a, 1, &out, small("reduce"), "test")
                .unwrap();
            assert_eq!(d.kernel.artifact.launch(&[rows as u64]).unwrap(), [4, 1, 1]);
            let want: Vec<f64> = v
                .chunks(cols)
                .map(|row| match reduction {
                    Reduction::Sum => row.iter().sum::<f32>(),
                    Reduction::Max => row.iter().cloned().fold(f32::NEG_INFINITY, f32::max),
                    Reduction::Mean => row.iter().sum::<f32>() / cols as f32,
                })
                .map(f64::from)
                .collect();
            let wrong = first_wrong(&rt, &a, out, &d, &want);
            assert_eq!(wrong, None, "{reduction:?}: (index, got)");
        }
        let out = output(DType::I32);
        let d = ops
            .argmax_dispatch(&a, &out, small("argmax"), "test")
            .unwrap();
        assert_eq!(d.kernel.artifact.launch(&[rows as u64]).unwrap(), [4, 1, 1]);
        let want: Vec<f64> = v
            .chunks(cols)
            .map(|row| {
                let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                row.iter().position(|&x| x == max).unwrap() as f64
            })
            .collect();
        let wrong = first_wrong(&rt, &a, out, &d, &want);
        assert_eq!(wrong, None, "argmax: (index, got)");
    }

    /// The row-parallel argmax with its grid capped at 4 workgroups: each
    /// reaches several of the 11 rows through the grid-stride loop, with
    /// the workgroup memory reused row after row. Rows of 300 (a partial
    /// last trip), the maximum repeated (the first wins), NaNs skipped, one
    /// row all -inf (index 0).
    #[test]
    fn a_capped_grid_reaches_every_long_row() {
        let rt = Runtime::from_env().unwrap();
        let ops = Ops::new(&rt);
        let (rows, cols) = (11, 300);
        let mut v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37) % 101) as f32 - 50.0)
            .collect();
        for (r, row) in v.chunks_mut(cols).enumerate() {
            row[(r * 53) % cols] = 60.0 + r as f32;
            row[(r * 53 + 17) % cols] = 60.0 + r as f32;
            row[(r * 31) % cols] = f32::NAN;
        }
        v[4 * cols..5 * cols].fill(f32::NEG_INFINITY);
        let values: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
        let a = DeviceTensor::from_values(&rt, DType::F32, vec![rows, cols], &values).unwrap();
        let out = ops
            .output(TensorDesc::new(DType::I32, vec![rows]).unwrap())
            .unwrap();
        let shape = ArgmaxShape {
            wg: 16,
            max_groups: 4,
        };
        let d = ops.argmax_launch(&a, &out, shape.key(), "test").unwrap();
        assert_eq!(d.kernel.artifact.workgroup_size(), [16, 1, 1]);
        assert_eq!(d.kernel.artifact.launch(&[rows as u64]).unwrap(), [4, 1, 1]);
        assert_eq!(d.kernel.artifact.launch(&[2]).unwrap(), [2, 1, 1]);
        let want: Vec<f64> = v
            .chunks(cols)
            .map(|row| {
                let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                match max {
                    f32::NEG_INFINITY => 0.0,
                    _ => row.iter().position(|&x| x == max).unwrap() as f64,
                }
            })
            .collect();
        let wrong = first_wrong(&rt, &a, out, &d, &want);
        assert_eq!(wrong, None, "argmax_rows: (index, got)");
    }
}

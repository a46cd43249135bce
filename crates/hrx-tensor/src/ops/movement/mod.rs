//! Data movement through the strided copy kernel: contiguous copies,
//! permutes (transposes), concatenation along any axis, and padding.

pub(super) mod gather;
pub(super) mod kernels;

use crate::ops::{
    Ops,
    indexing::coalesce,
    operand::{check_inputs, check_output, operand},
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_loom::ir::Scalar;
use hrx_runtime::Graph;

fn index(v: usize) -> ScalarValue {
    ScalarValue::Index(v as u64)
}

impl Ops {
    /// Record an element-by-element copy of `src` into `dst` (same dtype
    /// and shape; either may be strided, e.g. `dst` a slice of a larger
    /// tensor). 4-byte and 2-byte dtypes.
    pub fn record_copy(
        &self,
        graph: &mut Graph,
        src: &DeviceTensor,
        dst: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("copy of {} into {}", src.desc(), dst.desc());
        self.record_copy_as(graph, src, dst, &operation)
    }

    /// [`Ops::record_copy`] for an operator built on it: errors name
    /// `operation`.
    fn record_copy_as(
        &self,
        graph: &mut Graph,
        src: &DeviceTensor,
        dst: &DeviceTensor,
        operation: &str,
    ) -> Result<()> {
        check_inputs(self.runtime(), operation, &[src, dst])?;
        if src.desc().dtype() != dst.desc().dtype() || src.desc().shape() != dst.desc().shape() {
            return Err(Error::Message(format!(
                "{operation}: dtypes or shapes differ"
            )));
        }
        if src.desc().is_empty() {
            return Ok(());
        }
        let t = match src.desc().dtype().bytes() {
            4 => Scalar::U32,
            2 => Scalar::F16,
            _ => {
                return Err(Error::Unsupported(format!(
                    "{operation}: only 4-byte and 2-byte elements are copied"
                )));
            }
        };
        let strides = [src.desc().strides().to_vec(), dst.desc().strides().to_vec()];
        let (dims, strides) = coalesce(src.desc().shape(), &strides, 4).ok_or_else(|| {
            Error::Unsupported(format!(
                "{operation}: more than 4 axes remain after merging"
            ))
        })?;
        let target = self.registry.target()?;
        let (ka, ko) = (
            operand(src, &target, operation)?,
            operand(dst, &target, operation)?,
        );
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(format!("copy {t:?}"), move || {
                kernels::copy(t)
            })),
            symbol: "copy",
            config: self.grid_config("copy.wg", "copy.max_groups")?,
        })?;
        let n = src.desc().elements();
        let scalars: Vec<ScalarValue> = std::iter::once(index(n))
            .chain(dims[1..].iter().map(|&d| index(d)))
            .chain(strides[0].iter().map(|&s| index(s)))
            .chain(ka.scalars())
            .chain(strides[1].iter().map(|&s| index(s)))
            .chain(ko.scalars())
            .collect();
        kernel.record(graph, operation, &[ka.view, ko.view], &scalars, &[n as u64])
    }

    /// New contiguous storage of `a`'s dtype and shape, for an operator
    /// whose kernel cannot read `a`'s layout: see
    /// [`Ops::record_after_packing`].
    pub(crate) fn packing_storage(&self, a: &DeviceTensor) -> Result<DeviceTensor> {
        self.output(TensorDesc::new(
            a.desc().dtype(),
            a.desc().shape().to_vec(),
        )?)
    }

    /// Record `kernel` over `a`, or over `packed` after a copy of `a` into
    /// it. The copy and the kernel are two recordings, and the kernel's
    /// can still fail (an output that does not bind, a grid beyond the
    /// device's limits) after the copy's succeeded: both are tried on a
    /// graph of their own first, so that a failure leaves the caller's
    /// graph as it was.
    pub(crate) fn record_after_packing(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        packed: Option<&DeviceTensor>,
        kernel: impl Fn(&mut Graph, &DeviceTensor) -> Result<()>,
    ) -> Result<()> {
        let Some(packed) = packed else {
            return kernel(graph, a);
        };
        let both = |g: &mut Graph| {
            self.record_copy(g, a, packed)?;
            kernel(g, packed)
        };
        both(&mut self.runtime().graph())?;
        both(graph)
    }

    /// A contiguous copy of `a` recorded into `graph` (new storage), or `a`
    /// itself when it is already contiguous.
    pub fn record_contiguous(&self, graph: &mut Graph, a: &DeviceTensor) -> Result<DeviceTensor> {
        if a.desc().is_contiguous() {
            return Ok(a.clone());
        }
        let out = self.output(TensorDesc::new(
            a.desc().dtype(),
            a.desc().shape().to_vec(),
        )?)?;
        self.record_copy(graph, a, &out)?;
        Ok(out)
    }

    /// `a` with its axes reordered: axis `i` of the result is axis
    /// `axes[i]` of `a`. A view, no copy (use [`Ops::contiguous`] to pack it).
    pub fn permuted(a: &DeviceTensor, axes: &[usize]) -> Result<DeviceTensor> {
        let rank = a.desc().rank();
        let mut seen = vec![false; rank];
        let valid = axes.len() == rank
            && axes
                .iter()
                .all(|&x| x < rank && !std::mem::replace(&mut seen[x], true));
        if !valid {
            return Err(Error::Message(format!(
                "permute of {}: {axes:?} is not a permutation of 0..{rank}",
                a.desc()
            )));
        }
        let shape = axes.iter().map(|&x| a.desc().shape()[x]).collect();
        let strides = axes.iter().map(|&x| a.desc().strides()[x]).collect();
        let desc = TensorDesc::strided(a.desc().dtype(), shape, strides)?;
        a.view(0, desc)
    }

    /// A packed copy of `a`, run eagerly (a clone when already contiguous).
    pub fn contiguous(&self, a: &DeviceTensor) -> Result<DeviceTensor> {
        if a.desc().is_contiguous() {
            return Ok(a.clone());
        }
        let desc = TensorDesc::new(a.desc().dtype(), a.desc().shape().to_vec())?;
        self.eager(&[a], desc, |g, out| self.record_copy(g, a, out))
    }

    /// `a` permuted by `axes` and packed, run eagerly.
    pub fn permute(&self, a: &DeviceTensor, axes: &[usize]) -> Result<DeviceTensor> {
        let view = Self::permuted(a, axes)?;
        let desc = TensorDesc::new(a.desc().dtype(), view.desc().shape().to_vec())?;
        self.eager(&[a], desc, |g, out| self.record_copy(g, &view, out))
    }

    /// The shape of `inputs` concatenated along `axis`.
    pub fn concat_shape(inputs: &[&DeviceTensor], axis: usize) -> Result<Vec<usize>> {
        let shapes: Vec<_> = inputs.iter().map(|t| t.desc().shape().to_vec()).collect();
        let fail = |why: &str| {
            Err(Error::Message(format!(
                "concat of {shapes:?} along axis {axis}: {why}"
            )))
        };
        let Some(first) = inputs.first() else {
            return fail("no inputs");
        };
        let mut shape = first.desc().shape().to_vec();
        if axis >= shape.len() {
            return fail("the axis is out of range");
        }
        shape[axis] = 0;
        for t in inputs {
            let s = t.desc().shape();
            let same = s.len() == shape.len()
                && s.iter()
                    .zip(&shape)
                    .enumerate()
                    .all(|(i, (a, b))| i == axis || a == b);
            if !same || t.desc().dtype() != first.desc().dtype() {
                return fail("dtypes or the other extents differ");
            }
            let Some(total) = shape[axis].checked_add(s[axis]) else {
                return fail("the extent overflows");
            };
            shape[axis] = total;
        }
        Ok(shape)
    }

    /// Record the concatenation of `inputs` along `axis` into `out`
    /// (which may be strided); inputs may be strided.
    pub fn record_concat(
        &self,
        graph: &mut Graph,
        inputs: &[&DeviceTensor],
        axis: usize,
        out: &DeviceTensor,
    ) -> Result<()> {
        let shape = Self::concat_shape(inputs, axis)?;
        if out.desc().shape() != shape || out.desc().dtype() != inputs[0].desc().dtype() {
            return Err(Error::Message(format!(
                "concat along axis {axis}: output {} must have shape {shape:?} and dtype {}",
                out.desc(),
                inputs[0].desc().dtype()
            )));
        }
        // Check everything before recording anything.
        let mut parts = Vec::with_capacity(inputs.len());
        let mut start = 0;
        for t in inputs {
            let end = start + t.desc().shape()[axis];
            parts.push((t, out.slice(axis, start..end)?));
            start = end;
        }
        check_inputs(self.runtime(), "concat", inputs)?;
        // Dry run into a scratch graph so that a failing part records none.
        let mut scratch = self.runtime().graph();
        for (t, part) in &parts {
            self.record_copy(&mut scratch, t, part)?;
        }
        for (t, part) in parts {
            self.record_copy(graph, t, &part)?;
        }
        Ok(())
    }

    /// Concatenation along `axis`, run eagerly.
    pub fn concat(&self, inputs: &[&DeviceTensor], axis: usize) -> Result<DeviceTensor> {
        let shape = Self::concat_shape(inputs, axis)?;
        let desc = TensorDesc::new(inputs[0].desc().dtype(), shape)?;
        self.eager(inputs, desc, |g, out| {
            self.record_concat(g, inputs, axis, out)
        })
    }

    /// The shape of `a` padded by `pads[i] = (before, after)` on axis `i`
    /// (one pair per axis), or an error naming the pad and the shape.
    ///
    /// ```
    /// use hrx_tensor::{DType, Ops, TensorDesc};
    /// let a = TensorDesc::new(DType::F32, vec![2, 3])?;
    /// assert_eq!(Ops::pad_shape(&a, &[(1, 0), (0, 2)])?, [3, 5]);
    /// assert!(Ops::pad_shape(&a, &[(1, 0)]).is_err());
    /// # Ok::<(), hrx_tensor::Error>(())
    /// ```
    pub fn pad_shape(a: &TensorDesc, pads: &[(usize, usize)]) -> Result<Vec<usize>> {
        let fail = |why: String| Err(Error::Message(format!("pad of {a} by {pads:?}: {why}")));
        if pads.len() != a.rank() {
            return fail(format!(
                "one (before, after) pair per axis is required ({} axes, {} pairs)",
                a.rank(),
                pads.len()
            ));
        }
        let shape: Option<Vec<usize>> = a
            .shape()
            .iter()
            .zip(pads)
            .map(|(&d, &(b, e))| d.checked_add(b)?.checked_add(e))
            .collect();
        // The byte size must fit too, so the eager form's allocation and a
        // caller's output descriptor cannot fail where this succeeded.
        match shape.filter(|s| TensorDesc::new(a.dtype(), s.clone()).is_ok()) {
            Some(shape) => Ok(shape),
            None => fail("the padded shape overflows".into()),
        }
    }

    /// Record `out = a` padded with `pads[i] = (before, after)` elements of
    /// `value` on each axis `i` ([`Ops::pad_shape`] gives the shape). 4-byte
    /// dtypes; `a` may be strided, `out` must be a contiguous tensor of
    /// `a`'s dtype and the padded shape (it may start anywhere in its
    /// storage). `value` is stored as the dtype holds it ([`crate::encode`]:
    /// f32 rounds to nearest, integers convert like Rust's `as`). At most 4
    /// axes may remain after merging `a` with the part of `out` it lands in.
    ///
    /// ```
    /// use hrx_tensor::{DType, DeviceTensor, Ops, TensorDesc};
    /// let runtime = hrx_runtime::Runtime::new()?;
    /// let ops = Ops::new(&runtime);
    /// let a = DeviceTensor::from_values(&runtime, DType::I32, vec![2, 2], &[1., 2., 3., 4.])?;
    /// let pads = [(0, 1), (1, 0)];
    /// let shape = Ops::pad_shape(a.desc(), &pads)?;
    /// let mut out = ops.output(TensorDesc::new(DType::I32, shape)?)?;
    /// let mut graph = runtime.graph();
    /// ops.record_pad(&mut graph, &a, &pads, -1.0, &out)?;
    /// out.set_producer(graph.prepare()?.submit_after(&[a.completion().clone()])?);
    /// assert_eq!(out.to_values()?, [-1., 1., 2., -1., 3., 4., -1., -1., -1.]);
    /// # Ok::<(), hrx_tensor::Error>(())
    /// ```
    pub fn record_pad(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        pads: &[(usize, usize)],
        value: f64,
        out: &DeviceTensor,
    ) -> Result<()> {
        let shape = Self::pad_shape(a.desc(), pads)?;
        let operation = format!("pad of {} by {pads:?}", a.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a])?;
        let dtype = a.desc().dtype();
        if dtype.bytes() != 4 {
            return Err(Error::Unsupported(format!(
                "{operation}: only 4-byte dtypes are padded (the padding is filled by words)"
            )));
        }
        check_output(runtime, operation, out, dtype, &shape)?;
        let Some(binding) = out.binding() else {
            return Ok(());
        };
        let mut interior = out.clone();
        for (axis, (&(before, _), &d)) in pads.iter().zip(a.desc().shape()).enumerate() {
            interior = interior.slice(axis, before..before + d)?;
        }
        let bits = crate::encode(dtype, &[value]);
        let word = u32::from_le_bytes([bits[0], bits[1], bits[2], bits[3]]);
        // `out` is contiguous, so its binding holds exactly its elements
        // and the fill touches nothing of a larger buffer it is cut from.
        // With no padding the copy writes every element by itself.
        let fill = out.desc().elements() != a.desc().elements();
        let record = |g: &mut Graph| -> Result<()> {
            if fill {
                g.fill(binding.clone(), word)?;
            }
            self.record_copy_as(g, a, &interior, operation)
        };
        // The copy can still refuse `a` (too many axes, a binding too
        // large) after the fill: a dry run into a scratch graph keeps the
        // caller's graph untouched then.
        record(&mut runtime.graph())?;
        record(graph)
    }

    /// `a` padded with `pads[i] = (before, after)` elements of `value` on
    /// each axis, run eagerly (see [`Ops::record_pad`]).
    pub fn pad(
        &self,
        a: &DeviceTensor,
        pads: &[(usize, usize)],
        value: f64,
    ) -> Result<DeviceTensor> {
        let shape = Self::pad_shape(a.desc(), pads)?;
        let desc = TensorDesc::new(a.desc().dtype(), shape)?;
        self.eager(&[a], desc, |g, out| self.record_pad(g, a, pads, value, out))
    }
}

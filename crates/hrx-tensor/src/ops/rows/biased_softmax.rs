//! The softmax of attention scores plus a per-key bias, in one pass
//! ([`Ops::record_biased_softmax`]; the kernel in
//! `biased_softmax_kernel.rs`).
//!
//! An encoder masks padding by adding a large negative bias to the scores
//! of padded keys before the softmax, and in f16 it then narrows the
//! probabilities for the next product. As separate operations that is
//! three passes over the largest tensor of the layer (`[batch, heads,
//! seq, seq]`); here it is one read of the scores and one write of the
//! probabilities.

use super::biased_softmax_kernel;
use crate::ops::{
    Ops,
    operand::{check_inputs, disjoint, float_output, operand, quad_offset},
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor};
use hrx_core::{DeviceKind, Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

/// Work items per workgroup: eight warps of rows on a GPU; on a CPU
/// device, where llvmpipe runs a workgroup's invocations as coroutines,
/// one subgroup's worth.
const GPU_WG: usize = 256;

impl Ops {
    /// Record `out[b, .., i, :] = softmax(a[b, .., i, :] + bias[b, :])`
    /// over the last axis: the bias row of a row is picked by its leading
    /// index and broadcast over the axes between (for attention scores
    /// `[batch, heads, seq, keys]`, a per-key bias `[batch, keys]` such as
    /// a padding mask).
    ///
    /// `a` and `bias` are f32; `out` is a contiguous f32 or f16 tensor of
    /// `a`'s shape (f16 where the device has f16 arithmetic and 16-bit
    /// storage), written rounded from the f32 probabilities. `a` and
    /// `bias` must be contiguous, with rows a multiple of 4 long, every
    /// tensor starting 16-byte aligned and `out` apart from both inputs;
    /// anything else is refused (`Unsupported`) before recording.
    ///
    /// ```
    /// use hrx_tensor::{DType, DeviceTensor, Ops, TensorDesc};
    /// let runtime = hrx_runtime::Runtime::new()?;
    /// let ops = Ops::new(&runtime);
    /// // Two sequences of 4 keys, two query rows each; the second
    /// // sequence has its last key masked.
    /// let scores = DeviceTensor::from_values(&runtime, DType::F32, vec![2, 2, 4], &[0.; 16])?;
    /// let mask = [0., 0., 0., 0., 0., 0., 0., -1e4];
    /// let bias = DeviceTensor::from_values(&runtime, DType::F32, vec![2, 4], &mask)?;
    /// let mut out = ops.output(TensorDesc::new(DType::F32, vec![2, 2, 4])?)?;
    /// let mut graph = runtime.graph();
    /// ops.record_biased_softmax(&mut graph, &scores, &bias, &out)?;
    /// let inputs = [&scores, &bias].map(|t| t.completion().clone());
    /// out.set_producer(graph.prepare()?.submit_after(&inputs)?);
    /// let p = out.to_values()?;
    /// assert!((p[0] - 0.25).abs() < 1e-6);
    /// assert!((p[8] - 1.0 / 3.0).abs() < 1e-6 && p[11] == 0.0);
    /// # Ok::<(), hrx_tensor::Error>(())
    /// ```
    pub fn record_biased_softmax(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        bias: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("biased softmax of {} with bias {}", a.desc(), bias.desc());
        let operation = operation.as_str();
        let refuse = |why: String| Err(Error::Unsupported(format!("{operation}: {why}")));
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a, bias])?;
        out.check_runtime(runtime, operation)?;
        let shape = a.desc().shape();
        if shape.len() < 2 {
            return refuse("the scores need a leading axis and a last axis".into());
        }
        let (lead, cols) = (shape[0], shape[shape.len() - 1]);
        if a.desc().dtype() != DType::F32 || bias.desc().dtype() != DType::F32 {
            return refuse("the scores and the bias must be f32".into());
        }
        if bias.desc().shape() != [lead, cols] {
            return Err(Error::Message(format!(
                "{operation}: the bias must have shape [{lead}, {cols}]"
            )));
        }
        let target = self.registry.target()?;
        let narrow = float_output(&target, out.desc().dtype(), operation)?;
        if out.desc().shape() != shape || !out.desc().is_contiguous() {
            return Err(Error::Message(format!(
                "{operation}: the output {} must be contiguous and of shape {shape:?}",
                out.desc()
            )));
        }
        if out.desc().is_empty() {
            return Ok(());
        }
        if !(a.desc().is_contiguous() && bias.desc().is_contiguous()) {
            return refuse("the scores and the bias must be contiguous".into());
        }
        if !cols.is_multiple_of(4) {
            return refuse(format!("rows of {cols} are not a multiple of 4 long"));
        }
        let (ka, kb, ko) = (
            operand(a, &target, operation)?,
            operand(bias, &target, operation)?,
            operand(out, &target, operation)?,
        );
        let (Some(qa), Some(qb), Some(qo)) = (quad_offset(&ka), quad_offset(&kb), quad_offset(&ko))
        else {
            return refuse("a tensor does not start 16-byte aligned".into());
        };
        disjoint(operation, ("out", &ko), ("the scores", &ka))?;
        disjoint(operation, ("out", &ko), ("the bias", &kb))?;
        let rows = a.desc().elements() / cols;
        let per_bias = rows / lead;
        let wg = if target.kind == DeviceKind::Cpu {
            target.subgroup_size_max.max(1) as usize
        } else {
            GPU_WG
        }
        .min(target.max_workgroup_invocations as usize)
        .min(target.max_workgroup_size[0] as usize);
        let rows_per_group = (wg / target.subgroup_size_max.max(1) as usize).max(1);
        let groups = (rows.div_ceil(rows_per_group) as u64).min(biased_softmax_kernel::MAX_GROUPS);
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("biased_softmax4 {wg} {narrow:?}"),
                move || biased_softmax_kernel::biased_softmax4(wg, narrow),
            )),
            symbol: "biased_softmax4",
            config: Vec::new(),
        })?;
        let scalars = [rows, cols / 4, per_bias]
            .map(|v| ScalarValue::Index(v as u64))
            .into_iter()
            .chain([qa, ka.len, qb, kb.len, qo, ko.len].map(ScalarValue::Index))
            .collect::<Vec<_>>();
        kernel.record(
            graph,
            operation,
            &[ka.view, kb.view, ko.view],
            &scalars,
            &[groups],
        )
    }
}

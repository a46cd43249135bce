//! Top-k over the last axis, with the softmax denominator at a per-row
//! temperature: what drawing a token needs from a row of logits, written
//! as `k` values, `k` indices and one sum a row. Rows up to a chunk (2,048
//! columns on a GPU, 4,096 on a CPU device) take one dispatch; longer
//! rows two: the top-k of every chunk into the graph's scratch, then
//! their merge (see `top_k_kernel`).
//!
//! Checks: `x` an f32 matrix (may be strided) with non-empty rows;
//! `temperature` and every output contiguous, of the row count; `k` in
//! `1..=MAX_TOP_K`; no output overlapping an input or another output. The
//! kernel needs subgroup arithmetic; without it the operator answers
//! `Unsupported`.

use super::top_k_kernel::{MAX_TOP_K, Pass, TopKPlan, TopKShape};
use crate::ops::{
    Ops,
    attention::{f32_rank, index, no_alias},
    operand::{Operand, check_inputs, check_output, operand},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

/// The most values [`Ops::record_top_k`] gives a row.
pub const TOP_K_MAX: usize = MAX_TOP_K;

impl Ops {
    /// Record the `k` largest values of each row of `x` with their column
    /// indices, largest first and equal values by smaller index, and each
    /// row's softmax denominator relative to its largest value:
    /// `mass[r] = sum over j of exp((x[r, j] - values[r, 0]) /
    /// temperature[r])`.
    ///
    /// `x`: f32 `[rows, cols]` (may be strided), `cols >= 1`;
    /// `temperature`: f32 `[rows]`, positive; `values`: f32 `[rows, k]`
    /// (`k` in `1..=`[`TOP_K_MAX`]), `indices`: i32 `[rows, k]`, `mass`:
    /// f32 `[rows]`. NaN and -inf are never taken and add nothing to
    /// `mass`; a row with fewer than `k` other values ends with index -1
    /// and value -inf, and a row with none has `mass` 0.
    ///
    /// ```
    /// use hrx_tensor::{DType, DeviceTensor, Ops};
    /// let runtime = hrx_runtime::Runtime::new()?;
    /// let ops = Ops::new(&runtime);
    /// let x = DeviceTensor::from_values(&runtime, DType::F32, vec![1, 4], &[0.5, 2., 2., -1.])?;
    /// let t = DeviceTensor::from_values(&runtime, DType::F32, vec![1], &[1.])?;
    /// let (values, indices, mass) = ops.top_k(&x, &t, 2)?;
    /// assert_eq!(values.to_values()?, [2., 2.]);
    /// assert_eq!(indices.to_values()?, [1., 2.]);
    /// let expected = 2. + (-1.5f64).exp() + (-3f64).exp();
    /// assert!((mass.to_values()?[0] - expected).abs() < 1e-5);
    /// # Ok::<(), hrx_tensor::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn record_top_k(
        &self,
        graph: &mut Graph,
        x: &DeviceTensor,
        temperature: &DeviceTensor,
        values: &DeviceTensor,
        indices: &DeviceTensor,
        mass: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("top_k of {}", x.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[x, temperature])?;
        f32_rank(operation, "x", x, 2)?;
        let [rows, cols] = [0, 1].map(|i| x.desc().shape()[i]);
        if cols == 0 {
            return Err(Error::Message(format!(
                "{operation}: the rows must be non-empty"
            )));
        }
        let t = temperature.desc();
        if t.dtype() != DType::F32 || t.shape() != [rows] || !t.is_contiguous() {
            return Err(Error::Message(format!(
                "{operation}: temperature {t} must be a contiguous f32 tensor of shape [{rows}]"
            )));
        }
        let k = match values.desc().shape() {
            [_, k] => *k,
            _ => {
                return Err(Error::Message(format!(
                    "{operation}: values {} must be [{rows}, k]",
                    values.desc()
                )));
            }
        };
        if !(1..=MAX_TOP_K).contains(&k) {
            return Err(Error::Message(format!(
                "{operation}: k = {k} is outside 1..={MAX_TOP_K}"
            )));
        }
        check_output(runtime, operation, values, DType::F32, &[rows, k])?;
        check_output(runtime, operation, indices, DType::I32, &[rows, k])?;
        check_output(runtime, operation, mass, DType::F32, &[rows])?;
        if rows == 0 {
            return Ok(());
        }
        let target = self.registry.target()?;
        let plan = TopKPlan::for_rows(&target, cols, k).ok_or_else(|| {
            Error::Unsupported(format!(
                "{operation}: the device has no subgroup arithmetic"
            ))
        })?;
        let bound = [x, temperature, values, indices, mass]
            .map(|t| operand(t, &target, operation))
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let (inputs, outputs) = bound.split_at(2);
        for (n, out) in outputs.iter().enumerate() {
            for other in inputs.iter().chain(&outputs[n + 1..]) {
                no_alias(operation, out, other)?;
            }
        }
        let [kx, kt, kv, ki, km] = &bound[..] else {
            unreachable!("five operands");
        };
        let s = x.desc().strides();
        let sizes = [rows, cols, s[0], s[1], plan.chunks, plan.chunk];
        let Some(merge) = plan.merge else {
            // One chunk a row: the scan is the answer.
            return self.record_top_k_pass(
                graph,
                operation,
                plan.scan,
                &sizes,
                &[kx, kt, kv, ki, km],
            );
        };
        // Both kernels first, so that a failure leaves the graph as it was.
        self.registry.kernel(plan.scan.key())?;
        self.registry.kernel(merge.key())?;
        // The chunks' candidates in the graph's scratch: values, columns,
        // then denominators, each range aligned for binding.
        let align = (target.storage_buffer_offset_alignment as usize).max(16);
        let units = rows * plan.chunks;
        let lengths = [units * k, units * k, units];
        let mut starts = [0; 3];
        for n in 1..3 {
            starts[n] = (starts[n - 1] + lengths[n - 1] * 4).next_multiple_of(align);
        }
        let scratch = graph.scratch(starts[2] + lengths[2] * 4)?;
        let part = |n: usize| -> Result<Operand> {
            Ok(Operand {
                view: scratch.slice(starts[n]..starts[n] + lengths[n] * 4)?,
                offset: 0,
                len: lengths[n] as u64,
            })
        };
        let (cv, ci, cm) = (part(0)?, part(1)?, part(2)?);
        self.record_top_k_pass(
            graph,
            operation,
            plan.scan,
            &sizes,
            &[kx, kt, &cv, &ci, &cm],
        )?;
        let merge_sizes = [rows, plan.chunks * k, plan.chunks];
        self.record_top_k_pass(
            graph,
            operation,
            merge,
            &merge_sizes,
            &[&cv, &ci, &cm, kt, kv, ki, km],
        )
    }

    /// Records one pass of the top-k: launch arguments `sizes`, then each
    /// operand's offset and length, over its workgroups' units ((row,
    /// chunk) pairs for the scan, rows for the merge).
    fn record_top_k_pass(
        &self,
        graph: &mut Graph,
        operation: &str,
        shape: TopKShape,
        sizes: &[usize],
        operands: &[&Operand],
    ) -> Result<()> {
        let kernel = self.registry.kernel(shape.key())?;
        let scalars: Vec<ScalarValue> = sizes
            .iter()
            .map(|&v| index(v))
            .chain(operands.iter().flat_map(|o| o.scalars()))
            .collect();
        let views: Vec<_> = operands.iter().map(|o| o.view.clone()).collect();
        let units = match shape.pass {
            Pass::Scan => sizes[0] * sizes[4],
            Pass::Merge => sizes[0],
        };
        kernel.record(graph, operation, &views, &scalars, &[units as u64])
    }

    /// Top-k with the softmax denominator (see [`Ops::record_top_k`]), run
    /// eagerly: `(values, indices, mass)`.
    pub fn top_k(
        &self,
        x: &DeviceTensor,
        temperature: &DeviceTensor,
        k: usize,
    ) -> Result<(DeviceTensor, DeviceTensor, DeviceTensor)> {
        let rows = x.desc().shape().first().copied().unwrap_or(0);
        let mut values = self.output(TensorDesc::new(DType::F32, vec![rows, k])?)?;
        let mut indices = self.output(TensorDesc::new(DType::I32, vec![rows, k])?)?;
        let mut mass = self.output(TensorDesc::new(DType::F32, vec![rows])?)?;
        let mut graph = self.runtime().graph();
        self.record_top_k(&mut graph, x, temperature, &values, &indices, &mass)?;
        let after = [x.completion().clone(), temperature.completion().clone()];
        let done = graph.prepare()?.submit_after(&after)?;
        for out in [&mut values, &mut indices, &mut mass] {
            out.set_producer(done.clone());
        }
        Ok((values, indices, mass))
    }
}

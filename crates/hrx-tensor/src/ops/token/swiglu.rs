//! The SwiGLU gate of a feed-forward block, `silu(gate) * up`, over
//! `[rows, width]`; the kernel is in `kernels`.

use super::kernels;
use crate::ops::{
    Ops,
    attention::{index, no_alias},
    operand::{check_inputs, check_output, float_output, operand},
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

impl Ops {
    /// Record `out = silu(gate) * up = gate / (1 + exp(-gate)) * up`,
    /// elementwise over `[rows, width]`: `gate` and `up` may be strided
    /// (e.g. halves of a fused projection), `out` contiguous. The inputs
    /// (both f32 or both f16) and the output are each f32 or f16; the
    /// gate is computed in f32 and an f16 output holds it rounded to
    /// nearest (f16 needs a device with f16 arithmetic and 16-bit
    /// storage; `Unsupported` elsewhere).
    pub fn record_swiglu(
        &self,
        graph: &mut Graph,
        gate: &DeviceTensor,
        up: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("swiglu of {} and {}", gate.desc(), up.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[gate, up])?;
        let (gd, ud) = (gate.desc(), up.desc());
        let float = |d: DType| matches!(d, DType::F32 | DType::F16);
        if gd.rank() != 2 || gd.shape() != ud.shape() || gd.dtype() != ud.dtype() {
            return Err(Error::Message(format!(
                "{operation}: gate and up must be tensors of rank 2 with one shape and one dtype"
            )));
        }
        if !float(gd.dtype()) || !float(out.desc().dtype()) {
            return Err(Error::Message(format!(
                "{operation}: gate, up and the output {} must be f32 or f16",
                out.desc()
            )));
        }
        let target = self.registry.target()?;
        let input = float_output(&target, gd.dtype(), operation)?;
        let output = float_output(&target, out.desc().dtype(), operation)?;
        check_output(runtime, operation, out, out.desc().dtype(), gd.shape())?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let (kg, ku, ko) = (
            operand(gate, &target, operation)?,
            operand(up, &target, operation)?,
            operand(out, &target, operation)?,
        );
        no_alias(operation, &ko, &kg)?;
        no_alias(operation, &ko, &ku)?;
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("swiglu {input:?} {output:?}"),
                move || kernels::swiglu((input, output)),
            )),
            symbol: "swiglu",
            config: self.grid_config("swiglu.wg", "swiglu.max_groups")?,
        })?;
        let n = out.desc().elements();
        let width = gate.desc().shape()[1];
        let (sg, su) = (gate.desc().strides(), up.desc().strides());
        let scalars: Vec<ScalarValue> = [n, width, sg[0], sg[1]]
            .map(index)
            .into_iter()
            .chain(kg.scalars())
            .chain([su[0], su[1]].map(index))
            .chain(ku.scalars())
            .chain(ko.scalars())
            .collect();
        kernel.record(
            graph,
            operation,
            &[kg.view, ku.view, ko.view],
            &scalars,
            &[n as u64],
        )
    }

    /// `silu(gate) * up` (see [`Ops::record_swiglu`]), run eagerly.
    pub fn swiglu(&self, gate: &DeviceTensor, up: &DeviceTensor) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(DType::F32, gate.desc().shape().to_vec())?;
        self.eager(&[gate, up], desc, |g, out| {
            self.record_swiglu(g, gate, up, out)
        })
    }
}

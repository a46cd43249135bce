//! Rotary position embedding of token rows (see [`Ops::record_rope`]):
//! each row's position is device data, like the other attention-side
//! operators (attention.rs); the kernel is in token_kernels.rs.

use super::{
    Ops,
    attention::{f32_rank, index, no_alias, row_data},
    operand::{check_inputs, check_output, operand},
    registry::{Generator, KernelKey, KernelSource},
    token_kernels,
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

impl Ops {
    /// Record rotary position embedding on adjacent pairs (GGUF's layout
    /// for llama's Q and K): for row `r`, head `h` and `i < rope_dims / 2`,
    /// `(x[2i], x[2i+1])` turns by the angle `position[r] *
    /// base^(-2i/rope_dims)`: `out0 = x0 cos - x1 sin`, `out1 = x0 sin + x1
    /// cos`. Elements at `rope_dims` and beyond are copied, as is every
    /// element of a row at a negative position. `x: [rows, heads,
    /// head_dim]` f32 (may be strided), `position`: i32 `[rows]`, `out`:
    /// contiguous like `x`, not overlapping it. `rope_dims` is even, in
    /// `2..=head_dim`; `base` finite and positive.
    #[allow(clippy::too_many_arguments)]
    pub fn record_rope(
        &self,
        graph: &mut Graph,
        x: &DeviceTensor,
        position: &DeviceTensor,
        rope_dims: usize,
        base: f32,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("rope of {} at {}", x.desc(), position.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[x, position])?;
        f32_rank(operation, "x", x, 3)?;
        let [rows, heads, hd] = [0, 1, 2].map(|i| x.desc().shape()[i]);
        row_data(operation, "position", position, rows)?;
        if rope_dims < 2 || rope_dims > hd || !rope_dims.is_multiple_of(2) {
            return Err(Error::Message(format!(
                "{operation}: rope_dims {rope_dims} must be even and in 2..={hd}"
            )));
        }
        if !(base.is_finite() && base > 0.0) {
            return Err(Error::Message(format!(
                "{operation}: base {base} must be finite and positive"
            )));
        }
        check_output(runtime, operation, out, DType::F32, x.desc().shape())?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let target = self.registry.target()?;
        let (kx, kp, ko) = (
            operand(x, &target, operation)?,
            operand(position, &target, operation)?,
            operand(out, &target, operation)?,
        );
        no_alias(operation, &ko, &kx)?;
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new("rope".into(), token_kernels::rope)),
            symbol: "rope",
            config: self.grid_config("rope.wg", "rope.max_groups")?,
        })?;
        // The frequency exponent per pair, from f64: pair i turns by
        // position * exp(-i * c).
        let c = (2.0 * f64::from(base).ln() / rope_dims as f64) as f32;
        let n = out.desc().elements();
        let s = x.desc().strides();
        let scalars: Vec<ScalarValue> = [n, heads, hd, rope_dims]
            .map(index)
            .into_iter()
            .chain([ScalarValue::F32(c)])
            .chain([s[0], s[1], s[2]].map(index))
            .chain(kx.scalars())
            .chain(kp.scalars())
            .chain(ko.scalars())
            .collect();
        kernel.record(
            graph,
            operation,
            &[kx.view, kp.view, ko.view],
            &scalars,
            &[n as u64],
        )
    }

    /// Rotary position embedding (see [`Ops::record_rope`]), run eagerly.
    pub fn rope(
        &self,
        x: &DeviceTensor,
        position: &DeviceTensor,
        rope_dims: usize,
        base: f32,
    ) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(DType::F32, x.desc().shape().to_vec())?;
        self.eager(&[x, position], desc, |g, out| {
            self.record_rope(g, x, position, rope_dims, base, out)
        })
    }
}

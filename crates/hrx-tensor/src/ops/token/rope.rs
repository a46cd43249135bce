//! Rotary position embedding of token rows (see [`Ops::record_rope`]):
//! each row's position is device data, like the other attention-side
//! operators (`attention`); the kernels are in `kernels`.
//!
//! [`Ops::record_rope_kv_store`] fuses a layer's key rotation with the
//! store of its keys and values (rope then two kv_stores: three dependent
//! dispatches, which bound a decode step, become one). It rotates with the
//! same kernel fragment as `rope`, so the cache holds the same bits, and
//! makes the same checks as the operators it replaces.

use super::kernels;
use crate::ops::{
    Ops,
    attention::{cache_element, cache_shape, f32_rank, float_rank, index, no_alias, row_data},
    operand::{check_inputs, check_output, operand},
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

/// Rotary position embedding's parameters, for operators that rotate as
/// they read ([`Ops::record_rotary_attention`]): the rotated width of a
/// head (`dims`, even, in `2..=head_dim`) and the frequency base.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rotary {
    /// Leading elements of each head that turn (pairs `(2i, 2i + 1)`).
    pub dims: usize,
    /// The frequency base (llama: 10,000 or more), finite and positive.
    pub base: f32,
}

/// Check `rope_dims` (even, in `2..=hd`) and `base` (finite, positive)
/// and return the frequency exponent per pair, from f64: pair `i` turns
/// by `position * exp(-i * c)`.
pub(crate) fn rotation(operation: &str, rope_dims: usize, base: f32, hd: usize) -> Result<f32> {
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
    Ok((2.0 * f64::from(base).ln() / rope_dims as f64) as f32)
}

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
        let c = rotation(operation, rope_dims, base, hd)?;
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
            source: KernelSource::Built(Generator::new("rope".into(), kernels::rope)),
            symbol: "rope",
            config: self.grid_config("rope.wg", "rope.max_groups")?,
        })?;
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

    /// Record RoPE of the new keys and the cache store of keys and values
    /// in one dispatch: for every active row `r` (`0 <= sequence[r] <
    /// slots`, `0 <= position[r] < capacity`) and head `h`,
    /// `k_cache[sequence[r], h, position[r], :]` is [`Ops::record_rope`]'s
    /// output for `k[r, h, :]` (bit for bit) and `v_cache[sequence[r], h,
    /// position[r], :] = v[r, h, :]`; other rows write nothing, as in
    /// [`Ops::record_kv_store`]. `k`, `v`: `[rows, kv_heads, head_dim]`
    /// (may be strided), both f32 or both f16 (widened as they are read),
    /// `sequence`, `position`: i32 `[rows]`,
    /// caches: contiguous `[slots, kv_heads, capacity, head_dim]` of one
    /// shape, both f32 or both f16 (each value rounded to nearest), not
    /// overlapping each other or the inputs, both declared
    /// written as a whole (so a later attention is ordered after this).
    /// `rope_dims` is even, in `2..=head_dim`; `base` finite and positive.
    #[allow(clippy::too_many_arguments)]
    pub fn record_rope_kv_store(
        &self,
        graph: &mut Graph,
        k: &DeviceTensor,
        v: &DeviceTensor,
        sequence: &DeviceTensor,
        position: &DeviceTensor,
        rope_dims: usize,
        base: f32,
        k_cache: &DeviceTensor,
        v_cache: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!(
            "rope_kv_store of {} and {} into {} and {}",
            k.desc(),
            v.desc(),
            k_cache.desc(),
            v_cache.desc()
        );
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(
            runtime,
            operation,
            &[k, v, sequence, position, k_cache, v_cache],
        )?;
        let target = self.registry.target()?;
        let input = float_rank(operation, "k", k, 3, &target)?;
        float_rank(operation, "v", v, 3, &target)?;
        if v.desc().shape() != k.desc().shape() || v.desc().dtype() != k.desc().dtype() {
            return Err(Error::Message(format!(
                "{operation}: v {} must have the shape of k {} and its dtype",
                v.desc(),
                k.desc()
            )));
        }
        let [rows, kvh, hd] = [0, 1, 2].map(|i| k.desc().shape()[i]);
        row_data(operation, "sequence", sequence, rows)?;
        row_data(operation, "position", position, rows)?;
        let c = rotation(operation, rope_dims, base, hd)?;
        let (slots, cap) = cache_shape(operation, "k_cache", k_cache, kvh, hd)?;
        cache_shape(operation, "v_cache", v_cache, kvh, hd)?;
        if v_cache.desc().shape() != k_cache.desc().shape() {
            return Err(Error::Message(format!(
                "{operation}: v_cache {} must have the shape of k_cache {}",
                v_cache.desc(),
                k_cache.desc()
            )));
        }
        let element = cache_element(operation, &target, k_cache, v_cache)?;
        if k.desc().is_empty() || k_cache.desc().is_empty() {
            return Ok(());
        }
        let bind = |t: &DeviceTensor| operand(t, &target, operation);
        let (kk, kv, ks, kp) = (bind(k)?, bind(v)?, bind(sequence)?, bind(position)?);
        let (kkc, kvc) = (bind(k_cache)?, bind(v_cache)?);
        for written in [&kkc, &kvc] {
            no_alias(operation, written, &kk)?;
            no_alias(operation, written, &kv)?;
        }
        if kkc.view.overlaps(&kvc.view) {
            return Err(Error::Message(format!(
                "{operation}: k_cache and v_cache must not overlap"
            )));
        }
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("rope_kv_store {input:?} {element:?}"),
                move || kernels::rope_kv_store(input, element),
            )),
            symbol: "rope_kv_store",
            config: self.grid_config("rope_kv_store.wg", "rope_kv_store.max_groups")?,
        })?;
        let n = k.desc().elements();
        let (sk, sv) = (k.desc().strides(), v.desc().strides());
        let scalars: Vec<ScalarValue> = [n, kvh, hd, slots, cap, rope_dims]
            .map(index)
            .into_iter()
            .chain([ScalarValue::F32(c)])
            .chain([sk[0], sk[1], sk[2], sv[0], sv[1], sv[2]].map(index))
            .chain(
                [&kk, &kv, &ks, &kp, &kkc, &kvc]
                    .into_iter()
                    .flat_map(|o| o.scalars()),
            )
            .collect();
        kernel.record(
            graph,
            operation,
            &[kk.view, kv.view, ks.view, kp.view, kkc.view, kvc.view],
            &scalars,
            &[n as u64],
        )
    }
}

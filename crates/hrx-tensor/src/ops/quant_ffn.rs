//! A decode step's feed-forward block in one dispatch
//! (`quant_ffn_kernel`): norm, gate-and-up product, SwiGLU, down product
//! and residual, where the separate operators take two dependent
//! dispatches (`record_quant_swiglu_fused` and `record_quant_matmul_fused`).

use super::{
    Ops, QuantMatrix, RowNorm,
    operand::{check_inputs, check_output, disjoint, operand, quad_offset},
    quant_ffn_kernel::{C, FfnKey, ffn_key},
    quant_resident::{MAX_SPANS_PER_LANE, resident_workgroup, spans_per_lane},
};
use crate::{DType, DeviceTensor};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

/// The most rows of x [`Ops::record_quant_ffn`] takes at once (each
/// subgroup holds all of them in registers, and the last workgroup sums
/// every workgroup's part of each).
pub const QUANT_FFN_MAX_ROWS: usize = 4;

/// The weights of a gated feed-forward block.
#[derive(Clone, Copy, Debug)]
pub struct FeedForward<'a> {
    /// RMS norm of the block's input.
    pub norm: RowNorm<'a>,
    /// Gate rows, then up rows: `[2 f, width]`.
    pub gate_up: &'a QuantMatrix,
    /// `[width, f]`.
    pub down: &'a QuantMatrix,
}

impl Ops {
    /// Record `out = residual + down(silu(g) * u)` with `[g | u] =
    /// gate_up(norm(x))` for each row of `x`: the values of
    /// [`Ops::record_quant_swiglu_fused`] (with the norm) followed by
    /// [`Ops::record_quant_matmul_fused`] (with the residual), up to
    /// rounding, in one dispatch.
    ///
    /// `x`, `residual`, `out`: contiguous f32 `[m, width]`, m from 1 to
    /// [`QUANT_FFN_MAX_ROWS`] (`x` and `residual` may be one tensor; `out`
    /// overlaps neither nor any weight); width and `f` multiples of 8. A
    /// device without subgroup arithmetic, or rows too long to hold in
    /// registers, is `Unsupported` (record the two products).
    pub fn record_quant_ffn(
        &self,
        graph: &mut Graph,
        x: &DeviceTensor,
        block: FeedForward,
        residual: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let FeedForward {
            norm,
            gate_up,
            down,
        } = block;
        let operation = format!(
            "quant_ffn of {} by {} and {}",
            x.desc(),
            gate_up.label(),
            down.label()
        );
        let operation = operation.as_str();
        let runtime = self.runtime();
        let weights = [norm.weight, gate_up.words(), down.words()];
        check_inputs(runtime, operation, &[&[x, residual][..], &weights].concat())?;
        let fail = |why: String| Err(Error::Message(format!("{operation}: {why}")));
        let width = gate_up.cols();
        let f = gate_up.rows() / 2;
        if gate_up.rows() % 2 != 0 || down.rows() != width || down.cols() != f || f == 0 {
            return fail(format!(
                "the gate-and-up matrix must be [2 f, width] and the down matrix [width, f] \
                 (f > 0), not [{}, {width}] and [{}, {}]",
                gate_up.rows(),
                down.rows(),
                down.cols()
            ));
        }
        let xd = x.desc();
        if xd.dtype() != DType::F32 || xd.rank() != 2 || xd.shape()[1] != width {
            return fail(format!("x must be f32 [m, {width}]"));
        }
        let m = xd.shape()[0];
        if !(1..=QUANT_FFN_MAX_ROWS).contains(&m) || !xd.is_contiguous() {
            return fail(format!(
                "x must be contiguous with 1 to {QUANT_FFN_MAX_ROWS} rows, not {m}"
            ));
        }
        let nd = norm.weight.desc();
        if nd.dtype() != DType::F32 || nd.shape() != [width] || !nd.is_contiguous() {
            return fail(format!(
                "the norm weight must be a contiguous f32 [{width}]"
            ));
        }
        let rd = residual.desc();
        if rd.dtype() != DType::F32 || rd.shape() != [m, width] || !rd.is_contiguous() {
            return fail(format!(
                "the residual must be a contiguous f32 [{m}, {width}]"
            ));
        }
        check_output(runtime, operation, out, DType::F32, &[m, width])?;
        let target = self.registry.target()?;
        let spl = spans_per_lane(width, target.subgroup_size_min as usize);
        let groups = f.div_ceil(C);
        if !target.subgroup_ops.arithmetic
            || spl > MAX_SPANS_PER_LANE
            || !width.is_multiple_of(8)
            || !f.is_multiple_of(8)
            || groups > target.max_workgroup_count[0] as usize
        {
            return Err(Error::Unsupported(format!(
                "{operation}: not a one-dispatch block on this device"
            )));
        }
        let bind = |t: &DeviceTensor| operand(t, &target, operation);
        let (kx, kn, kg, kd, kr, ko) = (
            bind(x)?,
            bind(norm.weight)?,
            bind(gate_up.words())?,
            bind(down.words())?,
            bind(residual)?,
            bind(out)?,
        );
        let inputs = [
            ("x", &kx),
            ("the norm weight", &kn),
            ("the gate-and-up matrix", &kg),
            ("the down matrix", &kd),
            ("the residual", &kr),
        ];
        for input in inputs {
            disjoint(operation, ("the output", &ko), input)?;
        }
        let wg = resident_workgroup(&target);
        let key = FfnKey {
            gate_up: gate_up.format(),
            down: down.format(),
            mt: m.next_power_of_two(),
            spl,
            per_item: width.div_ceil(wg),
            xvec: quad_offset(&kx).is_some() && quad_offset(&kn).is_some(),
            wg,
        };
        let kernel = self.registry.kernel(ffn_key(key))?;
        let scratch = groups * key.mt * width;
        let index = |v: usize| ScalarValue::Index(v as u64);
        let scalars: Vec<ScalarValue> = [
            m,
            width,
            f,
            gate_up.format().row_words(width)?,
            down.format().row_words(f)?,
        ]
        .map(index)
        .into_iter()
        .chain([ScalarValue::F32(norm.eps)])
        .chain(
            [&kx, &kn, &kg, &kd, &kr, &ko]
                .into_iter()
                .flat_map(|o| o.scalars()),
        )
        .chain([index(scratch), index(1)])
        .collect();
        let launch = kernel.launch(operation, &scalars, &[f as u64])?;
        // Graph storage is taken only now, when nothing else can fail; the
        // last workgroup leaves the counter at zero for the next user.
        let partials = graph.scratch(4 * scratch)?;
        let counter = graph.zeroed_scratch(4)?;
        launch.record(
            graph,
            &[
                kx.view, kn.view, kg.view, kd.view, kr.view, ko.view, partials, counter,
            ],
        )
    }
}

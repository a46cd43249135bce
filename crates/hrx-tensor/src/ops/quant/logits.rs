//! A decoder's output head in one dispatch: the final RMS norm of the
//! picked rows, their projection onto the vocabulary by a quantised
//! matrix, and the argmax of each row of logits (`logits_kernel`).
//!
//! A decode step's tail would otherwise be four dependent dispatches
//! (norm, gather, projection, argmax), and the projection alone rereads x
//! for each of tens of thousands of weight rows; here each subgroup holds
//! x in registers and the argmax rides in the epilogue.

use super::logits_kernel::{CPW, LogitsKey, logits_key};
use super::resident::{MAX_SPANS_PER_LANE, resident_workgroup, spans_per_lane};
use crate::ops::{
    Ops, QuantMatrix, RowNorm,
    operand::{check_inputs, check_output, disjoint, operand, quad_offset},
};
use crate::{DType, DeviceTensor};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

/// The most picked rows [`Ops::record_quant_logits`] takes at once (each
/// subgroup holds all of them in registers).
pub const QUANT_LOGITS_MAX_PICKS: usize = 4;

impl Ops {
    /// Record a decoder's output head: for each pick `i`, the row
    /// `y = norm(x[picks[i], :])` (see [`RowNorm`]), `logits[i, j] = y .
    /// w[j, :]` and `next[i]` = the first `j` of the largest logit
    /// ([`Ops::record_argmax`]'s contract: NaN never wins, 0 where none
    /// beats -inf). The same values as an RMS norm, a gather, a
    /// [`Ops::record_quant_matmul`] and an argmax, up to rounding, in one
    /// dispatch.
    ///
    /// `x`: contiguous f32 `[m, cols]` (m at least 1); `picks`: contiguous
    /// i32 `[p]`, 1 to [`QUANT_LOGITS_MAX_PICKS`] of them (a pick outside
    /// `0..m` reads a row of zeros); `logits`: f32 `[p, w.rows()]`;
    /// `next`: i32 `[p]`; neither output overlaps an input. A device
    /// without subgroup arithmetic, or rows too long to hold, is
    /// `Unsupported` (record the four operators).
    #[allow(clippy::too_many_arguments)]
    pub fn record_quant_logits(
        &self,
        graph: &mut Graph,
        x: &DeviceTensor,
        picks: &DeviceTensor,
        norm: RowNorm,
        w: &QuantMatrix,
        logits: &DeviceTensor,
        next: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("quant_logits of {} by {}", x.desc(), w.label());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[x, picks, norm.weight, w.words()])?;
        let fail = |why: String| Err(Error::Message(format!("{operation}: {why}")));
        let cols = w.cols();
        let xd = x.desc();
        if xd.dtype() != DType::F32 || xd.rank() != 2 || xd.shape()[1] != cols {
            return fail(format!("x must be f32 [m, {cols}]"));
        }
        let m = xd.shape()[0];
        if m == 0 || cols == 0 || w.rows() == 0 || !xd.is_contiguous() {
            return fail(
                "x must be contiguous, with rows and columns, and w must have rows".into(),
            );
        }
        let pd = picks.desc();
        if pd.dtype() != DType::I32 || pd.rank() != 1 || !pd.is_contiguous() {
            return fail("the picks must be a contiguous i32 [p]".into());
        }
        let p = pd.shape()[0];
        if !(1..=QUANT_LOGITS_MAX_PICKS).contains(&p) {
            return fail(format!(
                "{p} picks; from 1 to {QUANT_LOGITS_MAX_PICKS} are taken at once"
            ));
        }
        let nd = norm.weight.desc();
        if nd.dtype() != DType::F32 || nd.shape() != [cols] || !nd.is_contiguous() {
            return fail(format!("the norm weight must be a contiguous f32 [{cols}]"));
        }
        let n = w.rows();
        check_output(runtime, operation, logits, DType::F32, &[p, n])?;
        check_output(runtime, operation, next, DType::I32, &[p])?;
        let target = self.registry.target()?;
        if !target.subgroup_ops.arithmetic {
            return Err(Error::Unsupported(format!(
                "{operation}: the device has no subgroup reductions"
            )));
        }
        let spl = spans_per_lane(cols, target.subgroup_size_min as usize);
        let groups = n.div_ceil(CPW);
        if spl > MAX_SPANS_PER_LANE
            || i32::try_from(n).is_err()
            || groups > target.max_workgroup_count[0] as usize
        {
            return Err(Error::Unsupported(format!(
                "{operation}: rows of {cols} or {n} columns are past the one-dispatch head"
            )));
        }
        let bind = |t: &DeviceTensor| operand(t, &target, operation);
        let (kx, kp, kn, kw, ko, ki) = (
            bind(x)?,
            bind(picks)?,
            bind(norm.weight)?,
            bind(w.words())?,
            bind(logits)?,
            bind(next)?,
        );
        for (name, written) in [("the logits", &ko), ("next", &ki)] {
            for (input, read) in [("x", &kx), ("picks", &kp), ("the norm weight", &kn)] {
                disjoint(operation, (name, written), (input, read))?;
            }
            disjoint(operation, (name, written), ("w", &kw))?;
        }
        disjoint(operation, ("the logits", &ko), ("next", &ki))?;
        let tail = !cols.is_multiple_of(8);
        let xvec = !tail && quad_offset(&kx).is_some() && quad_offset(&kn).is_some();
        let wg = resident_workgroup(&target);
        let key = LogitsKey {
            format: w.format(),
            mt: p.next_power_of_two(),
            spl,
            xvec,
            tail,
            wg,
        };
        let kernel = self.registry.kernel(logits_key(key))?;
        let scratch_words = 2 * groups * key.mt;
        let index = |v: usize| ScalarValue::Index(v as u64);
        let row_words = w.format().row_words(cols)?;
        let scalars: Vec<ScalarValue> = [m, n, cols, row_words, p]
            .map(index)
            .into_iter()
            .chain([ScalarValue::F32(norm.eps)])
            .chain(
                [&kx, &kp, &kn, &kw, &ko, &ki]
                    .into_iter()
                    .flat_map(|o| o.scalars()),
            )
            .chain([index(scratch_words), index(1)])
            .collect();
        let launch = kernel.launch(operation, &scalars, &[n as u64])?;
        // Graph storage is taken only now, when nothing else can fail; the
        // last workgroup leaves the counter at zero for the next user.
        let scratch = graph.scratch(4 * scratch_words)?;
        let counter = graph.zeroed_scratch(4)?;
        launch.record(
            graph,
            &[
                kx.view, kp.view, kn.view, kw.view, ko.view, ki.view, scratch, counter,
            ],
        )
    }
}

//! Rows of x held in registers by a quantised kernel that dots a few
//! short rows with many weight rows (`logits_kernel`), on the
//! [`hrx_loom::build`] builder.
//!
//! Lane `l` of a subgroup holds spans `l, l + sg, ..` of each row: `spl`
//! of them, a static count the kernel is specialised for (`ceil(spans /
//! smallest subgroup)`), each marked inside the row or not and clamped
//! into it. A row is RMS-normalised once as it is loaded (its sum of
//! squares is one subgroup reduction), so every weight row after that is
//! a plain dot: the lane's partial over its spans, then one subgroup sum.

use super::spans::{SPAN, XRows, x_span};
use hrx_core::{DeviceKind, Target};
use hrx_loom::build::{Body, Bool, Builder, Index, Num, Value, View};
use hrx_loom::ir::{IntPredicate, ReduceOp, Scalar};

/// The most spans of a row a lane holds (rows up to 8,192 values on
/// subgroups of 32).
pub(crate) const MAX_SPANS_PER_LANE: usize = 32;

/// Work items per workgroup of these kernels: 256 on a GPU (eight
/// subgroups of 32 share a block of weight rows), 64 on a CPU device;
/// within the device's limits.
pub(crate) fn resident_workgroup(target: &Target) -> usize {
    match target.kind {
        DeviceKind::Cpu => 64,
        _ => 256,
    }
    .min(target.max_workgroup_invocations as usize)
    .min(target.max_workgroup_size[0] as usize)
}

/// A buffer argument `name` (written or not) viewed from element 0 as
/// `len` elements of `t`.
pub(crate) fn arg_view(
    k: &mut Body,
    name: &str,
    writes: bool,
    len: Value<Index>,
    t: Scalar,
) -> Value<View> {
    let buffer = k.arg_buffer(name, !writes);
    let zero = k.offset(0);
    k.buffer_view(buffer, zero, [len.into()], t)
}

/// Spans of a row per lane on subgroups of at least `subgroup` lanes.
pub(crate) fn spans_per_lane(cols: usize, subgroup: usize) -> usize {
    cols.div_ceil(SPAN).div_ceil(subgroup.max(1))
}

/// This lane's `spl` spans of rows of `cols` values: whether each lies
/// inside the row, and its index clamped into the row.
pub(crate) fn lane_spans(
    k: &mut Builder,
    spl: usize,
    cols: Value<Index>,
) -> Vec<(Value<Bool>, Value<Index>)> {
    let (c1, c7, c8) = (k.index(1), k.index(7), k.index(8));
    let cols7 = k.add(cols, c7);
    let spans = k.div(cols7, c8);
    let last = k.sub(spans, c1);
    let lane = k.subgroup_lane_id();
    let size = k.subgroup_size();
    (0..spl)
        .map(|i| {
            let di = k.index(i as u64);
            let s = k.madd(size, di, lane);
            (k.cmp(IntPredicate::Ult, s, spans), k.min(s, last))
        })
        .collect()
}

/// The norm of resident rows: the weight's spans of this lane (`[cols]`
/// read like a row of x from element `at`), `1 / cols` and eps.
pub(crate) struct ResidentNorm {
    gains: Vec<Vec<Value<Num>>>,
    inv_cols: Value<Num>,
    eps: Value<Num>,
}

impl ResidentNorm {
    pub(crate) fn load(
        k: &mut Builder,
        weight: &XRows,
        at: Value<Index>,
        spans: &[(Value<Bool>, Value<Index>)],
        eps: Value<Num>,
    ) -> ResidentNorm {
        let gains = spans
            .iter()
            .map(|&(_, s)| x_span(k, weight, at, s))
            .collect();
        let cu = k.index_cast(weight.cols, Scalar::U32);
        let cf = k.uitofp(cu, Scalar::F32);
        let one = k.float(1.0, Scalar::F32);
        ResidentNorm {
            gains,
            inv_cols: k.divf(one, cf),
            eps,
        }
    }
}

/// This lane's spans of the row of x starting at element `start`,
/// RMS-normalised by `norm`: zeros past the row's end, or everywhere
/// where `keep` is false (the row's loads still happen: `start` must be
/// a row of x).
pub(crate) fn resident_row(
    k: &mut Builder,
    x: &XRows,
    start: Value<Index>,
    keep: Option<Value<Bool>>,
    spans: &[(Value<Bool>, Value<Index>)],
    norm: &ResidentNorm,
) -> Vec<Vec<Value<Num>>> {
    let zf = k.float(0.0, Scalar::F32);
    let mut squares = zf;
    let mut row = Vec::with_capacity(spans.len());
    for &(inside, s) in spans {
        let kept = match keep {
            Some(keep) => k.and(inside, keep),
            None => inside,
        };
        let mut values = x_span(k, x, start, s);
        for v in &mut values {
            *v = k.select(kept, *v, zf);
            squares = k.fmaf(*v, *v, squares);
        }
        row.push(values);
    }
    let total = k.subgroup_reduce(ReduceOp::AddF, squares);
    let mean = k.mulf(total, norm.inv_cols);
    let shifted = k.addf(mean, norm.eps);
    let factor = k.rsqrtf(shifted);
    for (values, gains) in row.iter_mut().zip(&norm.gains) {
        for (v, &g) in values.iter_mut().zip(gains) {
            let scaled = k.mulf(*v, factor);
            *v = k.mulf(scaled, g);
        }
    }
    row
}

/// This lane's part of the dot of a resident row with a weight row's
/// spans (`weights[i]`: span `i` of the lane); spans past the row's end
/// add nothing, whatever their weights.
pub(crate) fn lane_dot(
    b: &mut Builder,
    row: &[Vec<Value<Num>>],
    weights: &[Vec<Value<Num>>],
    spans: &[(Value<Bool>, Value<Index>)],
) -> Value<Num> {
    let zf = b.float(0.0, Scalar::F32);
    let mut part = zf;
    for ((&(inside, _), xs), ws) in spans.iter().zip(row).zip(weights) {
        // Two chains, so the adds overlap.
        let (mut even, mut odd) = (zf, zf);
        for (e, (&xv, &wv)) in xs.iter().zip(ws).enumerate() {
            if e % 2 == 0 {
                even = b.fmaf(xv, wv, even);
            } else {
                odd = b.fmaf(xv, wv, odd);
            }
        }
        let dot = b.addf(even, odd);
        let dot = b.select(inside, dot, zf);
        part = b.addf(part, dot);
    }
    part
}

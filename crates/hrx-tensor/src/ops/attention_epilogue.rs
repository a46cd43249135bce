//! The projected attention's epilogue (`AttentionShape::project`), built:
//! the attention's output projection and the residual, after the heads'
//! outputs are in workgroup memory. Each workgroup projects its own heads
//! into its plane of partial sums; the row's last workgroup to finish
//! (`split_count`) adds the planes in order to the residual, so the sum
//! does not depend on which finishes last.

use super::quant_spans::{SPAN, Weights, span_values};
use super::split_count::{last_split, sum_planes};
use hrx_loom::build::{Barrier, Bool, Builder, Index, Value, View};
use hrx_loom::ir::{IntPredicate, Scalar};

const F32: Scalar = Scalar::F32;

/// The output projection's operands (`AttentionShape::project`).
pub(super) struct Projection {
    /// Output columns (the weight's rows).
    pub(super) width: Value<Index>,
    pub(super) weights: Weights,
    /// The weights' element offset.
    pub(super) ow: Value<Index>,
    /// `[rows, width]` each: the residual and the output, with their
    /// element offsets.
    pub(super) residual: (Value<View>, Value<Index>),
    pub(super) out: (Value<View>, Value<Index>),
    /// Partial sums, `[rows, workgroups per row, width]`, and a finishing
    /// counter per row.
    pub(super) scratch: Value<View>,
    pub(super) counters: Value<View>,
    /// Elements of the scratch the planes take (the block variant's
    /// projected rows follow).
    pub(super) planes: Value<Index>,
}

/// How the workgroups of a row share its planes: `per_row` planes (head
/// groups), `arrivals` workgroups counting themselves done (more where a
/// head group's projection rows are split), and whether this one writes
/// its head group's plane.
pub(super) struct Planes {
    pub(super) per_row: Value<Index>,
    pub(super) arrivals: Value<Index>,
    pub(super) writes: Value<Bool>,
}

/// The fused output projection, after the heads' outputs are in `ys`
/// (`values` of them, the workgroup's heads side by side): this
/// workgroup's part, `wo[:, h0 * hd ..][.. values] . ys` for every
/// output column, into its plane of the scratch; the row's last
/// workgroup to finish adds the planes in order to the residual.
pub(super) fn project(
    k: &mut Builder,
    p: &Projection,
    (ys, values): (Value<View>, usize),
    (r, hg, h0, hd): (Value<Index>, Value<Index>, Value<Index>, usize),
    planes: Planes,
    (t, wgs): (Value<Index>, Value<Index>),
) {
    k.barrier(Barrier::Workgroup);
    let c0 = k.index(0);
    let c8 = k.index(SPAN as u64);
    let hdc = k.index(hd as u64);
    let groups = planes.per_row;
    let column0 = k.mul(h0, hdc);
    let span0 = k.div(column0, c8);
    let row_plane = k.mul(r, groups);
    let plane = k.add(row_plane, hg);
    let plane_at = k.mul(plane, p.width);
    k.for_each(t, p.width, wgs, |b, o| {
        let row = b.madd(o, p.weights.row_words, p.ow);
        let (mut even, mut odd) = (b.float(0.0, F32), b.float(0.0, F32));
        for s in 0..values / SPAN {
            let ds = b.index(s as u64);
            let span = b.add(span0, ds);
            let ws = span_values(b, &p.weights, row, span);
            for (e, w) in ws.into_iter().enumerate() {
                let at = b.index((s * SPAN + e) as u64);
                let y = b.load(ys, &[at]);
                if e % 2 == 0 {
                    even = b.fmaf(w, y, even);
                } else {
                    odd = b.fmaf(w, y, odd);
                }
            }
        }
        let part = b.addf(even, odd);
        let at = b.add(plane_at, o);
        b.if_(planes.writes, |b| b.store(part, p.scratch, &[at]));
    });
    let lead = k.cmp(IntPredicate::Eq, t, c0);
    let last = last_split(k, p.counters, r, planes.arrivals, lead);
    k.if_(last, |b| {
        let first_plane = b.mul(row_plane, p.width);
        b.for_each(t, p.width, wgs, |b, o| {
            let within = b.add(first_plane, o);
            let sum = sum_planes(b, p.scratch, groups, p.width, within);
            let at = b.madd(r, p.width, o);
            let (rv, or) = p.residual;
            let rat = b.add(at, or);
            let residual = b.load(rv, &[rat]);
            let value = b.addf(residual, sum);
            let (hv, oh) = p.out;
            let hat = b.add(at, oh);
            b.store(value, hv, &[hat]);
        });
    });
}

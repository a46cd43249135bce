//! The cooperative-matrix kernel's epilogue: each accumulator fragment
//! goes through its subgroup's 16 x 16 f32 staging tile, where the bias,
//! the activation and the bounds check are applied per element (or per
//! quad of elements) on the way to C.
//!
//! The staging tile belongs to one subgroup, so only subgroup barriers
//! order its store and its reads: the subgroups of a workgroup finish
//! their fragments independently.
//!
//! Where C's rows and the bias lie in aligned quads (`CoopLayout::wide_c`),
//! each invocation moves four consecutive elements at a time: one 16-byte
//! read of the staging tile, one 4-lane bias load, the activation on four
//! lanes, one 16-byte (f32) or 8-byte (f16) store. Otherwise element by
//! element.

use crate::ops::{UnaryOp, operand::quad_aligned};
use hrx_loom::build::{
    Barrier, Builder, CoopLayout as Major, Fragment, Index, Mat, Value, View, passes,
};
use hrx_loom::ir::{IntPredicate, Scalar};

/// What the epilogue reads and writes, defined by the kernel before it.
pub(super) struct Epilogue {
    /// The subgroup's staging tile's first row in `tile`.
    pub(super) srow: Value<Index>,
    pub(super) tile: Value<View>,
    pub(super) bias: Value<View>,
    pub(super) c: Value<View>,
    /// The workgroup's first row and column of C, and its batch.
    pub(super) row0: Value<Index>,
    pub(super) col0: Value<Index>,
    pub(super) batch: Value<Index>,
    /// Launch arguments: the extents, the bias's stride and offset, and
    /// C's batch stride and offset.
    pub(super) m: Value<Index>,
    pub(super) n: Value<Index>,
    pub(super) sbias: Value<Index>,
    pub(super) obias: Value<Index>,
    pub(super) scb: Value<Index>,
    pub(super) oc: Value<Index>,
    pub(super) act: Option<UnaryOp>,
    pub(super) out_f16: bool,
    /// Quads at a time (see the module docs), with the activation's
    /// 4-lane form where there is one; else elements.
    pub(super) wide: Option<Option<Fragment>>,
}

impl Epilogue {
    /// Stores accumulator `acc`, the fragment at rows `fr` and columns
    /// `fc` of the workgroup's tile.
    pub(super) fn store(
        &self,
        k: &mut Builder,
        acc: Value<Mat>,
        (fr, fc): (Value<Index>, Value<Index>),
    ) {
        let c0 = k.index(0);
        k.coop_store(Major::RowMajor, acc, self.tile, [self.srow, c0]);
        k.barrier(Barrier::Subgroup);
        let lane = k.subgroup_lane_id();
        let sgsize = k.subgroup_size();
        let per_row = if self.wide.is_some() { 4 } else { 16 };
        let count = k.index(16 * per_row);
        let step = k.index(16 / per_row);
        let per_row = k.index(per_row);
        k.for_each(lane, count, sgsize, |b, e| {
            let r = b.div(e, per_row);
            let q = b.rem(e, per_row);
            let cc = b.mul(q, step);
            let (tr, tc) = (b.add(fr, r), b.add(fc, cc));
            let gr = b.add(self.row0, tr);
            let gc = b.add(self.col0, tc);
            // In the wide form n is a multiple of 4 and gc is, so a quad
            // lies wholly inside C or wholly outside.
            let okr = b.cmp(IntPredicate::Ult, gr, self.m);
            let okc = b.cmp(IntPredicate::Ult, gc, self.n);
            let ok = b.and(okr, okc);
            b.if_(ok, |b| {
                let sr = b.add(self.srow, r);
                let crow = b.madd(gr, self.n, self.oc);
                let cbase = b.madd(self.batch, self.scb, crow);
                let at = b.add(cbase, gc);
                let pb = b.madd(gc, self.sbias, self.obias);
                if let Some(act) = &self.wide {
                    let (pb, at) = (quad_aligned(b, pb), quad_aligned(b, at));
                    quad(b, self, act.as_ref(), [sr, cc], pb, at);
                } else {
                    self.element(b, [sr, cc], pb, at);
                }
            });
        });
        k.barrier(Barrier::Subgroup);
    }

    fn element(
        &self,
        b: &mut Builder,
        staged: [Value<Index>; 2],
        pb: Value<Index>,
        at: Value<Index>,
    ) {
        let acc = b.load(self.tile, &staged);
        let bias = b.load(self.bias, &[pb]);
        let x = b.addf(acc, bias);
        let y = match self.act {
            Some(op) => b.inline(&op.fragment(Scalar::F32), &[x])[0],
            None => x,
        };
        let y = if self.out_f16 {
            b.truncf(y, Scalar::F16)
        } else {
            y
        };
        b.store(y, self.c, &[at]);
    }

    /// The wide form for `act` where C's rows and the bias lie in
    /// aligned quads and `act` (if any) has a 4-lane form.
    pub(super) fn wide_for(aligned: bool, act: Option<UnaryOp>) -> Option<Option<Fragment>> {
        match act {
            _ if !aligned => None,
            None => Some(None),
            Some(op) => passes::vectorize(&op.fragment(Scalar::F32), 4)
                .ok()
                .map(Some),
        }
    }
}

/// Four consecutive elements: staged at `staged`, the bias's at `pb`,
/// C's at `at`, with `act` the activation's 4-lane form.
fn quad(
    b: &mut Builder,
    e: &Epilogue,
    act: Option<&Fragment>,
    staged: [Value<Index>; 2],
    pb: Value<Index>,
    at: Value<Index>,
) {
    let acc = b.vector_load(e.tile, &staged, 4);
    let bias = b.vector_load(e.bias, &[pb], 4);
    let x = b.addf(acc, bias);
    let y = match act {
        Some(f) => b.inline(f, &[x])[0],
        None => x,
    };
    let y = if e.out_f16 {
        b.truncf(y, Scalar::F16)
    } else {
        y
    };
    b.vector_store(y, e.c, &[at]);
}

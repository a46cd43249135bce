//! The row kernels, built: softmax (and log-softmax) and layer / RMS norm
//! over the last axis, one workgroup of `wg` work items per row, each in a
//! strided form and a 4-wide form for aligned contiguous rows whose length
//! is a multiple of 4.
//!
//! Every form strides the row with the workgroup, reduces each work item's
//! partial across its subgroup with a subgroup reduction, then across
//! subgroups through workgroup memory (one slot per subgroup, written by
//! its first lane), and writes the row in a last pass.
//!
//! - softmax: the maximum, the sum of `exp(x - max)`, then `exp(x - max) /
//!   sum` or, for log-softmax, `x - max - ln(sum)`. The 4-wide form keeps
//!   an online maximum and rescaled sum per lane, so it reads the row
//!   twice rather than three times.
//! - norm: the mean (layer norm only; RMS norm centres on 0), the mean
//!   square of `x - mean`, then `(x - mean) * rsqrt(var + eps) * w + b`,
//!   `w` and `b` optional (flags `hw`, `hb`). The 4-wide form sums `x - k`
//!   and its square per lane, `k` the row's first quad (a shift that keeps
//!   the one-pass variance accurate), and merges the four lanes' partial
//!   moments exactly.
//! - add + norm ([`Residual`]): the norm of `a + c`, every pass reading
//!   both inputs and adding them (so each sees the same rounded sums), the
//!   first pass also storing them to `sum` where the caller keeps them
//!   (an encoder's post-norm layer does not: one tensor less to write). Recomputing rather than reading `sum`
//!   back keeps the passes free of a storage barrier (the 4-wide form's
//!   shift is the row's first quad, stored by another work item). The
//!   reductions are the norm's own, so the result equals an add followed
//!   by the norm kernel of the same form and workgroup size.

use crate::ops::token::kernels::narrow;
use hrx_loom::build::{
    Barrier, Body, Bool, Builder, Built, Extent, Index, KernelBuilder, Num, Value, View,
};
use hrx_loom::ir::{Axis, IntPredicate, ReduceOp, Scalar};

const F32: Scalar = Scalar::F32;

/// The fused residual add of a norm kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Residual {
    /// The norm of `a` alone.
    None,
    /// The norm of `a + c`, the sums stored to `sum` (arguments `c` and
    /// `sum`).
    Kept,
    /// The norm of `a + c`, the sums not stored (argument `c` only).
    Unkept,
}

impl Residual {
    /// Whether the kernel adds `c`.
    pub(crate) fn adds(self) -> bool {
        self != Residual::None
    }

    /// Whether the kernel stores the sums.
    pub(crate) fn keeps(self) -> bool {
        self == Residual::Kept
    }
}

/// A kernel of one workgroup of `wg` work items per row.
fn per_row(symbol: &str, wg: usize) -> Body {
    let mut k = KernelBuilder::new(symbol);
    let rows = k.workload("rows");
    let one = k.index(1);
    let wgc = k.index(wg as u64);
    k.launch_config([rows, one, one], [wgc, one, one])
}

/// What a cross-subgroup sum needs: the slots, which subgroup this is,
/// whether this is its first lane, the subgroup count, and 0 and 1.
#[derive(Clone, Copy)]
struct Slots {
    sh: Value<View>,
    sg: Value<Index>,
    first: Value<Bool>,
    nsg: Value<Index>,
    c0: Value<Index>,
    c1: Value<Index>,
}

impl Slots {
    /// `partial` summed across the subgroup, stored in this subgroup's
    /// slot by its first lane, then after a barrier the slots summed from
    /// `zero` (every work item gets the workgroup's sum).
    fn sum(&self, b: &mut Builder, partial: Value<Num>, zero: Value<Num>) -> Value<Num> {
        let s = b.subgroup_reduce(ReduceOp::AddF, partial);
        let (sh, sg) = (self.sh, self.sg);
        b.if_(self.first, |b| b.store(s, sh, &[sg]));
        b.barrier(Barrier::Workgroup);
        b.for_carry(self.c0, self.nsg, self.c1, &[zero], |b, i, acc| {
            let v = b.load(sh, &[i]);
            vec![b.addf(acc[0], v)]
        })[0]
    }
}

/// The workgroup memory of `elems` f32 slots.
fn slots_view(k: &mut Body, zero: Value<hrx_loom::build::Offset>, elems: usize) -> Value<View> {
    let bytes = k.offset(elems as u64 * 4);
    let shm = k.alloca_workgroup(bytes, 16);
    k.buffer_view(shm, zero, [Extent::from(elems)], F32)
}

/// Softmax (`log`: log-softmax) of strided rows.
pub(crate) fn softmax(wg: usize, log: bool) -> Built {
    let mut k = per_row("softmax", wg);
    let [cols, srow, scol, oa, la, oo, lo] =
        ["cols", "srow", "scol", "oa", "la", "oo", "lo"].map(|n| k.arg_index(n));
    let a = k.arg_buffer("a", false);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], F32);
    let ov = k.buffer_view(out, zero, [lo.into()], F32);
    let sh = slots_view(&mut k, zero, wg);
    let c0 = k.index(0);
    let wgs = k.index(wg as u64);
    let r = k.workgroup_id(Axis::X);
    let lx = k.workitem_id(Axis::X);
    let lane = k.subgroup_lane_id();
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let first = k.cmp(IntPredicate::Eq, lane, c0);
    let base = k.madd(r, srow, oa);
    let obase = k.madd(r, cols, oo);
    let ninf = k.float(f64::NEG_INFINITY, F32);
    let zf = k.float(0.0, F32);
    let onef = k.float(1.0, F32);
    let element = |b: &mut Builder, j: Value<Index>| {
        let p = b.madd(j, scol, base);
        b.load(av, &[p])
    };
    // Pass 1: the row maximum.
    let pmax = k.for_carry(lx, cols, wgs, &[ninf], |b, j, m| {
        let x = element(b, j);
        vec![b.maxnumf(m[0], x)]
    })[0];
    let smax = k.subgroup_reduce(ReduceOp::MaxNumF, pmax);
    k.if_(first, |b| b.store(smax, sh, &[sg]));
    k.barrier(Barrier::Workgroup);
    let c1 = k.index(1);
    let rmax = k.for_carry(c0, nsg, c1, &[ninf], |b, i, m| {
        let v = b.load(sh, &[i]);
        vec![b.maxnumf(m[0], v)]
    })[0];
    k.barrier(Barrier::Workgroup);
    // Pass 2: the sum of exp(x - max).
    let psum = k.for_carry(lx, cols, wgs, &[zf], |b, j, s| {
        let x = element(b, j);
        let d = b.subf(x, rmax);
        let e = b.expf(d);
        vec![b.addf(s[0], e)]
    })[0];
    let slots = Slots {
        sh,
        sg,
        first,
        nsg,
        c0,
        c1,
    };
    let sum = slots.sum(&mut k, psum, zf);
    let inv = k.divf(onef, sum);
    let lse = k.logf(sum);
    // Pass 3: write.
    k.for_each(lx, cols, wgs, |b, j| {
        let x = element(b, j);
        let d = b.subf(x, rmax);
        let o = if log {
            b.subf(d, lse)
        } else {
            let e = b.expf(d);
            b.mulf(e, inv)
        };
        let q = b.add(obase, j);
        b.store(o, ov, &[q]);
    });
    Built::kernel(k.finish())
}

/// Softmax (`log`: log-softmax) of aligned contiguous rows of quads.
pub(crate) fn softmax4(wg: usize, log: bool) -> Built {
    let mut k = per_row("softmax4", wg);
    let [c4, srow4, qa, la, qo, lo] =
        ["c4", "srow4", "qa", "la", "qo", "lo"].map(|n| k.arg_index(n));
    let a = k.arg_buffer("a", false);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], F32);
    let ov = k.buffer_view(out, zero, [lo.into()], F32);
    let sh = slots_view(&mut k, zero, wg * 4);
    let [c0, c1, four, wgs] = [0, 1, 4, wg as u64].map(|v| k.index(v));
    let r = k.workgroup_id(Axis::X);
    let lx = k.workitem_id(Axis::X);
    let lane = k.subgroup_lane_id();
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let nsh = k.mul(nsg, four);
    let first = k.cmp(IntPredicate::Eq, lane, c0);
    let slot = k.mul(sg, four);
    let abase = k.madd(r, srow4, qa);
    let obase = k.madd(r, c4, qo);
    let lowest = k.float(f64::from(f32::MIN), F32);
    let zf = k.float(0.0, F32);
    let onef = k.float(1.0, F32);
    let lowv = k.splat(lowest, 4);
    let zv = k.splat(zf, 4);
    let quad = |b: &mut Builder, j: Value<Index>| {
        let t = b.add(abase, j);
        let p = b.mul(t, four);
        b.vector_load(av, &[p], 4)
    };
    // Pass 1: online maximum and sum per lane.
    let ms = k.for_carry(lx, c4, wgs, &[lowv, zv], |b, j, acc| {
        let (mj, sj) = (acc[0], acc[1]);
        let x = quad(b, j);
        let m2 = b.maxnumf(mj, x);
        let dm = b.subf(mj, m2);
        let scale = b.expf(dm);
        let dx = b.subf(x, m2);
        let ex = b.expf(dx);
        let s2 = b.fmaf(sj, scale, ex);
        vec![m2, s2]
    });
    let (m, s) = (ms[0], ms[1]);
    let smax = k.subgroup_reduce(ReduceOp::MaxNumF, m);
    k.if_(first, |b| b.vector_store(smax, sh, &[slot]));
    k.barrier(Barrier::Workgroup);
    let rmax = k.for_carry(c0, nsh, c1, &[lowest], |b, i, acc| {
        let v = b.load(sh, &[i]);
        vec![b.maxnumf(acc[0], v)]
    })[0];
    k.barrier(Barrier::Workgroup);
    let maxv = k.splat(rmax, 4);
    let shift = k.subf(m, maxv);
    let rescale = k.expf(shift);
    let ls = k.mulf(s, rescale);
    let ssum = k.subgroup_reduce(ReduceOp::AddF, ls);
    k.if_(first, |b| b.vector_store(ssum, sh, &[slot]));
    k.barrier(Barrier::Workgroup);
    let sum = k.for_carry(c0, nsh, c1, &[zf], |b, i, acc| {
        let v = b.load(sh, &[i]);
        vec![b.addf(acc[0], v)]
    })[0];
    let inv = k.divf(onef, sum);
    let lse = k.logf(sum);
    let invv = k.splat(inv, 4);
    let lsev = k.splat(lse, 4);
    // Pass 2: write.
    k.for_each(lx, c4, wgs, |b, j| {
        let x = quad(b, j);
        let d = b.subf(x, maxv);
        let o = if log {
            b.subf(d, lsev)
        } else {
            let e = b.expf(d);
            b.mulf(e, invv)
        };
        let to = b.add(obase, j);
        let q = b.mul(to, four);
        b.vector_store(o, ov, &[q]);
    });
    Built::kernel(k.finish())
}

/// Layer norm (`center`) or RMS norm of strided rows; with a `residual`,
/// of `a + c` (`c` strided like `a`), the sums stored to the contiguous
/// `sum` where kept.
pub(crate) fn norm(wg: usize, center: bool, residual: Residual) -> Built {
    let add = residual.adds();
    let mut k = per_row(if add { "add_norm" } else { "norm" }, wg);
    let cols = k.arg_index("cols");
    let eps = k.arg_scalar("eps", F32);
    let [hw, hb, srow, scol, oa, la, sw, ow, lw, sb, ob, lb, oo, lo] = [
        "hw", "hb", "srow", "scol", "oa", "la", "sw", "ow", "lw", "sb", "ob", "lb", "oo", "lo",
    ]
    .map(|n| k.arg_index(n));
    let [a, w, bb, out] = ["a", "w", "b", "out"].map(|n| k.arg_buffer(n, false));
    let added = declare_residual(&mut k, residual, ["oc", "lc", "os", "ls"]);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], F32);
    let wv = k.buffer_view(w, zero, [lw.into()], F32);
    let bv = k.buffer_view(bb, zero, [lb.into()], F32);
    let ov = k.buffer_view(out, zero, [lo.into()], F32);
    let sh = slots_view(&mut k, zero, wg);
    let [c0, c1, wgs] = [0, 1, wg as u64].map(|v| k.index(v));
    let r = k.workgroup_id(Axis::X);
    let lx = k.workitem_id(Axis::X);
    let lane = k.subgroup_lane_id();
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let first = k.cmp(IntPredicate::Eq, lane, c0);
    let base = k.madd(r, srow, oa);
    let obase = k.madd(r, cols, oo);
    // The addend's row base and the sum's view and row base.
    let added = added.map(|(cv, oc, kept)| {
        let cbase = k.madd(r, srow, oc);
        (cv, cbase, kept.map(|(sv, os)| (sv, k.madd(r, cols, os))))
    });
    let zf = k.float(0.0, F32);
    let onef = k.float(1.0, F32);
    let centerc = k.index(u64::from(center));
    let centered = k.cmp(IntPredicate::Ne, centerc, c0);
    let colsu = k.index_cast(cols, Scalar::U32);
    let n = k.uitofp(colsu, F32);
    let slots = Slots {
        sh,
        sg,
        first,
        nsg,
        c0,
        c1,
    };
    let element = |b: &mut Builder, j: Value<Index>| {
        let p = b.madd(j, scol, base);
        let x = b.load(av, &[p]);
        match added {
            Some((cv, cbase, _)) => {
                let pc = b.madd(j, scol, cbase);
                let y = b.load(cv, &[pc]);
                b.addf(x, y)
            }
            None => x,
        }
    };
    // Pass 1: the mean (layer norm only), and the sums stored.
    let psum = k.for_carry(lx, cols, wgs, &[zf], |b, j, s| {
        let x = element(b, j);
        if let Some((_, _, Some((sv, sbase)))) = added {
            let q = b.add(sbase, j);
            b.store(x, sv, &[q]);
        }
        vec![b.addf(s[0], x)]
    })[0];
    let sum = slots.sum(&mut k, psum, zf);
    k.barrier(Barrier::Workgroup);
    let mean0 = k.divf(sum, n);
    let mean = k.select(centered, mean0, zf);
    // Pass 2: the mean square of x - mean.
    let psq = k.for_carry(lx, cols, wgs, &[zf], |b, j, s| {
        let x = element(b, j);
        let d = b.subf(x, mean);
        vec![b.fmaf(d, d, s[0])]
    })[0];
    let sq = slots.sum(&mut k, psq, zf);
    let var = k.divf(sq, n);
    let ve = k.addf(var, eps);
    let rstd = k.rsqrtf(ve);
    let usew = k.cmp(IntPredicate::Ne, hw, c0);
    let useb = k.cmp(IntPredicate::Ne, hb, c0);
    // Pass 3: write.
    k.for_each(lx, cols, wgs, |b, j| {
        let x = element(b, j);
        let d = b.subf(x, mean);
        let y = b.mulf(d, rstd);
        let pw = b.madd(j, sw, ow);
        let wl = b.load(wv, &[pw]);
        let wj = b.select(usew, wl, onef);
        let pb = b.madd(j, sb, ob);
        let bl = b.load(bv, &[pb]);
        let bj = b.select(useb, bl, zf);
        let o = b.fmaf(y, wj, bj);
        let q = b.add(obase, j);
        b.store(o, ov, &[q]);
    });
    Built::kernel(k.finish())
}

/// The fused add's addend view and offset, and (where kept) the sum's
/// view and offset.
pub(super) type AddedIo = (
    Value<View>,
    Value<Index>,
    Option<(Value<View>, Value<Index>)>,
);

/// Declare a `residual`'s arguments, named by `names` (the addend's
/// offset and length, then the sum's): the addend's, then the sum's where
/// kept (scalars first, then buffers `c` and `sum`, each after those
/// declared before).
fn declare_residual(k: &mut Body, residual: Residual, names: [&str; 4]) -> Option<AddedIo> {
    if !residual.adds() {
        return None;
    }
    let [oc, lc] = [names[0], names[1]].map(|n| k.arg_index(n));
    let sum_args = residual
        .keeps()
        .then(|| [names[2], names[3]].map(|n| k.arg_index(n)));
    let zero = k.offset(0);
    let c = k.arg_buffer("c", false);
    let cv = k.buffer_view(c, zero, [lc.into()], F32);
    let kept = sum_args.map(|[os, ls]| {
        let s = k.arg_buffer("sum", false);
        (k.buffer_view(s, zero, [ls.into()], F32), os)
    });
    Some((cv, oc, kept))
}

/// The arguments and views of the 4-wide norm kernels (`norm4` and the
/// subgroup-a-row form), in launch order: `c4, eps, hw, hb, srow4, qa,
/// la, sw, qw, lw, sb, qb, lb, qo, lo`, then with a residual `qc, lc`
/// (and `qs, ls` where its sums are kept), then with `copy` `qk, lk`;
/// buffers `a, w, b, out`, then `c` (and `sum`), then `copy`. Offsets and strides are in quads.
pub(super) struct Norm4Io {
    pub(super) c4: Value<Index>,
    pub(super) eps: Value<Num>,
    pub(super) hw: Value<Index>,
    pub(super) hb: Value<Index>,
    pub(super) srow4: Value<Index>,
    pub(super) qa: Value<Index>,
    pub(super) sw: Value<Index>,
    pub(super) qw: Value<Index>,
    pub(super) sb: Value<Index>,
    pub(super) qb: Value<Index>,
    pub(super) qo: Value<Index>,
    pub(super) av: Value<View>,
    pub(super) wv: Value<View>,
    pub(super) bv: Value<View>,
    pub(super) ov: Value<View>,
    pub(super) added: Option<AddedIo>,
    /// The f16 copy's view and offset.
    pub(super) copied: Option<(Value<View>, Value<Index>)>,
    /// The output's element type (f32, or f16 rounded to nearest).
    pub(super) out: Scalar,
}

impl Norm4Io {
    /// The arguments of a norm with `residual`, with an f16 `copy`,
    /// writing `out` elements.
    pub(super) fn declare(
        k: &mut Body,
        residual: Residual,
        (copy, out): (bool, Scalar),
    ) -> Norm4Io {
        let c4 = k.arg_index("c4");
        let eps = k.arg_scalar("eps", F32);
        let [hw, hb, srow4, qa, la, sw, qw, lw, sb, qb, lb, qo, lo] = [
            "hw", "hb", "srow4", "qa", "la", "sw", "qw", "lw", "sb", "qb", "lb", "qo", "lo",
        ]
        .map(|n| k.arg_index(n));
        let [a, w, bb, out_buffer] = ["a", "w", "b", "out"].map(|n| k.arg_buffer(n, false));
        let added = declare_residual(k, residual, ["qc", "lc", "qs", "ls"]);
        let zero = k.offset(0);
        let copied = copy.then(|| {
            let [qk, lk] = ["qk", "lk"].map(|n| k.arg_index(n));
            let kb = k.arg_buffer("copy", false);
            (k.buffer_view(kb, zero, [lk.into()], Scalar::F16), qk)
        });
        let av = k.buffer_view(a, zero, [la.into()], F32);
        let wv = k.buffer_view(w, zero, [lw.into()], F32);
        let bv = k.buffer_view(bb, zero, [lb.into()], F32);
        let ov = k.buffer_view(out_buffer, zero, [lo.into()], out);
        Norm4Io {
            c4,
            eps,
            hw,
            hb,
            srow4,
            qa,
            sw,
            qw,
            sb,
            qb,
            qo,
            av,
            wv,
            bv,
            ov,
            added,
            copied,
            out,
        }
    }
}

/// Whether the norm's weight and bias are present, and the quads they
/// default to (ones, zeros).
#[derive(Clone, Copy)]
pub(super) struct Affine {
    usew: Value<Bool>,
    useb: Value<Bool>,
    ones: Value<Num>,
    zeros: Value<Num>,
}

impl Norm4Io {
    /// The weight's and bias's presence, read from the flags `hw`, `hb`.
    pub(super) fn affine(&self, b: &mut Builder) -> Affine {
        let c0 = b.index(0);
        let (zf, onef) = (b.float(0.0, F32), b.float(1.0, F32));
        Affine {
            usew: b.cmp(IntPredicate::Ne, self.hw, c0),
            useb: b.cmp(IntPredicate::Ne, self.hb, c0),
            ones: b.splat(onef, 4),
            zeros: b.splat(zf, 4),
        }
    }

    /// Stores `y * weight + bias` as quad `j` of the output row starting
    /// at quad `obase`, and rounded to f16 into the copy's row at its base.
    pub(super) fn write_quad(
        &self,
        b: &mut Builder,
        affine: Affine,
        (j, y): (Value<Index>, Value<Num>),
        obase: Value<Index>,
        copied: Option<(Value<View>, Value<Index>)>,
    ) {
        let four = b.index(4);
        let at = |b: &mut Builder, base: Value<Index>| {
            let t = b.add(base, j);
            b.mul(t, four)
        };
        let tw = b.madd(j, self.sw, self.qw);
        let pw = b.mul(tw, four);
        let wl = b.vector_load(self.wv, &[pw], 4);
        let wj = b.select(affine.usew, wl, affine.ones);
        let tb = b.madd(j, self.sb, self.qb);
        let pb = b.mul(tb, four);
        let bl = b.vector_load(self.bv, &[pb], 4);
        let bj = b.select(affine.useb, bl, affine.zeros);
        let o = b.fmaf(y, wj, bj);
        let po = at(b, obase);
        let stored = narrow(b, o, self.out);
        b.vector_store(stored, self.ov, &[po]);
        if let Some((kv, kbase)) = copied {
            let pk = at(b, kbase);
            let narrow = b.truncf(o, Scalar::F16);
            b.vector_store(narrow, kv, &[pk]);
        }
    }
}

/// Layer norm (`center`) or RMS norm of aligned contiguous rows of quads;
/// with a `residual`, of `a + c` (`c` laid out like `a`), the sums stored
/// to the contiguous `sum` where kept; with `copy`, the output also rounded to f16 into the
/// contiguous `copy` (arguments `qk`, `lk` after the others); the output
/// of `out` elements.
pub(crate) fn norm4(
    wg: usize,
    center: bool,
    residual: Residual,
    (copy, out): (bool, Scalar),
) -> Built {
    let symbol = if residual.adds() {
        "add_norm4"
    } else {
        "norm4"
    };
    let mut k = per_row(symbol, wg);
    let io = Norm4Io::declare(&mut k, residual, (copy, out));
    let Norm4Io {
        c4,
        eps,
        srow4,
        qa,
        qo,
        av,
        added,
        copied,
        ..
    } = io;
    let zero = k.offset(0);
    // Two quads per subgroup slot (sum, sum of squares), then the merge
    // area: four lane means and four lane second moments.
    let sh = slots_view(&mut k, zero, wg * 8 + 8);
    let [c0, c1, four, eight, wgs, merge] =
        [0, 1, 4, 8, wg as u64, wg as u64 * 8].map(|v| k.index(v));
    let merge2 = k.add(merge, four);
    let r = k.workgroup_id(Axis::X);
    let lx = k.workitem_id(Axis::X);
    let lane = k.subgroup_lane_id();
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let first = k.cmp(IntPredicate::Eq, lane, c0);
    let leader = k.cmp(IntPredicate::Eq, lx, c0);
    let slot = k.mul(sg, eight);
    let slot2 = k.add(slot, four);
    let abase = k.madd(r, srow4, qa);
    let obase = k.madd(r, c4, qo);
    let copied = copied.map(|(kv, qk)| (kv, k.madd(r, c4, qk)));
    // The addend's row base and the sum's view and row base, in quads.
    let added = added.map(|(cv, qc, kept)| {
        let cbase = k.madd(r, srow4, qc);
        (cv, cbase, kept.map(|(sv, qs)| (sv, k.madd(r, c4, qs))))
    });
    let zf = k.float(0.0, F32);
    let zv = k.splat(zf, 4);
    let c4u = k.index_cast(c4, Scalar::U32);
    let n4 = k.uitofp(c4u, F32);
    let n4v = k.splat(n4, 4);
    let centerc = k.index(u64::from(center));
    let centered = k.cmp(IntPredicate::Ne, centerc, c0);
    let quad = |b: &mut Builder, j: Value<Index>| {
        let t = b.add(abase, j);
        let p = b.mul(t, four);
        let x = b.vector_load(av, &[p], 4);
        match added {
            Some((cv, cbase, _)) => {
                let tc = b.add(cbase, j);
                let pc = b.mul(tc, four);
                let y = b.vector_load(cv, &[pc], 4);
                b.addf(x, y)
            }
            None => x,
        }
    };
    let shift = quad(&mut k, c0);
    // Pass 1: shifted sums per lane, and the sums stored.
    let sums = k.for_carry(lx, c4, wgs, &[zv, zv], |b, j, acc| {
        let x = quad(b, j);
        if let Some((_, _, Some((sv, sbase)))) = added {
            let ts = b.add(sbase, j);
            let ps = b.mul(ts, four);
            b.vector_store(x, sv, &[ps]);
        }
        let d = b.subf(x, shift);
        let s2 = b.addf(acc[0], d);
        let ss2 = b.fmaf(d, d, acc[1]);
        vec![s2, ss2]
    });
    let gs = k.subgroup_reduce(ReduceOp::AddF, sums[0]);
    let gss = k.subgroup_reduce(ReduceOp::AddF, sums[1]);
    k.if_(first, |b| {
        b.vector_store(gs, sh, &[slot]);
        b.vector_store(gss, sh, &[slot2]);
    });
    k.barrier(Barrier::Workgroup);
    let totals = k.for_carry(c0, nsg, c1, &[zv, zv], |b, i, acc| {
        let pi = b.mul(i, eight);
        let pi2 = b.add(pi, four);
        let vs = b.vector_load(sh, &[pi], 4);
        let vss = b.vector_load(sh, &[pi2], 4);
        let s3 = b.addf(acc[0], vs);
        let ss3 = b.addf(acc[1], vss);
        vec![s3, ss3]
    });
    let (ts, tss) = (totals[0], totals[1]);
    let smean = k.divf(ts, n4v);
    let lmean = k.addf(shift, smean);
    let sq = k.mulf(ts, smean);
    let lm2 = k.subf(tss, sq);
    k.if_(leader, |b| {
        b.vector_store(lmean, sh, &[merge]);
        b.vector_store(lm2, sh, &[merge2]);
    });
    k.barrier(Barrier::Workgroup);
    let c2 = k.index(2);
    let c3 = k.index(3);
    let i1 = k.add(merge, c1);
    let i2 = k.add(merge, c2);
    let i3 = k.add(merge, c3);
    let [m0, m1, m2, m3] = [merge, i1, i2, i3].map(|i| k.load(sh, &[i]));
    let msum01 = k.addf(m0, m1);
    let msum23 = k.addf(m2, m3);
    let msum = k.addf(msum01, msum23);
    let quarter = k.float(0.25, F32);
    let mean0 = k.mulf(msum, quarter);
    let mean = k.select(centered, mean0, zf);
    let meanv = k.splat(mean, 4);
    let tot = k.for_carry(c0, four, c1, &[zf], |b, i, acc| {
        let vi = b.add(merge2, i);
        let m2i = b.load(sh, &[vi]);
        let mi0 = b.add(merge, i);
        let mi = b.load(sh, &[mi0]);
        let di = b.subf(mi, mean);
        let di2 = b.mulf(di, di);
        let pi3 = b.fmaf(di2, n4, m2i);
        vec![b.addf(acc[0], pi3)]
    })[0];
    let four_f = k.float(4.0, F32);
    let cols = k.mulf(n4, four_f);
    let var = k.divf(tot, cols);
    let ve = k.addf(var, eps);
    let rstd = k.rsqrtf(ve);
    let rstdv = k.splat(rstd, 4);
    let affine = io.affine(&mut k);
    // Pass 2: write.
    k.for_each(lx, c4, wgs, |b, j| {
        let x = quad(b, j);
        let d = b.subf(x, meanv);
        let y = b.mulf(d, rstdv);
        io.write_quad(b, affine, (j, y), obase, copied);
    });
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;

    /// A residual whose sums are not kept gives kernels without the `sum`
    /// argument (so nothing can be stored to it), in each of the three
    /// forms; a kept one declares it.
    #[test]
    fn unkept_sums_have_no_sum_argument() {
        let rows_form = |residual| {
            let input = super::super::norm_kernel::RowInput::Rows { residual };
            super::super::norm_kernel::norm4_rows(32, 8, 3, (input, true, false), F32)
        };
        for residual in [Residual::Kept, Residual::Unkept] {
            for built in [
                norm(32, true, residual),
                norm4(32, true, residual, (false, F32)),
                rows_form(residual),
            ] {
                let text = built.text();
                assert_eq!(
                    text.contains("%sum"),
                    residual.keeps(),
                    "{residual:?}:\n{text}"
                );
            }
        }
    }

    /// Every form, workgroup size and flag builds a kernel the verifier
    /// and naga accept, on a CPU and a GPU target.
    #[test]
    fn every_variant_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for wg in [16, 32, 256] {
                for (flag, kept) in [(false, Residual::Kept), (true, Residual::Unkept)] {
                    for (symbol, built) in [
                        ("softmax", softmax(wg, flag)),
                        ("softmax4", softmax4(wg, flag)),
                        ("norm", norm(wg, flag, Residual::None)),
                        ("norm4", norm4(wg, flag, Residual::None, (false, F32))),
                        (
                            "norm4",
                            norm4(wg, flag, Residual::None, (false, Scalar::F16)),
                        ),
                        ("add_norm", norm(wg, flag, kept)),
                        ("add_norm4", norm4(wg, flag, kept, (false, F32))),
                        ("add_norm4", norm4(wg, flag, kept, (true, F32))),
                        ("add_norm4", norm4(wg, flag, kept, (false, Scalar::F16))),
                    ] {
                        compiler
                            .built(&built)
                            .and_then(|m| {
                                m.compile_uncached(&hrx_loom::Specialization::new(symbol))
                            })
                            .unwrap_or_else(|e| panic!("{symbol} wg={wg} {flag}: {e}"));
                    }
                }
            }
        }
    }
}

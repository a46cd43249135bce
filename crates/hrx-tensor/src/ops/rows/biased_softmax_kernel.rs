//! The biased softmax kernel, built: `softmax(a[r, :] + bias[r / per_bias,
//! :])` over contiguous rows of quads, one subgroup per row.
//!
//! Attention rows are short (128 keys are 32 quads), so one workgroup per
//! row, as the plain softmax kernels run, leaves most of the device's
//! workgroup places holding a single warp. Here every subgroup takes a
//! row: the row's maximum and sum are subgroup reductions, with no
//! workgroup memory and no barrier, and a workgroup holds as many rows as
//! it has subgroups. Rows are taken in a grid-stride loop from
//! `workgroup * subgroups + subgroup`, so the launch needs no assumption
//! about the subgroup size the device picks.
//!
//! Each lane keeps an online maximum and rescaled sum per quad component
//! (one read of the row), folds its four components into one, and the
//! subgroup folds its lanes; a second read writes `exp(x - max) / sum`,
//! narrowed to f16 when the output is f16.

use hrx_loom::build::{Built, KernelBuilder};
use hrx_loom::ir::{Axis, ReduceOp, Scalar};

const F32: Scalar = Scalar::F32;

/// Workgroups a launch of `rows` rows uses at most: a grid-stride loop
/// takes the rest.
pub(crate) const MAX_GROUPS: u64 = 65535;

/// The kernel for workgroups of `wg` work items writing `out` elements.
pub(crate) fn biased_softmax4(wg: usize, out: Scalar) -> Built {
    let mut k = KernelBuilder::new("biased_softmax4");
    let groups = k.workload("groups");
    let one = k.index(1);
    let wgc = k.index(wg as u64);
    let mut k = k.launch_config([groups, one, one], [wgc, one, one]);
    let [rows, c4, per_bias, qa, la, qb, lb, qo, lo] =
        ["rows", "c4", "per_bias", "qa", "la", "qb", "lb", "qo", "lo"].map(|n| k.arg_index(n));
    let a = k.arg_buffer("a", false);
    let bias = k.arg_buffer("bias", false);
    let dst = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], F32);
    let bv = k.buffer_view(bias, zero, [lb.into()], F32);
    let ov = k.buffer_view(dst, zero, [lo.into()], out);
    let [c0, c1, c2, c3, four] = [0, 1, 2, 3, 4].map(|v| k.index(v));
    let group = k.workgroup_id(Axis::X);
    let ngroups = k.workgroup_count(Axis::X);
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let lane = k.subgroup_lane_id();
    let width = k.subgroup_size();
    let first = k.madd(group, nsg, sg);
    let stride = k.mul(ngroups, nsg);
    let lowest = k.float(f64::from(f32::MIN), F32);
    let zf = k.float(0.0, F32);
    let onef = k.float(1.0, F32);
    let lowv = k.splat(lowest, 4);
    let zv = k.splat(zf, 4);
    k.for_each(first, rows, stride, |b, r| {
        let abase = b.madd(r, c4, qa);
        let brow = b.div(r, per_bias);
        let bbase = b.madd(brow, c4, qb);
        let obase = b.madd(r, c4, qo);
        // The quad j of the biased row.
        let quad = |b: &mut hrx_loom::build::Builder, j| {
            let ta = b.add(abase, j);
            let pa = b.mul(ta, four);
            let x = b.vector_load(av, &[pa], 4);
            let tb = b.add(bbase, j);
            let pb = b.mul(tb, four);
            let y = b.vector_load(bv, &[pb], 4);
            b.addf(x, y)
        };
        // Pass 1: an online maximum and sum per component.
        let ms = b.for_carry(lane, c4, width, &[lowv, zv], |b, j, acc| {
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
        // The lane's four components folded into one, then the lanes.
        let parts = [c0, c1, c2, c3].map(|i| (b.extract(ms[0], i), b.extract(ms[1], i)));
        let m_lane = parts
            .iter()
            .skip(1)
            .fold(parts[0].0, |m, &(mi, _)| b.maxnumf(m, mi));
        let s_lane = parts.iter().fold(zf, |s, &(mi, si)| {
            let d = b.subf(mi, m_lane);
            let e = b.expf(d);
            b.fmaf(si, e, s)
        });
        let max = b.subgroup_reduce(ReduceOp::MaxNumF, m_lane);
        let shift = b.subf(m_lane, max);
        let rescale = b.expf(shift);
        let mine = b.mulf(s_lane, rescale);
        let sum = b.subgroup_reduce(ReduceOp::AddF, mine);
        let inv = b.divf(onef, sum);
        let maxv = b.splat(max, 4);
        let invv = b.splat(inv, 4);
        // Pass 2: write.
        b.for_each(lane, c4, width, |b, j| {
            let x = quad(b, j);
            let d = b.subf(x, maxv);
            let e = b.expf(d);
            let p = b.mulf(e, invv);
            let p = if out == F32 { p } else { b.truncf(p, out) };
            let to = b.add(obase, j);
            let q = b.mul(to, four);
            b.vector_store(p, ov, &[q]);
        });
    });
    Built::kernel(k.finish())
}

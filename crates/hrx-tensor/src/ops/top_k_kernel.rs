//! The top-k kernel: each row's `k` largest values in order with their
//! column indices, and the row's softmax denominator at a per-row
//! temperature. Sampling a token from an LLM's logits then reads back `k`
//! candidates and one sum instead of the whole row.
//!
//! - One workgroup per row (a grid-stride loop over rows past the grid
//!   cap), shaped as the row-parallel argmax (`argmax_kernel`).
//! - `k` rounds. Round `n` is an argmax over the elements that follow
//!   round `n - 1`'s pick in the order "larger value first, equal values
//!   by smaller index": `(x, j)` follows `(v, i)` when `x < v`, or
//!   `x == v` and `j > i`. The first round follows `(+inf, -1)`, which
//!   every element but NaN does.
//! - A round reduces as the argmax does (per work item, then subgroup,
//!   then the workgroup's slots), except that every work item merges the
//!   slots, so all of them hold the pick the next round follows without
//!   a broadcast. A second barrier keeps the slots until all have read.
//! - NaN and -inf are never picked. Rounds past the row's last other
//!   element write index -1 and value -inf.
//! - Then one pass sums `exp((x - top) / temperature[r])` over the row's
//!   elements above -inf (NaN skipped), `top` being the first pick: the
//!   softmax denominator relative to the largest logit. With no pick the
//!   sum is 0.
//!
//! Cost: `k + 1` reads of the row, each a few loads per work item and two
//! barriers. An LLM's row of logits (49,152 f32, 192 KiB) stays in cache
//! across the rounds.

use super::argmax_kernel::{UNROLL, row_workgroup, slots};
use super::registry::{Generator, KernelKey, KernelSource};
use hrx_core::Target;
use hrx_loom::build::{Barrier, Builder, Built, Index, KernelBuilder, Value};
use hrx_loom::ir::{Axis, FloatPredicate, IntPredicate, ReduceOp, Scalar};

/// The most values a row gives.
pub(crate) const MAX_TOP_K: usize = 256;

/// The index a work item holds before any column qualifies (i32::MAX:
/// larger than any column, so the minimum over lanes ignores it).
const NONE: i64 = i32::MAX as i64;

/// A launch shape of the top-k kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TopKShape {
    /// Work items per row (one workgroup).
    pub(crate) wg: usize,
    /// At most this many workgroups a dispatch.
    pub(crate) max_groups: usize,
    /// Values per row.
    pub(crate) k: usize,
}

impl TopKShape {
    /// The shape for `k` values of rows of `cols` on `target`, or `None`
    /// on a device without subgroup arithmetic.
    pub(crate) fn for_rows(target: &Target, cols: usize, k: usize) -> Option<TopKShape> {
        let ops = target.subgroup_ops;
        if !(ops.basic && ops.arithmetic) {
            return None;
        }
        Some(TopKShape {
            wg: row_workgroup(target, cols),
            max_groups: target.max_workgroup_count[0].min(1 << 20) as usize,
            k,
        })
    }

    /// The registry key of the kernel of this shape.
    pub(crate) fn key(self) -> KernelKey {
        KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("top_k_rows {} {} {}", self.wg, self.max_groups, self.k),
                move || top_k_rows(self),
            )),
            symbol: "top_k_rows",
            config: Vec::new(),
        }
    }
}

/// The kernel: launch arguments `rows, cols, srow, scol` (element `(r, c)`
/// of `x` at `ox + r * srow + c * scol`), then the offset and length of
/// each buffer: `x`, `temperature` (f32, `[rows]`), `values` (f32,
/// `[rows, k]`), `indices` (i32, `[rows, k]`), `mass` (f32, `[rows]`);
/// workload `rows`.
pub(crate) fn top_k_rows(shape: TopKShape) -> Built {
    let TopKShape {
        wg,
        max_groups,
        k: picks,
    } = shape;
    let mut k = KernelBuilder::new("top_k_rows");
    let nrows = k.workload("nrows");
    let one = k.index(1);
    let cap = k.index(max_groups as u64);
    let groups = k.min(nrows, cap);
    let wgc = k.index(wg as u64);
    let mut k = k.launch_config([groups, one, one], [wgc, one, one]);
    let [rows, cols, srow, scol] = ["rows", "cols", "srow", "scol"].map(|n| k.arg_index(n));
    let [ox, lx, ot, lt, ov, lv, oi, li, om, lm] =
        ["ox", "lx", "ot", "lt", "ov", "lv", "oi", "li", "om", "lm"].map(|n| k.arg_index(n));
    let [x, temperature] = ["x", "temperature"].map(|n| k.arg_buffer(n, true));
    let [values, indices, mass] = ["values", "indices", "mass"].map(|n| k.arg_buffer(n, false));
    let zero = k.offset(0);
    let xv = k.buffer_view(x, zero, [lx.into()], Scalar::F32);
    let tv = k.buffer_view(temperature, zero, [lt.into()], Scalar::F32);
    let vv = k.buffer_view(values, zero, [lv.into()], Scalar::F32);
    let iv = k.buffer_view(indices, zero, [li.into()], Scalar::I32);
    let mv = k.buffer_view(mass, zero, [lm.into()], Scalar::F32);
    let shv = slots(&mut k, wg, Scalar::F32);
    let shi = slots(&mut k, wg, Scalar::I32);
    let [c0, c1] = [0, 1].map(|v| k.index(v));
    let kc = k.index(picks as u64);
    let span = k.index((wg * UNROLL) as u64);
    let last = k.sub(cols, c1);
    let first_row = k.workgroup_id(Axis::X);
    let row_step = k.workgroup_count(Axis::X);
    let lxi = k.workitem_id(Axis::X);
    let lane = k.subgroup_lane_id();
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let first_lane = k.cmp(IntPredicate::Eq, lane, c0);
    let leader = k.cmp(IntPredicate::Eq, lxi, c0);
    let ninf = k.float(f64::NEG_INFINITY, Scalar::F32);
    let pinf = k.float(f64::INFINITY, Scalar::F32);
    let fzero = k.float(0.0, Scalar::F32);
    let fone = k.float(1.0, Scalar::F32);
    let none = k.int(NONE, Scalar::I32);
    let before_all = k.int(-1, Scalar::I32);
    // This work item's column offsets within a trip.
    let lanes: Vec<_> = (0..UNROLL)
        .map(|u| {
            let off = k.index((u * wg) as u64);
            k.add(lxi, off)
        })
        .collect();
    k.for_each(first_row, rows, row_step, |b, r| {
        let base = b.madd(r, srow, ox);
        // One trip's columns and their values: every load first (past the
        // row's end it rereads the last column, masked by `inside`).
        let trip = |b: &mut Builder, t: Value<Index>| {
            let js: Vec<_> = lanes.iter().map(|&o| b.add(t, o)).collect();
            let xs: Vec<_> = js
                .iter()
                .map(|&j| {
                    let jc = b.min(j, last);
                    let p = b.madd(jc, scol, base);
                    b.load(xv, &[p])
                })
                .collect();
            let inside: Vec<_> = js
                .iter()
                .map(|&j| b.cmp(IntPredicate::Ult, j, cols))
                .collect();
            (js, xs, inside)
        };
        let slot_base_v = b.madd(r, kc, ov);
        let slot_base_i = b.madd(r, kc, oi);
        // Carried across rounds: the last pick (value, index) and the
        // first pick's value.
        let carried = b.for_carry(c0, kc, c1, &[pinf, before_all, ninf], |b, round, acc| {
            let (pv, pi, top) = (acc[0], acc[1], acc[2]);
            let best = b.for_carry(c0, cols, span, &[ninf, none], |b, t, acc| {
                let (js, xs, inside) = trip(b, t);
                let (mut m, mut mi) = (acc[0], acc[1]);
                for ((&j, &x), &inside) in js.iter().zip(&xs).zip(&inside) {
                    let ji = b.index_cast(j, Scalar::I32);
                    let below = b.cmpf(FloatPredicate::Olt, x, pv);
                    let same = b.cmpf(FloatPredicate::Oeq, x, pv);
                    let later = b.cmpi(IntPredicate::Sgt, ji, pi);
                    let tie_after = b.and(same, later);
                    let follows = b.or(below, tie_after);
                    let above = b.cmpf(FloatPredicate::Ogt, x, m);
                    let candidate = b.and(follows, above);
                    let better = b.and(inside, candidate);
                    m = b.select(better, x, m);
                    mi = b.select(better, ji, mi);
                }
                vec![m, mi]
            });
            let (m, mi) = (best[0], best[1]);
            let gm = b.subgroup_reduce(ReduceOp::MaxNumF, m);
            let holds = b.cmpf(FloatPredicate::Oeq, m, gm);
            let held = b.select(holds, mi, none);
            let gi = b.subgroup_reduce(ReduceOp::MinSI, held);
            b.if_(first_lane, |b| {
                b.store(gm, shv, &[sg]);
                b.store(gi, shi, &[sg]);
            });
            b.barrier(Barrier::Workgroup);
            let merged = b.for_carry(c0, nsg, c1, &[ninf, none], |b, i, acc| {
                let v = b.load(shv, &[i]);
                let vi = b.load(shi, &[i]);
                let above = b.cmpf(FloatPredicate::Ogt, v, acc[0]);
                let equal = b.cmpf(FloatPredicate::Oeq, v, acc[0]);
                let earlier = b.cmpi(IntPredicate::Slt, vi, acc[1]);
                let tie = b.and(equal, earlier);
                let better = b.or(above, tie);
                vec![b.select(better, v, acc[0]), b.select(better, vi, acc[1])]
            });
            let missing = b.cmpi(IntPredicate::Eq, merged[1], none);
            let value = b.select(missing, ninf, merged[0]);
            b.if_(leader, |b| {
                let index = b.select(missing, before_all, merged[1]);
                let pv_slot = b.add(slot_base_v, round);
                let pi_slot = b.add(slot_base_i, round);
                b.store(value, vv, &[pv_slot]);
                b.store(index, iv, &[pi_slot]);
            });
            b.barrier(Barrier::Workgroup);
            let first = b.cmp(IntPredicate::Eq, round, c0);
            let top = b.select(first, value, top);
            vec![value, merged[1], top]
        });
        let top = carried[2];
        let t_slot = b.add(ot, r);
        let t = b.load(tv, &[t_slot]);
        let inv = b.divf(fone, t);
        let partial = b.for_carry(c0, cols, span, &[fzero], |b, t, acc| {
            let (_, xs, inside) = trip(b, t);
            let mut sum = acc[0];
            for (&x, &inside) in xs.iter().zip(&inside) {
                let ordered = b.cmpf(FloatPredicate::Ogt, x, ninf);
                let counts = b.and(inside, ordered);
                let d = b.subf(x, top);
                let scaled = b.mulf(d, inv);
                let e = b.expf(scaled);
                let term = b.select(counts, e, fzero);
                sum = b.addf(sum, term);
            }
            vec![sum]
        });
        let gs = b.subgroup_reduce(ReduceOp::AddF, partial[0]);
        b.if_(first_lane, |b| b.store(gs, shv, &[sg]));
        b.barrier(Barrier::Workgroup);
        b.if_(leader, |b| {
            let total = b.for_carry(c0, nsg, c1, &[fzero], |b, i, acc| {
                let v = b.load(shv, &[i]);
                vec![b.addf(acc[0], v)]
            });
            let m_slot = b.add(om, r);
            b.store(total[0], mv, &[m_slot]);
        });
        b.barrier(Barrier::Workgroup);
    });
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every workgroup size builds a kernel the verifier and naga accept,
    /// on a CPU and a GPU target.
    #[test]
    fn every_shape_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for (wg, k) in [(8, 1), (16, 64), (64, 5), (256, 64), (1024, 256)] {
                let shape = TopKShape {
                    wg,
                    max_groups: 4,
                    k,
                };
                compiler
                    .built(&top_k_rows(shape))
                    .and_then(|m| m.compile_uncached(&hrx_loom::Specialization::new("top_k_rows")))
                    .unwrap_or_else(|e| panic!("wg={wg} k={k}: {e}"));
            }
        }
    }

    /// Devices without subgroup arithmetic have no top-k kernel.
    #[test]
    fn shapes_follow_the_target() {
        let gpu = Target::hopper();
        assert_eq!(TopKShape::for_rows(&gpu, 49_152, 64).unwrap().wg, 1024);
        assert_eq!(
            TopKShape::for_rows(&Target::lavapipe(), 49_152, 64)
                .unwrap()
                .wg,
            16
        );
        let mut bare = gpu;
        bare.subgroup_ops.arithmetic = false;
        assert_eq!(TopKShape::for_rows(&bare, 49_152, 64), None);
    }
}

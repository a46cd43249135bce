//! The row-parallel argmax kernel, built: one workgroup per row (a
//! grid-stride loop over rows where they exceed the grid cap), for long
//! rows such as an LLM's logits, where the serial kernel's one work item
//! per row walks 49,152 columns alone.
//!
//! Contract (identical to the serial kernel): the first index of the
//! largest value, as i32; NaN never wins; a row with no value above -inf
//! (all -inf, all NaN, or a mix) gives 0.
//!
//! - Each work item strides over the row with the workgroup, `UNROLL`
//!   columns per trip at `lx + u * wg` (consecutive work items read
//!   consecutive elements; the trip's loads are independent, so a GPU has
//!   `UNROLL` of them in flight per work item rather than one). It keeps
//!   `(best, index)`, starting from `(-inf, NONE)`, replaced only where
//!   `x > best` (ordered: NaN and -inf never replace), visiting its
//!   columns in increasing order, so its index is the first of its best.
//! - A subgroup takes the maximum of the bests (never NaN, so the float
//!   maximum is exact), then the minimum index among lanes holding it
//!   (`NONE` from the others); its first lane writes the pair to its slot
//!   in workgroup memory. After a barrier the first work item merges the
//!   slots (larger value, or equal value and smaller index), maps `NONE`
//!   to 0 and writes the row's output. A second barrier keeps the slots
//!   until it has read them before the next row overwrites them.

use crate::ops::registry::{Generator, KernelKey, KernelSource};
use hrx_core::{DeviceKind, Target};
use hrx_loom::build::{Barrier, Builder, Built, Extent, KernelBuilder, Num, Value, View};
use hrx_loom::ir::{Axis, FloatPredicate, IntPredicate, ReduceOp, Scalar};

/// Rows at least this long take the row-parallel kernel. From 256 columns
/// on, a GPU workgroup of the smallest size this kernel uses (64) reads at
/// least 4 elements per work item, coalesced, and the serial walk it
/// replaces takes 256 or more dependent loads per work item; shorter rows
/// are a few dependent loads on the serial kernel, which also spreads many
/// rows over all work items of the grid instead of one workgroup each.
pub(crate) const LONG_ROW: usize = 256;

/// Work items per row on CPU devices: llvmpipe runs a workgroup's work
/// items as coroutines that switch at every barrier, so few of them per
/// row cost least (the row kernels measured 16 best on lavapipe).
const CPU_WG: usize = 16;

/// Work items per row on GPUs at least / at most.
const GPU_WG: (usize, usize) = (64, 1024);

/// Columns each work item loads per trip of the column loop.
pub(crate) const UNROLL: usize = 8;

/// The index a work item holds before any column beats -inf (i32::MAX:
/// larger than any column, so the minimum over lanes ignores it).
pub(crate) const NONE: i64 = i32::MAX as i64;

/// A launch shape of the row-parallel kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArgmaxShape {
    /// Work items per row (one workgroup).
    pub(crate) wg: usize,
    /// At most this many workgroups a dispatch; further rows are reached
    /// by the grid-stride loop.
    pub(crate) max_groups: usize,
}

impl ArgmaxShape {
    /// The shape for rows of `cols` on `target`, or `None` where the serial
    /// kernel serves: short rows, or a device without subgroup arithmetic.
    /// The workgroup is [`row_workgroup`]'s (on a GPU, a single long row
    /// keeps as many loads in flight as one workgroup can).
    pub(crate) fn for_rows(target: &Target, cols: usize) -> Option<ArgmaxShape> {
        let ops = target.subgroup_ops;
        if cols < LONG_ROW || !(ops.basic && ops.arithmetic) {
            return None;
        }
        let max_groups = target.max_workgroup_count[0].min(1 << 20) as usize;
        Some(ArgmaxShape {
            wg: row_workgroup(target, cols),
            max_groups,
        })
    }

    /// The registry key of the kernel of this shape.
    pub(crate) fn key(self) -> KernelKey {
        KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("argmax_rows {} {}", self.wg, self.max_groups),
                move || argmax_rows(self),
            )),
            symbol: "argmax_rows",
            config: Vec::new(),
        }
    }
}

/// Work items per row of `cols` columns: on a GPU enough for one trip of
/// `UNROLL` loads each (a power of two from 64 to 1024), on a CPU device
/// [`CPU_WG`]; within the device's workgroup limits.
pub(crate) fn row_workgroup(target: &Target, cols: usize) -> usize {
    let wanted = if target.kind == DeviceKind::Cpu {
        CPU_WG
    } else {
        cols.div_ceil(UNROLL)
            .next_power_of_two()
            .clamp(GPU_WG.0, GPU_WG.1)
    };
    wanted
        .min(target.max_workgroup_invocations as usize)
        .min(target.max_workgroup_size[0] as usize)
}

/// Workgroup memory of `elems` slots of `elem`.
pub(crate) fn slots(k: &mut hrx_loom::build::Builder, elems: usize, elem: Scalar) -> Value<View> {
    let zero = k.offset(0);
    let bytes = k.offset(elems as u64 * 4);
    let buffer = k.alloca_workgroup(bytes, 16);
    k.buffer_view(buffer, zero, [Extent::from(elems)], elem)
}

/// The better of `(value, index)` pairs `acc` and `next`: the larger
/// value, or of equal values the smaller index (NaN never wins, being
/// neither larger nor equal).
pub(crate) fn merge_best(
    b: &mut Builder,
    acc: &[Value<Num>],
    (v, vi): (Value<Num>, Value<Num>),
) -> Vec<Value<Num>> {
    let above = b.cmpf(FloatPredicate::Ogt, v, acc[0]);
    let equal = b.cmpf(FloatPredicate::Oeq, v, acc[0]);
    let earlier = b.cmpi(IntPredicate::Slt, vi, acc[1]);
    let tie = b.and(equal, earlier);
    let better = b.or(above, tie);
    vec![b.select(better, v, acc[0]), b.select(better, vi, acc[1])]
}

/// The subgroup's best of its lanes' `(value, index)` pairs (values never
/// NaN, indices `NONE` where a lane has none): the largest value, then
/// the smallest index among the lanes holding it; in every lane.
pub(crate) fn subgroup_best(
    b: &mut Builder,
    (m, mi): (Value<Num>, Value<Num>),
) -> (Value<Num>, Value<Num>) {
    let none = b.int(NONE, Scalar::I32);
    let gm = b.subgroup_reduce(ReduceOp::MaxNumF, m);
    let holds = b.cmpf(FloatPredicate::Oeq, m, gm);
    let candidate = b.select(holds, mi, none);
    (gm, b.subgroup_reduce(ReduceOp::MinSI, candidate))
}

/// The kernel: launch arguments `rows, cols, srow, scol, oa, la, oo, lo`
/// (element `(r, c)` of `a` at `oa + r * srow + c * scol`, output `r` at
/// `oo + r`), buffers `a` (f32) and `out` (i32); workload `rows`.
pub(crate) fn argmax_rows(shape: ArgmaxShape) -> Built {
    let ArgmaxShape { wg, max_groups } = shape;
    let mut k = KernelBuilder::new("argmax_rows");
    let nrows = k.workload("nrows");
    let one = k.index(1);
    let cap = k.index(max_groups as u64);
    let groups = k.min(nrows, cap);
    let wgc = k.index(wg as u64);
    let mut k = k.launch_config([groups, one, one], [wgc, one, one]);
    let [rows, cols, srow, scol, oa, la, oo, lo] =
        ["rows", "cols", "srow", "scol", "oa", "la", "oo", "lo"].map(|n| k.arg_index(n));
    let a = k.arg_buffer("a", false);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], Scalar::F32);
    let ov = k.buffer_view(out, zero, [lo.into()], Scalar::I32);
    let shv = slots(&mut k, wg, Scalar::F32);
    let shi = slots(&mut k, wg, Scalar::I32);
    let [c0, c1] = [0, 1].map(|v| k.index(v));
    let span = k.index((wg * UNROLL) as u64);
    let last = k.sub(cols, c1);
    let first_row = k.workgroup_id(Axis::X);
    let row_step = k.workgroup_count(Axis::X);
    let lx = k.workitem_id(Axis::X);
    let lane = k.subgroup_lane_id();
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let first_lane = k.cmp(IntPredicate::Eq, lane, c0);
    let leader = k.cmp(IntPredicate::Eq, lx, c0);
    let ninf = k.float(f64::NEG_INFINITY, Scalar::F32);
    let none = k.int(NONE, Scalar::I32);
    let izero = k.int(0, Scalar::I32);
    // This work item's column offsets within a trip.
    let lanes: Vec<_> = (0..UNROLL)
        .map(|u| {
            let off = k.index((u * wg) as u64);
            k.add(lx, off)
        })
        .collect();
    k.for_each(first_row, rows, row_step, |b, r| {
        let base = b.madd(r, srow, oa);
        let best = b.for_carry(c0, cols, span, &[ninf, none], |b, t, acc| {
            let js: Vec<_> = lanes.iter().map(|&o| b.add(t, o)).collect();
            // Every load first (in range: past the row's end it rereads
            // the last column, ignored below), then the compares.
            let xs: Vec<_> = js
                .iter()
                .map(|&j| {
                    let jc = b.min(j, last);
                    let p = b.madd(jc, scol, base);
                    b.load(av, &[p])
                })
                .collect();
            let (mut m, mut mi) = (acc[0], acc[1]);
            for (&j, &x) in js.iter().zip(&xs) {
                let inside = b.cmp(IntPredicate::Ult, j, cols);
                let above = b.cmpf(FloatPredicate::Ogt, x, m);
                let better = b.and(inside, above);
                let ji = b.index_cast(j, Scalar::I32);
                m = b.select(better, x, m);
                mi = b.select(better, ji, mi);
            }
            vec![m, mi]
        });
        let (gm, gi) = subgroup_best(b, (best[0], best[1]));
        b.if_(first_lane, |b| {
            b.store(gm, shv, &[sg]);
            b.store(gi, shi, &[sg]);
        });
        b.barrier(Barrier::Workgroup);
        b.if_(leader, |b| {
            let merged = b.for_carry(c0, nsg, c1, &[ninf, none], |b, i, acc| {
                let v = b.load(shv, &[i]);
                let vi = b.load(shi, &[i]);
                merge_best(b, acc, (v, vi))
            });
            let missing = b.cmpi(IntPredicate::Eq, merged[1], none);
            let res = b.select(missing, izero, merged[1]);
            let q = b.add(oo, r);
            b.store(res, ov, &[q]);
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
            for wg in [8, 16, 64, 256, 1024] {
                let shape = ArgmaxShape { wg, max_groups: 4 };
                compiler
                    .built(&argmax_rows(shape))
                    .and_then(|m| m.compile_uncached(&hrx_loom::Specialization::new("argmax_rows")))
                    .unwrap_or_else(|e| panic!("wg={wg}: {e}"));
            }
        }
    }

    /// Short rows and devices without subgroup arithmetic keep the serial
    /// kernel; the workgroup follows the device kind and limits.
    #[test]
    fn shapes_follow_the_target() {
        let (cpu, gpu) = (Target::lavapipe(), Target::hopper());
        assert_eq!(ArgmaxShape::for_rows(&gpu, LONG_ROW - 1), None);
        assert_eq!(ArgmaxShape::for_rows(&cpu, 49_152).unwrap().wg, CPU_WG);
        assert_eq!(ArgmaxShape::for_rows(&gpu, 49_152).unwrap().wg, 1024);
        assert_eq!(ArgmaxShape::for_rows(&gpu, 1000).unwrap().wg, 128);
        assert_eq!(ArgmaxShape::for_rows(&gpu, LONG_ROW).unwrap().wg, 64);
        let mut small = gpu.clone();
        small.max_workgroup_invocations = 256;
        small.max_workgroup_count[0] = 4;
        let shape = ArgmaxShape::for_rows(&small, 49_152).unwrap();
        assert_eq!((shape.wg, shape.max_groups), (256, 4));
        let mut bare = gpu;
        bare.subgroup_ops.arithmetic = false;
        assert_eq!(ArgmaxShape::for_rows(&bare, 49_152), None);
    }
}

//! The top-k kernels: each row's `k` largest values in order with their
//! column indices, and the row's softmax denominator at a per-row
//! temperature. Sampling a token from an LLM's logits then reads back `k`
//! candidates and one sum instead of the whole row.
//!
//! - **Scan.** One workgroup per chunk of a row (a grid-stride loop over
//!   (row, chunk) pairs past the grid cap), shaped as the row-parallel
//!   argmax (`argmax_kernel`). `k` rounds: round `n` is an argmax over the
//!   chunk's elements that follow round `n - 1`'s pick in the order
//!   "larger value first, equal values by smaller column": `(x, j)`
//!   follows `(v, i)` when `x < v`, or `x == v` and `j > i`; the first
//!   round follows `(+inf, -1)`. A round reduces as the argmax does (per
//!   work item, subgroup, then the workgroup's slots), except that every
//!   work item merges the slots, so all hold the pick the next round
//!   follows; a second barrier keeps the slots until all have read. Then
//!   one pass sums `exp((x - top) / temperature[r])` over the chunk, `top`
//!   being its first pick.
//! - **Merge**, for rows of more than one chunk: one workgroup per row
//!   takes the `k` first of the chunks' candidates in the same order
//!   (comparing their columns, not their places), and the denominator is
//!   the sum of each chunk's times `exp((chunk top - top) / t)`.
//! - NaN and -inf are never picked. Rounds past the last other element
//!   write index -1 and value -inf; with no pick the sum is 0.
//!
//! Cost: a round is a few loads and compares per work item and two
//! barriers, so `k` rounds over a whole row in one workgroup reread it `k`
//! times on one compute unit. Chunks of 2,048 columns (4,096 on a CPU
//! device) run side by side, each rereading a few KiB, and the merge
//! reads `chunks * k` candidates.

use super::argmax_kernel::{UNROLL, row_workgroup, slots};
use crate::ops::registry::{Generator, KernelKey, KernelSource};
use hrx_core::{DeviceKind, Target};
use hrx_loom::build::{Barrier, Bool, Builder, Built, Index, KernelBuilder, Num, Value, View};
use hrx_loom::ir::{Axis, FloatPredicate, IntPredicate, ReduceOp, Scalar};

/// The most values a row gives.
pub(crate) const MAX_TOP_K: usize = 256;

/// The index a work item holds before any column qualifies (i32::MAX:
/// larger than any column, so the minimum over lanes ignores it).
const NONE: i64 = i32::MAX as i64;

/// Columns a workgroup of the scan takes on a GPU and on a CPU device:
/// longer rows are cut into chunks that run as workgroups of their own
/// (a chunk's rounds reread a few KiB instead of the whole row, and the
/// chunks of one row run side by side), then a merge pass takes the top-k
/// of the chunks' candidates.
const GPU_CHUNK: usize = 2048;
const CPU_CHUNK: usize = 4096;

/// Which pass a kernel is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Pass {
    /// The top-k of each chunk of each row, and the chunk's denominator
    /// relative to its own largest value. With one chunk a row, the
    /// answer.
    Scan,
    /// The top-k of each row's chunk candidates (compared by value, then
    /// by their column), and the row's denominator from the chunks'.
    Merge,
}

/// A launch shape of one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TopKShape {
    pub(crate) pass: Pass,
    /// Work items per (row, chunk) or row (one workgroup).
    pub(crate) wg: usize,
    /// At most this many workgroups a dispatch.
    pub(crate) max_groups: usize,
    /// Values per row (and per chunk).
    pub(crate) k: usize,
}

/// How a row of `cols` is taken: columns per chunk and chunks, the scan's
/// shape, and the merge's where there is more than one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TopKPlan {
    pub(crate) chunk: usize,
    pub(crate) chunks: usize,
    pub(crate) scan: TopKShape,
    pub(crate) merge: Option<TopKShape>,
}

impl TopKPlan {
    /// The plan for `k` values of rows of `cols` on `target`, or `None`
    /// on a device without subgroup arithmetic.
    pub(crate) fn for_rows(target: &Target, cols: usize, k: usize) -> Option<TopKPlan> {
        let ops = target.subgroup_ops;
        if !(ops.basic && ops.arithmetic) {
            return None;
        }
        let chunk = if target.kind == DeviceKind::Cpu {
            CPU_CHUNK
        } else {
            GPU_CHUNK
        }
        .min(cols.max(1));
        let chunks = cols.div_ceil(chunk).max(1);
        let max_groups = target.max_workgroup_count[0].min(1 << 20) as usize;
        let shape = |pass, columns| TopKShape {
            pass,
            wg: row_workgroup(target, columns),
            max_groups,
            k,
        };
        Some(TopKPlan {
            chunk,
            chunks,
            scan: shape(Pass::Scan, chunk),
            merge: (chunks > 1).then(|| shape(Pass::Merge, chunks * k)),
        })
    }
}

impl TopKShape {
    /// The registry key of the kernel of this shape.
    pub(crate) fn key(self) -> KernelKey {
        KernelKey {
            source: KernelSource::Built(Generator::new(
                format!(
                    "top_k {:?} {} {} {}",
                    self.pass, self.wg, self.max_groups, self.k
                ),
                move || top_k(self),
            )),
            symbol: "top_k",
            config: Vec::new(),
        }
    }
}

/// The kernel of one pass.
///
/// Scan: launch arguments `rows, cols, srow, scol, chunks, chunk`
/// (element `(r, c)` of `x` at `ox + r * srow + c * scol`; chunk `h` of a
/// row holds columns `h * chunk ..` up to `chunk` of them), then the
/// offset and length of each buffer: `x`, `temperature` (f32, `[rows]`),
/// `values` (f32, `[rows * chunks, k]`), `indices` (i32, columns),
/// `mass` (f32, `[rows * chunks]`); workload `rows * chunks`.
///
/// Merge: launch arguments `rows, n, chunks` (`n = chunks * k`
/// candidates a row), then the offset and length of `cv`, `ci` (the
/// scan's values and indices, `[rows, n]`), `cm` (its masses, `[rows,
/// chunks]`), `temperature`, `values`, `indices` (`[rows, k]`) and `mass`
/// (`[rows]`); workload `rows`.
pub(crate) fn top_k(shape: TopKShape) -> Built {
    let TopKShape {
        pass,
        wg,
        max_groups,
        k: picks,
    } = shape;
    let mut k = KernelBuilder::new("top_k");
    let nrows = k.workload("nrows");
    let one = k.index(1);
    let cap = k.index(max_groups as u64);
    let groups = k.min(nrows, cap);
    let wgc = k.index(wg as u64);
    let mut k = k.launch_config([groups, one, one], [wgc, one, one]);
    let scan = pass == Pass::Scan;
    let (size_names, inputs): (&[&str], &[&'static str]) = if scan {
        (
            &["rows", "cols", "srow", "scol", "chunks", "chunk"],
            &["x", "temperature"],
        )
    } else {
        (&["rows", "n", "chunks"], &["cv", "ci", "cm", "temperature"])
    };
    let sizes: Vec<_> = size_names.iter().map(|n| k.arg_index(n)).collect();
    let names: Vec<&'static str> = inputs
        .iter()
        .copied()
        .chain(["values", "indices", "mass"])
        .collect();
    let ranges: Vec<_> = names
        .iter()
        .map(|n| {
            let offset = k.arg_index(&format!("o_{n}"));
            let len = k.arg_index(&format!("l_{n}"));
            (offset, len)
        })
        .collect();
    let buffers: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, n)| k.arg_buffer(n, i < inputs.len()))
        .collect();
    let zero = k.offset(0);
    let views: Vec<_> = names
        .iter()
        .zip(&buffers)
        .zip(&ranges)
        .map(|((n, &buffer), &(_, len))| {
            let elem = if *n == "ci" || *n == "indices" {
                Scalar::I32
            } else {
                Scalar::F32
            };
            k.buffer_view(buffer, zero, [len.into()], elem)
        })
        .collect();
    let [c0, c1] = [0, 1].map(|v| k.index(v));
    let lxi = k.workitem_id(Axis::X);
    let lane = k.subgroup_lane_id();
    let parts = Parts {
        scan,
        chunks: if scan { sizes[4] } else { sizes[2] },
        sizes,
        names,
        views,
        offsets: ranges.iter().map(|&(offset, _)| offset).collect(),
        shv: slots(&mut k, wg, Scalar::F32),
        shi: slots(&mut k, wg, Scalar::I32),
        c0,
        c1,
        kc: k.index(picks as u64),
        span: k.index((wg * UNROLL) as u64),
        sg: k.subgroup_id(),
        nsg: k.subgroup_count(),
        first_lane: k.cmp(IntPredicate::Eq, lane, c0),
        leader: k.cmp(IntPredicate::Eq, lxi, c0),
        // This work item's element offsets within a trip.
        lanes: (0..UNROLL)
            .map(|u| {
                let off = k.index((u * wg) as u64);
                k.add(lxi, off)
            })
            .collect(),
        c: Consts {
            ninf: k.float(f64::NEG_INFINITY, Scalar::F32),
            pinf: k.float(f64::INFINITY, Scalar::F32),
            fzero: k.float(0.0, Scalar::F32),
            fone: k.float(1.0, Scalar::F32),
            none: k.int(NONE, Scalar::I32),
            before_all: k.int(-1, Scalar::I32),
        },
    };
    // Workgroups: (row, chunk) pairs for the scan, rows for the merge.
    let rows = parts.sizes[0];
    let units = if scan {
        k.mul(rows, parts.chunks)
    } else {
        rows
    };
    let first_unit = k.workgroup_id(Axis::X);
    let unit_step = k.workgroup_count(Axis::X);
    k.for_each(first_unit, units, unit_step, |b, unit| {
        let u = parts.unit(b, unit);
        let top = parts.rounds(b, &u);
        parts.denominator(b, &u, top);
    });
    Built::kernel(k.finish())
}

/// Constants the passes share.
struct Consts {
    ninf: Value<Num>,
    pinf: Value<Num>,
    fzero: Value<Num>,
    fone: Value<Num>,
    none: Value<Num>,
    before_all: Value<Num>,
}

/// What the kernel body reads: its pass, launch sizes, buffers by name,
/// the workgroup's slots and ids, and constants.
struct Parts {
    scan: bool,
    sizes: Vec<Value<Index>>,
    chunks: Value<Index>,
    names: Vec<&'static str>,
    views: Vec<Value<View>>,
    offsets: Vec<Value<Index>>,
    shv: Value<View>,
    shi: Value<View>,
    c0: Value<Index>,
    c1: Value<Index>,
    kc: Value<Index>,
    span: Value<Index>,
    sg: Value<Index>,
    nsg: Value<Index>,
    first_lane: Value<Bool>,
    leader: Value<Bool>,
    lanes: Vec<Value<Index>>,
    c: Consts,
}

/// One workgroup's unit: a chunk of a row (scan) or a row's candidates
/// (merge).
struct Unit {
    unit: Value<Index>,
    row: Value<Index>,
    /// Its elements, and the last one's index.
    n: Value<Index>,
    last: Value<Index>,
    /// Element 0's place: in `x` (scan) or in the candidates (merge,
    /// before the buffers' offsets).
    base: Value<Index>,
    /// The column of element 0 (scan).
    start: Value<Index>,
}

impl Parts {
    fn at(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|n| *n == name)
            .expect("a buffer of this pass")
    }

    fn view(&self, name: &str) -> Value<View> {
        self.views[self.at(name)]
    }

    fn offset(&self, name: &str) -> Value<Index> {
        self.offsets[self.at(name)]
    }

    fn unit(&self, b: &mut Builder, unit: Value<Index>) -> Unit {
        if self.scan {
            let [cols, srow, scol, chunk] = [1, 2, 3, 5].map(|i| self.sizes[i]);
            let row = b.div(unit, self.chunks);
            let h = b.rem(unit, self.chunks);
            let start = b.mul(h, chunk);
            let left = b.sub(cols, start);
            let n = b.min(left, chunk);
            let row_base = b.madd(row, srow, self.offset("x"));
            let base = b.madd(start, scol, row_base);
            let last = b.sub(n, self.c1);
            Unit {
                unit,
                row,
                n,
                last,
                base,
                start,
            }
        } else {
            let n = self.sizes[1];
            let base = b.mul(unit, n);
            let last = b.sub(n, self.c1);
            Unit {
                unit,
                row: unit,
                n,
                last,
                base,
                start: self.c0,
            }
        }
    }

    /// Element `j` of `u` (clamped to its last; the caller masks) as
    /// (value, column).
    fn load(&self, b: &mut Builder, u: &Unit, j: Value<Index>) -> (Value<Num>, Value<Num>) {
        let jc = b.min(j, u.last);
        if self.scan {
            let p = b.madd(jc, self.sizes[3], u.base);
            let x = b.load(self.view("x"), &[p]);
            let column = b.add(u.start, j);
            (x, b.index_cast(column, Scalar::I32))
        } else {
            let at = b.add(u.base, jc);
            let pv = b.add(at, self.offset("cv"));
            let pi = b.add(at, self.offset("ci"));
            let x = b.load(self.view("cv"), &[pv]);
            (x, b.load(self.view("ci"), &[pi]))
        }
    }

    /// The `k` rounds: writes the unit's values and columns; returns the
    /// first pick's value (-inf with none).
    fn rounds(&self, b: &mut Builder, u: &Unit) -> Value<Num> {
        let c = &self.c;
        let slot_v = b.madd(u.unit, self.kc, self.offset("values"));
        let slot_i = b.madd(u.unit, self.kc, self.offset("indices"));
        // Carried across rounds: the last pick (value, column) and the
        // first pick's value.
        let init = [c.pinf, c.before_all, c.ninf];
        let carried = b.for_carry(self.c0, self.kc, self.c1, &init, |b, round, acc| {
            let (pv, pi, top) = (acc[0], acc[1], acc[2]);
            let init = [c.ninf, c.none];
            let best = b.for_carry(self.c0, u.n, self.span, &init, |b, t, acc| {
                let js: Vec<_> = self.lanes.iter().map(|&o| b.add(t, o)).collect();
                // Every load first, then the compares.
                let xs: Vec<_> = js.iter().map(|&j| self.load(b, u, j)).collect();
                let (mut m, mut mi) = (acc[0], acc[1]);
                for (&j, &(x, id)) in js.iter().zip(&xs) {
                    let inside = b.cmp(IntPredicate::Ult, j, u.n);
                    // -inf and NaN are never taken.
                    let real = b.cmpf(FloatPredicate::Ogt, x, c.ninf);
                    let follows = after(b, x, id, pv, pi);
                    let beats = after(b, m, mi, x, id);
                    let candidate = b.and(follows, beats);
                    let taken = b.and(real, candidate);
                    let better = b.and(inside, taken);
                    m = b.select(better, x, m);
                    mi = b.select(better, id, mi);
                }
                vec![m, mi]
            });
            let (value, id) = self.workgroup_best(b, best[0], best[1]);
            let missing = b.cmpi(IntPredicate::Eq, id, c.none);
            let value = b.select(missing, c.ninf, value);
            b.if_(self.leader, |b| {
                let index = b.select(missing, c.before_all, id);
                let pv_slot = b.add(slot_v, round);
                let pi_slot = b.add(slot_i, round);
                b.store(value, self.view("values"), &[pv_slot]);
                b.store(index, self.view("indices"), &[pi_slot]);
            });
            // Keeps the slots until every work item has merged them.
            b.barrier(Barrier::Workgroup);
            let first = b.cmp(IntPredicate::Eq, round, self.c0);
            let top = b.select(first, value, top);
            vec![value, id, top]
        });
        carried[2]
    }

    /// The first of the work items' `(m, mi)` in the order of [`after`]
    /// (`mi` is `NONE` where a work item has none), held by every work
    /// item: a subgroup reduction, each subgroup's first lane writing its
    /// pair to the workgroup slots, a barrier, and every work item merging
    /// the slots. The caller's next barrier keeps the slots until all have
    /// read them.
    fn workgroup_best(
        &self,
        b: &mut Builder,
        m: Value<Num>,
        mi: Value<Num>,
    ) -> (Value<Num>, Value<Num>) {
        let c = &self.c;
        let gm = b.subgroup_reduce(ReduceOp::MaxNumF, m);
        let holds = b.cmpf(FloatPredicate::Oeq, m, gm);
        let held = b.select(holds, mi, c.none);
        let gi = b.subgroup_reduce(ReduceOp::MinSI, held);
        b.if_(self.first_lane, |b| {
            b.store(gm, self.shv, &[self.sg]);
            b.store(gi, self.shi, &[self.sg]);
        });
        b.barrier(Barrier::Workgroup);
        let init = [c.ninf, c.none];
        let merged = b.for_carry(self.c0, self.nsg, self.c1, &init, |b, i, acc| {
            let v = b.load(self.shv, &[i]);
            let vi = b.load(self.shi, &[i]);
            let first = after(b, acc[0], acc[1], v, vi);
            vec![b.select(first, v, acc[0]), b.select(first, vi, acc[1])]
        });
        (merged[0], merged[1])
    }

    /// Writes the unit's denominator relative to `top`: over its elements
    /// for the scan, over the row's chunks (mass * exp((chunk top - top)
    /// / t)) for the merge.
    fn denominator(&self, b: &mut Builder, u: &Unit, top: Value<Num>) {
        let c = &self.c;
        let t_slot = b.add(self.offset("temperature"), u.row);
        let t = b.load(self.view("temperature"), &[t_slot]);
        let inv = b.divf(c.fone, t);
        let terms = if self.scan { u.n } else { self.chunks };
        let partial = b.for_carry(self.c0, terms, self.span, &[c.fzero], |b, tr, acc| {
            let mut sum = acc[0];
            for &o in &self.lanes {
                let j = b.add(tr, o);
                let inside = b.cmp(IntPredicate::Ult, j, terms);
                let (x, weight) = if self.scan {
                    (self.load(b, u, j).0, None)
                } else {
                    let last_chunk = b.sub(terms, self.c1);
                    let h = b.min(j, last_chunk);
                    let first_of_chunk = b.mul(h, self.kc);
                    let p = b.add(u.base, first_of_chunk);
                    let pv = b.add(p, self.offset("cv"));
                    let row_chunk = b.madd(u.unit, self.chunks, h);
                    let pm = b.add(row_chunk, self.offset("cm"));
                    let x = b.load(self.view("cv"), &[pv]);
                    (x, Some(b.load(self.view("cm"), &[pm])))
                };
                let ordered = b.cmpf(FloatPredicate::Ogt, x, c.ninf);
                let counts = b.and(inside, ordered);
                let d = b.subf(x, top);
                let scaled = b.mulf(d, inv);
                let mut e = b.expf(scaled);
                if let Some(weight) = weight {
                    e = b.mulf(e, weight);
                }
                let term = b.select(counts, e, c.fzero);
                sum = b.addf(sum, term);
            }
            vec![sum]
        });
        let gs = b.subgroup_reduce(ReduceOp::AddF, partial[0]);
        b.if_(self.first_lane, |b| b.store(gs, self.shv, &[self.sg]));
        b.barrier(Barrier::Workgroup);
        b.if_(self.leader, |b| {
            let total = b.for_carry(self.c0, self.nsg, self.c1, &[c.fzero], |b, i, acc| {
                let v = b.load(self.shv, &[i]);
                vec![b.addf(acc[0], v)]
            });
            let m_slot = b.add(self.offset("mass"), u.unit);
            b.store(total[0], self.view("mass"), &[m_slot]);
        });
        b.barrier(Barrier::Workgroup);
    }
}

/// Whether `(x, id)` comes after `(v, i)` in the order "larger value
/// first, equal values by smaller id": `x < v`, or `x == v` and `id > i`.
/// False for a NaN on either side.
fn after(
    b: &mut Builder,
    x: Value<Num>,
    id: Value<Num>,
    v: Value<Num>,
    i: Value<Num>,
) -> Value<Bool> {
    let below = b.cmpf(FloatPredicate::Olt, x, v);
    let same = b.cmpf(FloatPredicate::Oeq, x, v);
    let later = b.cmpi(IntPredicate::Sgt, id, i);
    let tie_after = b.and(same, later);
    b.or(below, tie_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both passes build kernels the verifier and naga accept for every
    /// workgroup size, on a CPU and a GPU target.
    #[test]
    fn every_shape_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for pass in [Pass::Scan, Pass::Merge] {
                for (wg, k) in [(8, 1), (16, 64), (64, 5), (256, 64), (1024, 256)] {
                    let shape = TopKShape {
                        pass,
                        wg,
                        max_groups: 4,
                        k,
                    };
                    compiler
                        .built(&top_k(shape))
                        .and_then(|m| m.compile_uncached(&hrx_loom::Specialization::new("top_k")))
                        .unwrap_or_else(|e| panic!("{pass:?} wg={wg} k={k}: {e}"));
                }
            }
        }
    }

    /// Long rows are chunked; devices without subgroup arithmetic have no
    /// top-k kernel.
    #[test]
    fn plans_follow_the_target_and_the_row() {
        let gpu = Target::hopper();
        let plan = TopKPlan::for_rows(&gpu, 49_152, 64).unwrap();
        assert_eq!((plan.chunk, plan.chunks, plan.scan.wg), (2048, 24, 256));
        assert_eq!(plan.merge.map(|m| (m.pass, m.wg)), Some((Pass::Merge, 256)));
        let short = TopKPlan::for_rows(&gpu, 100, 8).unwrap();
        assert_eq!((short.chunk, short.chunks, short.merge), (100, 1, None));
        let cpu = TopKPlan::for_rows(&Target::lavapipe(), 49_152, 64).unwrap();
        assert_eq!((cpu.chunk, cpu.chunks, cpu.scan.wg), (4096, 12, 16));
        let mut bare = gpu;
        bare.subgroup_ops.arithmetic = false;
        assert_eq!(TopKPlan::for_rows(&bare, 49_152, 64), None);
    }
}

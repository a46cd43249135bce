//! The output-head kernel, built: a decoder step's last four operators
//! (the final RMS norm, the gather of the picked rows, the vocabulary
//! projection and the argmax) in one dispatch, for a few picked rows.
//!
//! - **x stays in registers.** Each subgroup loads the picked rows of x
//!   once, lane `l` holding spans `l, l + sg, ..` (`spl` of them, a static
//!   count), sums their squares, and scales them by the norm weight and
//!   `1 / sqrt(mean square + eps)`. The separate projection's subgroups
//!   reread x for every weight row: tens of thousands of times over a
//!   vocabulary.
//! - **Columns in blocks.** A workgroup takes `CPW` consecutive weight
//!   rows (logit columns); each subgroup takes `UNROLL` of them at a time
//!   (every load of the block issued before any is used), dots them with
//!   its resident rows, sums its lanes and stores the logits.
//! - **The argmax in the epilogue.** Each subgroup keeps, per picked row,
//!   the best logit and its column (replaced only by a strictly larger
//!   value, columns visited in increasing order, so NaN never wins and
//!   the first of equal values stays). The workgroup's first work item
//!   merges its subgroups' bests (equal values: smaller column) into the
//!   scratch, one pair per workgroup and row, and counts the workgroup
//!   done (`split_count`); the last workgroup's first subgroup merges all
//!   pairs the same way and stores each row's index, 0 where no logit
//!   beat -inf: the contract of `argmax`.
//!
//! A pick outside `0..m` reads a row of zeros: its logits are zeros and
//! its index 0. Spans past a row's end (unblocked formats) read as zeros
//! and their weights are not used.

use super::resident::{ResidentNorm, arg_view, lane_dot, lane_spans, resident_row};
use super::spans::{Weights, XRows, span_values};
use crate::ops::QuantFormat;
use crate::ops::reduce::argmax_kernel::{NONE, merge_best, slots, subgroup_best};
use crate::ops::registry::{Generator, KernelKey, KernelSource};
use crate::ops::split_count::last_split;
use hrx_loom::build::{Barrier, Bool, Built, Index, KernelBuilder, Num, Value};
use hrx_loom::ir::{Axis, FloatPredicate, IntPredicate, ReduceOp, Scalar};

/// Logit columns per workgroup.
pub(crate) const CPW: usize = 64;

/// Columns a subgroup computes at once.
const UNROLL: usize = 4;

/// What one output-head kernel is specialised for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LogitsKey {
    pub(crate) format: QuantFormat,
    /// Picked rows (all in one workgroup's registers).
    pub(crate) mt: usize,
    /// Spans each lane holds: `ceil(spans / smallest subgroup)`.
    pub(crate) spl: usize,
    /// x and the norm weight read in 16-byte quads.
    pub(crate) xvec: bool,
    /// Rows end in a partial span.
    pub(crate) tail: bool,
    /// Work items per workgroup.
    pub(crate) wg: usize,
}

/// The kernel for `key`.
pub(crate) fn logits_key(key: LogitsKey) -> KernelKey {
    KernelKey {
        source: KernelSource::Built(Generator::new(format!("quant_logits {key:?}"), move || {
            logits_kernel(key)
        })),
        symbol: "quant_logits",
        config: Vec::new(),
    }
}

/// The kernel: arguments `m, n, cols, rw, p, eps`, then the element
/// offset and length of `x`, `picks`, `nw`, `w`, `out` and `next`, then
/// the lengths of the scratch and the counter (both from element 0);
/// buffers in that order. Workload: `n`.
fn logits_kernel(key: LogitsKey) -> Built {
    let n64 = |v: usize| v as u64;
    let mt = key.mt;
    let mut k = KernelBuilder::new("quant_logits");
    let wn = k.workload("n");
    let one = k.index(1);
    let cpw = k.index(n64(CPW));
    let groups = k.div_ceil(wn, cpw);
    let wgc = k.index(n64(key.wg));
    let mut k = k.launch_config([groups, one, one], [wgc, one, one]);
    let [m, n, cols, rw, p] = ["m", "n", "cols", "rw", "p"].map(|a| k.arg_index(a));
    let eps = k.arg_scalar("eps", Scalar::F32);
    let [ox, lx, op, lp, on, ln, ow, lw, oo, lo, oi, li, ls, lc] = [
        "ox", "lx", "op", "lp", "on", "ln", "ow", "lw", "oo", "lo", "oi", "li", "ls", "lc",
    ]
    .map(|a| k.arg_index(a));
    let xv = arg_view(&mut k, "x", false, lx, Scalar::F32);
    let pv = arg_view(&mut k, "picks", false, lp, Scalar::I32);
    let nv = arg_view(&mut k, "nw", false, ln, Scalar::F32);
    let wv = arg_view(&mut k, "w", false, lw, Scalar::U32);
    let ov = arg_view(&mut k, "out", true, lo, Scalar::F32);
    let iv = arg_view(&mut k, "next", true, li, Scalar::I32);
    let sv = arg_view(&mut k, "scratch", true, ls, Scalar::I32);
    let cv = arg_view(&mut k, "cnt", true, lc, Scalar::U32);
    let x = XRows {
        view: xv,
        cols,
        quads: key.xvec,
        tail: key.tail,
    };
    let gains = XRows { view: nv, ..x };
    let w = Weights {
        format: key.format,
        view: wv,
        row_words: rw,
        tail: key.tail,
    };
    let max_subgroups = key.wg;
    let best_values = slots(&mut k, max_subgroups * mt, Scalar::F32);
    let best_columns = slots(&mut k, max_subgroups * mt, Scalar::I32);
    let [c0, c1] = [0, 1].map(|v| k.index(v));
    let ninf = k.float(f64::NEG_INFINITY, Scalar::F32);
    let none = k.int(NONE, Scalar::I32);
    let izero = k.int(0, Scalar::I32);
    let lx_id = k.workitem_id(Axis::X);
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let lane = k.subgroup_lane_id();
    let sgsize = k.subgroup_size();
    let group = k.workgroup_id(Axis::X);
    let ngroups = k.workgroup_count(Axis::X);
    let first_lane = k.cmp(IntPredicate::Eq, lane, c0);
    let leader = k.cmp(IntPredicate::Eq, lx_id, c0);
    let n1 = k.sub(n, c1);
    let m_u = k.index_cast(m, Scalar::U32);
    let m1 = k.sub(m, c1);
    let p1 = k.sub(p, c1);
    let lane_spans = lane_spans(&mut k, key.spl, cols);
    let norm = ResidentNorm::load(&mut k, &gains, on, &lane_spans, eps);
    // The picked rows, normalised and resident (zeros for a pick outside
    // x, which reads x's last row instead).
    let rows: Vec<Vec<Vec<Value<Num>>>> = (0..mt)
        .map(|r| {
            let dr = k.index(n64(r));
            let pr = k.min(dr, p1);
            let at = k.add(op, pr);
            let id = k.load(pv, &[at]);
            let idu = k.bitcast(id, Scalar::U32);
            let ok = k.cmpi(IntPredicate::Ult, idu, m_u);
            let row = k.to_index(idu);
            let row = k.min(row, m1);
            let start = k.madd(row, cols, ox);
            resident_row(&mut k, &x, start, Some(ok), &lane_spans, &norm)
        })
        .collect();

    // The workgroup's columns, UNROLL at a time per subgroup; carries the
    // best logit and its column per row.
    let cpw = k.index(n64(CPW));
    let j0 = k.mul(group, cpw);
    let cu = k.index(n64(UNROLL));
    let first = k.mul(sg, cu);
    let stride = k.mul(nsg, cu);
    let init: Vec<Value<Num>> = (0..mt).flat_map(|_| [ninf, none]).collect();
    let bests = k.for_carry(first, cpw, stride, &init, |b, jj, acc| {
        let columns: Vec<(Value<Index>, Value<Bool>)> = (0..UNROLL)
            .map(|u| {
                let du = b.index(n64(u));
                let jju = b.add(jj, du);
                let j = b.add(j0, jju);
                let inside = b.cmp(IntPredicate::Ult, j, n);
                (j, inside)
            })
            .collect();
        // Every weight span of the block first.
        let weights: Vec<Vec<Vec<Value<Num>>>> = columns
            .iter()
            .map(|&(j, _)| {
                let jc = b.min(j, n1);
                let wrow = b.madd(jc, rw, ow);
                lane_spans
                    .iter()
                    .map(|&(_, s)| span_values(b, &w, wrow, s))
                    .collect()
            })
            .collect();
        let mut acc = acc.to_vec();
        for ((j, inside), wspans) in columns.iter().zip(&weights) {
            for (r, row) in rows.iter().enumerate() {
                let part = lane_dot(b, row, wspans, &lane_spans);
                let logit = b.subgroup_reduce(ReduceOp::AddF, part);
                let dr = b.index(n64(r));
                let pick_ok = b.cmp(IntPredicate::Ult, dr, p);
                let keep = b.and(*inside, pick_ok);
                let store = b.and(keep, first_lane);
                b.if_(store, |b| {
                    let at = b.madd(dr, n, oo);
                    let at = b.add(at, *j);
                    b.store(logit, ov, &[at]);
                });
                let above = b.cmpf(FloatPredicate::Ogt, logit, acc[2 * r]);
                let better = b.and(*inside, above);
                let ji = b.index_cast(*j, Scalar::I32);
                acc[2 * r] = b.select(better, logit, acc[2 * r]);
                acc[2 * r + 1] = b.select(better, ji, acc[2 * r + 1]);
            }
        }
        acc
    });

    // The workgroup's best per row into the scratch: values' bits at
    // `group * mt + r`, columns `groups * mt` further on.
    let cmt = k.index(n64(mt));
    k.if_(first_lane, |b| {
        for r in 0..mt {
            let dr = b.index(n64(r));
            let at = b.madd(sg, cmt, dr);
            b.store(bests[2 * r], best_values, &[at]);
            b.store(bests[2 * r + 1], best_columns, &[at]);
        }
    });
    k.barrier(Barrier::Workgroup);
    let plane = k.mul(ngroups, cmt);
    k.if_(leader, |b| {
        for r in 0..mt {
            let dr = b.index(n64(r));
            let merged = b.for_carry(c0, nsg, c1, &[ninf, none], |b, s, acc| {
                let at = b.madd(s, cmt, dr);
                let v = b.load(best_values, &[at]);
                let vi = b.load(best_columns, &[at]);
                merge_best(b, acc, (v, vi))
            });
            let at = b.madd(group, cmt, dr);
            let bits = b.bitcast(merged[0], Scalar::I32);
            b.store(bits, sv, &[at]);
            let at = b.add(at, plane);
            b.store(merged[1], sv, &[at]);
        }
    });
    let last = last_split(&mut k, cv, c0, ngroups, leader);
    // The flag is the same in every lane (read after a barrier); a
    // broadcast makes that visible, so the reductions below may run
    // under it.
    let (zu, ou) = (k.int(0, Scalar::U32), k.int(1, Scalar::U32));
    let flag = k.select(last, ou, zu);
    let flag = k.subgroup_broadcast(flag, c0);
    let last = k.cmpi(IntPredicate::Eq, flag, ou);
    let sg0 = k.cmp(IntPredicate::Eq, sg, c0);
    let finish = k.and(last, sg0);
    k.if_(finish, |b| {
        // Lane `l` merges workgroups `l, l + sg, ..`, `TRIP` of them a
        // trip with every load issued first: a vocabulary's 768 would
        // otherwise be 24 dependent loads in a row.
        const TRIP: usize = 8;
        let per_trip = b.index(n64(TRIP));
        let trip = b.mul(sgsize, per_trip);
        let last_group = b.sub(ngroups, c1);
        let init: Vec<Value<Num>> = (0..mt).flat_map(|_| [ninf, none]).collect();
        let best = b.for_carry(lane, ngroups, trip, &init, |b, g0, acc| {
            let loads: Vec<Vec<(Value<Num>, Value<Num>)>> = (0..TRIP)
                .map(|u| {
                    let du = b.index(n64(u));
                    let g = b.madd(sgsize, du, g0);
                    let ok = b.cmp(IntPredicate::Ult, g, ngroups);
                    let gc = b.min(g, last_group);
                    (0..mt)
                        .map(|r| {
                            let dr = b.index(n64(r));
                            let at = b.madd(gc, cmt, dr);
                            let bits = b.load(sv, &[at]);
                            let at = b.add(at, plane);
                            let vi = b.load(sv, &[at]);
                            // A group past the last holds nothing.
                            let v = b.bitcast(bits, Scalar::F32);
                            (b.select(ok, v, ninf), b.select(ok, vi, none))
                        })
                        .collect()
                })
                .collect();
            let mut acc = acc.to_vec();
            for pairs in loads {
                for (r, pair) in pairs.into_iter().enumerate() {
                    let merged = merge_best(b, &acc[2 * r..2 * r + 2], pair);
                    acc[2 * r] = merged[0];
                    acc[2 * r + 1] = merged[1];
                }
            }
            acc
        });
        for r in 0..mt {
            let dr = b.index(n64(r));
            let (_, gi) = subgroup_best(b, (best[2 * r], best[2 * r + 1]));
            let missing = b.cmpi(IntPredicate::Eq, gi, none);
            let index = b.select(missing, izero, gi);
            let pick_ok = b.cmp(IntPredicate::Ult, dr, p);
            let store = b.and(first_lane, pick_ok);
            b.if_(store, |b| {
                let at = b.add(oi, dr);
                b.store(index, iv, &[at]);
            });
        }
    });
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::quant::resident::spans_per_lane;
    use hrx_core::Target;

    /// Every format, row count and load variant builds a kernel the
    /// verifier, naga and (where present) spirv-val accept.
    #[test]
    fn every_variant_compiles() {
        let formats = QuantFormat::ALL;
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            let sg = target.subgroup_size_min as usize;
            for format in formats {
                for (mt, xvec, tail, wg) in [(1, true, false, 256), (4, false, true, 64)] {
                    let key = LogitsKey {
                        format,
                        mt,
                        spl: spans_per_lane(576, sg),
                        xvec,
                        tail,
                        wg,
                    };
                    compiler
                        .built(&logits_kernel(key))
                        .and_then(|m| {
                            m.compile_uncached(&hrx_loom::Specialization::new("quant_logits"))
                        })
                        .unwrap_or_else(|e| panic!("{key:?}: {e}"));
                }
            }
        }
    }
}

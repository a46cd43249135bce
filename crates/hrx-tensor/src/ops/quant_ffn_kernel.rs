//! The feed-forward block of a decode step in one dispatch, built: RMS
//! norm, the gate-and-up product, SwiGLU, the down product and the
//! residual add, for a few rows of x.
//!
//! The down product needs every column of the gate's output, which a
//! dispatch's workgroups produce in parts; instead of a second dispatch,
//! each workgroup applies the down product to its own part (split along
//! the down product's k) and the last one to finish adds the parts up:
//!
//! 1. Each subgroup holds the rows of x in registers, normalised
//!    (`quant_resident`). The workgroup's subgroups take its `C` gate
//!    columns `COLUMNS` at a time (all their weight loads issued first):
//!    the dots with gate row `j` and up row `f + j`, `silu(gate) * up`
//!    into workgroup memory.
//! 2. After a barrier, work item `t` takes down rows `t, t + wg, ..`: the
//!    dot of the row's `C` columns of this workgroup with the `C` gate
//!    values, stored as this workgroup's plane of partial sums (`[mt,
//!    width]` per workgroup) in the scratch. The rows' words are loaded
//!    before step 1 and decoded only now (`quant_spans::span_words`), so
//!    their latency passes under the gate.
//! 3. The workgroup counts itself done (`split_count`); the last sums the
//!    planes in workgroup order from zero (so the result does not depend
//!    on which finishes last), a trip of planes for all of a work item's
//!    outputs at once, and stores the residual plus the sum.
//!
//! Gate columns past `f` are zeros, and the down row's spans past its end
//! add nothing.

use super::QuantFormat;
use super::argmax_kernel::slots;
use super::quant_resident::{ResidentNorm, arg_view, lane_dot, lane_spans, resident_row};
use super::quant_spans::{SPAN, SpanWords, Weights, XRows, decode_span, span_words};
use super::registry::{Generator, KernelKey, KernelSource};
use super::split_count::last_split;
use super::token_kernels::silu_times;
use hrx_loom::build::{Barrier, Bool, Built, Index, KernelBuilder, Num, Value};
use hrx_loom::ir::{Axis, IntPredicate, ReduceOp, Scalar};

/// Gate columns per workgroup (one block of the blocked formats along
/// the down product's k).
pub(crate) const C: usize = 32;

/// Gate columns a subgroup computes at once.
const COLUMNS: usize = 4;

/// What one feed-forward kernel is specialised for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FfnKey {
    /// The stacked gate-and-up matrix's format, and the down matrix's.
    pub(crate) gate_up: QuantFormat,
    pub(crate) down: QuantFormat,
    /// Rows of x (all in each subgroup's registers).
    pub(crate) mt: usize,
    /// Spans of a row each lane holds.
    pub(crate) spl: usize,
    /// Down rows per work item: `ceil(width / wg)`.
    pub(crate) per_item: usize,
    /// x and the norm weight read in 16-byte quads.
    pub(crate) xvec: bool,
    /// Work items per workgroup.
    pub(crate) wg: usize,
}

/// The kernel for `key`.
pub(crate) fn ffn_key(key: FfnKey) -> KernelKey {
    KernelKey {
        source: KernelSource::Built(Generator::new(format!("quant_ffn {key:?}"), move || {
            ffn_kernel(key)
        })),
        symbol: "quant_ffn",
        config: Vec::new(),
    }
}

/// The kernel: arguments `m, cols, f, rgu, rd, eps`, then the element
/// offset and length of `x`, `nw`, `gu`, `d`, `res` and `out`, then the
/// lengths of the scratch and the counter; buffers in that order.
/// Workload: `f`.
fn ffn_kernel(key: FfnKey) -> Built {
    let n64 = |v: usize| v as u64;
    let mt = key.mt;
    let mut k = KernelBuilder::new("quant_ffn");
    let wf = k.workload("f");
    let one = k.index(1);
    let cc = k.index(n64(C));
    let groups = k.div_ceil(wf, cc);
    let wgc = k.index(n64(key.wg));
    let mut k = k.launch_config([groups, one, one], [wgc, one, one]);
    let [m, cols, f, rgu, rd] = ["m", "cols", "f", "rgu", "rd"].map(|a| k.arg_index(a));
    let eps = k.arg_scalar("eps", Scalar::F32);
    let [ox, lx, on, ln, og, lg, od, ld, or, lr, oo, lo, ls, lc] = [
        "ox", "lx", "on", "ln", "og", "lg", "od", "ld", "or", "lr", "oo", "lo", "ls", "lc",
    ]
    .map(|a| k.arg_index(a));
    let xv = arg_view(&mut k, "x", false, lx, Scalar::F32);
    let nv = arg_view(&mut k, "nw", false, ln, Scalar::F32);
    let gv = arg_view(&mut k, "gu", false, lg, Scalar::U32);
    let dv = arg_view(&mut k, "d", false, ld, Scalar::U32);
    let rv = arg_view(&mut k, "res", false, lr, Scalar::F32);
    let ov = arg_view(&mut k, "out", true, lo, Scalar::F32);
    let sv = arg_view(&mut k, "scratch", true, ls, Scalar::F32);
    let cv = arg_view(&mut k, "cnt", true, lc, Scalar::U32);
    let x = XRows {
        view: xv,
        cols,
        quads: key.xvec,
        tail: false,
    };
    let gains = XRows { view: nv, ..x };
    let gate_up = Weights {
        format: key.gate_up,
        view: gv,
        row_words: rgu,
        tail: false,
    };
    let down = Weights {
        format: key.down,
        view: dv,
        row_words: rd,
        tail: false,
    };
    let act = slots(&mut k, mt * C, Scalar::F32);
    let [c0, c1, c7, c8] = [0, 1, 7, 8].map(|v| k.index(v));
    let zf = k.float(0.0, Scalar::F32);
    let cc = k.index(n64(C));
    let cmt = k.index(n64(mt));
    let item = k.workitem_id(Axis::X);
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let lane = k.subgroup_lane_id();
    let group = k.workgroup_id(Axis::X);
    let ngroups = k.workgroup_count(Axis::X);
    let first_lane = k.cmp(IntPredicate::Eq, lane, c0);
    let leader = k.cmp(IntPredicate::Eq, item, c0);
    let m1 = k.sub(m, c1);
    let f1 = k.sub(f, c1);
    let cols1 = k.sub(cols, c1);
    let first_column = k.mul(group, cc);

    // The down rows' words of this workgroup's columns (work item `t`
    // takes down rows `t, t + wg, ..`), loaded before the gate so that
    // their latency passes under it; used in step 2.
    let f7 = k.add(f, c7);
    let down_spans = k.div(f7, c8);
    let last_span = k.sub(down_spans, c1);
    let first_span = k.div(first_column, c8);
    let wgi = k.index(n64(key.wg));
    let outputs: Vec<(Value<Bool>, Value<Index>)> = (0..key.per_item)
        .map(|i| {
            let di = k.index(n64(i));
            let o = k.madd(wgi, di, item);
            (k.cmp(IntPredicate::Ult, o, cols), k.min(o, cols1))
        })
        .collect();
    let down_words: Vec<Vec<(Value<Bool>, SpanWords)>> = outputs
        .iter()
        .map(|&(_, o)| {
            let row = k.madd(o, rd, od);
            (0..C / SPAN)
                .map(|s| {
                    let ds = k.index(n64(s));
                    let span = k.add(first_span, ds);
                    let span_ok = k.cmp(IntPredicate::Ult, span, down_spans);
                    let clamped = k.min(span, last_span);
                    (span_ok, span_words(&mut k, &down, row, clamped))
                })
                .collect()
        })
        .collect();

    // 1. The rows, normalised and resident; the gate values into `act`.
    let spans = lane_spans(&mut k, key.spl, cols);
    let norm = ResidentNorm::load(&mut k, &gains, on, &spans, eps);
    let rows: Vec<Vec<Vec<Value<Num>>>> = (0..mt)
        .map(|r| {
            let dr = k.index(n64(r));
            let ok = k.cmp(IntPredicate::Ult, dr, m);
            let row = k.min(dr, m1);
            let start = k.madd(row, cols, ox);
            resident_row(&mut k, &x, start, Some(ok), &spans, &norm)
        })
        .collect();
    // `COLUMNS` gate columns a subgroup at a time, every load of them
    // issued before any is used.
    let per = k.index(n64(COLUMNS));
    let first = k.mul(sg, per);
    let stride = k.mul(nsg, per);
    k.for_each(first, cc, stride, |b, c0| {
        let columns: Vec<_> = (0..COLUMNS)
            .map(|u| {
                let du = b.index(n64(u));
                let c = b.add(c0, du);
                let column = b.add(first_column, c);
                let in_f = b.cmp(IntPredicate::Ult, column, f);
                let in_block = b.cmp(IntPredicate::Ult, c, cc);
                let clamped = b.min(column, f1);
                let gate_row = b.madd(clamped, rgu, og);
                let up = b.add(clamped, f);
                let up_row = b.madd(up, rgu, og);
                let [gate_w, up_w] = [gate_row, up_row].map(|at| {
                    spans
                        .iter()
                        .map(|&(_, s)| span_words(b, &gate_up, at, s))
                        .collect::<Vec<_>>()
                });
                (c, in_f, in_block, gate_w, up_w)
            })
            .collect();
        for (c, in_f, in_block, gate_w, up_w) in columns {
            let [gate_w, up_w] = [gate_w, up_w].map(|words| {
                words
                    .iter()
                    .map(|w| decode_span(b, &gate_up, w))
                    .collect::<Vec<_>>()
            });
            for (r, row) in rows.iter().enumerate() {
                let gate = lane_dot(b, row, &gate_w, &spans);
                let gate = b.subgroup_reduce(ReduceOp::AddF, gate);
                let up = lane_dot(b, row, &up_w, &spans);
                let up = b.subgroup_reduce(ReduceOp::AddF, up);
                let value = silu_times(b, gate, up);
                let value = b.select(in_f, value, zf);
                let store = b.and(first_lane, in_block);
                b.if_(store, |b| {
                    let dr = b.index(n64(r));
                    let at = b.madd(dr, cc, c);
                    b.store(value, act, &[at]);
                });
            }
        }
    });
    k.barrier(Barrier::Workgroup);

    // 2. This workgroup's part of the down product, one plane of the
    // scratch: `[group][r][o]`.
    let plane = k.mul(cmt, cols);
    let own_plane = k.mul(group, plane);
    for (&(inside, o), words) in outputs.iter().zip(&down_words) {
        let mut parts = vec![zf; mt];
        for (s, (span_ok, span)) in words.iter().enumerate() {
            let span_ok = *span_ok;
            let weights = decode_span(&mut k, &down, span);
            for (r, part) in parts.iter_mut().enumerate() {
                let base = k.index(n64(r * C + s * SPAN));
                let mut sum = zf;
                for (e, &w) in weights.iter().enumerate() {
                    let de = k.index(n64(e));
                    let at = k.add(base, de);
                    let a = k.load(act, &[at]);
                    sum = k.fmaf(w, a, sum);
                }
                let sum = k.select(span_ok, sum, zf);
                *part = k.addf(*part, sum);
            }
        }
        k.if_(inside, |b| {
            for (r, &part) in parts.iter().enumerate() {
                let dr = b.index(n64(r));
                let at = b.madd(dr, cols, own_plane);
                let at = b.add(at, o);
                b.store(part, sv, &[at]);
            }
        });
    }

    // 3. The last workgroup: residual plus the planes, in order.
    let last = last_split(&mut k, cv, c0, ngroups, leader);
    k.if_(last, |b| {
        // Every output of this work item and row at once, `TRIP` planes a
        // trip with all their loads issued first.
        const TRIP: usize = 8;
        let step = b.index(n64(TRIP));
        let last_plane = b.sub(ngroups, c1);
        let init = vec![zf; outputs.len() * mt];
        let sums = b.for_carry(c0, ngroups, step, &init, |b, p0, acc| {
            let loads: Vec<Vec<Value<Num>>> = (0..TRIP)
                .map(|u| {
                    let du = b.index(n64(u));
                    let g = b.add(p0, du);
                    let ok = b.cmp(IntPredicate::Ult, g, ngroups);
                    let gc = b.min(g, last_plane);
                    let base = b.mul(gc, plane);
                    let mut values = Vec::with_capacity(outputs.len() * mt);
                    for &(_, o) in &outputs {
                        for r in 0..mt {
                            let dr = b.index(n64(r));
                            let at = b.madd(dr, cols, base);
                            let at = b.add(at, o);
                            let v = b.load(sv, &[at]);
                            values.push(b.select(ok, v, zf));
                        }
                    }
                    values
                })
                .collect();
            let mut acc = acc.to_vec();
            for values in loads {
                for (a, v) in acc.iter_mut().zip(values) {
                    *a = b.addf(*a, v);
                }
            }
            acc
        });
        for (i, &(inside, o)) in outputs.iter().enumerate() {
            for r in 0..mt {
                let dr = b.index(n64(r));
                let row_ok = b.cmp(IntPredicate::Ult, dr, m);
                let store = b.and(inside, row_ok);
                let sum = sums[i * mt + r];
                b.if_(store, |b| {
                    let at = b.madd(dr, cols, o);
                    let rat = b.add(at, or);
                    let residual = b.load(rv, &[rat]);
                    let value = b.addf(residual, sum);
                    let oat = b.add(at, oo);
                    b.store(value, ov, &[oat]);
                });
            }
        }
    });
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::quant_resident::spans_per_lane;
    use hrx_core::Target;

    /// Every pairing of formats and row counts builds a kernel the
    /// verifier and naga accept.
    #[test]
    fn every_variant_compiles() {
        let formats = [
            QuantFormat::F32,
            QuantFormat::F16,
            QuantFormat::Q8_0,
            QuantFormat::Q4_1,
        ];
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            let sg = target.subgroup_size_min as usize;
            for (gate_up, down) in formats.iter().zip(formats.iter().rev()) {
                for (mt, xvec, wg) in [(1, true, 256), (4, false, 64)] {
                    let key = FfnKey {
                        gate_up: *gate_up,
                        down: *down,
                        mt,
                        spl: spans_per_lane(576, sg),
                        per_item: 576usize.div_ceil(wg),
                        xvec,
                        wg,
                    };
                    compiler
                        .built(&ffn_kernel(key))
                        .and_then(|m| {
                            m.compile_uncached(&hrx_loom::Specialization::new("quant_ffn"))
                        })
                        .unwrap_or_else(|e| panic!("{key:?}: {e}"));
                }
            }
        }
    }
}

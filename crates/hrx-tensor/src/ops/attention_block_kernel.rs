//! The query-key-value stage of the attention block kernel
//! (`AttentionShape::qkv`), built: the projection that feeds an attention
//! at decode, in the attention's own dispatch.
//!
//! A head group (the workgroup's query heads) needs, of its row, only
//! the queries of its heads and the key and value of their kv head:
//! `(heads + 2) * hd` weight rows. One workgroup computing them all would
//! do a third of the whole projection on one compute unit (and the key
//! and value once per head group), far slower than the attention itself,
//! so `splits` workgroups share them ([`Split`]):
//!
//! 1. Workgroup `part` takes its slice of the rows. Every subgroup holds
//!    the row of x in registers, RMS-normalised as it loads it
//!    (`quant_resident`); subgroup `s` takes rows in blocks of `u` (all
//!    the block's words loaded before any is used), and lane 0 stores each
//!    dot into the head group's rows in the scratch.
//! 2. Each workgroup counts itself done (`split_count`); the last of the
//!    head group copies all its rows into workgroup memory and attends.
//!    The others take zeros, attend to nothing and store nothing, but run
//!    on through the kernel's barriers.
//! 3. The queries are turned by RoPE at the row's position and scaled into
//!    the attention's q memory, the key is turned, and the last workgroup
//!    of the kv head's first head group stores the key and value into the
//!    caches at the row's position.
//!
//! No workgroup reads a cache entry another writes in the same dispatch:
//! the attention reads the positions before the row's own (stored by
//! earlier dispatches), and the row's own key and value enter as the
//! first subgroup's starting softmax state ([`Fresh`]), taken from
//! workgroup memory. So rows of one sequence in one dispatch do not see
//! each other: the operator is for decode rows of distinct sequences.

use super::QuantFormat;
use super::attention_kernels::shared;
use super::quant_resident::{ResidentNorm, lane_dot, lane_spans, resident_row};
use super::quant_spans::{SpanWords, Weights, XRows, decode_span, span_words};
use super::split_count::last_split;
use super::token_kernels::{Pair, rotated};
use hrx_loom::build::{Barrier, Bool, Builder, Index, Num, Value, View};
use hrx_loom::ir::{IntPredicate, ReduceOp, Scalar};

/// The most weight rows a subgroup loads at once.
const MAX_BLOCK: usize = 8;

/// What the stage is specialised for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct QkvShape {
    pub(crate) format: QuantFormat,
    /// Spans of x each lane holds: `ceil(width / 8 / smallest subgroup)`.
    pub(crate) spl: usize,
    /// x and the norm weight read in 16-byte quads.
    pub(crate) quads: bool,
    /// Workgroups sharing a head group's projection rows.
    pub(crate) splits: usize,
}

/// How a head group's projection rows are shared: this workgroup's part
/// of `splits`, the head group's index over the grid (row-major), where
/// the rows go in the scratch (the view and the element the head groups'
/// rows start at) and the counters (the view and the head groups' first).
pub(super) struct Split {
    pub(super) part: Value<Index>,
    pub(super) splits: usize,
    pub(super) head_group: Value<Index>,
    pub(super) scratch: (Value<View>, Value<Index>),
    pub(super) counters: (Value<View>, Value<Index>),
}

/// The stage's operands: x and the norm weight (rows of `width`), the
/// stacked weight (`[heads * hd | kv_heads * hd | kv_heads * hd]` rows)
/// and their element offsets, and the norm's eps.
pub(super) struct QkvOperands {
    pub(super) x: XRows,
    pub(super) gains: XRows,
    pub(super) weights: Weights,
    pub(super) ox: Value<Index>,
    pub(super) on: Value<Index>,
    pub(super) ow: Value<Index>,
    pub(super) eps: Value<Num>,
}

/// The attention's values the stage uses.
pub(super) struct Place {
    /// Head size and query heads per workgroup (static).
    pub(super) hd: usize,
    pub(super) hq: usize,
    /// Blocks of weight rows: `hq + 2` heads over the most subgroups.
    pub(super) max_subgroups: usize,
    /// The token row, the workgroup's first query head, its kv head, and
    /// the query and kv head counts.
    pub(super) r: Value<Index>,
    pub(super) h0: Value<Index>,
    pub(super) g: Value<Index>,
    pub(super) heads: Value<Index>,
    pub(super) kvh: Value<Index>,
    /// The row's position (i32) and as an index, and whether the row is
    /// active (slot and position in range).
    pub(super) pos: Value<Num>,
    pub(super) pi: Value<Index>,
    pub(super) active: Value<Bool>,
    /// Whether this workgroup stores the key and value.
    pub(super) writer: Value<Bool>,
    /// RoPE's `rope` and `c` (as for `rope`) and the score scale.
    pub(super) rope: Value<Index>,
    pub(super) c: Value<Num>,
    pub(super) scale: Value<Num>,
    /// The attention's q memory (`hq * hd`, scaled queries).
    pub(super) sq: Value<View>,
    /// The caches with their element offsets, and the first cache row of
    /// the row's slot and kv head.
    pub(super) k_cache: (Value<View>, Value<Index>),
    pub(super) v_cache: (Value<View>, Value<Index>),
    pub(super) kvrow: Value<Index>,
    /// Work item, workgroup size; subgroup, subgroup count, lane.
    pub(super) t: Value<Index>,
    pub(super) wgs: Value<Index>,
    pub(super) sg: Value<Index>,
    pub(super) nsg: Value<Index>,
    pub(super) lane: Value<Index>,
}

/// The row's own position for the attention: per query head its score
/// (scaled query . turned key), and this lane's dimensions of the value
/// (the attention's `dims` slots); and whether this workgroup attends
/// (the last of its head group to finish its rows; the others' q, key
/// and value are zeros and they store nothing).
pub(super) struct Fresh {
    pub(super) scores: Vec<Value<Num>>,
    pub(super) values: Vec<Value<Num>>,
    pub(super) attends: Value<Bool>,
}

/// The stage: q into `place.sq`, the key and value into the caches (by
/// the writer), and the row's own score and value. `dims` are the
/// attention's (dimension, clamped dimension) slots of this lane.
pub(super) fn project_qkv(
    k: &mut Builder,
    shape: QkvShape,
    ops: &QkvOperands,
    place: &Place,
    split: &Split,
    dims: &[(Value<Index>, Value<Index>)],
) -> Fresh {
    let (hd, hq) = (place.hd, place.hq);
    let queries = hq * hd;
    let total = queries + 2 * hd;
    let raw = shared(k, total);
    let sk = shared(k, hd);
    let [c0, hdc, qn, end, last] = [0, hd, queries, total, total - 1].map(|v| k.index(v as u64));

    // The norm's gains now; x, normalised, in every subgroup's registers
    // once the first weights are on their way.
    let spans = lane_spans(k, shape.spl, ops.x.cols);
    let norm = ResidentNorm::load(k, &ops.gains, ops.on, &spans, ops.eps);
    let start = k.madd(place.r, ops.x.cols, ops.ox);

    // Weight rows: the head group's queries, then its kv head's key and
    // value; this workgroup's part of them.
    let per = total.div_ceil(split.splits);
    let block = per.div_ceil(place.max_subgroups).clamp(1, MAX_BLOCK);
    let [cb, cper] = [block, per].map(|v| k.index(v as u64));
    let slice0 = k.mul(split.part, cper);
    let slice_end = k.add(slice0, cper);
    let slice_end = k.min(slice_end, end);
    let first = k.madd(place.sg, cb, slice0);
    let stride = k.mul(place.nsg, cb);
    let (scratch, rows0) = split.scratch;
    let rows_at = k.madd(split.head_group, end, rows0);
    let q0 = k.mul(place.h0, hdc);
    let keys = k.mul(place.heads, hdc);
    let key0 = k.madd(place.g, hdc, keys);
    let kv_width = k.mul(place.kvh, hdc);
    let values_skip = k.sub(kv_width, hdc);
    let first_lane = k.cmp(IntPredicate::Eq, place.lane, c0);
    k.for_each(first, slice_end, stride, |b, i0| {
        let rows: Vec<(Value<Index>, Value<Bool>, Value<Index>)> = (0..block)
            .map(|u| {
                let du = b.index(u as u64);
                let i = b.add(i0, du);
                let inside = b.cmp(IntPredicate::Ult, i, slice_end);
                let i = b.min(i, last);
                let is_query = b.cmp(IntPredicate::Ult, i, qn);
                let query_row = b.add(q0, i);
                let past = b.max(i, qn);
                let j = b.sub(past, qn);
                let key_row = b.add(key0, j);
                let is_value = b.cmp(IntPredicate::Uge, j, hdc);
                let value_row = b.add(key_row, values_skip);
                let kv_row = b.select(is_value, value_row, key_row);
                (i, inside, b.select(is_query, query_row, kv_row))
            })
            .collect();
        // Every word of the block first.
        let words: Vec<Vec<SpanWords>> = rows
            .iter()
            .map(|&(_, _, row)| {
                let start = b.madd(row, ops.weights.row_words, ops.ow);
                spans
                    .iter()
                    .map(|&(_, s)| span_words(b, &ops.weights, start, s))
                    .collect()
            })
            .collect();
        // x after the words, so both loads are in flight together (a
        // trip loads it again: once where the workgroup is large).
        let x = resident_row(b, &ops.x, start, None, &spans, &norm);
        for (&(i, inside, _), row_words) in rows.iter().zip(&words) {
            let values: Vec<Vec<Value<Num>>> = row_words
                .iter()
                .map(|w| decode_span(b, &ops.weights, w))
                .collect();
            let part = lane_dot(b, &x, &values, &spans);
            let dot = b.subgroup_reduce(ReduceOp::AddF, part);
            let store = b.and(inside, first_lane);
            b.if_(store, |b| {
                let at = b.add(rows_at, i);
                b.store(dot, scratch, &[at]);
            });
        }
    });
    // The head group's last workgroup to finish takes all its rows.
    let lead = k.cmp(IntPredicate::Eq, place.t, c0);
    let (counters, counters0) = split.counters;
    let tile = k.add(counters0, split.head_group);
    let csplits = k.index(split.splits as u64);
    let last = last_split(k, counters, tile, csplits, lead);
    let zf = k.float(0.0, Scalar::F32);
    k.for_each(place.t, end, place.wgs, |b, i| {
        let v = b.if_else(
            last,
            |b| {
                let at = b.add(rows_at, i);
                vec![b.load(scratch, &[at])]
            },
            |_| vec![zf],
        )[0];
        b.store(v, raw, &[i]);
    });
    k.barrier(Barrier::Workgroup);

    // The queries turned and scaled; the key turned; both stored.
    let izero = k.int(0, Scalar::I32);
    let placed = k.cmpi(IntPredicate::Sge, place.pos, izero);
    let turn = |b: &mut Builder, base: Value<Index>, d: Value<Index>| {
        let inside = b.cmp(IntPredicate::Ult, d, place.rope);
        let turns = b.and(inside, placed);
        let c1 = b.index(1);
        let at = Pair {
            xv: raw,
            xbase: base,
            xs2: c1,
            d,
            pos: place.pos,
            c: place.c,
        };
        b.if_else(
            turns,
            |b| vec![rotated(b, at)],
            |b| {
                let e = b.add(base, d);
                vec![b.load(raw, &[e])]
            },
        )[0]
    };
    k.for_each(place.t, qn, place.wgs, |b, e| {
        let j = b.div(e, hdc);
        let d = b.rem(e, hdc);
        let base = b.mul(j, hdc);
        let q = turn(b, base, d);
        let y = b.mulf(q, place.scale);
        b.store(y, place.sq, &[e]);
    });
    let values_at = k.add(qn, hdc);
    let stores = k.and(place.writer, place.active);
    let stores = k.and(stores, last);
    k.for_each(place.t, hdc, place.wgs, |b, d| {
        let key = turn(b, qn, d);
        b.store(key, sk, &[d]);
        b.if_(stores, |b| {
            let row = b.add(place.kvrow, place.pi);
            let at = b.mul(row, hdc);
            let at = b.add(at, d);
            let (kv, ok) = place.k_cache;
            let ka = b.add(at, ok);
            b.store(key, kv, &[ka]);
            let vi = b.add(values_at, d);
            let value = b.load(raw, &[vi]);
            let (vv, ov) = place.v_cache;
            let va = b.add(at, ov);
            b.store(value, vv, &[va]);
        });
    });
    k.barrier(Barrier::Workgroup);

    // The row's own score per head, and this lane's dimensions of its
    // value.
    let scores = (0..hq)
        .map(|j| {
            let head = k.index((j * hd) as u64);
            let mut part = zf;
            for &(d, dl) in dims {
                let inside = k.cmp(IntPredicate::Ult, d, hdc);
                let qa = k.add(head, dl);
                let q = k.load(place.sq, &[qa]);
                let key = k.load(sk, &[dl]);
                let p = k.mulf(q, key);
                let p = k.select(inside, p, zf);
                part = k.addf(part, p);
            }
            k.subgroup_reduce(ReduceOp::AddF, part)
        })
        .collect();
    let values = dims
        .iter()
        .map(|&(_, dl)| {
            let at = k.add(values_at, dl);
            k.load(raw, &[at])
        })
        .collect();
    Fresh {
        scores,
        values,
        attends: last,
    }
}

//! The cached attention kernel, built: one workgroup of `wg` work items
//! per (token row, query head), or per (token row, kv head) taking all of
//! its `shape.heads` query heads (each key and value row then read once
//! for all of them), reading the kv head's cache rows of its sequence
//! slot, positions `0..=position`.
//!
//! The row's position is device data, so the number of positions is not
//! workgroup-uniform to the verifier: no barrier may sit in a loop over
//! them. Each subgroup therefore runs its own online softmax (running
//! maximum `m`, running sum `l`, the output accumulator rescaled by
//! `exp(m_old - m_new)` whenever the maximum grows) over chunks of one
//! position per lane, subgroup `s` taking chunks `s, s + subgroups, ..`,
//! with subgroup reductions only; the subgroups' states meet once at the
//! end through workgroup memory. A short context costs one chunk.
//!
//! Per chunk:
//! 1. scores: lane `l` takes position `c + l` and computes `q . K[p]` over
//!    the head (q, pre-scaled, in workgroup memory; K read in `w`-wide
//!    vectors, `w` = 4 where the head and cache allow);
//! 2. the chunk's maximum and the weights `exp(s - m_new)` and their sum,
//!    by subgroup reductions;
//! 3. values: for each position of the chunk, its weight is shuffled from
//!    its lane to all, and lane `l` adds `weight * V[p, d]` for its
//!    dimensions `d = l, l + sg, ..` (reads of a V row are contiguous
//!    across the lanes). The dimension slots per lane are a static count,
//!    `ceil(hd / sg_min)` for the device's smallest subgroup size.
//!
//! With several query heads per workgroup, every step runs once per head
//! (its own score, softmax state and accumulators) on the same K vectors
//! and V values, loaded once.
//!
//! Where the subgroup size is fixed and a head is a power-of-two number of
//! 4-wide vectors (`LaneSplit`), step 1 reads K coalesced instead: `L`
//! lanes share a row, each taking every `L`-th vector of it, so one load
//! instruction covers `sg / L` whole consecutive rows (a lane per row
//! would touch `sg` rows a quarter-line each, and measured about three
//! times the time per position on an H200). Each lane then holds partial
//! dots of `L` positions; `log2 L` rounds of xor shuffles, each keeping
//! half of the values and trading the other half with the partner lane,
//! leave lane `l` the whole dot of position `(l % L) * (sg / L) + l / L`
//! of the chunk, which step 3 shuffles from that lane.
//!
//! Where the subgroup size is fixed (32 on NVIDIA) the value loop is
//! unrolled over the whole chunk, so all its loads are in flight at once:
//! the lanes past the chunk's end carry weight 0 and read the row's last
//! position (written, finite) instead of their own. The score loop is
//! unrolled over the head (at most 64 vector loads).
//!
//! The rotary variant (`AttentionShape::rotary`) turns q by its row's
//! position as it loads it, with the fragment `rope` uses (so the same
//! bits as a `rope` dispatch before it, which it saves).
//!
//! The projected variant (`AttentionShape::project`) also applies the
//! attention's output projection and adds the residual: after the heads'
//! outputs are stored (and kept in the workgroup memory q is done with),
//! work item `t` takes output columns `t, t + wg, ..`, dots the weight
//! row's columns of this workgroup's heads with them, and stores the sum
//! into this workgroup's plane of the scratch (`[rows, workgroups per row,
//! width]`). The row's last workgroup to count itself done (`split_count`)
//! adds the planes in order to the residual (`sum_planes`). Its arguments
//! come after the attention's: `width`, the weight's row words, and the
//! offsets and lengths of the weight, the residual and the output; the
//! scratch and the per-row counters are bound whole, sized by the grid.
//!
//! Where the projection's columns of the workgroup's heads are few
//! (`AttentionShape::staged`: a few words a work item), every work item
//! loads its share of those weight words, and its output column's
//! residual, before the attention begins, and stores the words into
//! workgroup memory only after it: the loads' latency (device memory, the
//! weights being read once a step) passes under the attention instead of
//! following it, and the projection reads its weights from workgroup
//! memory.
//!
//! With `AttentionShape::splits` above 1, each group of heads takes that
//! many workgroups (grid x: groups times splits): each attends the
//! group's heads (the first split stores the attended rows) and projects
//! its share of the output columns into the group's plane; the planes
//! are counted per row and split, and the last group to finish a split
//! adds that split's columns. A few rows' projection then runs on more of
//! the GPU than one workgroup per group of heads.
//!
//! Caches of f16 (`AttentionShape::cache`) are read as f16 and widened
//! to f32 as each key vector or value is loaded; everything after the
//! load is the f32 kernel's.
//!
//! An inactive row (slot or position out of range) runs no chunk and
//! writes zeros. The head size is a static extent of the generator (loops
//! of known length).

use crate::ops::QuantFormat;
use crate::ops::quant::spans::{SPAN, Weights, span_values};
use crate::ops::split_count::{last_split, sum_planes};
use crate::ops::token::kernels::{Pair, narrow, rotated, widen};
use hrx_loom::build::{Barrier, Builder, Built, Extent, Index, KernelBuilder, Num, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, ReduceOp, Scalar, ShuffleMode};

const F32: Scalar = Scalar::F32;

/// The shape of one instantiation: head size, vector width of the score
/// loads (1 or 4, which divides `hd`), work items per workgroup, the
/// device's smallest subgroup size, and whether that is its only size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AttentionShape {
    pub(crate) hd: usize,
    pub(crate) w: usize,
    pub(crate) wg: usize,
    pub(crate) sg_min: usize,
    pub(crate) sg_fixed: bool,
    /// q is turned by RoPE on load (arguments `rope`, `c` as for `rope`).
    pub(crate) rotary: bool,
    /// Query heads per workgroup (consecutive, of one kv head): each key
    /// and value row is read once for all of them.
    pub(crate) heads: usize,
    /// The output projection fused in, by a matrix of this format
    /// (arguments after the attention's; see the module documentation).
    pub(crate) project: Option<QuantFormat>,
    /// The output columns a workgroup projects, where its weight columns
    /// of the workgroup's heads are loaded at the start and kept in
    /// workgroup memory for the projection ([`stages`]).
    pub(crate) staged: Option<usize>,
    /// Workgroups per group of heads (1 without a projection): each
    /// attends the same heads and projects its share of the output
    /// columns, so a few heads' projection spreads over more of the GPU.
    pub(crate) splits: usize,
    /// The caches' element type (f32 or f16, widened to f32 on load).
    pub(crate) cache: Scalar,
    /// q's element type (f32, or f16 widened on load).
    pub(crate) q: Scalar,
    /// The output's element type (f32, or f16 rounded to nearest).
    pub(crate) out: Scalar,
}

impl AttentionShape {
    /// Dimensions each lane accumulates.
    fn slots(&self) -> usize {
        self.hd.div_ceil(self.sg_min)
    }

    /// The most subgroups a workgroup can have.
    fn max_subgroups(&self) -> usize {
        (self.wg / self.sg_min).max(1)
    }

    /// How step 1 shares rows between lanes, where it does.
    fn lane_split(&self) -> Option<LaneSplit> {
        let vectors = self.hd / 4;
        let lanes = vectors.min(self.sg_min);
        let fits = self.sg_fixed
            && self.w == 4
            && self.sg_min.is_power_of_two()
            && lanes.is_power_of_two()
            && vectors.is_multiple_of(lanes);
        fits.then_some(LaneSplit {
            lanes,
            rows: self.sg_min / lanes,
            loads: vectors / lanes,
        })
    }
}

/// Step 1 with `lanes` lanes per K row: `rows` rows per load instruction,
/// `loads` 4-wide loads per lane and row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LaneSplit {
    lanes: usize,
    rows: usize,
    loads: usize,
}

impl LaneSplit {
    /// The lane that holds the score of the chunk's `j`-th position.
    fn lane_of(&self, j: usize) -> usize {
        (j % self.rows) * self.lanes + j / self.rows
    }
}

/// The most weight words a workgroup stages for its projection.
const STAGED_WORDS_MAX: usize = 6144;
/// The most staged words a work item loads (and holds through the
/// attention).
const STAGED_PER_ITEM_MAX: usize = 8;

/// Words of one projection row's columns over a workgroup's `values`
/// head values, where each head starts on a block of the format.
fn head_row_words(format: QuantFormat, hd: usize, values: usize) -> Option<usize> {
    if !hd.is_multiple_of(format.block_len()) {
        return None;
    }
    format.row_words(values).ok()
}

/// Whether a workgroup's projection onto `columns` output columns by
/// `format` is staged (`AttentionShape::staged`) for workgroups of `wg`
/// work items taking `heads` heads of `hd` values: its words fit the
/// workgroup memory budget, a work item loads a few, and one work item
/// holds each output column's residual.
pub(crate) fn stages(
    format: QuantFormat,
    (hd, heads): (usize, usize),
    columns: usize,
    wg: usize,
) -> bool {
    head_row_words(format, hd, hd * heads).is_some_and(|words| {
        let total = columns * words;
        total <= STAGED_WORDS_MAX && total.div_ceil(wg) <= STAGED_PER_ITEM_MAX && columns <= wg
    })
}

/// Bytes of workgroup memory the staged projection of `shape` takes.
pub(crate) fn staged_bytes(shape: &AttentionShape) -> usize {
    match (shape.project, shape.staged) {
        (Some(format), Some(columns)) => {
            4 * columns * head_row_words(format, shape.hd, shape.hd * shape.heads).unwrap_or(0)
        }
        _ => 0,
    }
}

/// Workgroup memory of `elems` f32 slots.
fn shared(k: &mut Builder, elems: usize) -> Value<View> {
    let zero = k.offset(0);
    let bytes = k.offset(elems as u64 * 4);
    let buffer = k.alloca_workgroup(bytes, 16);
    k.buffer_view(buffer, zero, [Extent::from(elems)], F32)
}

/// A `w`-wide load (a scalar where `w` is 1).
fn load_w(b: &mut Builder, w: usize, view: Value<View>, at: Value<Index>) -> Value<Num> {
    if w == 1 {
        b.load(view, &[at])
    } else {
        b.vector_load(view, &[at], w as u8)
    }
}

/// The sum of a vector's lanes (the value itself where `w` is 1).
fn lanes_sum(b: &mut Builder, w: usize, v: Value<Num>) -> Value<Num> {
    if w == 1 {
        return v;
    }
    let mut sum = None;
    for lane in 0..w {
        let i = b.index(lane as u64);
        let x = b.extract(v, i);
        sum = Some(match sum {
            None => x,
            Some(s) => b.addf(s, x),
        });
    }
    sum.unwrap_or(v)
}

/// The index 4: the lanes of a vector load.
fn k4(k: &mut Builder) -> Value<Index> {
    k.index(4)
}

/// Step 1, lane-split: per head, the score this lane ends with after the
/// rounds (the lowest value for a position at or past `n`). `qparts`
/// holds each head's q vectors of this lane's part; `chunk` is (first
/// position `c`, positions `n`, the kv head's first cache row), `keys` the
/// K view and its element offset. Each key vector is loaded once for all
/// the heads.
#[allow(clippy::too_many_arguments)]
fn lane_split_scores(
    b: &mut Builder,
    ls: LaneSplit,
    (part, sub): (Value<Index>, Value<Index>),
    qparts: &[Vec<Value<Num>>],
    (c, n, kvrow): (Value<Index>, Value<Index>, Value<Index>),
    (kv, ok): (Value<View>, Value<Index>),
    hd: usize,
    lowest: Value<Num>,
) -> Vec<Value<Num>> {
    let c1 = b.index(1);
    let last = b.sub(n, c1);
    let crows = b.index(ls.rows as u64);
    let hdc = b.index(hd as u64);
    let c4 = k4(b);
    let lane_at = b.mul(part, c4);
    // Per head, partial dots of the chunk's positions `i * rows + sub`, i
    // < lanes (rows clamped into the sequence: every load reads written
    // data).
    let heads = qparts.len();
    let mut vals: Vec<Vec<Value<Num>>> = vec![Vec::with_capacity(ls.lanes); heads];
    for i in 0..ls.lanes {
        let ic = b.index((i * ls.rows) as u64);
        let j = b.add(ic, sub);
        let p = b.add(c, j);
        let p = b.min(p, last);
        let row = b.add(kvrow, p);
        let base = b.madd(row, hdc, ok);
        let base = b.add(base, lane_at);
        let keys: Vec<Value<Num>> = (0..ls.loads)
            .map(|v| {
                let off = b.index((v * ls.lanes * 4) as u64);
                let at = b.add(base, off);
                let key = b.vector_load(kv, &[at], 4);
                widen(b, key)
            })
            .collect();
        for (head, q) in qparts.iter().enumerate() {
            let mut dot = None;
            for (&kx, &qv) in keys.iter().zip(q) {
                dot = Some(match dot {
                    None => b.mulf(kx, qv),
                    Some(d) => b.fmaf(kx, qv, d),
                });
            }
            let dot = dot.expect("a head has at least one vector");
            vals[head].push(lanes_sum(b, 4, dot));
        }
    }
    // Halve the values each round: keep one half, trade the other with the
    // lane `mask` away, add.
    let mut mask = ls.lanes / 2;
    while mask >= 1 {
        let cm = b.index(mask as u64);
        let q = b.div(part, cm);
        let c2 = b.index(2);
        let bit = b.rem(q, c2);
        let c0 = b.index(0);
        let upper = b.cmp(IntPredicate::Ne, bit, c0);
        for head in vals.iter_mut() {
            let half = head.len() / 2;
            *head = (0..half)
                .map(|j| {
                    let (lo, hi) = (head[j], head[j + half]);
                    let keep = b.select(upper, hi, lo);
                    let send = b.select(upper, lo, hi);
                    let got = b.subgroup_shuffle(ShuffleMode::Xor, send, cm);
                    b.addf(keep, got)
                })
                .collect();
        }
        mask /= 2;
    }
    let ic = b.mul(part, crows);
    let j = b.add(ic, sub);
    let p = b.add(c, j);
    let valid = b.cmp(IntPredicate::Ult, p, n);
    vals.iter()
        .map(|head| b.select(valid, head[0], lowest))
        .collect()
}

/// `out[r, h, :] = softmax(scale * q[r, h, :] . K[s, g, 0..=p, :]) V[s, g,
/// 0..=p, :]` with `s = seq[r]`, `p = pos[r]`, `g = h / group`; `q`
/// strided, caches and `out` contiguous. A workgroup takes `shape.heads`
/// consecutive query heads of one kv head.
pub(crate) fn cached_attention(shape: AttentionShape) -> Built {
    let AttentionShape { hd, w, wg, .. } = shape;
    let hq = shape.heads;
    let (slots_n, max_sg) = (shape.slots(), shape.max_subgroups());
    let mut kb = KernelBuilder::new("cached_attention");
    let heads_n = kb.workload("heads");
    let rows_n = kb.workload("rows");
    let one = kb.index(1);
    let wgc = kb.index(wg as u64);
    let hqc = kb.index(hq as u64);
    let head_groups = kb.div(heads_n, hqc);
    let splits_b = kb.index(shape.splits as u64);
    let gx = kb.mul(head_groups, splits_b);
    let mut k = kb.launch_config([gx, rows_n, one], [wgc, one, one]);
    let [heads, group, kvh, slots, cap] =
        ["heads", "group", "kvh", "slots", "cap"].map(|x| k.arg_index(x));
    let scale = k.arg_scalar("scale", F32);
    let rotary = shape
        .rotary
        .then(|| (k.arg_index("rope"), k.arg_scalar("c", F32)));
    let [
        qs0,
        qs1,
        qs2,
        oq,
        lq,
        ok,
        lk,
        ov,
        lv,
        oo,
        lo,
        os,
        ls,
        op,
        lp,
    ] = [
        "qs0", "qs1", "qs2", "oq", "lq", "ok", "lk", "ov", "lv", "oo", "lo", "os", "ls", "op", "lp",
    ]
    .map(|x| k.arg_index(x));
    let projection_args = shape.project.map(|format| {
        let [width, rw, ow, lw, or, lr, oh, lh] =
            ["width", "rw", "ow", "lw", "or", "lr", "oh", "lh"].map(|x| k.arg_index(x));
        (format, [width, rw, ow, lw, or, lr, oh, lh])
    });
    let [q, kc, vc, sequence, position] =
        ["q", "k_cache", "v_cache", "sequence", "position"].map(|x| k.arg_buffer(x, true));
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let projection = projection_args.map(|(format, [width, rw, ow, lw, or, lr, oh, lh])| {
        // The scratch and the counters are bound whole, sized by the grid
        // (push constants are too few for their lengths): a plane of
        // `width` per group of heads, a counter per row and split.
        let per_row = k.workgroup_count(Axis::X);
        let rows = k.workgroup_count(Axis::Y);
        let splits = k.index(shape.splits as u64);
        let head_groups = k.div(per_row, splits);
        let planes = k.mul(head_groups, rows);
        let tiles = k.mul(rows, splits);
        let lsc = k.mul(planes, width);
        let [wb, rb] = ["wo", "res"].map(|x| k.arg_buffer(x, true));
        let [hb, sb, cb] = ["h", "scratch", "cnt"].map(|x| k.arg_buffer(x, false));
        Projection {
            width,
            weights: Weights {
                format,
                view: k.buffer_view(wb, zero, [lw.into()], Scalar::U32),
                row_words: rw,
                tail: false,
            },
            ow,
            residual: (k.buffer_view(rb, zero, [lr.into()], F32), or),
            out: (k.buffer_view(hb, zero, [lh.into()], F32), oh),
            scratch: k.buffer_view(sb, zero, [lsc.into()], F32),
            counters: k.buffer_view(cb, zero, [tiles.into()], Scalar::U32),
        }
    });
    let qv = k.buffer_view(q, zero, [lq.into()], shape.q);
    let kv = k.buffer_view(kc, zero, [lk.into()], shape.cache);
    let vv = k.buffer_view(vc, zero, [lv.into()], shape.cache);
    let sv = k.buffer_view(sequence, zero, [ls.into()], Scalar::I32);
    let pv = k.buffer_view(position, zero, [lp.into()], Scalar::I32);
    let outv = k.buffer_view(out, zero, [lo.into()], shape.out);
    // Per head: q, the subgroups' maxima and sums, their accumulators.
    let sq = shared(&mut k, hd * hq);
    let sm = shared(&mut k, max_sg * hq);
    let sl = shared(&mut k, max_sg * hq);
    let sacc = shared(&mut k, max_sg * hd * hq);

    let [c0, c1, wgs, hdc, last_d] = [0, 1, wg, hd, hd - 1].map(|v| k.index(v as u64));
    let t = k.workitem_id(Axis::X);
    // The group of heads, and which split of its projection.
    let wid = k.workgroup_id(Axis::X);
    let splits = k.index(shape.splits as u64);
    let hg = k.div(wid, splits);
    let part = k.rem(wid, splits);
    let hq_b = k.index(hq as u64);
    let h0 = k.mul(hg, hq_b);
    let r = k.workgroup_id(Axis::Y);
    let lane = k.subgroup_lane_id();
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let sgsize = k.subgroup_size();
    let g = k.div(h0, group);

    // The row's slot and position; `n` positions to attend (0: inactive),
    // made subgroup-uniform by a broadcast so chunk loops may reduce.
    let ps = k.add(os, r);
    let pp = k.add(op, r);
    let seq = k.load(sv, &[ps]);
    let pos = k.load(pv, &[pp]);
    let sequ = k.bitcast(seq, Scalar::U32);
    let posu = k.bitcast(pos, Scalar::U32);
    let slotsu = k.index_cast(slots, Scalar::U32);
    let capu = k.index_cast(cap, Scalar::U32);
    let in_slots = k.cmpi(IntPredicate::Ult, sequ, slotsu);
    let in_cap = k.cmpi(IntPredicate::Ult, posu, capu);
    let active = k.and(in_slots, in_cap);
    let si = k.to_index(sequ);
    let pi = k.to_index(posu);
    let seqi = k.select(active, si, c0);
    let next = k.add(pi, c1);
    let n_lane = k.select(active, next, c0);
    let n_u = k.index_cast(n_lane, Scalar::U32);
    let n_b = k.subgroup_broadcast(n_u, c0);
    let n = k.to_index(n_b);
    let head_row = k.madd(seqi, kvh, g);
    let kvrow = k.mul(head_row, cap);

    // This split's output columns.
    let columns = projection.as_ref().map(|p| {
        let per = k.div_ceil(p.width, splits);
        let first = k.mul(part, per);
        let start = k.min(first, p.width);
        let room = k.sub(p.width, start);
        Columns {
            start,
            count: k.min(per, room),
            part,
            splits,
        }
    });
    // The staged projection's loads, issued first and used last.
    let staging = match (&projection, &columns, shape.project, shape.staged) {
        (Some(p), Some(cols), Some(format), Some(columns)) => {
            let values = hd * hq;
            let words = head_row_words(format, hd, values).expect("staged heads start on blocks");
            Some(stage_loads(
                &mut k,
                (p, cols),
                (words, columns, wg),
                (t, r, h0),
                format.row_words(hd).unwrap_or(0),
            ))
        }
        _ => None,
    };

    // q of the workgroup's heads, scaled, into workgroup memory.
    let q0 = k.madd(r, qs0, oq);
    let izero = k.int(0, Scalar::I32);
    let all = k.index((hd * hq) as u64);
    k.for_each(t, all, wgs, |b, e| {
        let j = b.div(e, hdc);
        let d = b.rem(e, hdc);
        let h = b.add(h0, j);
        let qbase = b.madd(h, qs1, q0);
        let load = |b: &mut Builder| {
            let at = b.madd(d, qs2, qbase);
            let x = b.load(qv, &[at]);
            widen(b, x)
        };
        let x = match rotary {
            None => load(b),
            Some((rope, c)) => {
                let inside = b.cmp(IntPredicate::Ult, d, rope);
                let placed = b.cmpi(IntPredicate::Sge, pos, izero);
                let turn = b.and(inside, placed);
                let at = Pair {
                    xv: qv,
                    xbase: qbase,
                    xs2: qs2,
                    d,
                    pos,
                    c,
                };
                b.if_else(turn, |b| vec![rotated(b, at)], |b| vec![load(b)])[0]
            }
        };
        let y = b.mulf(x, scale);
        b.store(y, sq, &[e]);
    });
    k.barrier(Barrier::Workgroup);

    let lowest = k.float(f64::from(f32::MIN), F32);
    let zf = k.float(0.0, F32);
    let zdot = if w == 1 { zf } else { k.splat(zf, w as u8) };
    // This lane's dimensions `lane + i * sgsize`, clamped for the loads
    // (a slot past the head accumulates garbage that is never stored).
    let dims: Vec<(Value<Index>, Value<Index>)> = (0..slots_n)
        .map(|i| {
            let ic = k.index(i as u64);
            let d = k.madd(ic, sgsize, lane);
            let dl = k.min(d, last_d);
            (d, dl)
        })
        .collect();
    // Lane-split scores: this lane's part of a row and, per head, its q
    // vectors.
    let split = shape.lane_split().map(|ls| {
        let cl = k.index(ls.lanes as u64);
        let part = k.rem(lane, cl);
        let sub = k.div(lane, cl);
        let qparts: Vec<Vec<Value<Num>>> = (0..hq)
            .map(|j| {
                (0..ls.loads)
                    .map(|v| {
                        let cv = k.index((v * ls.lanes) as u64);
                        let vec = k.add(part, cv);
                        let c4 = k4(&mut k);
                        let head0 = k.index((j * hd) as u64);
                        let at = k.madd(vec, c4, head0);
                        k.vector_load(sq, &[at], 4)
                    })
                    .collect()
            })
            .collect();
        (ls, part, sub, qparts)
    });
    let first_chunk = k.mul(sg, sgsize);
    let stride = k.mul(nsg, sgsize);
    // Carried per head: the running maximum, the running sum, then the
    // head's accumulators.
    let per = 2 + slots_n;
    let mut init = Vec::with_capacity(per * hq);
    for _ in 0..hq {
        init.extend([lowest, zf]);
        init.extend(std::iter::repeat_n(zf, slots_n));
    }
    let state = k.for_carry(first_chunk, n, stride, &init, |b, c, acc| {
        // 1. The scores of position c + lane (lane-split: of the position
        // the rounds leave this lane), one per head.
        let scores = if let Some((ls, part, sub, qparts)) = &split {
            lane_split_scores(
                b,
                *ls,
                (*part, *sub),
                qparts,
                (c, n, kvrow),
                (kv, ok),
                hd,
                lowest,
            )
        } else {
            let p = b.add(c, lane);
            let valid = b.cmp(IntPredicate::Ult, p, n);
            b.if_else(
                valid,
                |b| {
                    let row = b.add(kvrow, p);
                    let kbase = b.madd(row, hdc, ok);
                    let mut dots = vec![zdot; hq];
                    for e in (0..hd).step_by(w) {
                        let ec = b.index(e as u64);
                        let at = b.add(kbase, ec);
                        let kx = load_w(b, w, kv, at);
                        let kx = widen(b, kx);
                        for (j, dot) in dots.iter_mut().enumerate() {
                            let qe = b.index((j * hd + e) as u64);
                            let qx = load_w(b, w, sq, qe);
                            *dot = b.fmaf(kx, qx, *dot);
                        }
                    }
                    dots.into_iter().map(|d| lanes_sum(b, w, d)).collect()
                },
                |_| vec![lowest; hq],
            )
        };
        // 2. Per head: the chunk's maximum, the weights and their sum.
        let mut next = Vec::with_capacity(per * hq);
        let mut weights = Vec::with_capacity(hq);
        for (j, &s) in scores.iter().enumerate() {
            let (m, l) = (acc[j * per], acc[j * per + 1]);
            let cmax = b.subgroup_reduce(ReduceOp::MaxNumF, s);
            let m_new = b.maxnumf(m, cmax);
            let ds = b.subf(s, m_new);
            let weight = b.expf(ds);
            let csum = b.subgroup_reduce(ReduceOp::AddF, weight);
            let dm = b.subf(m, m_new);
            let alpha = b.expf(dm);
            let l_new = b.fmaf(l, alpha, csum);
            next.extend([m_new, l_new]);
            for &a in &acc[j * per + 2..(j + 1) * per] {
                next.push(b.mulf(a, alpha));
            }
            weights.push(weight);
        }
        // 3. The chunk's weighted values: each V row read once for all
        // the heads.
        let add_position =
            |b: &mut Builder, from: Value<Index>, pc: Value<Index>, x: &mut [Value<Num>]| {
                let row = b.add(kvrow, pc);
                let vb = b.madd(row, hdc, ov);
                let values: Vec<Value<Num>> = dims
                    .iter()
                    .map(|&(_, dl)| {
                        let at = b.add(vb, dl);
                        let value = b.load(vv, &[at]);
                        widen(b, value)
                    })
                    .collect();
                for (j, &weight) in weights.iter().enumerate() {
                    let wj = b.subgroup_shuffle(ShuffleMode::Index, weight, from);
                    for (slot, &v) in values.iter().enumerate() {
                        let a = &mut x[j * per + 2 + slot];
                        *a = b.fmaf(wj, v, *a);
                    }
                }
            };
        if shape.sg_fixed {
            let last = b.sub(n, c1);
            for jpos in 0..shape.sg_min {
                let from = split.as_ref().map_or(jpos, |(ls, ..)| ls.lane_of(jpos));
                let jc = b.index(jpos as u64);
                let fc = b.index(from as u64);
                let pj = b.add(c, jc);
                let pc = b.min(pj, last);
                add_position(b, fc, pc, &mut next);
            }
            next
        } else {
            let left = b.sub(n, c);
            let count = b.min(sgsize, left);
            b.for_carry(c0, count, c1, &next, |b, jpos, x| {
                let pc = b.add(c, jpos);
                let mut x = x.to_vec();
                add_position(b, jpos, pc, &mut x);
                x
            })
        }
    });

    // The subgroups' states meet, per head: maxima, sums and accumulators.
    let first = k.cmp(IntPredicate::Eq, lane, c0);
    for j in 0..hq {
        let (m, l) = (state[j * per], state[j * per + 1]);
        let at = k.index((j * max_sg) as u64);
        let at = k.add(at, sg);
        k.if_(first, |b| {
            b.store(m, sm, &[at]);
            b.store(l, sl, &[at]);
        });
        let sbase = k.mul(at, hdc);
        for (&(d, _), &a) in dims.iter().zip(&state[j * per + 2..(j + 1) * per]) {
            let inside = k.cmp(IntPredicate::Ult, d, hdc);
            k.if_(inside, |b| {
                let at = b.add(sbase, d);
                b.store(a, sacc, &[at]);
            });
        }
    }
    k.barrier(Barrier::Workgroup);
    let onef = k.float(1.0, F32);
    for j in 0..hq {
        let head_sg = k.index((j * max_sg) as u64);
        let mmax = k.for_carry(c0, nsg, c1, &[lowest], |b, i, x| {
            let at = b.add(head_sg, i);
            let v = b.load(sm, &[at]);
            vec![b.maxnumf(x[0], v)]
        })[0];
        let total = k.for_carry(c0, nsg, c1, &[zf], |b, i, x| {
            let at = b.add(head_sg, i);
            let mi = b.load(sm, &[at]);
            let li = b.load(sl, &[at]);
            let dmi = b.subf(mi, mmax);
            let f = b.expf(dmi);
            vec![b.fmaf(li, f, x[0])]
        })[0];
        let inv0 = k.divf(onef, total);
        let some = k.cmpf(hrx_loom::ir::FloatPredicate::Ogt, total, zf);
        let inv = k.select(some, inv0, zf);
        let jc = k.index(j as u64);
        let h = k.add(h0, jc);
        let orow = k.madd(r, heads, h);
        let obase = k.madd(orow, hdc, oo);
        k.for_each(t, hdc, wgs, |b, d| {
            let o = b.for_carry(c0, nsg, c1, &[zf], |b, i, x| {
                let at = b.add(head_sg, i);
                let mi = b.load(sm, &[at]);
                let dmi = b.subf(mi, mmax);
                let f = b.expf(dmi);
                let at = b.madd(at, hdc, d);
                let a = b.load(sacc, &[at]);
                vec![b.fmaf(a, f, x[0])]
            })[0];
            let y = b.mulf(o, inv);
            let at = b.add(obase, d);
            let stored = narrow(b, y, shape.out);
            // Every split attends the heads; the first stores them.
            let first_split = b.cmp(IntPredicate::Eq, part, c0);
            b.if_(first_split, |b| b.store(stored, outv, &[at]));
            if projection.is_some() {
                // q is spent: its memory holds the heads' outputs.
                let at = b.madd(jc, hdc, d);
                b.store(y, sq, &[at]);
            }
        });
    }
    if let (Some(p), Some(cols)) = (projection, columns) {
        let staged = staging.map(|st| st.store(&mut k, t));
        project(
            &mut k,
            (&p, &cols),
            staged,
            (sq, hd * hq),
            (r, hg, h0, hd),
            (t, wgs),
        );
    }
    Built::kernel(k.finish())
}

/// The output projection's operands (`AttentionShape::project`).
struct Projection {
    /// Output columns (the weight's rows).
    width: Value<Index>,
    weights: Weights,
    /// The weights' element offset.
    ow: Value<Index>,
    /// `[rows, width]` each: the residual and the output, with their
    /// element offsets.
    residual: (Value<View>, Value<Index>),
    out: (Value<View>, Value<Index>),
    /// Partial sums, `[rows, groups of heads, width]`, and a finishing
    /// counter per row and split.
    scratch: Value<View>,
    counters: Value<View>,
}

/// The output columns of one split of a projection: `count` from
/// `start`, split `part` of `splits`.
struct Columns {
    start: Value<Index>,
    count: Value<Index>,
    part: Value<Index>,
    splits: Value<Index>,
}

/// The fused output projection, after the heads' outputs are in `ys`
/// (`values` of them, the workgroup's heads side by side): this
/// workgroup's part, `wo[:, h0 * hd ..][.. values] . ys` for each of its
/// split's output columns, into its group of heads' plane of the
/// scratch; the last of the row's groups to finish a split adds the
/// planes of its columns in order to the residual.
fn project(
    k: &mut Builder,
    (p, cols): (&Projection, &Columns),
    staged: Option<Staged>,
    (ys, values): (Value<View>, usize),
    (r, hg, h0, hd): (Value<Index>, Value<Index>, Value<Index>, usize),
    (t, wgs): (Value<Index>, Value<Index>),
) {
    k.barrier(Barrier::Workgroup);
    let c0 = k.index(0);
    let c8 = k.index(SPAN as u64);
    let hdc = k.index(hd as u64);
    let per_row = k.workgroup_count(Axis::X);
    let groups = k.div(per_row, cols.splits);
    // Staged: the rows of the split's columns alone, from workgroup
    // memory, by local column.
    let (weights, span0, first_word) = match &staged {
        Some(st) => (st.weights, c0, c0),
        None => {
            let column0 = k.mul(h0, hdc);
            (p.weights, k.div(column0, c8), p.ow)
        }
    };
    let row_plane = k.mul(r, groups);
    let plane = k.add(row_plane, hg);
    let plane_at = k.mul(plane, p.width);
    k.for_each(t, cols.count, wgs, |b, i| {
        let o = b.add(cols.start, i);
        let column = if staged.is_some() { i } else { o };
        let row = b.madd(column, weights.row_words, first_word);
        let (mut even, mut odd) = (b.float(0.0, F32), b.float(0.0, F32));
        for s in 0..values / SPAN {
            let ds = b.index(s as u64);
            let span = b.add(span0, ds);
            let ws = span_values(b, &weights, row, span);
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
        b.store(part, p.scratch, &[at]);
    });
    let lead = k.cmp(IntPredicate::Eq, t, c0);
    let tile = k.madd(r, cols.splits, cols.part);
    let last = last_split(k, p.counters, tile, groups, lead);
    k.if_(last, |b| {
        let first_plane = b.mul(row_plane, p.width);
        let finish = |b: &mut Builder, o: Value<Index>, residual: Value<Num>| {
            let within = b.add(first_plane, o);
            let sum = sum_planes(b, p.scratch, groups, p.width, within);
            let value = b.addf(residual, sum);
            let at = b.madd(r, p.width, o);
            let (hv, oh) = p.out;
            let hat = b.add(at, oh);
            b.store(value, hv, &[hat]);
        };
        match &staged {
            // One column a work item, its residual loaded at the start.
            Some(st) => {
                let inside = b.cmp(IntPredicate::Ult, t, cols.count);
                let o = b.add(cols.start, t);
                b.if_(inside, |b| finish(b, o, st.residual));
            }
            None => b.for_each(t, cols.count, wgs, |b, i| {
                let o = b.add(cols.start, i);
                let at = b.madd(r, p.width, o);
                let (rv, or) = p.residual;
                let rat = b.add(at, or);
                let residual = b.load(rv, &[rat]);
                finish(b, o, residual);
            }),
        }
    });
}

/// The staged projection's loads, held in registers through the
/// attention: this work item's weight words and its column's residual.
struct StageLoads {
    words: Vec<Value<Num>>,
    residual: Value<Num>,
    view: Value<View>,
    /// Words staged in all, and each row's words.
    total: usize,
    row_words: usize,
    wg: usize,
    format: QuantFormat,
}

/// The staged projection as `project` reads it.
struct Staged {
    weights: Weights,
    residual: Value<Num>,
}

/// Issues the loads of the staged projection: word `i = t + j * wg` of
/// the staged rows (`row_words` words of the split's output column
/// `i / row_words`, from the workgroup's first head's word
/// `h0 * head_words`) and the residual of the split's column `t` of row
/// `r`. Indices past the end are clamped (their words are loaded and
/// never stored or used).
fn stage_loads(
    k: &mut Builder,
    (p, cols): (&Projection, &Columns),
    (row_words, columns, wg): (usize, usize, usize),
    (t, r, h0): (Value<Index>, Value<Index>, Value<Index>),
    head_words: usize,
) -> StageLoads {
    let total = columns * row_words;
    let [last, rw, hw, c1] = [total - 1, row_words, head_words, 1].map(|v| k.index(v as u64));
    let head_at = k.madd(h0, hw, p.ow);
    let last_column = k.sub(p.width, c1);
    let words = (0..total.div_ceil(wg))
        .map(|j| {
            let offset = k.index((j * wg) as u64);
            let i = k.add(t, offset);
            let i = k.min(i, last);
            let local = k.div(i, rw);
            let column = k.add(cols.start, local);
            let column = k.min(column, last_column);
            let within = k.rem(i, rw);
            let row = k.madd(column, p.weights.row_words, head_at);
            let at = k.add(row, within);
            k.load(p.weights.view, &[at])
        })
        .collect();
    let column = k.add(cols.start, t);
    let column = k.min(column, last_column);
    let (rv, or) = p.residual;
    let at = k.madd(r, p.width, column);
    let at = k.add(at, or);
    let residual = k.load(rv, &[at]);
    let zero = k.offset(0);
    let bytes = k.offset(4 * total as u64);
    let buffer = k.alloca_workgroup(bytes, 16);
    let view = k.buffer_view(buffer, zero, [Extent::from(total)], Scalar::U32);
    StageLoads {
        words,
        residual,
        view,
        total,
        row_words,
        wg,
        format: p.weights.format,
    }
}

impl StageLoads {
    /// Stores the held words into workgroup memory (the projection's
    /// barrier follows before any is read).
    fn store(self, k: &mut Builder, t: Value<Index>) -> Staged {
        let total = k.index(self.total as u64);
        for (j, &word) in self.words.iter().enumerate() {
            let offset = k.index((j * self.wg) as u64);
            let i = k.add(t, offset);
            let inside = k.cmp(IntPredicate::Ult, i, total);
            k.if_(inside, |b| b.store(word, self.view, &[i]));
        }
        Staged {
            weights: Weights {
                format: self.format,
                view: self.view,
                row_words: k.index(self.row_words as u64),
                tail: false,
            },
            residual: self.residual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lane-split rounds leave lane `l` the position `(l % L) * R + l
    /// / L` of the chunk, and `lane_of` finds that lane for every position
    /// once.
    #[test]
    fn lane_split_maps_each_position_to_one_lane() {
        for (hd, sg) in [(64, 32), (64, 8), (256, 32), (128, 64), (16, 32)] {
            let shape = AttentionShape {
                hd,
                w: 4,
                wg: 128,
                sg_min: sg,
                sg_fixed: true,
                rotary: false,
                heads: 1,
                project: None,
                staged: None,
                splits: 1,
                cache: F32,
                q: F32,
                out: F32,
            };
            let ls = shape.lane_split().expect("a power-of-two head");
            assert_eq!(ls.lanes * ls.rows, sg, "{hd} {sg}");
            assert_eq!(ls.lanes * ls.loads * 4, hd, "{hd} {sg}");
            let mut seen = vec![false; sg];
            for j in 0..sg {
                let l = ls.lane_of(j);
                assert_eq!((l % ls.lanes) * ls.rows + l / ls.lanes, j, "{hd} {sg} {j}");
                assert!(!std::mem::replace(&mut seen[l], true), "{hd} {sg} {j}");
            }
        }
        let odd = AttentionShape {
            hd: 80,
            w: 4,
            wg: 128,
            sg_min: 32,
            sg_fixed: true,
            rotary: false,
            heads: 1,
            project: None,
            staged: None,
            splits: 1,
            cache: F32,
            q: F32,
            out: F32,
        };
        assert_eq!(odd.lane_split(), None);
        assert_eq!(
            AttentionShape {
                sg_fixed: false,
                hd: 64,
                ..odd
            }
            .lane_split(),
            None
        );
    }

    /// Head sizes with and without vectors, workgroups with idle work
    /// items, compile on a CPU and a GPU target.
    #[test]
    fn every_shape_compiles() {
        for target in [hrx_core::Target::lavapipe(), hrx_core::Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            let sg_min = target.subgroup_size_min as usize;
            let shapes = [
                (64, 4, 128, true, 3),
                (64, 4, 16, false, 2),
                (6, 1, 16, true, 1),
                (80, 4, 128, false, 4),
                (256, 4, 128, true, 1),
                (64, 4, 256, true, 1),
            ];
            let projections = [None, Some(QuantFormat::Q4_1), Some(QuantFormat::F16)];
            let caches = [F32, F32, Scalar::F16];
            for ((((hd, w, wg, sg_fixed, heads), rotary), project), cache) in shapes
                .into_iter()
                .zip([false, true].repeat(3))
                .zip(projections.repeat(2))
                .zip(caches.repeat(2))
            {
                // The projection reads whole spans of the heads.
                let project = project.filter(|_| hd % SPAN == 0);
                let built = cached_attention(AttentionShape {
                    hd,
                    w,
                    wg,
                    sg_min,
                    sg_fixed,
                    rotary,
                    heads,
                    project,
                    staged: None,
                    splits: 1,
                    cache,
                    q: cache,
                    out: cache,
                });
                compiler
                    .built(&built)
                    .and_then(|m| {
                        m.compile_uncached(&hrx_loom::Specialization::new("cached_attention"))
                    })
                    .unwrap_or_else(|e| {
                        panic!(
                            "hd={hd} w={w} wg={wg} {sg_fixed} {rotary} {heads} {project:?} \
                             {cache:?}: {e}"
                        )
                    });
            }
        }
    }

    /// The staged projection (`AttentionShape::staged`) builds for the
    /// shapes the rule gives it: SmolLM2's decode on an H200, and narrow
    /// projections over shared heads on lavapipe.
    #[test]
    fn staged_projections_compile() {
        let cases = [
            (
                hrx_core::Target::hopper(),
                (1024, 1),
                QuantFormat::Q4_1,
                576,
            ),
            (
                hrx_core::Target::hopper(),
                (1024, 1),
                QuantFormat::Q8_0,
                320,
            ),
            (hrx_core::Target::hopper(), (512, 3), QuantFormat::F16, 40),
            (
                hrx_core::Target::lavapipe(),
                (256, 3),
                QuantFormat::Q4_1,
                32,
            ),
        ];
        for (target, (wg, heads), format, width) in cases {
            assert!(stages(format, (64, heads), width, wg), "{format:?} {width}");
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            let shape = AttentionShape {
                hd: 64,
                w: 4,
                wg,
                sg_min: target.subgroup_size_min as usize,
                sg_fixed: true,
                rotary: true,
                heads,
                project: Some(format),
                staged: Some(width),
                splits: 1,
                cache: F32,
                q: F32,
                out: F32,
            };
            compiler
                .built(&cached_attention(shape))
                .and_then(|m| {
                    m.compile_uncached(&hrx_loom::Specialization::new("cached_attention"))
                })
                .unwrap_or_else(|e| panic!("{shape:?}: {e}"));
        }
        // Too many words a work item, or more columns than work items.
        assert!(!stages(QuantFormat::Q4_1, (64, 1), 576, 256));
        assert!(!stages(QuantFormat::Q4_1, (64, 1), 300, 256));
        // A head that does not start on a block.
        assert!(!stages(QuantFormat::Q4_1, (16, 1), 64, 256));
    }
}

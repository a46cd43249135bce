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
//! attention's output projection and adds the residual (`projection`).
//!
//! Caches of f16 (`AttentionShape::cache`) are read as f16 and widened
//! to f32 as each key vector or value is loaded; everything after the
//! load is the f32 kernel's.
//!
//! An inactive row (slot or position out of range) runs no chunk and
//! writes zeros. The head size is a static extent of the generator (loops
//! of known length).

use super::projection::{Columns, Projection, project, stage_loads};
use crate::ops::QuantFormat;
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
    let projection_args = shape
        .project
        .map(|format| (format, Projection::declare(&mut k)));
    let [q, kc, vc, sequence, position] =
        ["q", "k_cache", "v_cache", "sequence", "position"].map(|x| k.arg_buffer(x, true));
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let projection =
        projection_args.map(|(format, args)| Projection::bind(&mut k, format, args, shape.splits));
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

    // This split's output columns, and the staged projection's loads,
    // issued first and used last.
    let columns = projection
        .as_ref()
        .map(|p| Columns::of_split(&mut k, p, part, splits));
    let staging = match (&projection, &columns, shape.staged) {
        (Some(p), Some(cols), Some(staged)) => Some(stage_loads(
            &mut k,
            (p, cols),
            (hd, hq),
            (staged, wg),
            (t, r, h0),
        )),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::projection::stages;
    use crate::ops::quant::spans::SPAN;

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

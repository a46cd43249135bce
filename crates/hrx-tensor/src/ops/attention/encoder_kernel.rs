//! The encoder attention kernel, built: a workgroup per block of queries
//! of one head of one sequence; each work item runs `per_item` queries
//! over `dh / split` of the head's values, `split` neighbouring lanes
//! sharing those queries.
//!
//! The workgroup walks the sequence's keys in blocks as long as its block
//! of queries: the work items copy the block's key rows, value rows and
//! key biases into workgroup memory, and after a barrier every work item
//! runs its queries over the block with an online softmax (running
//! maximum `m`, sum `l`, the output accumulated as four-wide vectors and
//! rescaled when the maximum moves, once per group of four keys scored
//! side by side). The keys and values are read from device memory once
//! per query block rather than once per query, and every read of
//! workgroup memory is the same address across the lanes that read it (a
//! broadcast) of four values, feeding four multiply-adds per query.
//!
//! **Split heads.** Reads of workgroup memory, not multiply-adds, bound
//! the kernel where a work item's queries are few. With `split` lanes to
//! a query each lane holds `dh / split` of the query's and the output's
//! values: its partial dot products are summed across the lanes by
//! subgroup shuffles, and every key and value quad it reads feeds
//! `per_item` queries at the cost of a `split`-th of the registers, so a
//! work item may take `split` times the queries in the same registers.
//!
//! Scores, probabilities and sums stay in f32 registers; only the output
//! is written, narrowed to f16 when it is f16.

use super::encoder::encoder_launch;
use hrx_loom::build::{Barrier, Body, Builder, Built, Extent, Index, Num, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, Scalar, ShuffleMode};

const F32: Scalar = Scalar::F32;

/// Keys scored together: their dot products are independent chains, and
/// the running maximum moves (and the output is rescaled) once per group.
const GROUP: usize = 4;

/// One build of the online-softmax kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OnlineShape {
    /// Values a head (a multiple of `4 * split`).
    pub dh: usize,
    /// Work items a workgroup (a multiple of `split`).
    pub wg: usize,
    /// Queries a work item (a multiple of `split`).
    pub per_item: usize,
    /// Neighbouring lanes sharing a work item's queries, each holding
    /// `dh / split` of their values: 1, 2 or 4.
    pub split: usize,
}

impl OnlineShape {
    /// Queries (and keys) a block: `wg / split * per_item`.
    pub fn block(&self) -> usize {
        self.wg / self.split * self.per_item
    }
}

/// The kernel of `shape`, reading `input` (f32 or f16) projections and
/// writing `out` elements.
pub(crate) fn encoder_attention(shape: OnlineShape, input: Scalar, out: Scalar) -> Built {
    let OnlineShape {
        dh,
        wg,
        per_item,
        split,
    } = shape;
    assert!(matches!(split, 1 | 2 | 4), "{split} lanes a query");
    assert!(dh > 0 && dh.is_multiple_of(4 * split), "head size {dh}");
    assert!(
        per_item > 0 && per_item.is_multiple_of(split),
        "{per_item} queries"
    );
    assert!(wg.is_multiple_of(split), "{wg} work items");
    let block = shape.block();
    assert!(block.is_multiple_of(GROUP), "blocks of {block}");
    // Rows of the block each work item copies, and the quads of a head
    // each lane holds.
    let copies = block / wg;
    let quads = dh / 4 / split;
    let lanes = wg / split;
    let (mut k, [seq, row, width, qa, la, qb, lb, qo, lo], scale, [qkv, bias, dst]) =
        encoder_launch("encoder_attention", wg);
    let zero = k.offset(0);
    let qkv_v = k.buffer_view(qkv, zero, [la.into()], input);
    // Four projection values at `p`, as f32.
    let load4 = |b: &mut Builder, p: Value<Index>| {
        let v = b.vector_load(qkv_v, &[p], 4);
        if input == F32 { v } else { b.extf(v, F32) }
    };
    let bias_v = k.buffer_view(bias, zero, [lb.into()], F32);
    let out_v = k.buffer_view(dst, zero, [lo.into()], out);
    // Workgroup memory: the block's key rows, value rows and key biases.
    let shared = |k: &mut Body, elems: usize| -> Value<View> {
        let bytes = k.offset(elems as u64 * 4);
        let buffer = k.alloca_workgroup(bytes, 16);
        k.buffer_view(buffer, zero, [Extent::from(elems)], F32)
    };
    let keys = shared(&mut k, block * dh);
    let values = shared(&mut k, block * dh);
    let biases = shared(&mut k, block);
    // Constants of the body (the launch region's are its own).
    let [c0, one, blockc, dhc, group, splitc, partc] =
        [0, 1, block, dh, GROUP, split, dh / split].map(|v| k.index(v as u64));
    let qblock = k.workgroup_id(Axis::X);
    let head = k.workgroup_id(Axis::Y);
    let sequence = k.workgroup_id(Axis::Z);
    let t = k.workitem_id(Axis::X);
    // Split, the `split` neighbouring lanes of a subgroup from a multiple
    // of `split` share the queries of one slot, lane `l % split` holding
    // values `part ..` of them (the subgroup's own lane numbers: the order
    // of invocation indices across lanes is the driver's). The op checks
    // that the largest subgroup divides the workgroup (so every subgroup
    // is whole) and that `split` is at most the smallest (subgroup sizes
    // being powers of two, it divides them all).
    let (slot_t, lane_t) = if split == 1 {
        (t, c0)
    } else {
        let lane = k.subgroup_lane_id();
        let size = k.subgroup_size();
        let sg = k.subgroup_id();
        let slots_per_sg = k.div(size, splitc);
        let within = k.div(lane, splitc);
        (k.madd(sg, slots_per_sg, within), k.rem(lane, splitc))
    };
    let part = k.mul(lane_t, partc);
    let first_row = k.mul(sequence, seq);
    let head_col = k.mul(head, dhc);
    let last = k.sub(seq, one);
    // Element offsets in `qkv` of a row's query, key and value of this head.
    let at = |b: &mut Builder, r: Value<Index>, part: usize| {
        let base = b.madd(r, row, qa);
        let part = b.index(part as u64);
        let part_off = b.mul(part, width);
        let col = b.add(part_off, head_col);
        b.add(base, col)
    };
    // This work item's queries: s, s + wg / split, ... of the block for
    // its slot s (t where unsplit). A query past the sequence reads the
    // sequence's last row and writes nothing: it still takes part in
    // every copy, shuffle and barrier.
    let first_query = k.madd(qblock, blockc, slot_t);
    let queries: Vec<Value<Index>> = (0..per_item)
        .map(|p| {
            let offset = k.index((p * lanes) as u64);
            k.add(first_query, offset)
        })
        .collect();
    let scales = k.splat(scale, 4);
    // This lane's values of each query, scaled, lane by lane.
    let q: Vec<Vec<Vec<Value<Num>>>> = queries
        .iter()
        .map(|&query| {
            let read = k.min(query, last);
            let qrow = k.add(first_row, read);
            let q_at = at(&mut k, qrow, 0);
            let q_at = k.add(q_at, part);
            (0..quads)
                .map(|c| {
                    let off = k.index(4 * c as u64);
                    let p = k.add(q_at, off);
                    let v = load4(&mut k, p);
                    let v = k.mulf(v, scales);
                    (0..4).map(|l| k.extract_lane(v, l)).collect()
                })
                .collect()
        })
        .collect();
    let lowest = k.float(f64::from(f32::MIN), F32);
    let zf = k.float(0.0, F32);
    let zv = k.splat(zf, 4);
    // Carried per query: the running maximum, the sum, the output quads.
    let carried = 2 + quads;
    let init: Vec<Value<Num>> = (0..per_item)
        .flat_map(|_| {
            [lowest, zf]
                .into_iter()
                .chain(std::iter::repeat_n(zv, quads))
        })
        .collect();
    let state = k.for_carry(c0, seq, blockc, &init, |b, kb, acc| {
        // Copy key rows kb + t, kb + t + wg, ... of the block. A row past
        // the sequence copies the last row with the lowest bias, so that
        // it weighs exactly 0 and the inner loop may run whole groups.
        b.barrier(Barrier::Workgroup);
        for p in 0..copies {
            let offset = b.index((p * wg) as u64);
            let local = b.add(t, offset);
            let j = b.add(kb, local);
            let present = b.cmp(IntPredicate::Ult, j, seq);
            let read = b.min(j, last);
            let krow = b.add(first_row, read);
            let k_at = at(b, krow, 1);
            let v_at = at(b, krow, 2);
            let slot = b.mul(local, dhc);
            for c in 0..dh / 4 {
                let off = b.index(4 * c as u64);
                let pk = b.add(k_at, off);
                let pv = b.add(v_at, off);
                let ps = b.add(slot, off);
                let kv = load4(b, pk);
                let vv = load4(b, pv);
                b.vector_store(kv, keys, &[ps]);
                b.vector_store(vv, values, &[ps]);
            }
            let pb = b.add(qb, krow);
            let bj = b.load(bias_v, &[pb]);
            let bj = b.select(present, bj, lowest);
            b.store(bj, biases, &[local]);
        }
        b.barrier(Barrier::Workgroup);
        let left = b.sub(seq, kb);
        let count = b.min(left, blockc);
        let groups = b.div_ceil(count, group);
        let keys_run = b.mul(groups, group);
        b.for_carry(c0, keys_run, group, acc, |b, j0, acc| {
            // Where this lane's values of keys j0 .. j0 + 3 start.
            let slots: Vec<Value<Index>> = (0..GROUP)
                .map(|i| {
                    let offset = b.index(i as u64);
                    let jj = b.add(j0, offset);
                    b.madd(jj, dhc, part)
                })
                .collect();
            let key_bias: Vec<Value<Num>> = (0..GROUP)
                .map(|i| {
                    let offset = b.index(i as u64);
                    let jj = b.add(j0, offset);
                    b.load(biases, &[jj])
                })
                .collect();
            // Every key quad read once, for every query of the work item;
            // each score a scalar chain of multiply-adds (four-lane
            // partial sums would take four times the registers).
            let mut dots = vec![vec![zf; GROUP]; per_item];
            for c in 0..quads {
                let off = b.index(4 * c as u64);
                for (i, slot) in slots.iter().enumerate() {
                    let p = b.add(*slot, off);
                    let kv = b.vector_load(keys, &[p], 4);
                    let kl: Vec<Value<Num>> = (0..4).map(|l| b.extract_lane(kv, l)).collect();
                    for (qp, dot) in q.iter().zip(dots.iter_mut()) {
                        for (&ql, &kl) in qp[c].iter().zip(&kl) {
                            dot[i] = b.fmaf(ql, kl, dot[i]);
                        }
                    }
                }
            }
            let mut next = Vec::with_capacity(acc.len());
            let mut spreads = Vec::with_capacity(per_item);
            for (p, dot) in dots.iter().enumerate() {
                let scores: Vec<Value<Num>> = dot
                    .iter()
                    .zip(&key_bias)
                    .map(|(&d, &bj)| {
                        let s = across_lanes(b, d, split);
                        b.addf(s, bj)
                    })
                    .collect();
                let (m, l) = (acc[p * carried], acc[p * carried + 1]);
                let top = scores[1..].iter().fold(scores[0], |x, &y| b.maxnumf(x, y));
                let m2 = b.maxnumf(m, top);
                let dm = b.subf(m, m2);
                let rescale = b.expf(dm);
                let weights: Vec<Value<Num>> = scores
                    .iter()
                    .map(|&s| {
                        let d = b.subf(s, m2);
                        b.expf(d)
                    })
                    .collect();
                let added = weights[1..].iter().fold(weights[0], |x, &y| b.addf(x, y));
                let l2 = b.fmaf(l, rescale, added);
                let rescales = b.splat(rescale, 4);
                let spread: Vec<Value<Num>> = weights.iter().map(|&w| b.splat(w, 4)).collect();
                let kept: Vec<Value<Num>> = (0..quads)
                    .map(|c| b.mulf(acc[p * carried + 2 + c], rescales))
                    .collect();
                next.push(m2);
                next.push(l2);
                next.extend(kept);
                spreads.push(spread);
            }
            // Every value quad read once, for every query of the work item.
            for c in 0..quads {
                let off = b.index(4 * c as u64);
                for (i, slot) in slots.iter().enumerate() {
                    let p_at = b.add(*slot, off);
                    let vv = b.vector_load(values, &[p_at], 4);
                    for (p, spread) in spreads.iter().enumerate() {
                        let o = &mut next[p * carried + 2 + c];
                        *o = b.fmaf(spread[i], vv, *o);
                    }
                }
            }
            next
        })
    });
    let output = OutputHead {
        first_row,
        width,
        offset: qo,
        column: head_col,
        view: out_v,
        dtype: out,
    };
    let onef = k.float(1.0, F32);
    for (p, &query) in queries.iter().enumerate() {
        let inv = k.divf(onef, state[p * carried + 1]);
        let inv = k.splat(inv, 4);
        let valid = k.cmp(IntPredicate::Ult, query, seq);
        k.if_(valid, |b| {
            for c in 0..quads {
                let off = b.index(4 * c as u64);
                let off = b.add(part, off);
                output.store(b, query, off, state[p * carried + 2 + c], inv);
            }
        });
    }
    Built::kernel(k.finish())
}

/// The sum of `x` over the `split` neighbouring lanes that share a query
/// (each holding a partial dot product), in every one of them.
fn across_lanes(b: &mut Builder, x: Value<Num>, split: usize) -> Value<Num> {
    let mut sum = x;
    let mut distance = 1;
    while distance < split {
        let lane = b.index(distance as u64);
        let other = b.subgroup_shuffle(ShuffleMode::Xor, sum, lane);
        sum = b.addf(sum, other);
        distance *= 2;
    }
    sum
}

/// Where a head's output rows go: row `first_row + query` of `width`
/// elements from element `offset`, the head's columns from `column`.
/// Both encoder attention kernels end by storing through it.
#[derive(Clone, Copy)]
pub(super) struct OutputHead {
    pub first_row: Value<Index>,
    pub width: Value<Index>,
    pub offset: Value<Index>,
    pub column: Value<Index>,
    pub view: Value<View>,
    /// The output's element type: f32, or f16 to narrow to.
    pub dtype: Scalar,
}

impl OutputHead {
    /// Stores the f32 quad `acc` times `inv` (a splat: one over the
    /// softmax sum) at the query's values `dim..dim + 4`.
    pub fn store(
        &self,
        b: &mut Builder,
        query: Value<Index>,
        dim: Value<Index>,
        acc: Value<Num>,
        inv: Value<Num>,
    ) {
        let row = b.add(self.first_row, query);
        let base = b.madd(row, self.width, self.offset);
        let col = b.add(base, self.column);
        let at = b.add(col, dim);
        let o = b.mulf(acc, inv);
        let o = if self.dtype == F32 {
            o
        } else {
            b.truncf(o, self.dtype)
        };
        b.vector_store(o, self.view, &[at]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every head size the op takes, both outputs and the workgroup sizes
    /// it picks build kernels the verifier and naga accept for the H200.
    #[test]
    fn every_variant_compiles() {
        let target = hrx_core::Target::hopper();
        let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
        for (dh, wg, per_item, split) in [
            (4, 128, 1, 1),
            (32, 64, 2, 1),
            (64, 32, 2, 1),
            (128, 32, 1, 1),
            (32, 16, 1, 1),
            (32, 128, 2, 2),
            (32, 64, 4, 2),
            (32, 128, 4, 4),
        ] {
            let shape = OnlineShape {
                dh,
                wg,
                per_item,
                split,
            };
            for (input, out) in [
                (Scalar::F32, Scalar::F32),
                (Scalar::F32, Scalar::F16),
                (Scalar::F16, Scalar::F16),
                (Scalar::F16, Scalar::F32),
            ] {
                compiler
                    .built(&encoder_attention(shape, input, out))
                    .and_then(|m| {
                        m.compile_uncached(&hrx_loom::Specialization::new("@encoder_attention"))
                    })
                    .unwrap_or_else(|e| panic!("{shape:?}, {input:?} -> {out:?}: {e}"));
            }
        }
    }
}

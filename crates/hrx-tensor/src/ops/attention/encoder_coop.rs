//! The encoder attention kernel on tensor cores, built: for f16 query-
//! key-value projections on devices with 16x16x16 f16 -> f32 cooperative
//! matrices and subgroups of 32, heads a multiple of 16 and sequences a
//! multiple of 16 whose keys and values fit workgroup memory
//! (`CoopAttention::for_input`).
//!
//! A workgroup takes one head of one sequence and `subgroups` blocks of
//! 16 queries, one block a subgroup (all of the sequence's queries where
//! they fit, so its keys and values are read once):
//!
//! 1. The sequence's keys and values of the head and the key biases are
//!    copied into workgroup memory (f16, four halves a load, every load
//!    of a work item issued before its first store).
//! 2. The softmax statistics: for each tile of 16 keys, the subgroup's
//!    `q k^T` tile on tensor cores (f32 accumulation), staged in
//!    workgroup memory, and each row's running maximum and sum of
//!    exponentials updated from it in f32 (two lanes a row, eight keys
//!    each, meeting by xor shuffles at the end).
//! 3. The products: for each tile of 16 keys, the `q k^T` tile again, its
//!    probabilities (`exp(scale * score + bias - max) / sum`) rounded to
//!    f16, and `p v` accumulated on tensor cores.
//! 4. The contexts are staged a head tile at a time (in the score tile)
//!    and written out four at a time.
//!
//! Scores live one 16 x 16 tile a subgroup at a time, so a workgroup's
//! memory is its keys and values and little else; the second `q k^T` is
//! cheaper than the memory all scores of a row block would take. After
//! the copies, a subgroup touches only its own tiles, so it orders them
//! with subgroup barriers and never waits for the others. The copies and
//! the loops over head tiles are unrolled (the shape is static); the key
//! tiles are a loop (see step 2).

use super::encoder::encoder_launch;
use crate::ops::matmul::coop::{coop_subgroup, fragment};
use crate::ops::operand::quad_aligned;
use hrx_core::Target;
use hrx_loom::build::{
    Barrier, Body, Builder, Built, CoopLayout as Major, Extent, Index, Num, Value, View,
};
use hrx_loom::ir::{Axis, CoopRole, Scalar, ShuffleMode};

const F32: Scalar = Scalar::F32;
const F16: Scalar = Scalar::F16;

/// The lanes of the subgroup the kernel is written for (two a row of 16).
pub(crate) const LANES: usize = 32;

/// Queries a subgroup takes, and keys a tile: one fragment's rows.
const ROWS: usize = 16;

/// The most subgroups a workgroup holds.
const MAX_SUBGROUPS: usize = 8;

/// Quads of keys and values each work item loads before storing any.
const UNROLL: usize = 8;

/// One instantiation: head size and sequence length (both multiples of
/// 16), and subgroups a workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CoopAttention {
    pub(crate) head: usize,
    pub(crate) seq: usize,
    pub(crate) subgroups: usize,
}

impl CoopAttention {
    /// The shape for heads of `head` over `seq` tokens in `limit` bytes
    /// of workgroup memory: as many subgroups as fit (a power of two
    /// dividing the sequence's blocks, at most [`MAX_SUBGROUPS`]), or
    /// `None` where none does.
    pub(crate) fn new(head: usize, seq: usize, limit: usize) -> Option<CoopAttention> {
        let valid = head > 0 && head.is_multiple_of(16) && seq > 0 && seq.is_multiple_of(ROWS);
        if !valid {
            return None;
        }
        (0..=MAX_SUBGROUPS.trailing_zeros())
            .rev()
            .map(|p| CoopAttention {
                head,
                seq,
                subgroups: 1 << p,
            })
            .find(|s| (seq / ROWS).is_multiple_of(s.subgroups) && s.workgroup_bytes() <= limit)
    }
    /// Row stride (halves) of the key and value tiles: 16 bytes of
    /// padding, so consecutive rows start in different banks.
    fn kv_stride(&self) -> usize {
        self.head + 8
    }
    /// Bytes of the keys' (or values') tile.
    fn kv_bytes(&self) -> usize {
        self.seq * self.kv_stride() * 2
    }
    /// Row stride (floats) of a subgroup's score tile.
    const SCORE_STRIDE: usize = ROWS + 4;
    /// Row stride (halves) of a subgroup's probability tile.
    const PROB_STRIDE: usize = ROWS + 8;
    /// Workgroup memory of the kernel.
    pub(crate) fn workgroup_bytes(&self) -> usize {
        let per_subgroup = ROWS * (Self::SCORE_STRIDE * 4 + Self::PROB_STRIDE * 2);
        2 * self.kv_bytes() + self.subgroups * per_subgroup + self.seq * 4
    }
    /// The shape for f16 `qkv` of `head`-value heads over `seq` tokens on
    /// `target`, or `None` where the kernel does not run: f32 inputs, no
    /// 16x16x16 f16 cooperative matrices with subgroups of [`LANES`], or a
    /// shape that does not fit.
    pub(crate) fn for_input(
        target: &Target,
        input: Scalar,
        head: usize,
        seq: usize,
    ) -> Option<CoopAttention> {
        if input != F16 || coop_subgroup(target) != Some(LANES) {
            return None;
        }
        CoopAttention::new(head, seq, target.workgroup_memory_bytes as usize)
    }
}

/// The tensor-core encoder attention's loom source for heads of `head`
/// over `seq` tokens on `target`, writing f16 (for offline compilation and
/// the driver's statistics); `None` where the kernel does not run there.
#[cfg(feature = "kernel-sources")]
pub fn encoder_attention_coop_source(target: &Target, head: usize, seq: usize) -> Option<String> {
    let shape = CoopAttention::for_input(target, F16, head, seq)?;
    Some(encoder_attention_coop(shape, F16).into_text())
}

/// A workgroup-memory allocation of `bytes`, seen through one view per
/// `(rows, cols, elem)`: tiles whose lives do not overlap share it.
fn tiles(k: &mut Body, bytes: usize, views: &[(usize, usize, Scalar)]) -> Vec<Value<View>> {
    let zero = k.offset(0);
    let size = k.offset(bytes as u64);
    let buffer = k.alloca_workgroup(size, 16);
    views
        .iter()
        .map(|&(rows, cols, elem)| {
            k.buffer_view(buffer, zero, [rows, cols].map(Extent::from), elem)
        })
        .collect()
}

/// The kernel (arguments as the f32 encoder attention's: `seq, row,
/// width, qa, la, qb, lb, qo, lo`, `scale`; buffers `qkv` (f16), `bias`,
/// `out`), writing `out` elements.
pub(crate) fn encoder_attention_coop(shape: CoopAttention, out: Scalar) -> Built {
    let CoopAttention {
        head: dh,
        seq,
        subgroups,
    } = shape;
    assert!(
        CoopAttention::new(dh, seq, usize::MAX).is_some() && (seq / ROWS).is_multiple_of(subgroups),
        "{shape:?}"
    );
    let lanes = subgroups * LANES;
    let quads = dh / 4;
    let (mut k, [seq_arg, row, width, qa, la, qb, lb, qo, lo], scale, [qkv, bias, dst]) =
        encoder_launch("encoder_attention_coop", lanes);
    let [row, width, qa, qo] = [row, width, qa, qo].map(|x| quad_aligned(&mut k, x));
    let zero = k.offset(0);
    // The projection as rows of `row` halves (queries are read from it as
    // fragments, keys and values four halves at a time).
    let rows = k.div(la, row);
    let qkv_v = k.buffer_view(qkv, zero, [rows.into(), row.into()], F16);
    let bias_v = k.buffer_view(bias, zero, [lb.into()], F32);
    let out_v = k.buffer_view(dst, zero, [lo.into()], out);
    // Keys, then values (rows `seq..2 seq`).
    let keys = tiles(
        &mut k,
        2 * shape.kv_bytes(),
        &[(2 * seq, shape.kv_stride(), F16)],
    )[0];
    let biases = tiles(&mut k, seq * 4, &[(1, seq, F32)])[0];
    let scores = tiles(
        &mut k,
        subgroups * ROWS * CoopAttention::SCORE_STRIDE * 4,
        &[(subgroups * ROWS, CoopAttention::SCORE_STRIDE, F32)],
    )[0];
    let probs = tiles(
        &mut k,
        subgroups * ROWS * CoopAttention::PROB_STRIDE * 2,
        &[(subgroups * ROWS, CoopAttention::PROB_STRIDE, F16)],
    )[0];
    let [c0, c4, c16, seqc, dhc, quadc, lanesc] =
        [0, 4, 16, seq, dh, quads, lanes].map(|v| k.index(v as u64));
    let block = k.workgroup_id(Axis::X);
    let head = k.workgroup_id(Axis::Y);
    let sequence = k.workgroup_id(Axis::Z);
    let t = k.workitem_id(Axis::X);
    let sg = k.subgroup_id();
    let lane = k.subgroup_lane_id();
    let first_row = k.mul(sequence, seqc);
    // This subgroup's rows in its tiles, and its queries in the sequence.
    let r0 = k.mul(sg, c16);
    let sgc = k.index(subgroups as u64);
    let first_block = k.mul(block, sgc);
    let query_block = k.add(first_block, sg);
    let first_query = k.mul(query_block, c16);
    let query_row = k.add(first_row, first_query);
    // Columns of this head's queries, keys and values in a row.
    let head_col = k.mul(head, dhc);
    let q_col = k.add(qa, head_col);
    let k_col = k.add(q_col, width);
    let v_col = k.add(k_col, width);
    // The values' rows follow the keys' in one tile.
    let values_at = k.index(seq as u64);

    // 1. Keys, values and their biases: `seq * dh / 4` quads, a whole
    // number a work item (the subgroups divide the blocks of 16, and the
    // head is a multiple of 16).
    let copies: Vec<(Value<Index>, Value<Index>)> = (0..seq * quads / lanes)
        .map(|i| {
            let step = k.index((i * lanes) as u64);
            let e = k.add(t, step);
            let key = k.div(e, quadc);
            let q = k.rem(e, quadc);
            (key, k.mul(q, c4))
        })
        .collect();
    for chunk in copies.chunks(UNROLL) {
        let loaded: Vec<_> = chunk
            .iter()
            .map(|&(key, c)| {
                let krow = k.add(first_row, key);
                let kc = k.add(k_col, c);
                let vc = k.add(v_col, c);
                let kv = k.vector_load(qkv_v, &[krow, kc], 4);
                let vv = k.vector_load(qkv_v, &[krow, vc], 4);
                (kv, vv)
            })
            .collect();
        for (&(key, c), &(kv, vv)) in chunk.iter().zip(&loaded) {
            let vrow = k.add(values_at, key);
            k.vector_store(kv, keys, &[key, c]);
            k.vector_store(vv, keys, &[vrow, c]);
        }
    }
    k.for_each(t, seqc, lanesc, |b, j| {
        let krow = b.add(first_row, j);
        let p = b.add(qb, krow);
        let bj = b.load(bias_v, &[p]);
        b.store(bj, biases, &[c0, j]);
    });
    let (fa, fb, fc) = (
        fragment(F16, CoopRole::A),
        fragment(F16, CoopRole::B),
        fragment(F32, CoopRole::C),
    );
    let head_tiles: Vec<Value<Index>> = (0..dh / 16).map(|i| k.index(16 * i as u64)).collect();
    let q_frags: Vec<_> = head_tiles
        .iter()
        .map(|&d| {
            let col = k.add(q_col, d);
            k.coop_load(Major::RowMajor, qkv_v, [query_row, col], fa)
        })
        .collect();
    k.barrier(Barrier::Workgroup);

    // Lanes 2i and 2i + 1 take row i of the subgroup's tiles, eight keys
    // of each tile apiece.
    let two = k.index(2);
    let in_row = k.div(lane, two);
    let side = k.rem(lane, two);
    let r = k.add(r0, in_row);
    let c8 = k.index(8);
    let j0 = k.mul(side, c8);
    let j1 = k.add(j0, c4);
    let scales = k.splat(scale, 4);
    // The subgroup's `q k^T` tile for keys `kt..kt + 16`, staged; then
    // (after the barrier) this lane's eight `scale * score + bias`.
    let scores_of = |k: &mut Builder, kt: Value<Index>| {
        let mut acc = k.coop_zero(fc);
        for (&d, &qf) in head_tiles.iter().zip(&q_frags) {
            let kf = k.coop_load(Major::ColMajor, keys, [kt, d], fb);
            acc = k.coop_mma(qf, kf, acc);
        }
        k.coop_store(Major::RowMajor, acc, scores, [r0, c0]);
        k.barrier(Barrier::Subgroup);
        [j0, j1].map(|j| {
            let s = k.vector_load(scores, &[r, j], 4);
            let key = k.add(kt, j);
            let bj = k.vector_load(biases, &[c0, key], 4);
            k.fmaf(s, scales, bj)
        })
    };
    // The four lanes of `v` folded pairwise by `op` (max or add).
    let fold4 = |k: &mut Builder,
                 v: Value<Num>,
                 op: fn(&mut Builder, Value<Num>, Value<Num>) -> Value<Num>| {
        let parts: Vec<_> = (0..4)
            .map(|i| {
                let at = k.index(i);
                k.extract(v, at)
            })
            .collect();
        let low = op(k, parts[0], parts[1]);
        let high = op(k, parts[2], parts[3]);
        op(k, low, high)
    };

    // 2. Each lane's running maximum and sum over its keys, then the
    // row's, with its partner lane's.
    let lowest = k.float(f64::from(f32::MIN), F32);
    let zf = k.float(0.0, F32);
    // The key tiles are a loop over the sequence length argument (the
    // same as `seq`), which the driver's compiler cannot unroll: unrolled,
    // it hoisted loads across tiles and a work item took 120 registers
    // on the H200 (two workgroups of 256 a multiprocessor).
    let stats = k.for_carry(c0, seq_arg, c16, &[lowest, zf], |k, kt, carried| {
        let (m, l) = (carried[0], carried[1]);
        let s = scores_of(k, kt);
        let top = k.maxnumf(s[0], s[1]);
        let tile_max = fold4(k, top, Builder::maxnumf);
        let m2 = k.maxnumf(m, tile_max);
        let ms = k.splat(m2, 4);
        let e: Vec<_> = s
            .iter()
            .map(|&x| {
                let d = k.subf(x, ms);
                k.expf(d)
            })
            .collect();
        let e = k.addf(e[0], e[1]);
        let added = fold4(k, e, Builder::addf);
        let dm = k.subf(m, m2);
        let rescale = k.expf(dm);
        let l2 = k.fmaf(l, rescale, added);
        // The next tile's scores go where these were read.
        k.barrier(Barrier::Subgroup);
        vec![m2, l2]
    });
    let (m, l) = (stats[0], stats[1]);
    let one_i = k.index(1);
    let m_other = k.subgroup_shuffle(ShuffleMode::Xor, m, one_i);
    let l_other = k.subgroup_shuffle(ShuffleMode::Xor, l, one_i);
    let row_max = k.maxnumf(m, m_other);
    let d_self = k.subf(m, row_max);
    let d_other = k.subf(m_other, row_max);
    let w_self = k.expf(d_self);
    let w_other = k.expf(d_other);
    let l_self = k.mulf(l, w_self);
    let sum = k.fmaf(l_other, w_other, l_self);
    let onef = k.float(1.0, F32);
    let inv = k.divf(onef, sum);
    let (maxes, invs) = (k.splat(row_max, 4), k.splat(inv, 4));

    // 3. The probabilities of each key tile, times its values.
    let zeros: Vec<_> = head_tiles.iter().map(|_| k.coop_zero(fc)).collect();
    let accs = k.for_carry(c0, seq_arg, c16, &zeros, |k, kt, accs| {
        let s = scores_of(k, kt);
        for (&x, j) in s.iter().zip([j0, j1]) {
            let d = k.subf(x, maxes);
            let e = k.expf(d);
            let p = k.mulf(e, invs);
            let ph = k.truncf(p, F16);
            k.vector_store(ph, probs, &[r, j]);
        }
        k.barrier(Barrier::Subgroup);
        let pf = k.coop_load(Major::RowMajor, probs, [r0, c0], fa);
        let vrow = k.add(values_at, kt);
        head_tiles
            .iter()
            .zip(accs)
            .map(|(&d, &acc)| {
                let vf = k.coop_load(Major::RowMajor, keys, [vrow, d], fb);
                k.coop_mma(pf, vf, acc)
            })
            .collect()
    });
    // 4. The contexts, a head tile at a time through the subgroup's
    // score tile (last read before the barrier above), four values a lane
    // and store.
    let per_row = k.index(4);
    for (&d, &acc) in head_tiles.iter().zip(&accs) {
        k.coop_store(Major::RowMajor, acc, scores, [r0, c0]);
        k.barrier(Barrier::Subgroup);
        for i in 0..ROWS * 4 / LANES {
            let step = k.index((i * LANES) as u64);
            let e = k.add(lane, step);
            let rr = k.div(e, per_row);
            let q = k.rem(e, per_row);
            let c = k.mul(q, c4);
            let tr = k.add(r0, rr);
            let o = k.vector_load(scores, &[tr, c], 4);
            let o = if out == F32 { o } else { k.truncf(o, out) };
            let orow = k.add(query_row, rr);
            let base = k.madd(orow, width, qo);
            let col = k.add(base, head_col);
            let col = k.add(col, d);
            let at = k.add(col, c);
            k.vector_store(o, out_v, &[at]);
        }
        k.barrier(Barrier::Subgroup);
    }
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MiniLM's heads over every bucket, and heads of 16 and 64, compile
    /// for the H200 (naga validates the module, spirv-val the SPIR-V);
    /// the shapes that do not fit 48 KiB are refused.
    #[test]
    fn every_fitting_shape_compiles_for_hopper() {
        let target = hrx_core::Target::hopper();
        let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
        let limit = target.workgroup_memory_bytes as usize;
        for (head, seq) in [
            (32, 16),
            (32, 32),
            (32, 64),
            (32, 128),
            (32, 256),
            (16, 128),
            (64, 64),
        ] {
            let shape = CoopAttention::new(head, seq, limit)
                .unwrap_or_else(|| panic!("heads of {head} over {seq} do not fit"));
            for out in [Scalar::F16, Scalar::F32] {
                let artifact = compiler
                    .built(&encoder_attention_coop(shape, out))
                    .and_then(|m| {
                        m.compile_uncached(&hrx_loom::Specialization::new(
                            "@encoder_attention_coop",
                        ))
                    })
                    .unwrap_or_else(|e| panic!("{shape:?} {out:?}: {e}"));
                hrx_test_support::spirv_val::validate_modern(
                    &format!("attention-coop-{head}-{seq}-{out:?}"),
                    artifact.spirv(),
                );
            }
        }
        let subgroups = |head, seq| CoopAttention::new(head, seq, limit).map(|s| s.subgroups);
        assert_eq!(subgroups(32, 16), Some(1));
        assert_eq!(subgroups(32, 48), Some(1));
        assert_eq!(subgroups(32, 64), Some(4));
        assert_eq!(subgroups(32, 128), Some(8));
        assert_eq!(subgroups(32, 256), Some(2));
        assert_eq!(subgroups(32, 512), None);
        assert_eq!(subgroups(24, 64), None);
        assert_eq!(subgroups(32, 40), None);
        // Chosen for f16 inputs on tensor cores only.
        let minilm = CoopAttention {
            head: 32,
            seq: 128,
            subgroups: 8,
        };
        assert_eq!(
            CoopAttention::for_input(&target, F16, 32, 128),
            Some(minilm)
        );
        assert_eq!(CoopAttention::for_input(&target, F32, 32, 128), None);
        assert_eq!(CoopAttention::for_input(&target, F16, 32, 512), None);
        let lavapipe = hrx_core::Target::lavapipe();
        assert_eq!(CoopAttention::for_input(&lavapipe, F16, 32, 128), None);
    }
}

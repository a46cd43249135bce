//! The encoder attention kernel on tensor cores, built: for an f16
//! output on devices with 16x16x16 f16 -> f32 cooperative matrices and
//! subgroups of 32, heads a multiple of 16 and sequences a multiple of 16
//! that fit workgroup memory whole (`CoopAttention::fits`).
//!
//! A workgroup takes one head of one sequence, two subgroups of 16 query
//! rows each:
//!
//! 1. The sequence's keys and values of the head and the key biases are
//!    copied into workgroup memory once, rounded to f16 (read as f32,
//!    four at a time, [`UNROLL`] loads in flight per work item); then
//!    for each block of [`QUERIES`] queries, the block's queries (times
//!    `scale`), rounded to f16, and steps 2 to 5:
//! 2. Each subgroup multiplies its 16 queries by every key on tensor
//!    cores (`q k^T`, 16 x 16 fragments, f32 accumulation) and stages the
//!    f32 scores in workgroup memory.
//! 3. Softmax by row, in f32: two lanes a row, each over half of the keys
//!    (the key bias added), meeting by one xor shuffle for the maximum and
//!    one for the sum; the probabilities are stored in f16, normalised.
//! 4. Each subgroup multiplies its probabilities by the values (`p v`,
//!    tensor cores again) and stages the f32 contexts, which step 5 writes
//!    out in f16, four at a time.
//!
//! The scores never leave workgroup memory. Queries past the sequence
//! (a block of 32 over a sequence of 16) read the last query and write
//! nothing. The sequence length and head size are static, so every loop
//! over query blocks and key and head tiles has a fixed count.

use super::matmul_coop::{coop_subgroup, fragment};
use hrx_core::Target;
use hrx_loom::build::{
    Barrier, Body, Builder, Built, CoopLayout as Major, Extent, Index, KernelBuilder, Value, View,
};
use hrx_loom::ir::{Axis, CoopRole, IntPredicate, Scalar, ShuffleMode};

const F32: Scalar = Scalar::F32;
const F16: Scalar = Scalar::F16;

/// Queries a workgroup takes: two subgroups of 16 rows.
pub(crate) const QUERIES: usize = 32;

/// The lanes of the subgroup the kernel is written for (two a row of 16).
pub(crate) const LANES: usize = 32;

/// Quads of keys and values each work item loads before storing any.
const UNROLL: usize = 8;

/// One instantiation: head size and sequence length (both multiples of
/// 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CoopAttention {
    pub(crate) head: usize,
    pub(crate) seq: usize,
}

impl CoopAttention {
    /// Row stride (halves) of the f16 key, value and query tiles: 16
    /// bytes of padding so consecutive rows start in different banks.
    fn kv_stride(&self) -> usize {
        self.head + 8
    }
    /// Row stride (floats) of the f32 scores.
    fn score_stride(&self) -> usize {
        self.seq + 4
    }
    /// Row stride (halves) of the f16 probabilities.
    fn prob_stride(&self) -> usize {
        self.seq + 8
    }
    /// Row stride (floats) of the f32 contexts.
    fn context_stride(&self) -> usize {
        self.head + 4
    }
    /// Bytes of the keys' (or values') tile.
    fn kv_bytes(&self) -> usize {
        self.seq * self.kv_stride() * 2
    }
    /// Bytes shared by the scores and, after them, the contexts.
    fn score_bytes(&self) -> usize {
        (QUERIES * self.score_stride() * 4).max(QUERIES * self.context_stride() * 4)
    }
    /// Bytes shared by the queries and, after them, the probabilities.
    fn prob_bytes(&self) -> usize {
        (QUERIES * self.prob_stride() * 2).max(QUERIES * self.kv_stride() * 2)
    }
    /// Workgroup memory of the kernel.
    pub(crate) fn workgroup_bytes(&self) -> usize {
        2 * self.kv_bytes() + self.seq * 4 + self.score_bytes() + self.prob_bytes()
    }
    /// The shape for an `out` of `head`-value heads over `seq` tokens on
    /// `target`, or `None` where the kernel does not run: an f32 output
    /// (the f32 kernel keeps q, k and v in f32), no 16x16x16 f16
    /// cooperative matrices with subgroups of [`LANES`], or a shape that
    /// does not fit.
    pub(crate) fn for_output(
        target: &Target,
        out: Scalar,
        head: usize,
        seq: usize,
    ) -> Option<CoopAttention> {
        let shape = CoopAttention { head, seq };
        (out == F16
            && coop_subgroup(target) == Some(LANES)
            && shape.fits(target.workgroup_memory_bytes as usize))
        .then_some(shape)
    }

    /// Whether the shape is one this kernel takes, in `limit` bytes of
    /// workgroup memory.
    pub(crate) fn fits(&self, limit: usize) -> bool {
        self.head > 0
            && self.head.is_multiple_of(16)
            && self.seq > 0
            && self.seq.is_multiple_of(16)
            && self.workgroup_bytes() <= limit
    }
}

/// A workgroup-memory tile of `rows x cols` `elem`s.
fn tile(k: &mut Body, bytes: usize, rows: usize, cols: usize, elem: Scalar) -> Value<View> {
    tiles(k, bytes, &[(rows, cols, elem)])[0]
}

/// Views of one `bytes` of workgroup memory, one per `(rows, cols, elem)`:
/// tiles whose lives do not overlap share it.
fn tiles(k: &mut Body, bytes: usize, views: &[(usize, usize, Scalar)]) -> Vec<Value<View>> {
    let zero = k.offset(0);
    let size = k.offset(bytes as u64);
    let buffer = k.alloca_workgroup(size, 16);
    views
        .iter()
        .map(|&(rows, cols, elem)| {
            k.buffer_view(buffer, zero, [Extent::from(rows), Extent::from(cols)], elem)
        })
        .collect()
}

/// The kernel (arguments as the f32 encoder attention's: `seq, row,
/// width, qa, la, qb, lb, qo, lo`, `scale`; buffers `qkv`, `bias`,
/// `out`), writing `out` elements.
pub(crate) fn encoder_attention_coop(shape: CoopAttention, out: Scalar) -> Built {
    let CoopAttention { head: dh, seq } = shape;
    assert!(shape.fits(usize::MAX), "head {dh}, sequence {seq}");
    let quads = dh / 4;
    let mut k = KernelBuilder::new("encoder_attention_coop");
    let [blocks, heads, batch] = ["blocks", "heads", "batch"].map(|n| k.workload(n));
    let (one, size) = (k.index(1), k.index((2 * LANES) as u64));
    let mut k = k.launch_config([blocks, heads, batch], [size, one, one]);
    let [_seq, row, width, qa, la, qb, lb, qo, lo] =
        ["seq", "row", "width", "qa", "la", "qb", "lb", "qo", "lo"].map(|n| k.arg_index(n));
    let scale = k.arg_scalar("scale", F32);
    let qkv = k.arg_buffer("qkv", false);
    let bias = k.arg_buffer("bias", false);
    let dst = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let qkv_v = k.buffer_view(qkv, zero, [la.into()], F32);
    let bias_v = k.buffer_view(bias, zero, [lb.into()], F32);
    let out_v = k.buffer_view(dst, zero, [lo.into()], out);
    let keys = tile(&mut k, shape.kv_bytes(), seq, shape.kv_stride(), F16);
    let values = tile(&mut k, shape.kv_bytes(), seq, shape.kv_stride(), F16);
    let biases = tile(&mut k, seq * 4, 1, seq, F32);
    // The scores, then (same memory) the contexts; the queries, then the
    // probabilities.
    let (scores, contexts) = {
        let views = [
            (QUERIES, shape.score_stride(), F32),
            (QUERIES, shape.context_stride(), F32),
        ];
        let v = tiles(&mut k, shape.score_bytes(), &views);
        (v[0], v[1])
    };
    let (queries, probs) = {
        let views = [
            (QUERIES, shape.kv_stride(), F16),
            (QUERIES, shape.prob_stride(), F16),
        ];
        let v = tiles(&mut k, shape.prob_bytes(), &views);
        (v[0], v[1])
    };
    let [c0, c4, c16, quadc, seqc, dhc, wgc] =
        [0, 4, 16, quads, seq, dh, 2 * LANES].map(|v| k.index(v as u64));
    let head = k.workgroup_id(Axis::Y);
    let sequence = k.workgroup_id(Axis::Z);
    let t = k.workitem_id(Axis::X);
    let sg = k.subgroup_id();
    let lane = k.subgroup_lane_id();
    let first_row = k.mul(sequence, seqc);
    let head_col = k.mul(head, dhc);
    let last = k.index((seq - 1) as u64);
    // Element offset in `qkv` of a row's part (0 q, 1 k, 2 v), column c.
    let at = |b: &mut Builder, r: Value<Index>, part: usize, c: Value<Index>| {
        let base = b.madd(r, row, qa);
        let part = b.index(part as u64);
        let col = b.madd(part, width, head_col);
        let at = b.add(base, col);
        b.add(at, c)
    };
    // Work item t's `n` quads of a `[rows, quads]` copy: (row, column) of
    // quad `t + i * wg`, static in number so every load is issued before
    // the first store.
    let spread = |b: &mut Builder, n: usize| -> Vec<(Value<Index>, Value<Index>)> {
        (0..n)
            .map(|i| {
                let step = b.index((i * 2 * LANES) as u64);
                let e = b.add(t, step);
                let r = b.div(e, quadc);
                let q = b.rem(e, quadc);
                (r, b.mul(q, c4))
            })
            .collect()
    };

    // 1. Keys, values and their biases, once for every query block.
    let kv_each = seq * quads / (2 * LANES);
    for chunk in spread(&mut k, kv_each).chunks(UNROLL) {
        let loaded: Vec<_> = chunk
            .iter()
            .map(|&(key, c)| {
                let krow = k.add(first_row, key);
                let k_at = at(&mut k, krow, 1, c);
                let v_at = at(&mut k, krow, 2, c);
                let kv = k.vector_load(qkv_v, &[k_at], 4);
                let vv = k.vector_load(qkv_v, &[v_at], 4);
                (kv, vv)
            })
            .collect();
        for (&(key, c), &(kv, vv)) in chunk.iter().zip(&loaded) {
            let kh = k.truncf(kv, F16);
            let vh = k.truncf(vv, F16);
            k.vector_store(kh, keys, &[key, c]);
            k.vector_store(vh, values, &[key, c]);
        }
    }
    k.for_each(t, seqc, wgc, |b, j| {
        let krow = b.add(first_row, j);
        let p = b.add(qb, krow);
        let bj = b.load(bias_v, &[p]);
        b.store(bj, biases, &[c0, j]);
    });
    let scales = k.splat(scale, 4);
    let r0 = k.mul(sg, c16);
    let (fa, fb, fc) = (
        fragment(F16, CoopRole::A),
        fragment(F16, CoopRole::B),
        fragment(F32, CoopRole::C),
    );
    let head_tiles: Vec<Value<Index>> = (0..dh / 16).map(|i| k.index(16 * i as u64)).collect();
    let key_tiles: Vec<Value<Index>> = (0..seq / 16).map(|i| k.index(16 * i as u64)).collect();
    // Softmax lanes: l and l + 16 share row l % 16, each over half of the
    // keys.
    let half = seq / 2;
    let halfc = k.index(half as u64);
    let lanes16 = k.index(16);
    let in_row = k.rem(lane, lanes16);
    let side = k.div(lane, lanes16);
    let r = k.add(r0, in_row);
    let j0 = k.mul(side, halfc);
    let j1 = k.add(j0, halfc);
    let one_i = k.index(1);
    let lowest = k.float(f64::from(f32::MIN), F32);
    let zf = k.float(0.0, F32);
    let onef = k.float(1.0, F32);
    let score = |b: &mut Builder, j: Value<Index>| {
        let s = b.load(scores, &[r, j]);
        let bj = b.load(biases, &[c0, j]);
        b.addf(s, bj)
    };
    let q_each = QUERIES * quads / (2 * LANES);
    let q_spread = spread(&mut k, q_each);
    for block in 0..seq.div_ceil(QUERIES) {
        let first_query = k.index((block * QUERIES) as u64);
        // The block's queries, scaled (their memory is the previous
        // block's probabilities, read before the last barrier).
        let loaded: Vec<_> = q_spread
            .iter()
            .map(|&(r, c)| {
                let query = k.add(first_query, r);
                let read = k.min(query, last);
                let qrow = k.add(first_row, read);
                let q_at = at(&mut k, qrow, 0, c);
                k.vector_load(qkv_v, &[q_at], 4)
            })
            .collect();
        for (&(r, c), &qv) in q_spread.iter().zip(&loaded) {
            let qv = k.mulf(qv, scales);
            let qh = k.truncf(qv, F16);
            k.vector_store(qh, queries, &[r, c]);
        }
        k.barrier(Barrier::Workgroup);

        // 2. Scores of this subgroup's 16 rows against every key.
        let q_frags: Vec<_> = head_tiles
            .iter()
            .map(|&d| k.coop_load(Major::RowMajor, queries, [r0, d], fa))
            .collect();
        for &kt in &key_tiles {
            let mut acc = k.coop_zero(fc);
            for (&d, &qf) in head_tiles.iter().zip(&q_frags) {
                let kf = k.coop_load(Major::ColMajor, keys, [kt, d], fb);
                acc = k.coop_mma(qf, kf, acc);
            }
            k.coop_store(Major::RowMajor, acc, scores, [r0, kt]);
        }
        k.barrier(Barrier::Workgroup);

        // 3. Softmax of each row, in f32.
        let m = k.for_carry(j0, j1, one_i, &[lowest], |b, j, acc| {
            let s = score(b, j);
            vec![b.maxnumf(acc[0], s)]
        })[0];
        let other = k.subgroup_shuffle(ShuffleMode::Xor, m, lanes16);
        let m = k.maxnumf(m, other);
        let l = k.for_carry(j0, j1, one_i, &[zf], |b, j, acc| {
            let s = score(b, j);
            let d = b.subf(s, m);
            let e = b.expf(d);
            vec![b.addf(acc[0], e)]
        })[0];
        let other = k.subgroup_shuffle(ShuffleMode::Xor, l, lanes16);
        let l = k.addf(l, other);
        let inv = k.divf(onef, l);
        // The queries' memory becomes the probabilities': every subgroup
        // has read its query fragments before the barrier above.
        k.for_each(j0, j1, one_i, |b, j| {
            let s = score(b, j);
            let d = b.subf(s, m);
            let e = b.expf(d);
            let p = b.mulf(e, inv);
            let ph = b.truncf(p, F16);
            b.store(ph, probs, &[r, j]);
        });
        k.barrier(Barrier::Workgroup);

        // 4. Contexts of this subgroup's rows, into the scores' memory
        // (read before the barrier above).
        for &d in &head_tiles {
            let mut acc = k.coop_zero(fc);
            for &kt in &key_tiles {
                let pf = k.coop_load(Major::RowMajor, probs, [r0, kt], fa);
                let vf = k.coop_load(Major::RowMajor, values, [kt, d], fb);
                acc = k.coop_mma(pf, vf, acc);
            }
            k.coop_store(Major::RowMajor, acc, contexts, [r0, d]);
        }
        k.barrier(Barrier::Workgroup);

        // 5. The block's rows inside the sequence, written out.
        for &(r, c) in &q_spread {
            let query = k.add(first_query, r);
            let inside = k.cmp(IntPredicate::Ult, query, seqc);
            k.if_(inside, |b| {
                let o = b.vector_load(contexts, &[r, c], 4);
                let o = if out == F32 { o } else { b.truncf(o, out) };
                let orow = b.add(first_row, query);
                let base = b.madd(orow, width, qo);
                let col = b.add(base, head_col);
                let at_o = b.add(col, c);
                b.vector_store(o, out_v, &[at_o]);
            });
        }
    }
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MiniLM's heads over every bucket that fits, and heads of 16 and
    /// 64, compile for the H200 (naga validates the module, spirv-val the
    /// SPIR-V); the shapes that do not fit 48 KiB are refused.
    #[test]
    fn every_fitting_shape_compiles_for_hopper() {
        let target = hrx_core::Target::hopper();
        let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
        let limit = target.workgroup_memory_bytes as usize;
        for (head, seq) in [(32, 16), (32, 32), (32, 64), (32, 128), (16, 128), (64, 64)] {
            let shape = CoopAttention { head, seq };
            assert!(
                shape.fits(limit),
                "{shape:?}: {} bytes",
                shape.workgroup_bytes()
            );
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
        assert!(!CoopAttention { head: 32, seq: 256 }.fits(limit));
        // Chosen for f16 outputs on tensor cores only.
        let minilm = CoopAttention { head: 32, seq: 128 };
        assert_eq!(
            CoopAttention::for_output(&target, F16, 32, 128),
            Some(minilm)
        );
        assert_eq!(CoopAttention::for_output(&target, F32, 32, 128), None);
        assert_eq!(CoopAttention::for_output(&target, F16, 32, 256), None);
        let lavapipe = hrx_core::Target::lavapipe();
        assert_eq!(CoopAttention::for_output(&lavapipe, F16, 32, 128), None);
        assert!(!CoopAttention { head: 24, seq: 64 }.fits(limit));
        assert!(!CoopAttention { head: 32, seq: 40 }.fits(limit));
    }
}

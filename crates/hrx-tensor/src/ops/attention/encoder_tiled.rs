//! The encoder attention as two register-tiled products, built: a
//! workgroup of [`THREADS`] work items takes [`QUERIES`] queries of one
//! head of one sequence and all of the sequence's keys (up to
//! [`MAX_KEYS`]), and keeps every score of its block in workgroup memory.
//!
//! Stages, separated by workgroup barriers:
//! 1. **Stage**: the block's queries (pre-scaled) and the keys are copied
//!    transposed, dimension-major (`qt[d][q]`, `kt[d][j]`: consecutive
//!    work items take consecutive rows, so the transposing stores fall in
//!    consecutive banks), the values as rows (`v[j][d]`, consecutive work
//!    items reading consecutive quads of a row), and each key's bias (the
//!    lowest float for the padding past the sequence, whose rows repeat
//!    the last key's, so they weigh exactly 0).
//! 2. **Scores**: work item `t` computes a tile of 4 queries by 8 keys,
//!    `s = q . k + bias`, as eight four-key accumulators: per dimension one
//!    4-wide read of the queries and two of the keys feed 32 multiply-adds.
//!    The keys of a tile are two quads half the keys apart, so that the
//!    lanes of a subgroup read consecutive quads.
//! 3. **Softmax**: after a barrier (the scores overwrite the staged queries
//!    and keys) each query's row is split among [`PARTS`] work items: the
//!    row maximum, then `exp(s - max)` written back and its sum. The
//!    division by the sum waits until the output.
//! 4. **Values**: work item `t` computes a tile of 2 queries by 4 output
//!    values, four keys a step: two 4-wide reads of the probabilities and
//!    four of the values feed 32 multiply-adds.
//!
//! Against the online-softmax kernel (`encoder_kernel.rs`) no score is
//! rescaled, summed across lanes or recomputed, and every read of
//! workgroup memory feeds several multiply-adds; the price is the scores'
//! workgroup memory, which bounds the sequence. Rows of the score and
//! value tiles are padded by a quad so that the subgroups' reads of
//! different rows fall in different banks.

use super::encoder::encoder_launch;
use super::encoder_kernel::OutputHead;
use hrx_loom::build::{Barrier, Body, Buffer, Builder, Built, Extent, Index, Num, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, Scalar};

const F32: Scalar = Scalar::F32;

/// Queries a workgroup takes.
pub(crate) const QUERIES: usize = 32;
/// Work items a workgroup.
pub(crate) const THREADS: usize = 128;
/// Work items sharing a query's row in the softmax.
const PARTS: usize = THREADS / QUERIES;
/// The most keys: one 4 x 8 score tile a work item.
pub(crate) const MAX_KEYS: usize = THREADS * 32 / QUERIES;
/// Keys are padded to a multiple of this (two quads a score tile, and
/// [`PARTS`] whole quads a softmax row).
const KEY_STEP: usize = 16;

/// One instantiation: heads of `head` values (a multiple of 4) over
/// `keys` padded keys, reading `input` projections, writing `out`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TiledAttention {
    pub(crate) head: usize,
    pub(crate) keys: usize,
    pub(crate) input: Scalar,
    pub(crate) out: Scalar,
}

impl TiledAttention {
    /// The shape for sequences of `seq` tokens, or `None` where the kernel
    /// does not run: more than [`MAX_KEYS`] tokens, a head that is not a
    /// multiple of 4, or workgroup memory over `memory_bytes`.
    pub(crate) fn new(
        head: usize,
        seq: usize,
        input: Scalar,
        out: Scalar,
        memory_bytes: usize,
    ) -> Option<TiledAttention> {
        let keys = seq.next_multiple_of(KEY_STEP);
        let shape = TiledAttention {
            head,
            keys,
            input,
            out,
        };
        (seq > 0 && keys <= MAX_KEYS && head.is_multiple_of(4) && head > 0)
            .then_some(shape)
            .filter(|s| s.layout().bytes() <= memory_bytes)
    }

    /// Workgroup memory the kernel takes.
    pub(crate) fn workgroup_bytes(&self) -> usize {
        self.layout().bytes()
    }

    /// Where each tile lies in workgroup memory, in f32 words.
    fn layout(&self) -> Layout {
        let (dh, keys) = (self.head, self.keys);
        let score_stride = keys + 4;
        let value_stride = dh + 4;
        // The scores overwrite the staged queries and keys.
        let staged = dh * (QUERIES + keys);
        let first = staged.max(QUERIES * score_stride);
        let values = first;
        let biases = values + keys * value_stride;
        let stats = biases + keys;
        Layout {
            score_stride,
            value_stride,
            values,
            biases,
            stats,
            words: stats + 2 * PARTS * QUERIES,
        }
    }
}

/// Word offsets and strides of the workgroup memory (the queries at 0,
/// the keys after them, the scores at 0).
struct Layout {
    score_stride: usize,
    value_stride: usize,
    values: usize,
    biases: usize,
    stats: usize,
    words: usize,
}

impl Layout {
    fn bytes(&self) -> usize {
        4 * self.words
    }
}

/// A `[rows, cols]` f32 view `at` words into `buffer`.
fn tile(k: &mut Body, buffer: Value<Buffer>, at: usize, rows: usize, cols: usize) -> Value<View> {
    let offset = k.offset(4 * at as u64);
    k.buffer_view(buffer, offset, [rows, cols].map(Extent::from), F32)
}

/// The sum (or maximum) of a quad's four lanes.
fn across(b: &mut Builder, v: Value<Num>, max: bool) -> Value<Num> {
    let lanes: Vec<_> = (0..4)
        .map(|i| {
            let lane = b.index(i);
            b.extract(v, lane)
        })
        .collect();
    let pair = |b: &mut Builder, x, y| if max { b.maxnumf(x, y) } else { b.addf(x, y) };
    let low = pair(b, lanes[0], lanes[1]);
    let high = pair(b, lanes[2], lanes[3]);
    pair(b, low, high)
}

/// The kernel; arguments as the online-softmax kernel's (`seq, row, width,
/// qa, la, qb, lb, qo, lo`, `scale`; buffers `qkv`, `bias`, `out`), the
/// grid `[ceil(seq / QUERIES), heads, batch]`.
pub(crate) fn encoder_attention_tiled(shape: TiledAttention) -> Built {
    let TiledAttention {
        head: dh,
        keys,
        input,
        out,
    } = shape;
    assert!(
        TiledAttention::new(dh, keys, input, out, usize::MAX) == Some(shape),
        "{shape:?}"
    );
    let layout = shape.layout();
    let (quads, key_groups, half) = (dh / 4, keys / 8, keys / 2);
    let (mut k, [seq, row, width, qa, la, qb, lb, qo, lo], scale, [qkv, bias, dst]) =
        encoder_launch("encoder_attention_tiled", THREADS);
    let zero = k.offset(0);
    let qkv_v = k.buffer_view(qkv, zero, [la.into()], input);
    let bias_v = k.buffer_view(bias, zero, [lb.into()], F32);
    let out_v = k.buffer_view(dst, zero, [lo.into()], out);
    let bytes = k.offset(layout.bytes() as u64);
    let memory = k.alloca_workgroup(bytes, 16);
    let qt = tile(&mut k, memory, 0, dh, QUERIES);
    let kt = tile(&mut k, memory, dh * QUERIES, dh, keys);
    let scores = tile(&mut k, memory, 0, QUERIES, layout.score_stride);
    let values = tile(&mut k, memory, layout.values, keys, layout.value_stride);
    let biases = tile(&mut k, memory, layout.biases, 1, keys);
    let maxima = tile(&mut k, memory, layout.stats, PARTS, QUERIES);
    let sums = tile(
        &mut k,
        memory,
        layout.stats + PARTS * QUERIES,
        PARTS,
        QUERIES,
    );

    let c = |k: &mut Body, v: usize| k.index(v as u64);
    let [c0, c4, threads, queries_c, keys_c, dhc] =
        [0, 4, THREADS, QUERIES, keys, dh].map(|v| c(&mut k, v));
    let block = k.workgroup_id(Axis::X);
    let head = k.workgroup_id(Axis::Y);
    let sequence = k.workgroup_id(Axis::Z);
    let t = k.workitem_id(Axis::X);
    let first_row = k.mul(sequence, seq);
    let first_query = k.mul(block, queries_c);
    let head_col = k.mul(head, dhc);
    let one_i = k.index(1);
    let last = k.sub(seq, one_i);
    let lowest = k.float(f64::from(f32::MIN), F32);
    let zf = k.float(0.0, F32);
    let zv = k.splat(zf, 4);
    // Four projection values of row `r` (clamped into the sequence), part
    // `part` (0 queries, 1 keys, 2 values), quad `quad`, as f32.
    let load = |b: &mut Builder, r: Value<Index>, part: usize, quad: Value<Index>| {
        let clamped = b.min(r, last);
        let r = b.add(first_row, clamped);
        let base = b.madd(r, row, qa);
        let part = b.index(part as u64);
        let col = b.madd(part, width, head_col);
        let at = b.add(base, col);
        let four = b.index(4);
        let at = b.madd(quad, four, at);
        let v = b.vector_load(qkv_v, &[at], 4);
        if input == F32 { v } else { b.extf(v, F32) }
    };

    // 1. Stage: queries and keys transposed, values as rows, biases.
    let scales = k.splat(scale, 4);
    let query_items = c(&mut k, QUERIES * quads);
    k.for_each(t, query_items, threads, |b, item| {
        let (quad, q) = (b.div(item, queries_c), b.rem(item, queries_c));
        let r = b.add(first_query, q);
        let v = load(b, r, 0, quad);
        let v = b.mulf(v, scales);
        let d0 = b.mul(quad, c4);
        for i in 0..4 {
            let lane = b.index(i);
            let d = b.add(d0, lane);
            let x = b.extract(v, lane);
            b.store(x, qt, &[d, q]);
        }
    });
    let key_items = c(&mut k, keys * quads);
    k.for_each(t, key_items, threads, |b, item| {
        let (quad, j) = (b.div(item, keys_c), b.rem(item, keys_c));
        let kv = load(b, j, 1, quad);
        let d0 = b.mul(quad, c4);
        for i in 0..4 {
            let lane = b.index(i);
            let d = b.add(d0, lane);
            let x = b.extract(kv, lane);
            b.store(x, kt, &[d, j]);
        }
    });
    // Values a row's quads at a time: consecutive work items read
    // consecutive quads of a row and store them side by side.
    let quads_c = c(&mut k, quads);
    k.for_each(t, key_items, threads, |b, item| {
        let (j, quad) = (b.div(item, quads_c), b.rem(item, quads_c));
        let vv = load(b, j, 2, quad);
        let d0 = b.mul(quad, c4);
        b.vector_store(vv, values, &[j, d0]);
    });
    k.for_each(t, keys_c, threads, |b, j| {
        let present = b.cmp(IntPredicate::Ult, j, seq);
        let clamped = b.min(j, last);
        let r = b.add(first_row, clamped);
        let at = b.add(qb, r);
        let x = b.load(bias_v, &[at]);
        let x = b.select(present, x, lowest);
        b.store(x, biases, &[c0, j]);
    });
    k.barrier(Barrier::Workgroup);

    // 2. Scores: a 4 x 8 tile a work item (the idle ones past the tiles
    // recompute the last tile and store nothing).
    let tiles = c(&mut k, QUERIES / 4 * key_groups);
    let last_tile = c(&mut k, QUERIES / 4 * key_groups - 1);
    let tile_of = k.min(t, last_tile);
    let groups_c = c(&mut k, key_groups);
    let (qg, kg) = (k.div(tile_of, groups_c), k.rem(tile_of, groups_c));
    let q0 = k.mul(qg, c4);
    let k0 = k.mul(kg, c4);
    let half_c = c(&mut k, half);
    let k1 = k.add(k0, half_c);
    let key_quads = [k0, k1];
    let init = vec![zv; 8];
    let acc = k.for_carry(c0, dhc, one_i, &init, |b, d, acc| {
        let qv = b.vector_load(qt, &[d, q0], 4);
        let kv: Vec<_> = key_quads
            .iter()
            .map(|&j| b.vector_load(kt, &[d, j], 4))
            .collect();
        let mut next = acc.to_vec();
        for i in 0..4 {
            let lane = b.index(i as u64);
            let x = b.extract(qv, lane);
            let x = b.splat(x, 4);
            for (h, kq) in kv.iter().enumerate() {
                next[2 * i + h] = b.fmaf(x, *kq, next[2 * i + h]);
            }
        }
        next
    });
    // Every work item is done with the staged queries and keys.
    k.barrier(Barrier::Workgroup);
    let active = k.cmp(IntPredicate::Ult, t, tiles);
    k.if_(active, |b| {
        let bias_quads: Vec<_> = key_quads
            .iter()
            .map(|&j| b.vector_load(biases, &[c0, j], 4))
            .collect();
        for i in 0..4 {
            let offset = b.index(i as u64);
            let q = b.add(q0, offset);
            for (h, &j) in key_quads.iter().enumerate() {
                let s = b.addf(acc[2 * i + h], bias_quads[h]);
                b.vector_store(s, scores, &[q, j]);
            }
        }
    });
    k.barrier(Barrier::Workgroup);

    // 3. Softmax: `PARTS` work items a row, `keys / PARTS` keys each.
    let q = k.rem(t, queries_c);
    let part = k.div(t, queries_c);
    let span = c(&mut k, keys / PARTS);
    let start = k.mul(part, span);
    let end = k.add(start, span);
    let lowest_v = k.splat(lowest, 4);
    let top = k.for_carry(start, end, c4, &[lowest_v], |b, j, m| {
        let s = b.vector_load(scores, &[q, j], 4);
        vec![b.maxnumf(m[0], s)]
    })[0];
    let top = across(&mut k, top, true);
    k.store(top, maxima, &[part, q]);
    k.barrier(Barrier::Workgroup);
    let parts: Vec<_> = (0..PARTS).map(|p| c(&mut k, p)).collect();
    let row_max = parts.iter().fold(lowest, |m, &p| {
        let x = k.load(maxima, &[p, q]);
        k.maxnumf(m, x)
    });
    let row_max = k.splat(row_max, 4);
    let total = k.for_carry(start, end, c4, &[zv], |b, j, sum| {
        let s = b.vector_load(scores, &[q, j], 4);
        let d = b.subf(s, row_max);
        let e = b.expf(d);
        b.vector_store(e, scores, &[q, j]);
        vec![b.addf(sum[0], e)]
    })[0];
    let total = across(&mut k, total, false);
    k.store(total, sums, &[part, q]);
    k.barrier(Barrier::Workgroup);

    // 4. Values: a 2 x 4 tile a work item, queries `g` and `g + QUERIES /
    // 2` of output quad `quad`.
    let out_tiles = c(&mut k, QUERIES / 2 * quads);
    let half_q = c(&mut k, QUERIES / 2);
    let output = OutputHead {
        first_row,
        width,
        offset: qo,
        column: head_col,
        view: out_v,
        dtype: out,
    };
    let onef = k.float(1.0, F32);
    k.for_each(t, out_tiles, threads, |b, tile| {
        let (g, quad) = (b.div(tile, quads_c), b.rem(tile, quads_c));
        let rows = [g, b.add(g, half_q)];
        let d0 = b.mul(quad, c4);
        let acc = b.for_carry(c0, keys_c, c4, &[zv, zv], |b, j, acc| {
            let p: Vec<_> = rows
                .iter()
                .map(|&r| b.vector_load(scores, &[r, j], 4))
                .collect();
            let mut next = acc.to_vec();
            for i in 0..4 {
                let lane = b.index(i as u64);
                let key = b.add(j, lane);
                let v = b.vector_load(values, &[key, d0], 4);
                for (r, pr) in p.iter().enumerate() {
                    let w = b.extract(*pr, lane);
                    let w = b.splat(w, 4);
                    next[r] = b.fmaf(w, v, next[r]);
                }
            }
            next
        });
        for (r, &ql) in rows.iter().enumerate() {
            let query = b.add(first_query, ql);
            let valid = b.cmp(IntPredicate::Ult, query, seq);
            b.if_(valid, |b| {
                let parts: Vec<_> = (0..PARTS).map(|p| b.index(p as u64)).collect();
                let sum = parts.iter().fold(zf, |s, &p| {
                    let x = b.load(sums, &[p, ql]);
                    b.addf(s, x)
                });
                let inv = b.divf(onef, sum);
                let inv = b.splat(inv, 4);
                output.store(b, query, d0, acc[r], inv);
            });
        }
    });
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every head size and sequence bucket the op takes on a GPU builds
    /// kernels the verifier and naga accept for the H200.
    #[test]
    fn every_variant_compiles() {
        let target = hrx_core::Target::hopper();
        let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
        let memory = target.workgroup_memory_bytes as usize;
        for (dh, seq) in [(32, 128), (32, 16), (64, 48), (4, 1), (128, 16)] {
            for (input, out) in [(F32, F32), (F32, Scalar::F16), (Scalar::F16, F32)] {
                let Some(shape) = TiledAttention::new(dh, seq, input, out, memory) else {
                    panic!("head {dh} over {seq} tokens should fit {memory} bytes");
                };
                compiler
                    .built(&encoder_attention_tiled(shape))
                    .and_then(|m| {
                        m.compile_uncached(&hrx_loom::Specialization::new(
                            "@encoder_attention_tiled",
                        ))
                    })
                    .unwrap_or_else(|e| panic!("{shape:?}: {e}"));
            }
        }
    }
}

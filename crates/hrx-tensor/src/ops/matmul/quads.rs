//! The f32 matmul kernel for operands in aligned 16-byte quads, built
//! with [`hrx_loom::build`]: `C[b, i, j] = act(sum_k A[b, i, k] * B[b, k,
//! j] + bias[j])` where A is contiguous along k, B contiguous along n or
//! along k (a linear layer's weight either way round), and every row,
//! batch entry and offset of both is a multiple of 4 elements (so are k,
//! and n where B runs along n).
//!
//! The plain tiled kernel (`tiled`) loads one element per work
//! item per copy and waits for each k step's loads before its products.
//! This one is built for a GPU's load/store path:
//!
//! - **Tiles of 128 rows by 64 (or 128) columns**, 16 x 8 (or 16 x 16)
//!   work items of 8 x 8 outputs, k steps of 16 (8 where workgroup
//!   memory is short, or where a tuning asks). On an H200 the 64-column
//!   workgroups (164 registers a work item, three workgroups an SM) ran
//!   MiniLM's f32 batch 1.065x faster than 128 columns (148 registers,
//!   one workgroup an SM) and f32 8192^3 at 42.3 against 41.9 TFLOP/s.
//! - **16-byte copies** into **k-major tiles**: both tiles are kept as
//!   rows of k. A's quads (and B's, where B runs along k) are stored
//!   transposed, a lane at a time, as they are copied in; B's along n
//!   are stored whole. Rows are padded by 4 elements, so a transposed
//!   store's lanes spread over the banks (two-way at most) and every row
//!   starts on 16 bytes.
//! - **Quad reads of the tiles.** Work item (tx, ty) owns rows `4 ty +
//!   {0..3}` and `64 + 4 ty + {0..3}` and the columns of tx likewise, half
//!   the tile apart: 8 x 8 outputs. For each k it reads 2 quads of A and 2
//!   of B, 4 reads for 64 multiply-adds, and holds only those 16 values.
//!   The outputs are 16 4-lane accumulators (a row's column quad each),
//!   so where C's rows and the bias lie in aligned quads the epilogue
//!   moves a quad at a time: one bias load, the activation on four
//!   lanes, one 16-byte store (lane by lane otherwise).
//!   Tiles in the operands' own layouts (8 quads of each per 4-deep slice
//!   of k, 64 values held) took 186 registers a work item against 148 at
//!   128 columns, and 39.4 against 41.9 TFLOP/s on 8192^3.
//! - **Loads in flight during the products.** Two tile buffers alternate:
//!   step t's products read one while the quads of step t + 1, loaded
//!   before them, wait in registers and are stored into the other after;
//!   one barrier a step. (Also measured and not kept: a step's k values
//!   in a loop instead of unrolled, 126 registers but 32.8 TFLOP/s; A's
//!   quads loaded and stored in the first half of a step and B's in the
//!   second, 38.5; 4 x 8 outputs a work item in 256-item workgroups of
//!   64 columns, 102 registers, 38.4.)
//!
//! Element indices of A and B are formed as 4 x (a quad index), so the
//! module declares both as arrays of 4-vectors: each copy is one 16-byte
//! load. Rows or columns past the matrices read zeros and are not
//! stored.

use super::abi::{F32Epilogue, MatmulArgs, tile_launch};
use crate::ops::{
    UnaryOp,
    registry::{Generator, KernelKey, KernelSource},
};
use hrx_loom::build::{Barrier, Builder, Built, Extent, Index, Num, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, Scalar};

/// Rows of C per workgroup.
const BM: usize = 128;
/// The columns of C a workgroup can take: 16 x (`bn` / 8) work items,
/// each 8 x 8 outputs.
pub(crate) const COLUMNS: [usize; 2] = [128, 64];
/// The k steps the kernel is built for, deepest first: 16 where the
/// device's workgroup memory holds its tiles (half the barriers), else 8.
pub(crate) const DEPTHS: [usize; 2] = [16, 8];

/// Work items of a workgroup taking `bn` columns.
pub(crate) const fn threads(bn: usize) -> usize {
    2 * bn
}

/// Workgroup memory for k steps of `bk` over `bn` columns: two buffers
/// of each tile, rows padded by 4 elements (see the module docs).
pub(crate) const fn workgroup_bytes(bk: usize, bn: usize) -> usize {
    4 * 2 * bk * (BM + 4 + bn + 4)
}

const F32: Scalar = Scalar::F32;

/// One build of the kernel: k steps of `bk` (one of [`DEPTHS`]), `bn`
/// columns a workgroup (one of [`COLUMNS`]), B contiguous along n
/// (`b_n_fast`) or along k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QuadShape {
    pub bk: usize,
    pub bn: usize,
    pub b_n_fast: bool,
    /// C's rows and the bias lie in aligned quads (`n` a multiple of 4;
    /// C's offset, batch stride and binding aligned; the bias contiguous
    /// and aligned, or absent): the epilogue stores a quad at a time.
    pub wide_c: bool,
}

impl QuadShape {
    /// The deepest k step (or the one `wanted`) whose tiles of `bn`
    /// columns `target`'s workgroup memory holds, if the device runs
    /// workgroups of their [`threads`] at all.
    pub(crate) fn depth(
        target: &hrx_core::Target,
        wanted: Option<usize>,
        bn: usize,
    ) -> Option<usize> {
        let t = threads(bn);
        let fits = target.max_workgroup_invocations as usize >= t
            && target.max_workgroup_size[0] as usize >= t;
        DEPTHS
            .into_iter()
            .filter(|&bk| wanted.is_none_or(|w| w == bk))
            .find(|&bk| workgroup_bytes(bk, bn) <= target.workgroup_memory_bytes as usize)
            .filter(|_| fits)
    }
}

/// The kernel of `shape`, with `act` after the bias.
pub(crate) fn quads_key(shape: QuadShape, act: Option<UnaryOp>) -> KernelKey {
    let QuadShape {
        bk,
        bn,
        b_n_fast,
        wide_c,
    } = shape;
    KernelKey {
        source: KernelSource::Built(Generator::new(
            format!("matmul quads bk {bk} bn {bn} b_n_fast {b_n_fast} wide_c {wide_c} {act:?}"),
            move || quads_kernel(shape, act),
        )),
        symbol: "matmul",
        config: Vec::new(),
    }
}

/// The quad kernel's loom source for `bn` columns a workgroup (128 or
/// 64) at k steps of `depth` or the deepest `target`'s workgroup memory
/// holds, B contiguous along n or (`transposed_b`) along k (for offline
/// compilation and the driver's statistics); `None` where no depth fits.
#[cfg(feature = "kernel-sources")]
pub fn quads_matmul_source(
    target: &hrx_core::Target,
    transposed_b: bool,
    (depth, bn): (Option<usize>, usize),
) -> Option<String> {
    let bn = COLUMNS.into_iter().find(|&c| c == bn)?;
    let bk = QuadShape::depth(target, depth, bn)?;
    let shape = QuadShape {
        bk,
        bn,
        b_n_fast: !transposed_b,
        wide_c: true,
    };
    Some(quads_key(shape, None).source())
}

/// A quad index `q` as an element index (`4 q`: provably a multiple of 4).
fn elements(b: &mut Builder, q: Value<Index>) -> Value<Index> {
    let c4 = b.index(4);
    b.mul(q, c4)
}

/// A 16-byte quad of `view` at quad index `q`, or zeros where `inside` is
/// false.
fn quad_or_zeros(
    b: &mut Builder,
    view: Value<View>,
    q: Value<Index>,
    inside: Value<hrx_loom::build::Bool>,
) -> Value<Num> {
    b.if_else(
        inside,
        |b| {
            let at = elements(b, q);
            vec![b.vector_load(view, &[at], 4)]
        },
        |b| {
            let zf = b.float(0.0, F32);
            vec![b.splat(zf, 4)]
        },
    )[0]
}

/// Work item `tid`'s copy slots of a tile of `quads` quads whose rows
/// hold `per_row`, copied by `threads` work items: (row, quad within the
/// row) of quad `tid + threads s`.
fn copy_slots(
    k: &mut Builder,
    tid: Value<Index>,
    (quads, per_row): (usize, usize),
    threads: usize,
) -> Vec<(Value<Index>, Value<Index>)> {
    let per = k.index(per_row as u64);
    (0..quads / threads)
        .map(|s| {
            let off = k.index((s * threads) as u64);
            let e = k.add(tid, off);
            (k.div(e, per), k.rem(e, per))
        })
        .collect()
}

/// Store `quads` whole at their `slots` (row, quad within the row) of
/// buffer `buf` of `tile`, whose buffers are `rows` rows each.
fn put(
    b: &mut Builder,
    (tile, rows, buf): (Value<View>, Value<Index>, Value<Index>),
    slots: &[(Value<Index>, Value<Index>)],
    quads: &[Value<Num>],
) {
    let first = b.mul(buf, rows);
    for (&(r, q), &v) in slots.iter().zip(quads) {
        let row = b.add(first, r);
        let col = elements(b, q);
        b.vector_store(v, tile, &[row, col]);
    }
}

/// Store `quads` of a k-running operand at their `slots` (lead, k quad)
/// of buffer `buf` of k-major `tile` (`depth` rows a buffer), transposed:
/// lane `l` of a quad goes to row `4 kq + l` at column `lead`.
fn put_across(
    b: &mut Builder,
    (tile, depth, buf): (Value<View>, Value<Index>, Value<Index>),
    slots: &[(Value<Index>, Value<Index>)],
    quads: &[Value<Num>],
) {
    let first = b.mul(buf, depth);
    for (&(lead, kq), &v) in slots.iter().zip(quads) {
        let k0 = elements(b, kq);
        let row0 = b.add(first, k0);
        for l in 0..4 {
            let at = b.index(l as u64);
            let row = b.add(row0, at);
            let x = b.extract(v, at);
            b.store(x, tile, &[row, lead]);
        }
    }
}

/// An operand contiguous along k (A, or B along k), its leading axis
/// (A's rows, B's columns) `stride_q` quads apart from `base_q`; the
/// tile's leads start at `first`, and `count` exist.
struct Running {
    view: Value<View>,
    base_q: Value<Index>,
    stride_q: Value<Index>,
    first: Value<Index>,
    count: Value<Index>,
}

impl Running {
    /// The quads of `slots` (lead within the tile, k quad within the
    /// step) for the step starting at quad `k0_q` of `k` elements; zeros
    /// past either end.
    fn fetch(
        &self,
        b: &mut Builder,
        slots: &[(Value<Index>, Value<Index>)],
        k0_q: Value<Index>,
        k: Value<Index>,
    ) -> Vec<Value<Num>> {
        slots
            .iter()
            .map(|&(lead, kq)| {
                let g = b.add(self.first, lead);
                let gk_q = b.add(k0_q, kq);
                let gk = elements(b, gk_q);
                let inside_lead = b.cmp(IntPredicate::Ult, g, self.count);
                let inside_k = b.cmp(IntPredicate::Ult, gk, k);
                let inside = b.and(inside_lead, inside_k);
                let at = b.madd(g, self.stride_q, self.base_q);
                let q = b.add(at, gk_q);
                quad_or_zeros(b, self.view, q, inside)
            })
            .collect()
    }
}

/// The products of one k value from row `row` of the tiles: 2 quads of
/// A's rows and 2 of B's columns, 64 multiply-adds into 16 4-lane
/// accumulators (row `i`, column quad `h` at `2 i + h`).
fn products(
    b: &mut Builder,
    (ta, tb): (Value<View>, Value<View>),
    (rows, cols): (&[Value<Index>], &[Value<Index>]),
    row: Value<Index>,
    acc: &mut [Value<Num>],
) {
    let mut xs = Vec::with_capacity(8);
    for half in 0..2 {
        let v = b.vector_load(ta, &[row, rows[4 * half]], 4);
        xs.extend((0..4).map(|l| b.extract_lane(v, l)));
    }
    let ys: Vec<_> = (0..2)
        .map(|half| b.vector_load(tb, &[row, cols[4 * half]], 4))
        .collect();
    for (i, &x) in xs.iter().enumerate() {
        let x4 = b.splat(x, 4);
        for (h, &y) in ys.iter().enumerate() {
            acc[2 * i + h] = b.fmaf(x4, y, acc[2 * i + h]);
        }
    }
}

fn quads_kernel(shape: QuadShape, act: Option<UnaryOp>) -> Built {
    let QuadShape {
        bk, bn, b_n_fast, ..
    } = shape;
    assert!(DEPTHS.contains(&bk) && COLUMNS.contains(&bn), "{shape:?}");
    let threads = threads(bn);
    let n64 = |v: usize| v as u64;
    let (mut k, args) = tile_launch("matmul", (BM, bn), threads, false);
    let &MatmulArgs {
        m,
        n,
        k: kk,
        sab,
        sam,
        oa,
        la,
        sbb,
        sbk,
        sbn,
        ob,
        lb,
        a,
        b: bbuf,
        ..
    } = &args;
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], F32);
    let bv = k.buffer_view(bbuf, zero, [lb.into()], F32);
    // Two buffers of each tile, stacked along the rows.
    let tile = |k: &mut Builder, rows: usize, cols: usize| {
        let bytes = k.offset(n64(4 * rows * cols));
        let memory = k.alloca_workgroup(bytes, 16);
        k.buffer_view(memory, zero, [Extent::from(rows), Extent::from(cols)], F32)
    };
    let ta = tile(&mut k, 2 * bk, BM + 4);
    let tb = tile(&mut k, 2 * bk, bn + 4);
    let [c0, c1, c2, c4, cwide, cbk, cbm, cbn] =
        [0, 1, 2, 4, bn / 8, bk, BM, bn].map(|v| k.index(n64(v)));
    let tid = k.workitem_id(Axis::X);
    let tx = k.rem(tid, cwide);
    let ty = k.div(tid, cwide);
    let wgx = k.workgroup_id(Axis::X);
    let wgy = k.workgroup_id(Axis::Y);
    let bi = k.workgroup_id(Axis::Z);
    let row0 = k.mul(wgy, cbm);
    let col0 = k.mul(wgx, cbn);
    // Strides and offsets in quads (the caller checked them multiples of 4).
    let quads = |k: &mut Builder, v: Value<Index>| k.div(v, c4);
    let [sab_q, sam_q, oa_q, sbb_q, sbk_q, sbn_q, ob_q] =
        [sab, sam, oa, sbb, sbk, sbn, ob].map(|v| quads(&mut k, v));
    let base_a = k.madd(bi, sab_q, oa_q);
    let base_b = k.madd(bi, sbb_q, ob_q);
    let kp = k.add(kk, cbk);
    let kp = k.sub(kp, c1);
    let steps = k.div(kp, cbk);

    // A work item's copy slots: the quads of a k-running tile (A, or B
    // along k) are (lead, k quad) = (e / (bk / 4), e % (bk / 4)) of e =
    // tid + threads s; B's along n (k row, column quad) = (e / (bn / 4),
    // e % (bn / 4)).
    let slots = copy_slots(&mut k, tid, (BM * bk / 4, bk / 4), threads);
    let b_slots = copy_slots(&mut k, tid, (bn * bk / 4, bk / 4), threads);
    let n_slots = copy_slots(&mut k, tid, (bn * bk / 4, bn / 4), threads);
    let a_rows = Running {
        view: av,
        base_q: base_a,
        stride_q: sam_q,
        first: row0,
        count: m,
    };
    let b_cols = Running {
        view: bv,
        base_q: base_b,
        stride_q: sbn_q,
        first: col0,
        count: n,
    };

    // The quads of step t, loaded into registers: A's, then B's.
    let fetch = |b: &mut Builder, t: Value<Index>| -> Vec<Value<Num>> {
        let k0 = b.mul(t, cbk);
        let k0_q = b.div(k0, c4);
        let mut loaded = a_rows.fetch(b, &slots, k0_q, kk);
        if b_n_fast {
            for &(kr, cq) in &n_slots {
                let gk = b.add(k0, kr);
                let cq4 = b.mul(cq, c4);
                let gc = b.add(col0, cq4);
                let okk = b.cmp(IntPredicate::Ult, gk, kk);
                let okc = b.cmp(IntPredicate::Ult, gc, n);
                let ok = b.and(okk, okc);
                let col0_q = b.div(col0, c4);
                let row = b.madd(gk, sbk_q, base_b);
                let at = b.add(row, col0_q);
                let q = b.add(at, cq);
                loaded.push(quad_or_zeros(b, bv, q, ok));
            }
        } else {
            loaded.extend(b_cols.fetch(b, &b_slots, k0_q, kk));
        }
        loaded
    };
    // Store fetched quads into tile buffer `buf`: A's (and B's along k)
    // transposed, B's along n whole.
    let stash = |b: &mut Builder, buf: Value<Index>, loaded: &[Value<Num>]| {
        let (a, rest) = loaded.split_at(slots.len());
        put_across(b, (ta, cbk, buf), &slots, a);
        match b_n_fast {
            true => put(b, (tb, cbk, buf), &n_slots, rest),
            false => put_across(b, (tb, cbk, buf), &b_slots, rest),
        }
    };

    // This work item's rows and columns (tile-relative): two quads of
    // each, half the tile apart.
    let owned = |k: &mut Builder, t: Value<Index>, across: usize| -> Vec<Value<Index>> {
        let t4 = k.mul(t, c4);
        (0..8)
            .map(|i| {
                let off = k.index(n64(across / 2 * (i / 4) + i % 4));
                k.add(t4, off)
            })
            .collect()
    };
    let rows = owned(&mut k, ty, BM);
    let cols = owned(&mut k, tx, bn);

    let first = fetch(&mut k, c0);
    stash(&mut k, c0, &first);
    k.barrier(Barrier::Workgroup);
    let zf = k.float(0.0, F32);
    let zq = k.splat(zf, 4);
    let init = vec![zq; 16];
    let acc = k.for_carry(c0, steps, c1, &init, |b, t, acc| {
        let next = b.add(t, c1);
        let last = b.sub(steps, c1);
        let next = b.min(next, last);
        let loaded = fetch(b, next);
        let buf = b.rem(t, c2);
        let mut acc = acc.to_vec();
        let first = b.mul(buf, cbk);
        for kk in 0..bk {
            let at = b.index(n64(kk));
            let row = b.add(first, at);
            products(b, (ta, tb), (&rows, &cols), row, &mut acc);
        }
        let other = b.sub(c1, buf);
        stash(b, other, &loaded);
        b.barrier(Barrier::Workgroup);
        acc
    });

    let epilogue = F32Epilogue::new(&mut k, &args, bi, act);
    for (i, &ri) in rows.iter().enumerate() {
        let er = k.add(row0, ri);
        let okr = k.cmp(IntPredicate::Ult, er, m);
        let start = epilogue.row_start(&mut k, er);
        for h in 0..2 {
            let ec = k.add(col0, cols[4 * h]);
            let quad = acc[2 * i + h];
            if shape.wide_c {
                // n is a multiple of 4, and so is ec: the quad lies wholly
                // inside C or wholly outside.
                let okc = k.cmp(IntPredicate::Ult, ec, n);
                let ok = k.and(okr, okc);
                epilogue.store_quad(&mut k, ok, (start, ec), quad);
                continue;
            }
            for l in 0..4 {
                let at = k.index(n64(l));
                let ecl = k.add(ec, at);
                let okc = k.cmp(IntPredicate::Ult, ecl, n);
                let ok = k.and(okr, okc);
                let x = k.extract(quad, at);
                epilogue.store(&mut k, ok, (start, ecl), x);
            }
        }
    }
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;
    use hrx_loom::{Compiler, Specialization};

    /// Both layouts of B compile for a CPU and a GPU target at every k
    /// step their workgroup memory holds.
    #[test]
    fn both_layouts_compile() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = Compiler::for_target(None, &target).unwrap();
            for (b_n_fast, bk) in [(true, 16), (false, 16), (true, 8), (false, 8)] {
                for (bn, wide_c) in COLUMNS.into_iter().flat_map(|c| [(c, false), (c, true)]) {
                    if workgroup_bytes(bk, bn) > target.workgroup_memory_bytes as usize {
                        continue;
                    }
                    let shape = QuadShape {
                        bk,
                        bn,
                        b_n_fast,
                        wide_c,
                    };
                    let source = quads_key(shape, Some(UnaryOp::Gelu)).source();
                    compiler
                        .module(&source)
                        .and_then(|m| m.compile_uncached(&Specialization::new("@matmul")))
                        .unwrap_or_else(|e| panic!("{} {shape:?}: {e}", target.name));
                }
            }
        }
    }
}

//! The f32 matmul kernel for operands in aligned 16-byte quads, built
//! with [`hrx_loom::build`]: `C[b, i, j] = act(sum_k A[b, i, k] * B[b, k,
//! j] + bias[j])` where A is contiguous along k, B contiguous along n or
//! along k (a linear layer's weight either way round), and every row,
//! batch entry and offset of both is a multiple of 4 elements (so are k,
//! and n where B runs along n).
//!
//! The plain tiled kernel (`matmul_tiled`) loads one element per work
//! item per copy and waits for each k step's loads before its products.
//! This one is built for a GPU's load/store path:
//!
//! - **16-byte copies.** A workgroup's 128 x 128 tile of C takes k steps
//!   of 16 (8 where workgroup memory is short); each work item copies
//!   two 16-byte quads of A and two of B per 16-deep step (one of each
//!   per 8-deep step), stored as quads into workgroup memory in their
//!   operand's own layout (A's rows along k, B's along n or along k), so
//!   the copies need no transposition.
//! - **Quad reads of the tiles.** Work item (tx, ty) of 16 x 16 owns rows
//!   `ty + 16 i` and, for B along n, columns `4 tx + {0..3}` and `64 + 4
//!   tx + {0..3}` (along k: `tx + 16 j`), 8 x 8 outputs. For each 4-deep
//!   slice of k it reads 8 quads of A (one per row: 4 k values) and 8 of B,
//!   16 reads for 256 multiply-adds, against 128 single reads in the plain
//!   kernel. Rows of the tiles are padded by 4 elements, so the 8 work
//!   items of a quad read's phase hit distinct banks.
//! - **Loads in flight during the products.** Two tile buffers alternate:
//!   step t's products read one while the quads of step t + 1, loaded
//!   before them, wait in registers and are stored into the other after;
//!   one barrier a step.
//!
//! Element indices of A and B are formed as 4 x (a quad index), so the
//! module declares both as arrays of 4-vectors: each copy is one 16-byte
//! load. Rows or columns past the matrices read zeros and are not
//! stored.

use super::matmul_abi::MatmulArgs;
use super::{
    UnaryOp,
    registry::{Generator, KernelKey, KernelSource},
};
use hrx_loom::build::{Barrier, Builder, Built, Extent, Index, KernelBuilder, Num, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, Scalar};

/// Rows and columns of C per workgroup.
const BM: usize = 128;
const BN: usize = 128;
/// Work items per workgroup: 16 x 16, each 8 x 8 outputs.
pub(crate) const THREADS: usize = 256;
/// The k steps the kernel is built for, deepest first: 16 where the
/// device's workgroup memory holds its tiles (half the barriers), else 8.
pub(crate) const DEPTHS: [usize; 2] = [16, 8];

/// Row length of the k-running tiles (A, and B along k) for k steps of
/// `bk`, padded by 4 so a quad read's 8 work items hit distinct banks.
const fn padded(bk: usize) -> usize {
    bk + 4
}

/// Workgroup memory for k steps of `bk`: two buffers of each tile (B's
/// in the larger of its layouts).
pub(crate) const fn workgroup_bytes(bk: usize) -> usize {
    let b = if bk * BN > BN * padded(bk) {
        bk * BN
    } else {
        BN * padded(bk)
    };
    4 * 2 * (BM * padded(bk) + b)
}

const F32: Scalar = Scalar::F32;

/// The kernel for k steps of `bk` (one of [`DEPTHS`]), B contiguous
/// along n (`b_n_fast`) or along k, with `act` after the bias.
pub(crate) fn quads_key(bk: usize, b_n_fast: bool, act: Option<UnaryOp>) -> KernelKey {
    KernelKey {
        source: KernelSource::Built(Generator::new(
            format!("matmul quads bk {bk} b_n_fast {b_n_fast} {act:?}"),
            move || quads_kernel(bk, b_n_fast, act),
        )),
        symbol: "matmul",
        config: Vec::new(),
    }
}

/// The quad kernel's loom source at the deepest k step `target`'s
/// workgroup memory holds, B contiguous along n or (`transposed_b`) along
/// k (for offline compilation and the driver's statistics); `None` where
/// no depth fits.
#[cfg(feature = "kernel-sources")]
pub fn quads_matmul_source(target: &hrx_core::Target, transposed_b: bool) -> Option<String> {
    let bk = DEPTHS
        .into_iter()
        .find(|&bk| workgroup_bytes(bk) <= target.workgroup_memory_bytes as usize)?;
    Some(quads_key(bk, !transposed_b, None).source())
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

/// A work item's `copies` copy slots of a tile whose rows hold `per_row`
/// quads: (row, quad within the row) of quad `tid + 256 s`.
fn copy_slots(
    k: &mut Builder,
    tid: Value<Index>,
    copies: usize,
    per_row: usize,
) -> Vec<(Value<Index>, Value<Index>)> {
    let per_row = k.index(per_row as u64);
    (0..copies)
        .map(|s| {
            let off = k.index((s * THREADS) as u64);
            let e = k.add(tid, off);
            (k.div(e, per_row), k.rem(e, per_row))
        })
        .collect()
}

/// Store `quads` at their `slots` (row, quad within the row) of buffer
/// `buf` of `tile`, whose buffers are `rows` rows each.
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

fn quads_kernel(bk: usize, b_n_fast: bool, act: Option<UnaryOp>) -> Built {
    assert!(DEPTHS.contains(&bk), "k steps of {bk}");
    let (pk, copies) = (padded(bk), BM * bk / 4 / THREADS);
    let n64 = |v: usize| v as u64;
    let mut k = KernelBuilder::new("matmul");
    let [wm, wn, batch] = ["m", "n", "batch"].map(|name| k.workload(name));
    let one = k.index(1);
    let [bm_l, bn_l, lm, ln] = [BM, BN, BM - 1, BN - 1].map(|v| k.index(n64(v)));
    let pm = k.add(wm, lm);
    let gy = k.div(pm, bm_l);
    let pn = k.add(wn, ln);
    let gx = k.div(pn, bn_l);
    let wg = k.index(n64(THREADS));
    let mut k = k.launch_config([gx, gy, batch], [wg, one, one]);
    let MatmulArgs {
        m,
        n,
        k: kk,
        sab,
        sam,
        sak: _,
        oa,
        la,
        sbb,
        sbk,
        sbn,
        ob,
        lb,
        sbias,
        obias,
        lbias,
        scb,
        oc,
        lc,
        a,
        b: bbuf,
        bias,
        c,
    } = MatmulArgs::declare(&mut k, false);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], F32);
    let bv = k.buffer_view(bbuf, zero, [lb.into()], F32);
    let biasv = k.buffer_view(bias, zero, [lbias.into()], F32);
    let cv = k.buffer_view(c, zero, [lc.into()], F32);
    // Two buffers of each tile, stacked along the rows.
    let tile = |k: &mut Builder, rows: usize, cols: usize| {
        let bytes = k.offset(n64(4 * rows * cols));
        let memory = k.alloca_workgroup(bytes, 16);
        k.buffer_view(memory, zero, [Extent::from(rows), Extent::from(cols)], F32)
    };
    let ta = tile(&mut k, 2 * BM, pk);
    let tb = match b_n_fast {
        true => tile(&mut k, 2 * bk, BN),
        false => tile(&mut k, 2 * BN, pk),
    };
    let [c0, c1, c2, c4, c16, cbk, cbm, cbn] =
        [0, 1, 2, 4, 16, bk, BM, BN].map(|v| k.index(n64(v)));
    let tid = k.workitem_id(Axis::X);
    let tx = k.rem(tid, c16);
    let ty = k.div(tid, c16);
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
    // along k) are (row, k quad) = (e / (bk / 4), e % (bk / 4)) of e = tid
    // + 256 s; B's along n (k row, column quad) = (e / 32, e % 32).
    let slots = copy_slots(&mut k, tid, copies, bk / 4);
    let n_slots = copy_slots(&mut k, tid, copies, BN / 4);
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
            loaded.extend(b_cols.fetch(b, &slots, k0_q, kk));
        }
        loaded
    };
    // Store fetched quads into tile buffer `buf`.
    let stash = |b: &mut Builder, buf: Value<Index>, loaded: &[Value<Num>]| {
        put(b, (ta, cbm, buf), &slots, &loaded[..copies]);
        match b_n_fast {
            true => put(b, (tb, cbk, buf), &n_slots, &loaded[copies..]),
            false => put(b, (tb, cbn, buf), &slots, &loaded[copies..]),
        }
    };

    // This work item's rows, and its columns (tile-relative).
    let rows: Vec<Value<Index>> = (0..8)
        .map(|i| {
            let off = k.index(n64(16 * i));
            k.add(ty, off)
        })
        .collect();
    let tx4 = k.mul(tx, c4);
    let cols: Vec<Value<Index>> = (0..8)
        .map(|j| match b_n_fast {
            true => {
                let off = k.index(n64(64 * (j / 4) + j % 4));
                k.add(tx4, off)
            }
            false => {
                let off = k.index(n64(16 * j));
                k.add(tx, off)
            }
        })
        .collect();
    let lane = |b: &mut Builder, v: Value<Num>, i: usize| {
        let at = b.index(n64(i));
        b.extract(v, at)
    };

    let first = fetch(&mut k, c0);
    stash(&mut k, c0, &first);
    k.barrier(Barrier::Workgroup);
    let zf = k.float(0.0, F32);
    let init = vec![zf; 64];
    let acc = k.for_carry(c0, steps, c1, &init, |b, t, acc| {
        let next = b.add(t, c1);
        let last = b.sub(steps, c1);
        let next = b.min(next, last);
        let loaded = fetch(b, next);
        let buf = b.rem(t, c2);
        let mut acc = acc.to_vec();
        for slice in 0..bk / 4 {
            let kq = b.index(n64(4 * slice));
            // bvals[kk][j]: B at k = 4 slice + kk, column j.
            let mut bvals = vec![vec![zf; 8]; 4];
            if b_n_fast {
                let b_rows = b.mul(buf, cbk);
                for (kk_i, row_b) in bvals.iter_mut().enumerate() {
                    let kr = b.index(n64(4 * slice + kk_i));
                    let row = b.add(b_rows, kr);
                    for half in 0..2 {
                        let v = b.vector_load(tb, &[row, cols[4 * half]], 4);
                        for l in 0..4 {
                            row_b[4 * half + l] = lane(b, v, l);
                        }
                    }
                }
            } else {
                let b_rows = b.mul(buf, cbn);
                for (j, &cj) in cols.iter().enumerate() {
                    let row = b.add(b_rows, cj);
                    let v = b.vector_load(tb, &[row, kq], 4);
                    for (kk_i, row_b) in bvals.iter_mut().enumerate() {
                        row_b[j] = lane(b, v, kk_i);
                    }
                }
            }
            let a_rows = b.mul(buf, cbm);
            for (i, &ri) in rows.iter().enumerate() {
                let row = b.add(a_rows, ri);
                let v = b.vector_load(ta, &[row, kq], 4);
                for (kk_i, row_b) in bvals.iter().enumerate() {
                    let x = lane(b, v, kk_i);
                    for (j, &y) in row_b.iter().enumerate() {
                        acc[8 * i + j] = b.fmaf(x, y, acc[8 * i + j]);
                    }
                }
            }
        }
        let other = b.sub(c1, buf);
        stash(b, other, &loaded);
        b.barrier(Barrier::Workgroup);
        acc
    });

    let act = act.map(|op| op.fragment(F32));
    for (i, &ri) in rows.iter().enumerate() {
        let er = k.add(row0, ri);
        let okr = k.cmp(IntPredicate::Ult, er, m);
        let crow = k.madd(er, n, oc);
        let cbase = k.madd(bi, scb, crow);
        for (j, &cj) in cols.iter().enumerate() {
            let ec = k.add(col0, cj);
            let okc = k.cmp(IntPredicate::Ult, ec, n);
            let ok = k.and(okr, okc);
            let r = acc[8 * i + j];
            k.if_(ok, |b| {
                let pbias = b.madd(ec, sbias, obias);
                let bj = b.load(biasv, &[pbias]);
                let x = b.addf(r, bj);
                let y = match &act {
                    Some(f) => b.inline(f, &[x])[0],
                    None => x,
                };
                let at = b.add(cbase, ec);
                b.store(y, cv, &[at]);
            });
        }
    }
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;
    use hrx_loom::{Compiler, Specialization};

    /// Both layouts of B compile for a CPU and a GPU target.
    #[test]
    fn both_layouts_compile() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = Compiler::for_target(None, &target).unwrap();
            for (b_n_fast, bk) in [(true, 16), (false, 16), (true, 8), (false, 8)] {
                if workgroup_bytes(bk) > target.workgroup_memory_bytes as usize {
                    continue;
                }
                let key = quads_key(bk, b_n_fast, Some(UnaryOp::Gelu));
                let source = key.source();
                compiler
                    .module(&source)
                    .and_then(|m| m.compile_uncached(&Specialization::new("@matmul")))
                    .unwrap_or_else(|e| panic!("{} {b_n_fast} {bk}: {e}", target.name));
            }
        }
    }
}

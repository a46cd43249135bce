//! The decode matmul for a B contiguous along k (a transposed B, as linear
//! layers store weights), built with [`hrx_loom::build`]: each output a
//! dot product of an A row and a B row, one subgroup per output column,
//! 16-byte loads along k. f16 A and B, f32 accumulation and output:
//! `C[b, i, j] = act(sum_k A[b, i, k] * B[b, k, j] + bias[j])`.
//!
//! A subgroup computes column j for the `MT` rows of its workgroup's row
//! tile (grid y): its lanes stride along k in 16-byte quads (8 halves) of
//! B's row j and of the A rows, accumulate pairs in f32, and the subgroup
//! sums its lanes. A workgroup's subgroups take its `COLS` columns in turn
//! (`COLS` is the most subgroups the workgroup can have, so any subgroup
//! size works). The k loop is unrolled [`UNROLL`] times so each lane has
//! that many loads of B in flight; loads past k are clamped to the row's
//! last quad and their words zeroed, so the loop has no branches.
//! Out-of-range rows are clamped the same way and dropped at the store.
//! The caller guarantees quads: k, the row, batch and offset strides of A
//! and B multiples of 8, bindings 16-byte aligned.

use super::abi::MatmulArgs;
use super::gemv::{BLayout, BLoad, b_load};
use crate::DType;
use crate::ops::{
    UnaryOp,
    registry::{Generator, KernelKey, KernelSource},
};
use hrx_core::Target;
use hrx_loom::build::{Builder, Built, Index, KernelBuilder, Num, Value};
use hrx_loom::ir::{Axis, IntPredicate, ReduceOp, Scalar};

/// Work items per workgroup.
const WG: usize = 256;
/// Most rows of A per workgroup (row tiles beyond run in grid y).
const MAX_ROWS: usize = 8;
/// Loads of B each lane has in flight per k step.
const UNROLL: usize = 4;

/// The largest m the dot kernel is chosen for. Each B quad meets one A
/// quad per row, so its loads grow with m: on the H200 (k = n = 4096) it
/// took 23 / 35 / 62 us for 1 / 2 / 4 rows, where the split-k kernel
/// takes about 58 us for any m up to 16. Without cooperative matrices it
/// replaces element-by-element decode loads up to the decode threshold.
pub(crate) fn dot_max_rows(coop: bool) -> usize {
    if coop { 2 } else { 64 }
}

/// Whether the dot kernel can run: subgroup reductions on `target`, f16
/// inputs, A and B both contiguous along k with every quad of 8 halves
/// aligned (`a` and `b` as `Ops::record_matmul` describes them: A with k
/// as its columns, B with n as its columns).
pub(crate) fn dot_applies(
    target: &Target,
    input: DType,
    k: usize,
    a: &BLayout,
    b: &BLayout,
) -> bool {
    target.subgroup_ops.arithmetic
        && input == DType::F16
        && k > 0
        && b_load(input, a) == BLoad::Quad16
        && b_load(input, &b.along_k(k)) == BLoad::Quad16
}

/// The kernel for `m` rows on `target`, with `act` after the bias.
pub(crate) fn dot_key(target: &Target, m: usize, act: Option<UnaryOp>) -> KernelKey {
    // Rows of one power-of-two tile share a kernel; the subgroup size fixes
    // the columns per workgroup.
    let mt = m.clamp(1, MAX_ROWS).next_power_of_two();
    let cols = WG / (target.subgroup_size_min as usize).max(1);
    KernelKey {
        source: KernelSource::Built(Generator::new(
            format!("matmul_dot {mt} {cols} {act:?}"),
            move || dot_kernel(mt, cols, act),
        )),
        symbol: "matmul_dot",
        config: Vec::new(),
    }
}

/// The dot kernel for row tiles of `mt` rows and `cols` columns per
/// workgroup.
fn dot_kernel(mt: usize, cols: usize, act: Option<UnaryOp>) -> Built {
    let n64 = |v: usize| v as u64;
    let mut k = KernelBuilder::new("matmul_dot");
    let [wm, wn, batch] = ["m", "n", "batch"].map(|name| k.workload(name));
    let one = k.index(1);
    let cols_l = k.index(n64(cols));
    let cols1 = k.index(n64(cols - 1));
    let pn = k.add(wn, cols1);
    let gx = k.div(pn, cols_l);
    let mt_l = k.index(n64(mt));
    let mt1 = k.index(n64(mt - 1));
    let pm = k.add(wm, mt1);
    let gy = k.div(pm, mt_l);
    let wg = k.index(n64(WG));
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
        sbk: _,
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
    } = MatmulArgs::declare(&mut k, true);
    let zero = k.offset(0);
    let [c0, c1, c2, c3, c4, c8] = [0, 1, 2, 3, 4, 8].map(|v| k.index(v));
    let law = k.div(la, c2);
    let av = k.buffer_view(a, zero, [law.into()], Scalar::U32);
    let lbw = k.div(lb, c2);
    let bv = k.buffer_view(bbuf, zero, [lbw.into()], Scalar::U32);
    let biasv = k.buffer_view(bias, zero, [lbias.into()], Scalar::F32);
    let cv = k.buffer_view(c, zero, [lc.into()], Scalar::F32);
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let lane = k.subgroup_lane_id();
    let sgsize = k.subgroup_size();
    let wgx = k.workgroup_id(Axis::X);
    let wgy = k.workgroup_id(Axis::Y);
    let bi = k.workgroup_id(Axis::Z);
    let ccols = k.index(n64(cols));
    let cmt = k.index(n64(mt));
    let cu = k.index(n64(UNROLL));
    let j0 = k.mul(wgx, ccols);
    let row0 = k.mul(wgy, cmt);
    let m1 = k.sub(m, c1);
    let n1 = k.sub(n, c1);
    let q = k.div(kk, c8);
    let q1 = k.sub(q, c1);
    let stride = k.mul(sgsize, cu);
    let bbase = k.madd(bi, sbb, ob);
    let abase = k.madd(bi, sab, oa);
    let zu = k.int(0, Scalar::U32);
    let zf = k.float(0.0, Scalar::F32);
    let z2 = k.splat(zf, 2);
    // Lane offsets of the unrolled loads, and each row's clamped first
    // quad.
    let offsets: Vec<Value<Index>> = (0..UNROLL)
        .map(|u| {
            let du = k.index(n64(u));
            k.mul(sgsize, du)
        })
        .collect();
    let mut ar = Vec::with_capacity(mt);
    let mut qa = Vec::with_capacity(mt);
    for r in 0..mt {
        let dr = k.index(n64(r));
        let row = k.add(row0, dr);
        let arc = k.min(row, m1);
        let ap = k.madd(arc, sam, abase);
        ar.push(row);
        qa.push(k.div(ap, c8));
    }
    let first = k.cmp(IntPredicate::Eq, lane, c0);
    let cbase = k.madd(bi, scb, oc);
    let words = [c0, c1, c2, c3];
    // Word p of a quad as two floats, zero when the quad is past k (a
    // clamped A word may hold an infinity, and infinity times zero is not
    // zero).
    let half_pair = |b: &mut Builder, v: Value<Num>, ok, p: usize| {
        let d = b.extract(v, words[p]);
        let s = b.select(ok, d, zu);
        b.unpackf16(s)
    };
    let act = act.map(|op| op.fragment(Scalar::F32));
    k.for_each(sg, ccols, nsg, |b, jj| {
        let j = b.add(j0, jj);
        let jc = b.min(j, n1);
        let brow = b.madd(jc, sbn, bbase);
        let qb = b.div(brow, c8);
        let init = vec![z2; mt * 4];
        let res = b.for_carry(lane, q, stride, &init, |b, k0, acc| {
            let loads: Vec<_> = offsets
                .iter()
                .map(|&o| {
                    let i = b.add(k0, o);
                    let ok = b.cmp(IntPredicate::Ult, i, q);
                    let ic = b.min(i, q1);
                    let bq = b.add(qb, ic);
                    let bw = b.mul(bq, c4);
                    let bx = b.vector_load(bv, &[bw], 4);
                    let ax: Vec<_> = qa
                        .iter()
                        .map(|&qr| {
                            let aq = b.add(qr, ic);
                            let aw = b.mul(aq, c4);
                            b.vector_load(av, &[aw], 4)
                        })
                        .collect();
                    (ok, bx, ax)
                })
                .collect();
            let mut acc = acc.to_vec();
            for (ok, bx, ax) in loads {
                for p in 0..4 {
                    let bf = half_pair(b, bx, ok, p);
                    for (r, &axr) in ax.iter().enumerate() {
                        let af = half_pair(b, axr, ok, p);
                        acc[r * 4 + p] = b.fmaf(af, bf, acc[r * 4 + p]);
                    }
                }
            }
            acc
        });
        let tot: Vec<_> = (0..mt)
            .map(|r| {
                let sa = b.addf(res[r * 4], res[r * 4 + 1]);
                let sb = b.addf(res[r * 4 + 2], res[r * 4 + 3]);
                let sc = b.addf(sa, sb);
                let sx = b.extract(sc, c0);
                let sy = b.extract(sc, c1);
                let ss = b.addf(sx, sy);
                b.subgroup_reduce(ReduceOp::AddF, ss)
            })
            .collect();
        let jok = b.cmp(IntPredicate::Ult, j, n);
        let store = b.and(first, jok);
        b.if_(store, |b| {
            let pb = b.madd(j, sbias, obias);
            let bj = b.load(biasv, &[pb]);
            for (r, &row) in ar.iter().enumerate() {
                let rok = b.cmp(IntPredicate::Ult, row, m);
                b.if_(rok, |b| {
                    let x = b.addf(tot[r], bj);
                    let y = match &act {
                        Some(f) => b.inline(f, &[x])[0],
                        None => x,
                    };
                    let crow = b.madd(row, n, cbase);
                    let ci = b.add(crow, j);
                    b.store(y, cv, &[ci]);
                });
            }
        });
    });
    Built::kernel(k.finish())
}

/// The dot kernel's loom source for `target` and `m` rows (for offline
/// compilation and SPIR-V checks).
#[cfg(feature = "kernel-sources")]
pub fn dot_matmul_source(
    target: &Target,
    m: usize,
    activation: Option<crate::ops::UnaryOp>,
) -> String {
    dot_key(target, m, activation).source()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row tile, on a CPU and a GPU target, with and without an
    /// activation, builds a kernel the verifier and naga accept.
    #[test]
    fn every_row_tile_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for m in [1, 2, 3, 8] {
                for act in [None, Some(UnaryOp::Silu)] {
                    compiler
                        .module(&dot_matmul_source(&target, m, act))
                        .and_then(|module| {
                            module.compile_uncached(&hrx_loom::Specialization::new("@matmul_dot"))
                        })
                        .unwrap_or_else(|e| panic!("m={m} {act:?}: {e}"));
                }
            }
        }
    }
}

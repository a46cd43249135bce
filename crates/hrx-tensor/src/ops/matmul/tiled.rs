//! The register-tiled workgroup-memory matmul kernel (any device), built
//! with [`hrx_loom::build`]: batched `C[b, i, j] = act(sum_k A[b, i, k] *
//! B[b, k, j] + bias[j])`, f32 accumulation and output, A and B f32 or f16
//! (widened on load). Every operand is addressed by element strides, so
//! transposed, broadcast (stride 0) and sliced operands need no copy.
//!
//! A workgroup of `bm / tm * bn / tn` work items computes a `bm x bn` tile
//! of C; each k step stages a `bm x bk` tile of A (stored k-major, rows
//! padded by one against bank conflicts) and a `bk x bn` tile of B in
//! workgroup memory, zero-padded outside the matrices. Work item (tx, ty)
//! then owns `tm x tn` outputs: rows `ty + i * bm / tm` and columns
//! `tx + j * bn / tn` (strided, so neighbouring work items read
//! neighbouring workgroup-memory words and write neighbouring columns of
//! C).

use super::abi::{F32Epilogue, MatmulArgs, tile_launch};
use crate::DType;
use crate::ops::{
    UnaryOp,
    registry::{Generator, KernelKey, KernelSource},
};
use hrx_core::{DeviceKind, Target};
use hrx_loom::build::{Builder, Built, Extent, Index, Value};
use hrx_loom::ir::{Axis, IntPredicate, Scalar};

/// A `bm x bn` tile of C per workgroup, k steps of `bk`, `tm x tn`
/// outputs per work item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tiles {
    bm: usize,
    bn: usize,
    bk: usize,
    tm: usize,
    tn: usize,
}

impl Tiles {
    fn threads(&self) -> usize {
        (self.bm / self.tm) * (self.bn / self.tn)
    }
    fn bytes(&self) -> usize {
        4 * self.bk * (self.bm + 1 + self.bn)
    }
}

/// The largest tiling the target fits that still gives the device enough
/// workgroups: 128 x 128 tiles of 8 x 8 outputs on GPUs for large
/// matrices, 64 x 64 of 4 x 4 or 32 x 32 where bigger tiles would leave
/// fewer than [`GPU_WAVE`] workgroups (an encoder's 128-row matmuls ran 9
/// workgroups of 128 x 128 on an H200 at under 1 TFLOP/s); 32 x 32 on CPU
/// devices (lavapipe runs them as fast, and compiles the shorter unrolled
/// k step much faster); smaller fallbacks for tight limits.
fn tiles(target: &Target, (m, n, batch): (usize, usize, usize)) -> Tiles {
    let cpu = target.kind == DeviceKind::Cpu;
    let groups = |tile: usize| m.div_ceil(tile) * n.div_ceil(tile) * batch.max(1);
    let big = !cpu && m >= 128 && n >= 128 && groups(128) >= GPU_WAVE;
    let medium = !cpu && groups(64) >= GPU_WAVE;
    let t = |bm, bn, bk, tm, tn| Tiles { bm, bn, bk, tm, tn };
    let candidates = [
        (big, t(128, 128, 16, 8, 8)),
        (medium, t(64, 64, 16, 4, 4)),
        (true, t(32, 32, 8, 4, 4)),
        (true, t(16, 16, 8, 2, 2)),
    ];
    candidates
        .into_iter()
        .filter(|(ok, _)| *ok)
        .map(|(_, t)| t)
        .find(|t| {
            (t.threads() as u32) <= target.max_workgroup_invocations
                && (t.threads() as u32) <= target.max_workgroup_size[0]
                && t.bytes() as u64 <= u64::from(target.workgroup_memory_bytes)
        })
        .unwrap_or(t(8, 8, 4, 2, 2))
}

/// Workgroups below which a GPU tiling steps down to smaller tiles: about
/// one per multiprocessor of a large GPU.
const GPU_WAVE: usize = 128;

/// The tile row and column of flat index `e` over a `rows x cols` tile,
/// so consecutive work items read consecutive addresses along the
/// operand's fast axis (`fast_inner`: the columns).
pub(crate) fn pos(
    b: &mut Builder,
    e: Value<Index>,
    fast_inner: bool,
    (rows, cols): (usize, usize),
) -> (Value<Index>, Value<Index>) {
    if fast_inner {
        let d = b.index(cols as u64);
        (b.div(e, d), b.rem(e, d))
    } else {
        let d = b.index(rows as u64);
        (b.rem(e, d), b.div(e, d))
    }
}

/// The tiled kernel for `m x n` outputs of `input` elements; `a_k_fast` /
/// `b_n_fast` say which axis of A and B is contiguous.
pub(crate) fn tiled_key(
    target: &Target,
    input: DType,
    sizes: (usize, usize, usize),
    fast: (bool, bool),
    act: Option<UnaryOp>,
) -> KernelKey {
    let tl = tiles(target, sizes);
    KernelKey {
        source: KernelSource::Built(Generator::new(
            format!("matmul {tl:?} {input:?} {fast:?} {act:?}"),
            move || tiled_kernel(tl, input, fast, act),
        )),
        symbol: "matmul",
        config: Vec::new(),
    }
}

fn tiled_kernel(
    tl: Tiles,
    input: DType,
    (a_k_fast, b_n_fast): (bool, bool),
    act: Option<UnaryOp>,
) -> Built {
    let Tiles { bm, bn, bk, tm, tn } = tl;
    let (txs, tys) = (bn / tn, bm / tm);
    let pa = bm + 1;
    let n64 = |v: usize| v as u64;
    let elem = if input == DType::F16 {
        Scalar::F16
    } else {
        Scalar::F32
    };
    let (mut k, args) = tile_launch("matmul", (bm, bn), tl.threads(), false);
    let &MatmulArgs {
        m,
        n,
        k: kk,
        sab,
        sam,
        sak,
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
    let av = k.buffer_view(a, zero, [la.into()], elem);
    let bv = k.buffer_view(bbuf, zero, [lb.into()], elem);
    let abytes = k.offset(n64(4 * bk * pa));
    let bbytes = k.offset(n64(4 * bk * bn));
    let ma = k.alloca_workgroup(abytes, 16);
    let mb = k.alloca_workgroup(bbytes, 16);
    let ta = k.buffer_view(ma, zero, [Extent::from(bk), Extent::from(pa)], Scalar::F32);
    let tb = k.buffer_view(mb, zero, [Extent::from(bk), Extent::from(bn)], Scalar::F32);
    let [c0, c1, cbm, cbn, cbk, cbk1, cth, ca, cb, ctxs] = [
        0,
        1,
        bm,
        bn,
        bk,
        bk - 1,
        tl.threads(),
        bm * bk,
        bk * bn,
        txs,
    ]
    .map(|v| k.index(n64(v)));
    let zf = k.float(0.0, Scalar::F32);
    let tid = k.workitem_id(Axis::X);
    let tx = k.rem(tid, ctxs);
    let ty = k.div(tid, ctxs);
    let wgx = k.workgroup_id(Axis::X);
    let wgy = k.workgroup_id(Axis::Y);
    let bi = k.workgroup_id(Axis::Z);
    let row0 = k.mul(wgy, cbm);
    let col0 = k.mul(wgx, cbn);
    let basea = k.madd(bi, sab, oa);
    let baseb = k.madd(bi, sbb, ob);
    let kp = k.add(kk, cbk1);
    let steps = k.div(kp, cbk);
    let ro: Vec<_> = (0..tm)
        .map(|i| {
            let off = k.index(n64(i * tys));
            k.add(ty, off)
        })
        .collect();
    let co: Vec<_> = (0..tn)
        .map(|j| {
            let off = k.index(n64(j * txs));
            k.add(tx, off)
        })
        .collect();
    let widen = |b: &mut Builder, x| {
        if input == DType::F16 {
            b.extf(x, Scalar::F32)
        } else {
            x
        }
    };
    let init = vec![zf; tm * tn];
    let res = k.for_carry(c0, steps, c1, &init, |b, t, acc| {
        let k0 = b.mul(t, cbk);
        b.for_each(tid, ca, cth, |b, e| {
            let (ar, ac) = pos(b, e, a_k_fast, (bm, bk));
            let gr = b.add(row0, ar);
            let gk = b.add(k0, ac);
            let okr = b.cmp(IntPredicate::Ult, gr, m);
            let okk = b.cmp(IntPredicate::Ult, gk, kk);
            let ok = b.and(okr, okk);
            let va = b.if_else(
                ok,
                |b| {
                    let pr = b.madd(gr, sam, basea);
                    let p = b.madd(gk, sak, pr);
                    let xa = b.load(av, &[p]);
                    vec![widen(b, xa)]
                },
                |_| vec![zf],
            )[0];
            b.store(va, ta, &[ac, ar]);
        });
        b.for_each(tid, cb, cth, |b, e| {
            let (br, bc) = pos(b, e, b_n_fast, (bk, bn));
            let gk = b.add(k0, br);
            let gc = b.add(col0, bc);
            let okk = b.cmp(IntPredicate::Ult, gk, kk);
            let okc = b.cmp(IntPredicate::Ult, gc, n);
            let ok = b.and(okk, okc);
            let vb = b.if_else(
                ok,
                |b| {
                    let pc = b.madd(gc, sbn, baseb);
                    let p = b.madd(gk, sbk, pc);
                    let xb = b.load(bv, &[p]);
                    vec![widen(b, xb)]
                },
                |_| vec![zf],
            )[0];
            b.store(vb, tb, &[br, bc]);
        });
        b.barrier(hrx_loom::build::Barrier::Workgroup);
        let mut acc = acc.to_vec();
        for q in 0..bk {
            let kq = b.index(n64(q));
            let av_q: Vec<_> = ro.iter().map(|&r| b.load(ta, &[kq, r])).collect();
            let bv_q: Vec<_> = co.iter().map(|&cc| b.load(tb, &[kq, cc])).collect();
            for i in 0..tm {
                for j in 0..tn {
                    acc[i * tn + j] = b.fmaf(av_q[i], bv_q[j], acc[i * tn + j]);
                }
            }
        }
        b.barrier(hrx_loom::build::Barrier::Workgroup);
        acc
    });
    let epilogue = F32Epilogue::new(&mut k, &args, bi, act);
    for i in 0..tm {
        let er = k.add(row0, ro[i]);
        let okr = k.cmp(IntPredicate::Ult, er, m);
        let start = epilogue.row_start(&mut k, er);
        for j in 0..tn {
            let ec = k.add(col0, co[j]);
            let okc = k.cmp(IntPredicate::Ult, ec, n);
            let ok = k.and(okr, okc);
            epilogue.store(&mut k, ok, (start, ec), res[i * tn + j]);
        }
    }
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_loom::{Compiler, Specialization};

    #[test]
    fn every_tiling_compiles_for_both_targets() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = Compiler::for_target(None, &target).unwrap();
            for (dtype, mn, fast) in [
                (DType::F32, (8192, 8192, 1), (true, true)),
                (DType::F16, (100, 8192, 1), (false, true)),
                (DType::F32, (128, 384, 1), (true, true)),
                (DType::F32, (20, 20, 3), (true, false)),
            ] {
                let key = tiled_key(&target, dtype, mn, fast, Some(UnaryOp::Gelu));
                compiler
                    .module(&key.source())
                    .and_then(|m| m.compile_uncached(&Specialization::new("@matmul")))
                    .unwrap_or_else(|e| panic!("{} {dtype} {mn:?}: {e}", target.name));
            }
        }
    }
}

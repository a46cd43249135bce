//! The cooperative-matrix matmul kernel, built: batched `C[b, i, j] =
//! act(sum_k A[b, i, k] * B[b, k, j] + bias[j])` with f16 A and B and f32
//! accumulation on 16x16x16 fragments.
//!
//! A workgroup of `sgm x sgn` subgroups computes a `bm x bn` tile of C,
//! each subgroup `bm / sgm x bn / sgn` of it as 16 x 16 accumulator
//! fragments. Each k step stages a `bm x bk` tile of A and a `bk x bn`
//! tile of B (n-major `bn x bk` for a B contiguous along k, whose
//! fragments are then loaded column-major) in f16 workgroup memory, the
//! next step's global loads issued before this step's products (see
//! [`copies`](super::copies)). The epilogue goes through a per-subgroup
//! 16 x 16 f32 staging tile so bias, activation and the bounds check are
//! per element (see [`epilogue`](super::epilogue)).

use super::copies::{Consts, CoopLayout, Env, Operand};
use super::epilogue::Epilogue;
use super::{CoopTiles, fragment};
use crate::ops::UnaryOp;
use crate::ops::matmul::abi::{MatmulArgs, tile_launch};
use hrx_loom::build::{Barrier, Built, CoopLayout as Major, Extent, Mat, Value};
use hrx_loom::ir::{Axis, CoopRole, Scalar};

impl CoopTiles {
    /// The kernel for operands laid out as `layout` (already passed
    /// through `usable`), with `act` after the bias, storing C in f16
    /// where `out_f16` (rounded once, from the f32 result), else f32.
    pub(super) fn kernel(&self, layout: CoopLayout, act: Option<UnaryOp>, out_f16: bool) -> Built {
        let n64 = |v: usize| v as u64;
        let (fa_ty, fb_ty, fc_ty) = (
            fragment(Scalar::F16, CoopRole::A),
            fragment(Scalar::F16, CoopRole::B),
            fragment(Scalar::F32, CoopRole::C),
        );
        let (wm, wn) = (self.bm / 16 / self.sgm, self.bn / 16 / self.sgn);
        let crows = self.sgm * self.sgn * 16;

        let (mut k, args) = tile_launch("matmul_coop", (self.bm, self.bn), self.threads(), false);
        let MatmulArgs {
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
        } = args;
        let zero = k.offset(0);
        let views = self.copy_views(&mut k, layout, zero, [a, bbuf], [la, lb]);
        let biasv = k.buffer_view(bias, zero, [lbias.into()], Scalar::F32);
        let c_elem = if out_f16 { Scalar::F16 } else { Scalar::F32 };
        let cv = k.buffer_view(c, zero, [lc.into()], c_elem);
        let abytes = k.offset(n64(self.a_bytes()));
        let bbytes = k.offset(n64(self.b_bytes()));
        let cbytes = k.offset(n64(self.c_bytes()));
        let ma = k.alloca_workgroup(abytes, 16);
        let mb = k.alloca_workgroup(bbytes, 16);
        let mc = k.alloca_workgroup(cbytes, 16);
        let ta = k.buffer_view(
            ma,
            zero,
            [Extent::from(self.bm), Extent::from(self.pa())],
            Scalar::F16,
        );
        let tb_dims = if layout.wide_bt {
            [self.bn, self.pbt()]
        } else {
            [self.bk, self.pb()]
        };
        let tb = k.buffer_view(mb, zero, tb_dims.map(Extent::from), Scalar::F16);
        let tc = k.buffer_view(
            mc,
            zero,
            [Extent::from(crows), Extent::from(16usize)],
            Scalar::F32,
        );
        let [
            c0,
            c1,
            c16,
            cbm,
            cbn,
            cbk,
            cbk1,
            cth,
            ca,
            cb,
            csgn,
            cfm,
            cfn,
        ] = [
            0,
            1,
            16,
            self.bm,
            self.bn,
            self.bk,
            self.bk - 1,
            self.threads(),
            self.bm * self.bk,
            self.bk * self.bn,
            self.sgn,
            self.bm / self.sgm,
            self.bn / self.sgn,
        ]
        .map(|v| k.index(n64(v)));
        let hzero = k.float(0.0, Scalar::F16);
        let tid = k.workitem_id(Axis::X);
        let sg = k.subgroup_id();
        let wgx = k.workgroup_id(Axis::X);
        let wgy = k.workgroup_id(Axis::Y);
        let bi = k.workgroup_id(Axis::Z);
        let row0 = k.mul(wgy, cbm);
        let col0 = k.mul(wgx, cbn);
        let sgr = k.div(sg, csgn);
        let sgc = k.rem(sg, csgn);
        let frow = k.mul(sgr, cfm);
        let fcol = k.mul(sgc, cfn);
        let srow = k.mul(sg, c16);
        let basea = k.madd(bi, sab, oa);
        let baseb = k.madd(bi, sbb, ob);
        let kp = k.add(kk, cbk1);
        let steps = k.div(kp, cbk);
        // This subgroup's fragment rows and columns, and zero accumulators.
        let fro: Vec<_> = (0..wm)
            .map(|i| {
                let off = k.index(n64(16 * i));
                k.add(frow, off)
            })
            .collect();
        let fco: Vec<_> = (0..wn)
            .map(|j| {
                let off = k.index(n64(16 * j));
                k.add(fcol, off)
            })
            .collect();
        let zeros: Vec<Value<Mat>> = (0..wm * wn).map(|_| k.coop_zero(fc_ty)).collect();
        let env = Env {
            c: Consts {
                c0,
                c1,
                c2: views.c2,
                c4: views.c4,
                c8: views.c8,
                cq: views.cq,
            },
            zq: views.zq,
            hzero,
            tid,
            row0,
            col0,
            m,
            n,
            k: kk,
            sam,
            sak,
            sbn,
            sbk,
            basea,
            baseb,
            ca,
            cb,
            cth,
            av: views.av,
            bv: views.bv,
            ta,
            tb,
        };
        let copies = self.copy_setup(&mut k, &env, layout, &views);
        let operands = [(Operand::A, &copies[0]), (Operand::B, &copies[1])];
        let k0 = k.add(c0, c0);
        for operand in operands {
            self.prologue(&mut k, &env, operand, k0);
        }
        k.barrier(Barrier::Workgroup);
        let res = k.for_carry(c0, steps, c1, &zeros, |b, t, acc| {
            let t1 = b.add(t, c1);
            let kn = b.mul(t1, cbk);
            let fetched: Vec<_> = operands
                .iter()
                .map(|(_, copy)| self.prefetch(b, &env, copy, (kn, t1)))
                .collect();
            let mut acc = acc.to_vec();
            for s in 0..self.bk / 16 {
                let ko = b.index(n64(16 * s));
                let fa: Vec<_> = fro
                    .iter()
                    .map(|&r| b.coop_load(Major::RowMajor, ta, [r, ko], fa_ty))
                    .collect();
                let fb: Vec<_> = fco
                    .iter()
                    .map(|&cc| {
                        if layout.wide_bt {
                            b.coop_load(Major::ColMajor, tb, [cc, ko], fb_ty)
                        } else {
                            b.coop_load(Major::RowMajor, tb, [ko, cc], fb_ty)
                        }
                    })
                    .collect();
                for i in 0..wm {
                    for j in 0..wn {
                        acc[i * wn + j] = b.coop_mma(fa[i], fb[j], acc[i * wn + j]);
                    }
                }
            }
            b.barrier(Barrier::Workgroup);
            for (operand, fetched) in operands.iter().zip(&fetched) {
                self.stage(b, &env, *operand, kn, fetched);
            }
            b.barrier(Barrier::Workgroup);
            acc
        });
        let epilogue = Epilogue {
            srow,
            tile: tc,
            bias: biasv,
            c: cv,
            row0,
            col0,
            batch: bi,
            m,
            n,
            sbias,
            obias,
            scb,
            oc,
            act,
            out_f16,
            wide: Epilogue::wide_for(layout.wide_c, act),
        };
        for i in 0..wm {
            for j in 0..wn {
                epilogue.store(&mut k, res[i * wn + j], (fro[i], fco[j]));
            }
        }
        Built::kernel(k.finish())
    }
}

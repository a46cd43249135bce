//! The split-k kernel, built for one plan: tile copies, fragment
//! multiplies, pipelining, the scratch stores and the last workgroup's sum.
//!
//! Grid: column slabs of `BN` along x, the splits along y, the batch along
//! z. A workgroup multiplies its slab of B over its k range by all `mp`
//! rows of A on 16x16x16 fragments (subgroup `g` takes column fragment
//! `g % 4` and row group `g / 4`), storing the f32 sums into its plane of
//! the scratch (padded to whole fragments, so no bounds checks). Then,
//! behind a storage barrier, one work item counts the slab's finished
//! splits with an atomic; the workgroup that finishes last (the counter
//! then reset) sums the splits in order, adds bias and activation and
//! stores C.

use super::finish::Finish;
use super::{BN, SplitK, TileLoad};
use crate::ops::UnaryOp;
use crate::ops::registry::{Generator, KernelKey, KernelSource};
use crate::ops::split_count::last_split;
use hrx_loom::build::{
    Barrier, Built, CoopLayout as Major, Index, KernelBuilder, Mat, Num, Value, View,
};
use hrx_loom::ir::{Axis, CoopMatType, CoopRole, IntPredicate, Scalar};

/// Everything the copies and loads read, defined before them.
pub(super) struct Env {
    pub(super) c0: Value<Index>,
    pub(super) c4: Value<Index>,
    /// Halves per quad (8).
    pub(super) cq: Value<Index>,
    /// 0..4 and their doubles.
    pub(super) l: [Value<Index>; 4],
    pub(super) ce: [Value<Index>; 4],
    pub(super) uz4: Value<Num>,
    pub(super) hzero: Value<Num>,
    pub(super) tid: Value<Index>,
    pub(super) kend: Value<Index>,
    pub(super) m: Value<Index>,
    pub(super) n: Value<Index>,
    pub(super) sam: Value<Index>,
    pub(super) sak: Value<Index>,
    pub(super) sbn: Value<Index>,
    pub(super) sbk: Value<Index>,
    pub(super) basea: Value<Index>,
    pub(super) baseb: Value<Index>,
    pub(super) col0: Value<Index>,
    pub(super) av: Value<View>,
    pub(super) bv: Value<View>,
}

fn frag(elem: Scalar, role: CoopRole) -> CoopMatType {
    CoopMatType {
        rows: 16,
        cols: 16,
        elem,
        role,
    }
}

impl SplitK {
    pub(super) fn key(&self, act: Option<UnaryOp>) -> KernelKey {
        let plan = *self;
        KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("matmul_splitk {plan:?} {act:?}"),
                move || plan.kernel(act),
            )),
            symbol: "matmul_splitk",
            config: Vec::new(),
        }
    }

    fn kernel(&self, act: Option<UnaryOp>) -> Built {
        let (mp, bk, threads) = (self.mp, self.bk, self.threads());
        let (tile_a, tile_b) = (self.tile_a(), self.tile_b());
        let n64 = |v: usize| v as u64;
        let (fa_ty, fb_ty, fc_ty) = (
            frag(Scalar::F16, CoopRole::A),
            frag(Scalar::F16, CoopRole::B),
            frag(Scalar::F32, CoopRole::C),
        );
        // Row fragments per subgroup.
        let mf = mp / 16 / self.groups;

        let mut k = KernelBuilder::new("matmul_splitk");
        let [wn, wsplits, batch] = ["n", "splits", "batch"].map(|name| k.workload(name));
        let one = k.index(1);
        let bn_l = k.index(n64(BN));
        let ln = k.index(n64(BN - 1));
        let pn = k.add(wn, ln);
        let gx = k.div(pn, bn_l);
        let wg = k.index(n64(threads));
        let mut k = k.launch_config([gx, wsplits, batch], [wg, one, one]);

        let [m, n, kk, ks, sab, sam, sak, oa, la, sbb, sbk, sbn, ob, lb] = [
            "m", "n", "k", "ks", "sab", "sam", "sak", "oa", "la", "sbb", "sbk", "sbn", "ob", "lb",
        ]
        .map(|name| k.arg_index(name));
        let [splits, npad, lw, sbias, obias, lbias, scb, oc, lc, lcnt] = [
            "splits", "npad", "lw", "sbias", "obias", "lbias", "scb", "oc", "lc", "lcnt",
        ]
        .map(|name| k.arg_index(name));
        let a = k.arg_buffer("a", true);
        let bbuf = k.arg_buffer("b", true);
        let w = k.arg_buffer("w", false);
        let bias = k.arg_buffer("bias", true);
        let c = k.arg_buffer("c", false);
        let cnt = k.arg_buffer("cnt", false);
        let zero = k.offset(0);
        let mut view = |name: &str, buf, len: Value<Index>, load: TileLoad| match load {
            TileLoad::Quad | TileLoad::QuadAlongK => {
                let two = k.index(2);
                let words = k.div(len, two);
                k.hint(name)
                    .buffer_view(buf, zero, [words.into()], Scalar::U32)
            }
            TileLoad::Scalar { .. } => {
                k.hint(name)
                    .buffer_view(buf, zero, [len.into()], Scalar::F16)
            }
        };
        let av = view("av", a, la, self.a);
        let bv = view("bv", bbuf, lb, self.b);
        let wl = k.hint("wl").buffer_view(w, zero, [lw.into()], Scalar::F32);
        let abytes = k.offset(n64(mp * (bk + 8) * 2));
        let bbytes = k.offset(n64(tile_b.bytes()));
        let ma = k.alloca_workgroup(abytes, 16);
        let mb = k.alloca_workgroup(bbytes, 16);
        let ta = k
            .hint("ta")
            .buffer_view(ma, zero, tile_a.dims(), Scalar::F16);
        let tb = k
            .hint("tb")
            .buffer_view(mb, zero, tile_b.dims(), Scalar::F16);
        let [c0, c1, cbn, cbk, cbk1, cmp, cfn] =
            [0, 1, BN, bk, bk - 1, mp, 16].map(|v| k.index(n64(v)));
        let hzero = k.float(0.0, Scalar::F16);
        let tid = k.workitem_id(Axis::X);
        let sg = k.subgroup_id();
        let wgx = k.workgroup_id(Axis::X);
        let split = k.workgroup_id(Axis::Y);
        let bi = k.workgroup_id(Axis::Z);
        let col0 = k.mul(wgx, cbn);
        let kbeg = k.mul(split, ks);
        let kstop = k.add(kbeg, ks);
        let kend = k.min(kstop, kk);
        let klen = k.sub(kend, kbeg);
        let kp = k.add(klen, cbk1);
        let steps = k.div(kp, cbk);
        let basea = k.madd(bi, sab, oa);
        let baseb = k.madd(bi, sbb, ob);
        // Subgroup g takes column fragment g % 4 and row group g / 4.
        let cq = k.index(8);
        let c4 = k.index(4);
        let uzs = k.int(0, Scalar::U32);
        let uz4 = k.splat(uzs, 4);
        let sgc = k.rem(sg, c4);
        let fcol = k.mul(sgc, cfn);
        let sgr = k.div(sg, c4);
        let crg = k.index(n64(16 * mf));
        let frow = k.mul(sgr, crg);
        let mut l = [c0; 4];
        let mut ce = [c0; 4];
        for p in 0..4 {
            l[p] = k.index(n64(p));
            ce[p] = k.index(n64(2 * p));
        }
        let env = Env {
            c0,
            c4,
            cq,
            l,
            ce,
            uz4,
            hzero,
            tid,
            kend,
            m,
            n,
            sam,
            sak,
            sbn,
            sbk,
            basea,
            baseb,
            col0,
            av,
            bv,
        };
        let place_a = tile_a.setup(&mut k, &env);
        let place_b = tile_b.setup(&mut k, &env);
        let addr_a = self.setup_a(&mut k, &env, &place_a);
        let addr_b = self.setup_b(&mut k, &env, &place_b);

        let fco = k.add(fcol, c0);
        let mut fro = Vec::with_capacity(mf);
        let mut zeros: Vec<Value<Mat>> = Vec::with_capacity(mf);
        for i in 0..mf {
            let off = k.index(n64(16 * i));
            fro.push(k.add(frow, off));
            zeros.push(k.coop_zero(fc_ty));
        }
        let fetch = |b: &mut hrx_loom::build::Builder, k0| {
            let xa = self.fetch_a(b, &env, (&place_a, &addr_a), k0);
            let xb = self.fetch_b(b, &env, (&place_b, &addr_b), k0);
            (xa, xb)
        };
        let stores = |b: &mut hrx_loom::build::Builder, (xa, xb): &(Vec<_>, Vec<_>)| {
            tile_a.store(b, &env, &place_a, ta, xa);
            tile_b.store(b, &env, &place_b, tb, xb);
        };
        let multiply = |b: &mut hrx_loom::build::Builder, acc: &mut Vec<Value<Mat>>| {
            for s in 0..bk / 16 {
                let ko = b.index(n64(16 * s));
                // An n-major tile holds B's fragments column by column.
                let fb = if self.b == TileLoad::QuadAlongK {
                    b.coop_load(Major::ColMajor, tb, [fco, ko], fb_ty)
                } else {
                    b.coop_load(Major::RowMajor, tb, [ko, fco], fb_ty)
                };
                for (i, &r) in fro.iter().enumerate() {
                    let fa = b.coop_load(Major::RowMajor, ta, [r, ko], fa_ty);
                    acc[i] = b.coop_mma(fa, fb, acc[i]);
                }
            }
        };
        // Pipelined: the split's first step before the loop, each
        // iteration loading the next; else load, store and multiply in
        // turn.
        if self.prefetch {
            let x = fetch(&mut k, kbeg);
            stores(&mut k, &x);
            k.barrier(Barrier::Workgroup);
        }
        let res = k.for_carry(c0, steps, c1, &zeros, |b, t, acc| {
            let t1 = b.add(t, c1);
            let mut acc = acc.to_vec();
            if self.prefetch {
                let kn = b.madd(t1, cbk, kbeg);
                let x = fetch(b, kn);
                multiply(b, &mut acc);
                b.barrier(Barrier::Workgroup);
                stores(b, &x);
                b.barrier(Barrier::Workgroup);
            } else {
                let kn = b.madd(t, cbk, kbeg);
                let x = fetch(b, kn);
                stores(b, &x);
                b.barrier(Barrier::Workgroup);
                multiply(b, &mut acc);
                b.barrier(Barrier::Workgroup);
            }
            acc
        });
        let wplane = k.madd(bi, splits, split);
        let wrow0 = k.mul(wplane, cmp);
        let wcol = k.add(col0, fcol);
        // The scratch is padded to whole fragments (mp rows per split,
        // npad a multiple of BN columns), so the sums go straight to it.
        let wrows = k.div(lw, npad);
        let wv = k.buffer_view(w, zero, [wrows.into(), npad.into()], Scalar::F32);
        for (i, &r) in fro.iter().enumerate() {
            let wr = k.add(wrow0, r);
            k.coop_store(Major::RowMajor, res[i], wv, [wr, wcol]);
        }
        let biasv = k
            .hint("biasv")
            .buffer_view(bias, zero, [lbias.into()], Scalar::F32);
        let cv = k.hint("cv").buffer_view(c, zero, [lc.into()], Scalar::F32);
        let cntv = k
            .hint("cntv")
            .buffer_view(cnt, zero, [lcnt.into()], Scalar::U32);
        let slabs = k.div(npad, cbn);
        let tile = k.madd(bi, slabs, wgx);
        let first = k.cmp(IntPredicate::Eq, tid, c0);
        let finish = last_split(&mut k, cntv, tile, splits, first);
        let act = act.map(|op| op.fragment(Scalar::F32));
        let sums = self.splits;
        k.if_(finish, |b| {
            // Work item t takes column t % BN of the slab and rows t / BN +
            // q * (threads / BN): all its sums first (the scratch holds
            // every padded row, so the loads need no guard), then the bias,
            // activation and stores of the rows inside C.
            let fj = b.rem(tid, cbn);
            let fi0 = b.div(tid, cbn);
            let gj = b.add(col0, fj);
            let jin = b.cmp(IntPredicate::Ult, gj, n);
            let plane = b.mul(cmp, npad);
            let fs0 = b.mul(bi, splits);
            let crow0 = b.madd(bi, scb, oc);
            let zf = b.float(0.0, Scalar::F32);
            let bj = b.if_else(
                jin,
                |b| {
                    let pb = b.madd(gj, sbias, obias);
                    vec![b.load(biasv, &[pb])]
                },
                |_| vec![zf],
            )[0];
            let finish = Finish {
                fi0,
                gj,
                jin,
                fs0,
                plane,
                crow0,
                bj,
                zf,
                wl,
                cv,
                cmp,
                npad,
                m,
                n,
                splits,
                c0,
                c1,
            };
            finish.build(
                b,
                (mp.div_ceil(threads / BN), threads / BN, sums),
                act.as_ref(),
            );
        });
        Built::kernel(k.finish())
    }
}

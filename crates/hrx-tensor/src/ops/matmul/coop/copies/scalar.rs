//! The element-by-element copies of A and B, for layouts a wide copy
//! cannot take.

use super::Env;
use crate::ops::matmul::coop::CoopTiles;
use crate::ops::matmul::tiled::pos;
use hrx_loom::build::{Builder, Index, Value};
use hrx_loom::ir::IntPredicate;

impl CoopTiles {
    /// Element-by-element copy of the tile of A at `k0`; `k_fast` orders
    /// the elements so consecutive work items read consecutive addresses.
    pub(super) fn scalar_a(&self, b: &mut Builder, env: &Env, k_fast: bool, k0: Value<Index>) {
        let (bm, bk) = (self.bm, self.bk);
        b.for_each(env.tid, env.ca, env.cth, |b, e| {
            let (ar, ac) = pos(b, e, k_fast, (bm, bk));
            let gr = b.add(env.row0, ar);
            let gk = b.add(k0, ac);
            let okr = b.cmp(IntPredicate::Ult, gr, env.m);
            let okk = b.cmp(IntPredicate::Ult, gk, env.k);
            let ok = b.and(okr, okk);
            let x = b.if_else(
                ok,
                |b| {
                    let pr = b.madd(gr, env.sam, env.basea);
                    let p = b.madd(gk, env.sak, pr);
                    vec![b.load(env.av, &[p])]
                },
                |_| vec![env.hzero],
            )[0];
            b.store(x, env.ta, &[ar, ac]);
        });
    }

    /// Element-by-element copy of the tile of B at `k0`.
    pub(super) fn scalar_b(&self, b: &mut Builder, env: &Env, n_fast: bool, k0: Value<Index>) {
        let (bk, bn) = (self.bk, self.bn);
        b.for_each(env.tid, env.cb, env.cth, |b, e| {
            let (br, bc) = pos(b, e, n_fast, (bk, bn));
            let gk = b.add(k0, br);
            let gc = b.add(env.col0, bc);
            let okk = b.cmp(IntPredicate::Ult, gk, env.k);
            let okc = b.cmp(IntPredicate::Ult, gc, env.n);
            let ok = b.and(okk, okc);
            let x = b.if_else(
                ok,
                |b| {
                    let pc = b.madd(gc, env.sbn, env.baseb);
                    let p = b.madd(gk, env.sbk, pc);
                    vec![b.load(env.bv, &[p])]
                },
                |_| vec![env.hzero],
            )[0];
            b.store(x, env.tb, &[br, bc]);
        });
    }
}

//! The wide copies of A and B: where each work item's 16-byte groups lie
//! in its matrix, and how a k step moves them.

use super::Env;
use super::wide::{Place, Wide};
use crate::ops::matmul::coop::CoopTiles;
use hrx_loom::build::{Bool, Builder, Index, Num, Value, View};
use hrx_loom::ir::IntPredicate;

/// How a k step moves a wide copy.
enum Along {
    /// Tile rows are rows of the operand, groups run along k: the word
    /// offset of a step is `step * kw`, the bound is on the group's k.
    K,
    /// Tile rows are k, groups run along n: each copy's k is bounded.
    N,
}

/// One operand's wide copy, set up before the k loop.
pub(crate) struct WideCopy {
    wide: Wide,
    along: Along,
    place: Place,
    /// Whether each copy's row (and, along n, column group) lies in the
    /// matrix and the tile.
    okt: Vec<Value<Bool>>,
    /// Each copy's word index at k = 0.
    w: Vec<Value<Index>>,
    /// Words one k step moves.
    kw: Value<Index>,
    view: Value<View>,
    tile: Value<View>,
}

impl CoopTiles {
    pub(super) fn wide_a(&self) -> Wide {
        Wide {
            name: "a",
            rows: self.bm,
            cols: self.bk,
            pitch: self.pa(),
            threads: self.threads(),
            sg: self.sg,
        }
    }
    /// B staged n-major (`BN x BK`, rows padded like A's) for a B that is
    /// contiguous along k.
    pub(super) fn wide_bt(&self) -> Wide {
        Wide {
            name: "b",
            rows: self.bn,
            cols: self.bk,
            pitch: self.pbt(),
            threads: self.threads(),
            sg: self.sg,
        }
    }
    pub(super) fn wide_b(&self) -> Wide {
        Wide {
            name: "b",
            rows: self.bk,
            cols: self.bn,
            pitch: self.pb(),
            threads: self.threads(),
            sg: self.sg,
        }
    }

    /// A: tile rows are rows of A (`row0 + r`), groups run along k.
    pub(super) fn wide_a_copy(&self, b: &mut Builder, env: &Env, kw: Value<Index>) -> WideCopy {
        let rows = [env.row0, env.m, env.sam, env.basea];
        rows_along_k(b, env, self.wide_a(), rows, (kw, env.av, env.ta))
    }

    /// A transposed B (contiguous along k): tile rows are columns of B
    /// (`col0 + r`), groups run along k, as for A.
    pub(super) fn wide_bt_copy(&self, b: &mut Builder, env: &Env, kw: Value<Index>) -> WideCopy {
        let rows = [env.col0, env.n, env.sbn, env.baseb];
        rows_along_k(b, env, self.wide_bt(), rows, (kw, env.bv, env.tb))
    }

    /// B: tile rows are k (`k0 + r`), groups run along n. One k step
    /// moves every copy by `BK * sbk / 2` words.
    pub(super) fn wide_b_copy(&self, b: &mut Builder, env: &Env) -> WideCopy {
        let c = &env.c;
        let wide = self.wide_b();
        let place = wide.setup(b, env);
        let gc = b.add(env.col0, place.col);
        let okc = b.cmp(IntPredicate::Ult, gc, env.n);
        let pc = b.add(env.baseb, gc);
        let s8 = b.div(env.sbk, c.c8);
        let kc = b.index(self.bk as u64 * 4);
        let kw = b.mul(s8, kc);
        let mut okt = Vec::new();
        let mut w = Vec::new();
        for i in 0..wide.count() {
            okt.push(wide.narrow(b, &place, i, okc));
            let h = b.madd(place.r[i], env.sbk, pc);
            let q = b.div(h, c.c8);
            w.push(b.mul(q, c.c4));
        }
        WideCopy {
            wide,
            along: Along::N,
            place,
            okt,
            w,
            kw,
            view: env.bv,
            tile: env.tb,
        }
    }
}

/// Wide copies of an operand staged as rows along k: tile row `r` is row
/// `first + r` of the operand (inside when below `bound`, `stride`
/// elements apart from `base`). The word index of copy `i` at k step `t`
/// is its word at k = 0 plus `t * BK / 2`.
fn rows_along_k(
    b: &mut Builder,
    env: &Env,
    wide: Wide,
    [first, bound, stride, base]: [Value<Index>; 4],
    (kw, view, tile): (Value<Index>, Value<View>, Value<View>),
) -> WideCopy {
    let c = &env.c;
    let place = wide.setup(b, env);
    let mut okt = Vec::new();
    let mut w = Vec::new();
    for i in 0..wide.count() {
        let gr = b.add(first, place.r[i]);
        let okr = b.cmp(IntPredicate::Ult, gr, bound);
        okt.push(wide.narrow(b, &place, i, okr));
        let p = b.madd(gr, stride, base);
        let h = b.add(p, place.col);
        let q = b.div(h, c.c8);
        w.push(b.mul(q, c.c4));
    }
    WideCopy {
        wide,
        along: Along::K,
        place,
        okt,
        w,
        kw,
        view,
        tile,
    }
}

impl WideCopy {
    /// The loads of the tile at `k0` (step `step`).
    pub(super) fn fetch(
        &self,
        b: &mut Builder,
        env: &Env,
        k0: Value<Index>,
        step: Value<Index>,
    ) -> Vec<Value<Num>> {
        let mut ok = Vec::new();
        let mut word = Vec::new();
        match self.along {
            Along::K => {
                let gk = b.add(k0, self.place.col);
                let okk = b.cmp(IntPredicate::Ult, gk, env.k);
                let kw = b.mul(step, self.kw);
                for (&okt, &w) in self.okt.iter().zip(&self.w) {
                    ok.push(b.and(okt, okk));
                    word.push(b.add(w, kw));
                }
            }
            Along::N => {
                let kw = b.mul(step, self.kw);
                for ((&okt, &w), &r) in self.okt.iter().zip(&self.w).zip(&self.place.r) {
                    let gk = b.add(k0, r);
                    let okk = b.cmp(IntPredicate::Ult, gk, env.k);
                    ok.push(b.and(okt, okk));
                    word.push(b.add(w, kw));
                }
            }
        }
        self.wide.fetch(b, env, self.view, &ok, &word)
    }

    /// The quads `x` into the tile.
    pub(super) fn store(&self, b: &mut Builder, env: &Env, x: &[Value<Num>]) {
        self.wide.store(b, env, &self.place, self.tile, x);
    }
}

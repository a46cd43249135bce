//! The global loads of the split-k kernel: each work item's addressing
//! of A and B (set up before the k loop) and the loads of one step's
//! tiles, zero outside the matrices and past the split.

use super::source::Env;
use super::tiles::Place;
use super::{SplitK, TileLoad};
use hrx_loom::build::{Bool, Builder, Index, Num, Value, View};
use hrx_loom::ir::IntPredicate;

/// One operand's addressing, fixed before the k loop.
pub(super) enum Addressing {
    /// 16-byte loads along k (A, or a transposed B): whether each copy's
    /// row lies in the matrix, and the quad index of its start plus the
    /// work item's column group.
    AlongK {
        okr: Vec<Value<Bool>>,
        p: Vec<Value<Index>>,
    },
    /// 16-byte loads of B along n: the k stride in quads, whether the
    /// column group lies in B, and each copy's quad index at k = 0.
    AlongN {
        sbkq: Value<Index>,
        okc: Value<Bool>,
        w0: Vec<Value<Index>>,
    },
    /// Element loads: whether each copy's row (A) or column (B) lies in
    /// the matrix, and its element index at k = 0.
    Elements {
        ok: Vec<Value<Bool>>,
        p: Vec<Value<Index>>,
    },
}

impl SplitK {
    /// A's addressing (after its tile setup).
    pub(super) fn setup_a(&self, b: &mut Builder, env: &Env, place: &Place) -> Addressing {
        if self.a == TileLoad::Quad {
            return rows_along_k(b, env, place, [env.c0, env.m, env.sam, env.basea]);
        }
        let (mut ok, mut p) = (Vec::new(), Vec::new());
        for &r in place.rows() {
            ok.push(b.cmp(IntPredicate::Ult, r, env.m));
            p.push(b.madd(r, env.sam, env.basea));
        }
        Addressing::Elements { ok, p }
    }

    /// B's addressing (after its tile setup).
    pub(super) fn setup_b(&self, b: &mut Builder, env: &Env, place: &Place) -> Addressing {
        match self.b {
            // Tile rows are columns of B (`col0 + r`), quads run along k.
            TileLoad::QuadAlongK => {
                rows_along_k(b, env, place, [env.col0, env.n, env.sbn, env.baseb])
            }
            TileLoad::Quad => {
                let sbkq = b.div(env.sbk, env.cq);
                let col = place.group().map_or(env.c0, |(_, col)| col);
                let gc = b.add(env.col0, col);
                let okc = b.cmp(IntPredicate::Ult, gc, env.n);
                let gh = b.add(env.baseb, gc);
                let gq = b.div(gh, env.cq);
                let w0 = place.rows().iter().map(|&r| b.madd(r, sbkq, gq)).collect();
                Addressing::AlongN { sbkq, okc, w0 }
            }
            TileLoad::Scalar { .. } => {
                let (mut ok, mut p) = (Vec::new(), Vec::new());
                for &c in place.cols() {
                    let gc = b.add(env.col0, c);
                    ok.push(b.cmp(IntPredicate::Ult, gc, env.n));
                    p.push(b.madd(gc, env.sbn, env.baseb));
                }
                Addressing::Elements { ok, p }
            }
        }
    }

    /// The global loads of A's tile at k offset `k0` (zero outside the
    /// matrix and past the split).
    pub(super) fn fetch_a(
        &self,
        b: &mut Builder,
        env: &Env,
        (place, addressing): (&Place, &Addressing),
        k0: Value<Index>,
    ) -> Vec<Value<Num>> {
        match addressing {
            Addressing::AlongK { okr, p } => fetch_along_k(b, env, place, (okr, p), env.av, k0),
            Addressing::Elements { ok, p } => {
                let mut x = Vec::new();
                for ((&okr, &pr), &c) in ok.iter().zip(p).zip(place.cols()) {
                    let gk = b.add(k0, c);
                    let okk = b.cmp(IntPredicate::Ult, gk, env.kend);
                    let okv = b.and(okr, okk);
                    x.push(
                        b.if_else(
                            okv,
                            |b| {
                                let at = b.madd(gk, env.sak, pr);
                                vec![b.load(env.av, &[at])]
                            },
                            |_| vec![env.hzero],
                        )[0],
                    );
                }
                x
            }
            // A is never staged along n.
            Addressing::AlongN { .. } => Vec::new(),
        }
    }

    /// The global loads of B's tile at k offset `k0`.
    pub(super) fn fetch_b(
        &self,
        b: &mut Builder,
        env: &Env,
        (place, addressing): (&Place, &Addressing),
        k0: Value<Index>,
    ) -> Vec<Value<Num>> {
        match addressing {
            Addressing::AlongK { okr, p } => fetch_along_k(b, env, place, (okr, p), env.bv, k0),
            Addressing::AlongN { sbkq, okc, w0 } => {
                let kw = b.mul(k0, *sbkq);
                let mut x = Vec::new();
                for (&r, &w) in place.rows().iter().zip(w0) {
                    let gk = b.add(k0, r);
                    let okk = b.cmp(IntPredicate::Ult, gk, env.kend);
                    let ok = b.and(okk, *okc);
                    x.push(
                        b.if_else(
                            ok,
                            |b| {
                                let q = b.add(w, kw);
                                let at = b.mul(q, env.c4);
                                vec![b.vector_load(env.bv, &[at], 4)]
                            },
                            |_| vec![env.uz4],
                        )[0],
                    );
                }
                x
            }
            Addressing::Elements { ok, p } => {
                let mut x = Vec::new();
                for ((&okc, &pc), &r) in ok.iter().zip(p).zip(place.rows()) {
                    let gk = b.add(k0, r);
                    let okk = b.cmp(IntPredicate::Ult, gk, env.kend);
                    let okv = b.and(okk, okc);
                    x.push(
                        b.if_else(
                            okv,
                            |b| {
                                let at = b.madd(gk, env.sbk, pc);
                                vec![b.load(env.bv, &[at])]
                            },
                            |_| vec![env.hzero],
                        )[0],
                    );
                }
                x
            }
        }
    }
}

/// Addressing of an operand staged as rows along k with 16-byte loads:
/// copy `u`'s row is `first + r_u`, inside when below `bound`, `stride`
/// elements apart from `base`.
fn rows_along_k(
    b: &mut Builder,
    env: &Env,
    place: &Place,
    [first, bound, stride, base]: [Value<Index>; 4],
) -> Addressing {
    let rsq = b.div(stride, env.cq);
    let baseq = b.div(base, env.cq);
    let g = place.group().map_or(env.c0, |(g, _)| g);
    let (mut okr, mut p) = (Vec::new(), Vec::new());
    for &r in place.rows() {
        let gr = b.add(first, r);
        okr.push(b.cmp(IntPredicate::Ult, gr, bound));
        let p0 = b.madd(gr, rsq, baseq);
        p.push(b.add(p0, g));
    }
    Addressing::AlongK { okr, p }
}

/// The 16-byte loads along k at `k0` of an operand addressed by
/// `rows_along_k` (zero outside the matrix and past the split).
fn fetch_along_k(
    b: &mut Builder,
    env: &Env,
    place: &Place,
    (okr, p): (&[Value<Bool>], &[Value<Index>]),
    view: Value<View>,
    k0: Value<Index>,
) -> Vec<Value<Num>> {
    let col = place.group().map_or(env.c0, |(_, col)| col);
    let gk = b.add(k0, col);
    let okk = b.cmp(IntPredicate::Ult, gk, env.kend);
    let kq = b.div(k0, env.cq);
    okr.iter()
        .zip(p)
        .map(|(&okr, &pu)| {
            let ok = b.and(okr, okk);
            b.if_else(
                ok,
                |b| {
                    let q = b.add(pu, kq);
                    let w = b.mul(q, env.c4);
                    vec![b.vector_load(view, &[w], 4)]
                },
                |_| vec![env.uz4],
            )[0]
        })
        .collect()
}

//! The last workgroup of a slab: each work item sums the splits' partial
//! sums of its outputs, then adds the bias, applies the activation and
//! stores the rows inside C.

use hrx_loom::build::{Bool, Builder, Fragment, Index, Num, Value, View};
use hrx_loom::ir::IntPredicate;

/// Splits up to which a sum is unrolled (all loads in flight at once).
const SUM_UNROLL: usize = 32;

/// What the finishing work item knows: its first row `fi0`, its column
/// `gj` (and whether it lies in C, `jin`), the scratch view `wl` with
/// `plane` elements between splits, and the values the stores need.
pub(super) struct Finish {
    pub(super) fi0: Value<Index>,
    pub(super) gj: Value<Index>,
    pub(super) jin: Value<Bool>,
    pub(super) fs0: Value<Index>,
    pub(super) plane: Value<Index>,
    pub(super) crow0: Value<Index>,
    pub(super) bj: Value<Num>,
    pub(super) zf: Value<Num>,
    pub(super) wl: Value<View>,
    pub(super) cv: Value<View>,
    /// Padded rows per split, padded columns, rows and columns of C, the
    /// split count, 0 and 1.
    pub(super) cmp: Value<Index>,
    pub(super) npad: Value<Index>,
    pub(super) m: Value<Index>,
    pub(super) n: Value<Index>,
    pub(super) splits: Value<Index>,
    pub(super) c0: Value<Index>,
    pub(super) c1: Value<Index>,
}

impl Finish {
    /// `reps` output rows per work item, `step` rows apart from `fi0`,
    /// `splits` partial sums each, then `act` on each. Every row's loads
    /// come before any store, so they are in flight together.
    pub(super) fn build(
        &self,
        b: &mut Builder,
        (reps, step, splits): (usize, usize, usize),
        act: Option<&Fragment>,
    ) {
        let mut rows = Vec::with_capacity(reps);
        for q in 0..reps {
            let qk = b.index((q * step) as u64);
            let fi = b.add(self.fi0, qk);
            let fr = b.madd(self.fs0, self.cmp, fi);
            let fp = b.madd(fr, self.npad, self.gj);
            rows.push((fi, self.split_sum(b, fp, splits)));
        }
        for (fi, sum) in rows {
            let fin = b.cmp(IntPredicate::Ult, fi, self.m);
            let ok = b.and(fin, self.jin);
            b.if_(ok, |b| {
                let x = b.addf(sum, self.bj);
                let y = match act {
                    Some(f) => b.inline(f, &[x])[0],
                    None => x,
                };
                let fc = b.madd(fi, self.n, self.crow0);
                let ci = b.add(fc, self.gj);
                b.store(y, self.cv, &[ci]);
            });
        }
    }

    /// The f32 sum over `splits` partial sums of one output: the first at
    /// `fp` of the scratch, the next `plane` elements on. Always in split
    /// order, from zero, so the result does not depend on which workgroup
    /// finishes the slab.
    fn split_sum(&self, b: &mut Builder, fp: Value<Index>, splits: usize) -> Value<Num> {
        if splits > SUM_UNROLL {
            return b.for_carry(self.c0, self.splits, self.c1, &[self.zf], |b, sq, acc| {
                let sp = b.madd(sq, self.plane, fp);
                let sv = b.load(self.wl, &[sp]);
                vec![b.addf(acc[0], sv)]
            })[0];
        }
        let sv = b.load(self.wl, &[fp]);
        let mut ss = b.addf(self.zf, sv);
        let mut sp = b.add(fp, self.c0);
        for _ in 1..splits {
            sp = b.add(sp, self.plane);
            let sv = b.load(self.wl, &[sp]);
            ss = b.addf(ss, sv);
        }
        b.addf(ss, self.zf)
    }
}

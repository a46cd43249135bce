//! The reduction kernel, built: one work item per output element (a
//! grid-stride loop over `n = outer * inner` outputs) sums, maximises or
//! averages `len` elements strided by `sk` from `a[oa + o * so + i * si]`
//! (`o`, `i` the outer and inner coordinates), in f32.

use crate::ops::Reduction;
use crate::ops::elementwise::kernels::grid;
use hrx_loom::build::Built;
use hrx_loom::ir::Scalar;

const F32: Scalar = Scalar::F32;

/// The reduce kernel for `reduction`.
pub(crate) fn reduce(reduction: Reduction) -> Built {
    let (mut module, mut k) = grid("reduce", "n", None);
    let [n, len, inner, so, sk, si, oa, la, oo, lo] = [
        "n", "len", "inner", "so", "sk", "si", "oa", "la", "oo", "lo",
    ]
    .map(|x| k.arg_index(x));
    let a = k.arg_buffer("a", false);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], F32);
    let ov = k.buffer_view(out, zero, [lo.into()], F32);
    let c0 = k.index(0);
    let c1 = k.index(1);
    let lenu = k.index_cast(len, Scalar::U32);
    let nf = k.uitofp(lenu, F32);
    k.for_each_in_grid(n, |b, t| {
        let i = b.rem(t, inner);
        let o = b.div(t, inner);
        let b0 = b.madd(o, so, oa);
        let base = b.madd(i, si, b0);
        // The identity of the reduction: what an empty axis gives (the
        // mean divides it by 0 into NaN).
        let init = match reduction {
            Reduction::Max => f64::NEG_INFINITY,
            Reduction::Sum | Reduction::Mean => 0.0,
        };
        let init = b.float(init, F32);
        let total = b.for_carry(c0, len, c1, &[init], |b, kk, acc| {
            let p = b.madd(kk, sk, base);
            let x = b.load(av, &[p]);
            vec![match reduction {
                Reduction::Max => b.maxnumf(acc[0], x),
                Reduction::Sum | Reduction::Mean => b.addf(acc[0], x),
            }]
        })[0];
        // Combining with the identity once more keeps the result of an
        // empty axis the identity itself.
        let res = match reduction {
            Reduction::Sum => b.addf(total, init),
            Reduction::Max => b.maxnumf(total, init),
            Reduction::Mean => b.divf(total, nf),
        };
        let q = b.add(oo, t);
        b.store(res, ov, &[q]);
    });
    module.kernel(k.finish());
    module.finish()
}

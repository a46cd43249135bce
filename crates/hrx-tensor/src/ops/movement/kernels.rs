//! The data-movement kernels, built: strided copy and row gather, for
//! 4-byte elements (moved as `u32`) and 2-byte ones (as `f16`), as
//! grid-stride loops over the output elements.

use crate::ops::elementwise::kernels::{grid, strided_offset, unravel4};
use hrx_loom::build::Built;
use hrx_loom::ir::{IntPredicate, Scalar};

/// `out[po] = a[pa]` over at most four (coalesced) axes, both operands
/// strided, elements of type `t`.
pub(crate) fn copy(t: Scalar) -> Built {
    let (mut module, mut k) = grid("copy", "n", None);
    let n = k.arg_index("n");
    let [d1, d2, d3] = ["d1", "d2", "d3"].map(|x| k.arg_index(x));
    let [sa0, sa1, sa2, sa3, oa, la] =
        ["sa0", "sa1", "sa2", "sa3", "oa", "la"].map(|x| k.arg_index(x));
    let [so0, so1, so2, so3, oo, lo] =
        ["so0", "so1", "so2", "so3", "oo", "lo"].map(|x| k.arg_index(x));
    let a = k.arg_buffer("a", false);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], t);
    let ov = k.buffer_view(out, zero, [lo.into()], t);
    k.for_each_in_grid(n, |b, i| {
        let at = unravel4(b, i, [d1, d2, d3]);
        let pa = strided_offset(b, at, [sa0, sa1, sa2, sa3], oa);
        let po = strided_offset(b, at, [so0, so1, so2, so3], oo);
        let x = b.load(av, &[pa]);
        b.store(x, ov, &[po]);
    });
    module.kernel(k.finish());
    module.finish()
}

/// `out[r, j] = table[idx[r], j]` for rows of `d` elements of type `t`; an
/// index outside `0..rows` (negative ones included, read as u32) gives a
/// row of zeros.
pub(crate) fn gather(t: Scalar) -> Built {
    let (mut module, mut k) = grid("gather", "n", None);
    let [n, d, rows, st0, st1, ot, lt, oi, li, oo, lo] = [
        "n", "d", "rows", "st0", "st1", "ot", "lt", "oi", "li", "oo", "lo",
    ]
    .map(|x| k.arg_index(x));
    let table = k.arg_buffer("table", false);
    let idx = k.arg_buffer("idx", false);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let tv = k.buffer_view(table, zero, [lt.into()], t);
    let iv = k.buffer_view(idx, zero, [li.into()], Scalar::I32);
    let ov = k.buffer_view(out, zero, [lo.into()], t);
    let rowsu = k.index_cast(rows, Scalar::U32);
    k.for_each_in_grid(n, |b, e| {
        let r = b.div(e, d);
        let j = b.rem(e, d);
        let pi = b.add(oi, r);
        let ki = b.load(iv, &[pi]);
        let ku = b.bitcast(ki, Scalar::U32);
        let inside = b.cmpi(IntPredicate::Ult, ku, rowsu);
        let x = b.if_else(
            inside,
            |b| {
                let row = b.to_index(ku);
                let pt0 = b.madd(row, st0, ot);
                let pt = b.madd(j, st1, pt0);
                vec![b.load(tv, &[pt])]
            },
            |b| {
                vec![if t.is_float() {
                    b.float(0.0, t)
                } else {
                    b.int(0, t)
                }]
            },
        )[0];
        let po = b.add(oo, e);
        b.store(x, ov, &[po]);
    });
    module.kernel(k.finish());
    module.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both kernels build for both element sizes into modules the
    /// verifier and naga accept.
    #[test]
    fn every_kernel_compiles() {
        let compiler = hrx_loom::Compiler::for_target(None, &hrx_core::Target::hopper()).unwrap();
        for t in [Scalar::U32, Scalar::F16] {
            for (symbol, built) in [("copy", copy(t)), ("gather", gather(t))] {
                compiler
                    .built(&built)
                    .and_then(|m| m.compile_uncached(&hrx_loom::Specialization::new(symbol)))
                    .unwrap_or_else(|e| panic!("{symbol} {t:?}: {e}"));
            }
        }
    }
}

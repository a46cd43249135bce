//! The tiled quantised matmul for many rows of x (prefill), built with
//! [`hrx_loom::build`]: `out[i, j] = x[i, :] . w[j, :]`.
//!
//! A workgroup of 64 work items computes a 32 x 32 tile of out. Per step
//! along k it stages 32 columns: each work item loads two spans (8 values
//! each) of x rows and dequantises two spans of weight rows into
//! workgroup memory (k-major), then computes a 4 x 4 register tile of 4
//! consecutive rows and columns, reading each k's 4 values of x and of
//! the weights as one 16-byte load (a subgroup's loads of one k are
//! consecutive, so they do not conflict). Weights
//! are read and dequantised once per 32 rows of x. Rows of x and of the
//! weights past the ends are clamped into range and dropped at the store;
//! spans past a row's end (unblocked formats only) are zeroed.

use super::QuantFormat;
use super::quant_spans::{QuantMatmulArgs, SPAN, span_values, x_span};
use super::registry::{Generator, KernelKey, KernelSource};
use hrx_loom::build::{Barrier, Builder, Built, Extent, Index, KernelBuilder, Num, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, Scalar};

/// Rows of x and of the weights per workgroup tile: 32, so the model's
/// prefill products (n of 192 to 1536, a few hundred rows) give the H200's
/// 132 SMs enough workgroups (512 x 576 makes 288 of them).
const TILE: usize = 32;
/// Columns (k) staged per step: 4 spans.
const BK: usize = 32;
/// Work items per side of the workgroup (8 x 8), each a 4 x 4 tile.
const SIDE: usize = 8;
const REG: usize = TILE / SIDE;
/// Work items per workgroup.
const WG: usize = SIDE * SIDE;
/// Spans of x (and of the weights) each work item stages per step.
const PER: usize = TILE * (BK / SPAN) / WG;

/// The tiled kernel for `format`, x read in 16-byte quads (`xvec`), rows
/// ending in a partial span (`tail`).
pub(crate) fn tiled_key(format: QuantFormat, xvec: bool, tail: bool) -> KernelKey {
    KernelKey {
        source: KernelSource::Built(Generator::new(
            format!("quant_tiled {format:?} {xvec} {tail}"),
            move || tiled_kernel(format, xvec, tail),
        )),
        symbol: "quant_tiled",
        config: Vec::new(),
    }
}

fn tiled_kernel(format: QuantFormat, xvec: bool, tail: bool) -> Built {
    let n64 = |v: usize| v as u64;
    let mut k = KernelBuilder::new("quant_tiled");
    let [wm, wn] = ["m", "n"].map(|name| k.workload(name));
    let one = k.index(1);
    let ct = k.index(n64(TILE));
    let gx = k.div_ceil(wn, ct);
    let gy = k.div_ceil(wm, ct);
    let wg = k.index(n64(WG));
    let mut k = k.launch_config([gx, gy, one], [wg, one, one]);
    let a = QuantMatmulArgs::declare(&mut k, format, xvec, tail);
    // The launch region's values are not visible in the body.
    let ct = k.index(n64(TILE));
    let zero = k.offset(0);
    let elems = BK * TILE;
    let bytes = k.offset(n64(elems * 4));
    let xs_buf = k.alloca_workgroup(bytes, 16);
    let ws_buf = k.alloca_workgroup(bytes, 16);
    let xs = k.buffer_view(xs_buf, zero, [Extent::from(elems)], Scalar::F32);
    let ws = k.buffer_view(ws_buf, zero, [Extent::from(elems)], Scalar::F32);
    let [c0, c1, c4, c7, c8] = [0, 1, 4, 7, 8].map(|v| k.index(v));
    let cside = k.index(n64(SIDE));
    let ctile = k.index(n64(TILE));
    let t = k.workitem_id(Axis::X);
    let tx = k.rem(t, cside);
    let ty = k.div(t, cside);
    let tx4 = k.mul(tx, c4);
    let ty4 = k.mul(ty, c4);
    let col0 = k.workgroup_id(Axis::X);
    let col0 = k.mul(col0, ct);
    let row0 = k.workgroup_id(Axis::Y);
    let row0 = k.mul(row0, ct);
    let m1 = k.sub(a.m, c1);
    let n1 = k.sub(a.n, c1);
    let cols7 = k.add(a.x.cols, c7);
    let spans = k.div(cols7, c8);
    let spans1 = k.sub(spans, c1);
    let c3 = k.index(3);
    let spans3 = k.add(spans, c3);
    let steps = k.div(spans3, c4);
    // The rows of x and of the weights this work item stages, and their
    // spans of the step.
    let cwg = k.index(n64(WG));
    let staged: Vec<_> = (0..PER)
        .map(|p| {
            let cp = k.index(n64(p));
            let e = k.madd(cp, cwg, t);
            let lr = k.div(e, c4);
            let lsp = k.rem(e, c4);
            let xr = k.add(row0, lr);
            let xr = k.min(xr, m1);
            let xrow = k.madd(xr, a.x.cols, a.ox);
            let wr = k.add(col0, lr);
            let wr = k.min(wr, n1);
            let wrow = k.madd(wr, a.w.row_words, a.ow);
            (lr, lsp, xrow, wrow)
        })
        .collect();
    let zf = k.float(0.0, Scalar::F32);
    let init = vec![zf; REG * REG];
    let acc = k.for_carry(c0, steps, c1, &init, |b, step, acc| {
        for &(lr, lsp, xrow, wrow) in &staged {
            let s = b.madd(step, c4, lsp);
            let ok = b.cmp(IntPredicate::Ult, s, spans);
            let sc = b.min(s, spans1);
            let xv = x_span(b, &a.x, xrow, sc);
            let wv = span_values(b, &a.w, wrow, sc);
            let kk0 = b.mul(lsp, c8);
            for i in 0..SPAN {
                let ci = b.index(n64(i));
                let kk = b.add(kk0, ci);
                let at = b.madd(kk, ctile, lr);
                let x = b.select(ok, xv[i], zf);
                let w = b.select(ok, wv[i], zf);
                b.store(x, xs, &[at]);
                b.store(w, ws, &[at]);
            }
        }
        b.barrier(Barrier::Workgroup);
        let mut acc = acc.to_vec();
        for kk in 0..BK {
            let base = b.index(n64(kk * TILE));
            let xr = quad(b, xs, base, ty4);
            let wc = quad(b, ws, base, tx4);
            for i in 0..REG {
                for j in 0..REG {
                    acc[i * REG + j] = b.fmaf(xr[i], wc[j], acc[i * REG + j]);
                }
            }
        }
        b.barrier(Barrier::Workgroup);
        acc
    });
    for i in 0..REG {
        let oi = k.index(n64(i));
        let r = k.add(row0, ty4);
        let row = k.add(r, oi);
        let rok = k.cmp(IntPredicate::Ult, row, a.m);
        let orow = k.madd(row, a.n, a.oo);
        for j in 0..REG {
            let oj = k.index(n64(j));
            let c = k.add(col0, tx4);
            let col = k.add(c, oj);
            let cok = k.cmp(IntPredicate::Ult, col, a.n);
            let ok = k.and(rok, cok);
            let v = acc[i * REG + j];
            k.if_(ok, |b| {
                let p = b.add(orow, col);
                b.store(v, a.out, &[p]);
            });
        }
    }
    Built::kernel(k.finish())
}

/// The 4 values at `base + at` of a staged tile (one 16-byte load).
fn quad(
    b: &mut Builder,
    tile: Value<View>,
    base: Value<Index>,
    at: Value<Index>,
) -> Vec<Value<Num>> {
    let p = b.add(base, at);
    let q = b.vector_load(tile, &[p], 4);
    (0..REG as u64)
        .map(|l| {
            let l = b.index(l);
            b.extract(q, l)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;

    /// Every format and load variant builds a kernel the verifier and
    /// naga accept.
    #[test]
    fn every_variant_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for format in [
                QuantFormat::F32,
                QuantFormat::F16,
                QuantFormat::Q8_0,
                QuantFormat::Q4_1,
            ] {
                for (xvec, tail) in [(true, false), (false, true)] {
                    let text = tiled_key(format, xvec, tail).source();
                    compiler
                        .module(&text)
                        .and_then(|m| {
                            m.compile_uncached(&hrx_loom::Specialization::new("@quant_tiled"))
                        })
                        .unwrap_or_else(|e| panic!("{format:?} {xvec} {tail}: {e}"));
                }
            }
        }
    }
}

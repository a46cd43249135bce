//! The quantised-weight kernels for few rows of x, built with
//! [`hrx_loom::build`]: the matrix-vector kernel (decode) and the row
//! gather, reading weights and x in spans of 8 values (`spans`).
//!
//! The matrix-vector kernel computes `out[i, j] = x[i, :] . w[j, :]`:
//! one subgroup per weight row `j` (a workgroup's subgroups take its
//! `COLS` rows in turn, so any subgroup size works), its lanes striding
//! over the row's spans; each span is read and dequantised once and used
//! for the `MT` rows of x of the workgroup's row tile, then the subgroup
//! sums its lanes. Slabs of weight rows run along grid x (the long axis:
//! a vocabulary projection has tens of thousands of them), row tiles of x
//! along grid y (at most 4); a second row tile reads the weights again,
//! mostly from L2.
//!
//! The gated variant (`GemvKey::gated`) reads a stacked gate-and-up matrix
//! of `2n` rows: the subgroup of output column `j` takes weight rows `j`
//! (gate) and `n + j` (up) and stores `silu(gate) * up`, so a decode
//! step's feed-forward gate costs no dispatch of its own.
//!
//! The fused forms (`fused`) add work to the same loop: with
//! `GemvKey::norm` each lane also sums the squares of the spans of x it
//! reads and multiplies them by the norm weight's span, and the subgroup
//! scales its dots by `1 / sqrt(mean square + eps)` after the sum; with
//! `GemvKey::residual` the residual of each output is loaded before the
//! loop and added at the store; with `GemvKey::kv_store` a subgroup takes
//! the adjacent weight rows `2j` and `2j + 1` and stores the pair into the
//! key or value cache as well (`kv`).

use super::kv::{KvArgs, KvScalars};
use super::spans::{Elements, QuantMatmulArgs, SPAN, Weights, XRows, span_values, x_span};
use crate::ops::QuantFormat;
use crate::ops::elementwise::kernels::grid;
use crate::ops::registry::{Generator, KernelKey, KernelSource};
use crate::ops::token::kernels::silu_times;
use hrx_loom::build::{Body, Built, Index, KernelBuilder, Num, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, ReduceOp, Scalar};

/// The largest m the matrix-vector kernel is chosen for; the tiled kernel
/// takes larger ones.
pub(crate) const GEMV_MAX_ROWS: usize = 16;

/// Most rows of x one workgroup of the matrix-vector kernel accumulates
/// (one register each per lane); more rows run as further row tiles.
const MAX_TILE: usize = 16;

/// Work items per workgroup of the matrix-vector kernel: two subgroups on
/// the H200, so even the model's smallest matrix (192 rows) spreads over
/// 96 workgroups (more than half the SMs) rather than a few; small
/// workgroups cost nothing there (up to 32 resident per SM).
const WG: usize = 64;

/// The row tile for `m` rows: the next power of two up to [`MAX_TILE`], so
/// one row does no wasted multiply-adds and rows of a tile share a kernel.
pub(crate) fn gemv_row_tile(m: usize) -> usize {
    m.clamp(1, MAX_TILE).next_power_of_two()
}

/// What one matrix-vector kernel is specialised for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GemvKey {
    pub(crate) format: QuantFormat,
    /// Rows of x per workgroup.
    pub(crate) mt: usize,
    /// x read in 16-byte quads.
    pub(crate) xvec: bool,
    /// Rows end in a partial span.
    pub(crate) tail: bool,
    /// The device's smallest subgroup size (fixes the weight rows per
    /// workgroup).
    pub(crate) subgroup: usize,
    /// SwiGLU over a stacked gate-and-up matrix: column `j` is
    /// `silu(x . w[j]) * (x . w[n + j])`.
    pub(crate) gated: bool,
    /// Each row of x RMS-normalised as it is read (`QuantFusion::norm`).
    pub(crate) norm: bool,
    /// A residual added to the output (`QuantFusion::residual`).
    pub(crate) residual: bool,
    /// The paired form storing keys and values into caches
    /// (`QuantFusion::kv_store`, `kv`): a subgroup takes output
    /// columns `2j` and `2j + 1`; the caches' element type.
    pub(crate) kv_store: Option<Scalar>,
    /// x's and out's element types.
    pub(crate) elements: Elements,
}

/// The fused operands' arguments, declared after [`QuantMatmulArgs`]'s in
/// the order `Ops::record_quant` pushes them: the scalars (`eps`, the
/// norm weight's offset and length; the residual's offset and length;
/// the cache store's), then the buffers (`nw`, `res`, the store's).
struct FusedArgs {
    /// The norm weight, read in spans like a row of x from element `on`,
    /// and eps.
    norm: Option<(XRows, Value<Index>, Value<Num>)>,
    /// The residual's view and element offset (contiguous `[m, n]`).
    residual: Option<(Value<View>, Value<Index>)>,
    /// The key/value cache store.
    kv: Option<KvArgs>,
}

impl FusedArgs {
    fn declare(k: &mut Body, key: &GemvKey, cols: Value<Index>) -> FusedArgs {
        let norm = key.norm.then(|| {
            let eps = k.arg_scalar("eps", Scalar::F32);
            let [on, ln] = ["on", "ln"].map(|a| k.arg_index(a));
            (eps, on, ln)
        });
        let residual = key.residual.then(|| ["or", "lr"].map(|a| k.arg_index(a)));
        let kv = key.kv_store.map(|element| (KvScalars::declare(k), element));
        let zero = k.offset(0);
        let norm = norm.map(|(eps, on, ln)| {
            let buffer = k.arg_buffer("nw", true);
            let view = k.buffer_view(buffer, zero, [ln.into()], Scalar::F32);
            let rows = XRows {
                view,
                cols,
                quads: key.xvec,
                tail: key.tail,
            };
            (rows, on, eps)
        });
        let residual = residual.map(|[or, lr]| {
            let buffer = k.arg_buffer("res", true);
            (k.buffer_view(buffer, zero, [lr.into()], Scalar::F32), or)
        });
        let kv = kv.map(|(scalars, element)| KvArgs::declare(k, scalars, element));
        FusedArgs { norm, residual, kv }
    }
}

/// The matrix-vector kernel for `key`.
pub(crate) fn gemv_key(key: GemvKey) -> KernelKey {
    KernelKey {
        source: KernelSource::Built(Generator::new(format!("quant_gemv {key:?}"), move || {
            gemv_kernel(key)
        })),
        symbol: "quant_gemv",
        config: Vec::new(),
    }
}

/// The matrix-vector kernel: the layout the module documentation
/// describes.
fn gemv_kernel(key: GemvKey) -> Built {
    let mt = key.mt;
    let cols_per = (WG / key.subgroup.max(1)).max(1);
    let n64 = |v: usize| v as u64;
    let mut k = KernelBuilder::new("quant_gemv");
    let [wm, wn] = ["m", "n"].map(|name| k.workload(name));
    let one = k.index(1);
    let cp = k.index(n64(cols_per));
    let gy = k.div_ceil(wn, cp);
    let ct = k.index(n64(mt));
    let gx = k.div_ceil(wm, ct);
    let wg = k.index(n64(WG));
    let mut k = k.launch_config([gy, gx, one], [wg, one, one]);
    let a = QuantMatmulArgs::declare(&mut k, key.format, (key.xvec, key.tail), key.elements);
    let fused = FusedArgs::declare(&mut k, &key, a.x.cols);
    // The launch region's values are not visible in the body.
    let cp = k.index(n64(cols_per));
    let ct = k.index(n64(mt));
    let [c0, c1, c7, c8] = [0, 1, 7, 8].map(|v| k.index(v));
    let sg = k.subgroup_id();
    let nsg = k.subgroup_count();
    let lane = k.subgroup_lane_id();
    let sgsize = k.subgroup_size();
    let slab = k.workgroup_id(Axis::X);
    let tile = k.workgroup_id(Axis::Y);
    let j0 = k.mul(slab, cp);
    let row0 = k.mul(tile, ct);
    let m1 = k.sub(a.m, c1);
    // A subgroup's job: output column j, or the pair 2j, 2j + 1.
    let paired = key.kv_store.is_some();
    let jobs = match paired {
        true => {
            let c2 = k.index(2);
            k.div(a.n, c2)
        }
        false => a.n,
    };
    let jobs1 = k.sub(jobs, c1);
    let cols7 = k.add(a.x.cols, c7);
    let spans = k.div(cols7, c8);
    let spans1 = k.sub(spans, c1);
    // Spans per lane per trip: two for few rows (twice the weight bytes in
    // flight, which the DRAM-bound vocabulary projection needs), one for
    // many (their loads of x already keep a lane busy). Loading a whole
    // row in one trip measured slower on the H200 (three spans a trip for
    // a 576-wide row, six for a 1,536-wide one: 0.5 us a product).
    let unroll = if mt <= 4 { 2 } else { 1 };
    let cu = k.index(n64(unroll));
    let stride = k.mul(sgsize, cu);
    let zf = k.float(0.0, Scalar::F32);
    // Rows of the tile: the row, clamped into x (dropped at the store),
    // and where it starts in x.
    let rows: Vec<(Value<Index>, Value<Index>, Value<Index>)> = (0..mt)
        .map(|r| {
            let dr = k.index(n64(r));
            let row = k.add(row0, dr);
            let rc = k.min(row, m1);
            (row, rc, k.madd(rc, a.x.cols, a.ox))
        })
        .collect();
    // Rows of x are normalised by `1 / sqrt(mean square + eps)`, each lane
    // summing the squares of the spans it reads.
    let inv_cols = fused.norm.as_ref().map(|_| {
        let cu = k.index_cast(a.x.cols, Scalar::U32);
        let cf = k.uitofp(cu, Scalar::F32);
        let onef = k.float(1.0, Scalar::F32);
        k.divf(onef, cf)
    });
    let first = k.cmp(IntPredicate::Eq, lane, c0);
    k.for_each(sg, cp, nsg, |b, jj| {
        let j = b.add(j0, jj);
        let jc = b.min(j, jobs1);
        // The first output column, and the weight rows this subgroup
        // reads: row j; for the gated kernel the up row n + j too; for the
        // paired one rows 2j and 2j + 1.
        let col = match paired {
            true => b.add(jc, jc),
            false => jc,
        };
        let wrow = b.madd(col, a.w.row_words, a.ow);
        let mut wrows = vec![wrow];
        if key.gated {
            let upper = b.mul(a.n, a.w.row_words);
            wrows.push(b.add(wrow, upper));
        }
        if paired {
            wrows.push(b.add(wrow, a.w.row_words));
        }
        // The rows' cache places, loaded before the products.
        let places: Vec<_> = fused
            .kv
            .as_ref()
            .map(|kv| rows.iter().map(|&(_, rc, _)| kv.place(b, rc)).collect())
            .unwrap_or_default();
        // The residual of this column, loaded before the products so
        // that its latency hides behind them.
        let residuals: Vec<_> = fused
            .residual
            .map(|(view, or)| {
                rows.iter()
                    .map(|&(_, rc, _)| {
                        let at = b.madd(rc, a.n, or);
                        let at = b.add(at, col);
                        b.load(view, &[at])
                    })
                    .collect()
            })
            .unwrap_or_default();
        // Accumulators: the products (`mt` a weight row), then with a norm
        // the rows' sums of squares.
        let products = mt * wrows.len();
        let squares = if fused.norm.is_some() { mt } else { 0 };
        let init = vec![zf; products + squares];
        let acc = b.for_carry(lane, spans, stride, &init, |b, s, acc| {
            // Every span of the trip loads before any is used, so each
            // lane has `unroll` spans of weights in flight; a span past the
            // row's end rereads the last one and adds nothing.
            let spans_of_trip: Vec<_> = (0..unroll)
                .map(|u| {
                    let guard = (u > 0).then(|| {
                        let du = b.index(n64(u));
                        let su = b.madd(sgsize, du, s);
                        let ok = b.cmp(IntPredicate::Ult, su, spans);
                        (ok, b.min(su, spans1))
                    });
                    let at = guard.map_or(s, |(_, sc)| sc);
                    let values: Vec<_> = wrows
                        .iter()
                        .map(|&row| span_values(b, &a.w, row, at))
                        .collect();
                    (guard, values)
                })
                .collect();
            let mut acc = acc.to_vec();
            for (guard, wvs) in &spans_of_trip {
                let at = guard.map_or(s, |(_, sc)| sc);
                // The norm weight's span, shared by the tile's rows.
                let scale = fused
                    .norm
                    .as_ref()
                    .map(|(nw, on, _)| x_span(b, nw, *on, at));
                for (r, &(_, _, xrow)) in rows.iter().enumerate() {
                    let mut xs = x_span(b, &a.x, xrow, at);
                    if let Some(scale) = &scale {
                        let mut sq = zf;
                        for &xv in &xs {
                            sq = b.fmaf(xv, xv, sq);
                        }
                        if let Some((ok, _)) = guard {
                            sq = b.select(*ok, sq, zf);
                        }
                        acc[products + r] = b.addf(acc[products + r], sq);
                        xs = xs.iter().zip(scale).map(|(&x, &w)| b.mulf(x, w)).collect();
                    }
                    for (wi, wv) in wvs.iter().enumerate() {
                        // Two chains per row, so the adds overlap.
                        let mut even = zf;
                        let mut odd = zf;
                        for (i, (&xv, &w)) in xs.iter().zip(wv).enumerate() {
                            if i % 2 == 0 {
                                even = b.fmaf(xv, w, even);
                            } else {
                                odd = b.fmaf(xv, w, odd);
                            }
                        }
                        let mut part = b.addf(even, odd);
                        if let Some((ok, _)) = guard {
                            part = b.select(*ok, part, zf);
                        }
                        let slot = wi * mt + r;
                        acc[slot] = b.addf(acc[slot], part);
                    }
                }
            }
            acc
        });
        let mut sums: Vec<_> = acc
            .iter()
            .map(|&v| b.subgroup_reduce(ReduceOp::AddF, v))
            .collect();
        if let (Some((_, _, eps)), Some(inv_cols)) = (&fused.norm, inv_cols) {
            for r in 0..mt {
                let mean = b.mulf(sums[products + r], inv_cols);
                let shifted = b.addf(mean, *eps);
                let factor = b.rsqrtf(shifted);
                for wi in 0..wrows.len() {
                    let slot = wi * mt + r;
                    sums[slot] = b.mulf(sums[slot], factor);
                }
            }
        }
        // Each row's outputs: one column, or the pair's two.
        let tot: Vec<_> = if key.gated {
            (0..mt)
                .map(|r| silu_times(b, sums[r], sums[mt + r]))
                .collect()
        } else {
            sums[..mt].to_vec()
        };
        let second: Vec<_> = if paired {
            sums[mt..2 * mt].to_vec()
        } else {
            Vec::new()
        };
        let tot: Vec<_> = match residuals.is_empty() {
            true => tot,
            false => tot
                .iter()
                .zip(&residuals)
                .map(|(&t, &r)| b.addf(t, r))
                .collect(),
        };
        // Past the last job, `col` is the last job's column: not stored.
        let jok = b.cmp(IntPredicate::Ult, j, jobs);
        let store = b.and(first, jok);
        b.if_(store, |b| {
            for (r, &(row, _, _)) in rows.iter().enumerate() {
                let rok = b.cmp(IntPredicate::Ult, row, a.m);
                b.if_(rok, |b| {
                    let orow = b.madd(row, a.n, a.oo);
                    let oi = b.add(orow, col);
                    a.store_out(b, tot[r], oi);
                    if let Some(&y1) = second.get(r) {
                        let oi1 = b.add(oi, c1);
                        a.store_out(b, y1, oi1);
                    }
                    if let (Some(kv), Some(&place)) = (&fused.kv, places.get(r)) {
                        kv.store_pair(b, col, place, (tot[r], second[r]));
                    }
                });
            }
        });
    });
    Built::kernel(k.finish())
}

/// The gather kernel for `format` (`tail`: rows end in a partial span),
/// with the grid `config`.
pub(crate) fn gather_key(
    format: QuantFormat,
    tail: bool,
    config: Vec<(&'static str, u64)>,
) -> KernelKey {
    KernelKey {
        source: KernelSource::Built(Generator::new(
            format!("quant_gather {format:?} {tail}"),
            move || gather_kernel(format, tail),
        )),
        symbol: "quant_gather",
        config,
    }
}

/// `out[i, 8s..8s + 8] = span s of row ids[i]`, one span per work item of
/// a grid-stride loop; an id outside `0..rows` reads nothing and writes
/// zeros.
fn gather_kernel(format: QuantFormat, tail: bool) -> Built {
    let (mut module, mut k) = grid("quant_gather", "n", None);
    let [n, rows, cols, rw, ow, lw, oi, li, oo, lo] = [
        "n", "rows", "cols", "rw", "ow", "lw", "oi", "li", "oo", "lo",
    ]
    .map(|a| k.arg_index(a));
    let wbuf = k.arg_buffer("w", true);
    let ibuf = k.arg_buffer("ids", true);
    let obuf = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let wv = k.buffer_view(wbuf, zero, [lw.into()], Scalar::U32);
    let iv = k.buffer_view(ibuf, zero, [li.into()], Scalar::I32);
    let ov = k.buffer_view(obuf, zero, [lo.into()], Scalar::F32);
    let w = Weights {
        format,
        view: wv,
        row_words: rw,
        tail,
    };
    let [c7, c8] = [7, 8].map(|v| k.index(v));
    let cols7 = k.add(cols, c7);
    let spans = k.div(cols7, c8);
    let rows_u = k.index_cast(rows, Scalar::U32);
    let zf = k.float(0.0, Scalar::F32);
    k.for_each_in_grid(n, |b, e| {
        let i = b.div(e, spans);
        let s = b.rem(e, spans);
        let pi = b.add(oi, i);
        let id = b.load(iv, &[pi]);
        let idu = b.bitcast(id, Scalar::U32);
        let ok = b.cmpi(IntPredicate::Ult, idu, rows_u);
        let vals = b.if_else(
            ok,
            |b| {
                let row = b.to_index(idu);
                let wrow = b.madd(row, rw, ow);
                span_values(b, &w, wrow, s)
            },
            |_| vec![zf; SPAN],
        );
        let orow = b.madd(i, cols, oo);
        let col0 = b.mul(s, c8);
        for (j, &v) in vals.iter().enumerate() {
            let cj = b.index(j as u64);
            let col = b.add(col0, cj);
            let po = b.add(orow, col);
            if tail {
                let inside = b.cmp(IntPredicate::Ult, col, cols);
                b.if_(inside, |b| b.store(v, ov, &[po]));
            } else {
                b.store(v, ov, &[po]);
            }
        }
    });
    module.kernel(k.finish());
    module.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;

    const FORMATS: [QuantFormat; 10] = QuantFormat::ALL;

    /// Every format, row tile, load variant and fusion builds kernels the
    /// verifier and naga accept.
    #[test]
    fn every_variant_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for format in FORMATS {
                // (rows, x in quads, partial span, gated, norm, residual,
                // f16 x and out)
                let variants = [
                    (1, true, false, false, false, false, false),
                    (4, false, true, false, true, false, true),
                    (16, false, false, false, false, true, false),
                    (1, true, false, true, true, true, false),
                    (8, false, true, true, false, false, true),
                    (3, true, false, false, true, true, true),
                    (2, true, false, true, false, true, true),
                ];
                for (mt, xvec, tail, gated, norm, residual, f16) in variants {
                    let half = Elements {
                        x: Scalar::F16,
                        out: Scalar::F16,
                    };
                    let key = GemvKey {
                        format,
                        mt,
                        xvec,
                        tail,
                        norm,
                        residual,
                        kv_store: None,
                        subgroup: target.subgroup_size_min as usize,
                        gated,
                        elements: if f16 { half } else { Elements::F32 },
                    };
                    let text = gemv_key(key).source();
                    compiler
                        .module(&text)
                        .and_then(|m| {
                            m.compile_uncached(&hrx_loom::Specialization::new("@quant_gemv"))
                        })
                        .unwrap_or_else(|e| panic!("{key:?}: {e}"));
                }
                for tail in [false, true] {
                    let text = gather_key(format, tail, Vec::new()).source();
                    compiler
                        .module(&text)
                        .and_then(|m| {
                            m.compile_uncached(&hrx_loom::Specialization::new("@quant_gather"))
                        })
                        .unwrap_or_else(|e| panic!("gather {format:?} {tail}: {e}"));
                }
            }
        }
    }
}

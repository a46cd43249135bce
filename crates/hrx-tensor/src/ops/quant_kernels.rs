//! The quantised-weight kernels for few rows of x, built with
//! [`hrx_loom::build`]: the matrix-vector kernel (decode) and the row
//! gather, and the span readers every quantised kernel shares.
//!
//! A *span* is 8 consecutive values of one weight row (layouts in
//! `quant`): [`span_values`] loads and dequantises one, [`x_span`] loads
//! the matching 8 values of a row of x (two 16-byte loads where x's
//! binding and rows align, else element loads). A row of an unblocked
//! format whose length is not a multiple of 8 has a partial last span:
//! the kernels built with `tail` clamp its reads into the row and zero
//! the values past its end, so no read leaves the bound ranges.
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

use super::QuantFormat;
use super::elementwise_kernels::grid;
use super::registry::{Generator, KernelKey, KernelSource};
use hrx_loom::build::{Builder, Built, Index, KernelBuilder, Num, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, ReduceOp, Scalar};

/// Values per span.
pub(crate) const SPAN: usize = 8;

/// The largest m the matrix-vector kernel is chosen for; the tiled kernel
/// takes larger ones.
pub(crate) const GEMV_MAX_ROWS: usize = 64;

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

/// Reads one weight row's spans: the word view and the row's length.
pub(crate) struct Weights {
    pub(crate) format: QuantFormat,
    pub(crate) view: Value<View>,
    /// Words per row.
    pub(crate) row_words: Value<Index>,
    /// Whether the last span may be partial (guarded).
    pub(crate) tail: bool,
}

/// The 8 dequantised f32 values of span `s` of the row whose first word
/// is `row` (an index into the word view).
pub(crate) fn span_values(
    b: &mut Builder,
    w: &Weights,
    row: Value<Index>,
    s: Value<Index>,
) -> Vec<Value<Num>> {
    let [c0, c1, c2, c4] = [0, 1, 2, 4].map(|v| b.index(v));
    let load = |b: &mut Builder, i: Value<Index>| b.load(w.view, &[i]);
    match w.format {
        QuantFormat::Q4_1 | QuantFormat::Q8_0 => {
            let q4 = w.format == QuantFormat::Q4_1;
            let block_words = b.index(if q4 { 5 } else { 9 });
            let blk = b.div(s, c4);
            let sp = b.rem(s, c4);
            let bw = b.madd(blk, block_words, row);
            let head = load(b, bw);
            let dm = b.unpackf16(head);
            let d = b.extract(dm, c0);
            let mn = q4.then(|| b.extract(dm, c1));
            // Q4_1: the pair of nibble words (first or second half of the
            // block's 16 bytes), low or high nibbles. Q8_0: the pair of
            // byte words.
            let (pair, shift) = if let Some(mn) = mn {
                let half = b.rem(sp, c2);
                let hi = b.div(sp, c2);
                let sh = b.mul(hi, c4);
                (half, Some((b.index_cast(sh, Scalar::U32), mn)))
            } else {
                (sp, None)
            };
            let w1 = b.add(bw, c1);
            let wa = b.madd(pair, c2, w1);
            let wb = b.add(wa, c1);
            let words = [load(b, wa), load(b, wb)];
            let mut out = Vec::with_capacity(SPAN);
            for word in words {
                if let Some((sh, mn)) = shift {
                    let t = b.shrui(word, sh);
                    let mask = b.int(15, Scalar::U32);
                    for j in 0..4 {
                        let bits = b.int(8 * j, Scalar::U32);
                        let n = b.shrui(t, bits);
                        let nib = b.andi(n, mask);
                        let f = b.uitofp(nib, Scalar::F32);
                        out.push(b.fmaf(d, f, mn));
                    }
                } else {
                    let t = b.bitcast(word, Scalar::I32);
                    let c24 = b.int(24, Scalar::I32);
                    for j in 0..4 {
                        let up = b.int(24 - 8 * j, Scalar::I32);
                        let hi = b.shli(t, up);
                        let q = b.shrsi(hi, c24);
                        let f = b.sitofp(q, Scalar::F32);
                        out.push(b.mulf(d, f));
                    }
                }
            }
            out
        }
        QuantFormat::F16 | QuantFormat::F32 => {
            let f16 = w.format == QuantFormat::F16;
            // Words of the span, and the row's words to clamp them to.
            let per = if f16 { SPAN / 2 } else { SPAN };
            let cper = b.index(per as u64);
            let first = b.mul(s, cper);
            let last = b.sub(w.row_words, c1);
            let zu = b.int(0, Scalar::U32);
            let mut out = Vec::with_capacity(SPAN);
            for i in 0..per {
                let ci = b.index(i as u64);
                let wi = b.add(first, ci);
                let word = if w.tail {
                    let ok = b.cmp(IntPredicate::Ult, wi, w.row_words);
                    let wc = b.min(wi, last);
                    let p = b.add(row, wc);
                    let x = load(b, p);
                    b.select(ok, x, zu)
                } else {
                    let p = b.add(row, wi);
                    load(b, p)
                };
                if f16 {
                    let pair = b.unpackf16(word);
                    out.push(b.extract(pair, c0));
                    out.push(b.extract(pair, c1));
                } else {
                    out.push(b.bitcast(word, Scalar::F32));
                }
            }
            out
        }
    }
}

/// How a kernel reads spans of x rows.
pub(crate) struct XRows {
    pub(crate) view: Value<View>,
    /// Row length (the weights' cols).
    pub(crate) cols: Value<Index>,
    /// 16-byte loads (binding 16-byte aligned, offset and cols multiples
    /// of 4).
    pub(crate) quads: bool,
    /// Whether the last span may be partial (guarded).
    pub(crate) tail: bool,
}

/// The 8 values of x at span `s` of the row starting at element `row`.
pub(crate) fn x_span(
    b: &mut Builder,
    x: &XRows,
    row: Value<Index>,
    s: Value<Index>,
) -> Vec<Value<Num>> {
    let c8 = b.index(SPAN as u64);
    let first = b.madd(s, c8, row);
    if x.quads {
        let c4 = b.index(4);
        let second = b.add(first, c4);
        let mut out = Vec::with_capacity(SPAN);
        for at in [first, second] {
            let q = b.vector_load(x.view, &[at], 4);
            for lane in 0..4 {
                let l = b.index(lane);
                out.push(b.extract(q, l));
            }
        }
        return out;
    }
    let zf = b.float(0.0, Scalar::F32);
    let c1 = b.index(1);
    let col0 = b.mul(s, c8);
    let last = b.sub(x.cols, c1);
    (0..SPAN as u64)
        .map(|i| {
            let ci = b.index(i);
            if x.tail {
                let col = b.add(col0, ci);
                let ok = b.cmp(IntPredicate::Ult, col, x.cols);
                let cc = b.min(col, last);
                let p = b.add(row, cc);
                let v = b.load(x.view, &[p]);
                b.select(ok, v, zf)
            } else {
                let p = b.add(first, ci);
                b.load(x.view, &[p])
            }
        })
        .collect()
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

/// The launch arguments shared by the matmul kernels, in the order
/// `Ops::record_quant_matmul` pushes them, then the buffers.
pub(crate) struct MatmulArgs {
    pub(crate) m: Value<Index>,
    pub(crate) n: Value<Index>,
    pub(crate) x: XRows,
    pub(crate) w: Weights,
    /// Element offsets of x, the words and out in their bindings.
    pub(crate) ox: Value<Index>,
    pub(crate) ow: Value<Index>,
    pub(crate) oo: Value<Index>,
    pub(crate) out: Value<View>,
}

impl MatmulArgs {
    pub(crate) fn declare(
        k: &mut hrx_loom::build::Body,
        format: QuantFormat,
        xvec: bool,
        tail: bool,
    ) -> MatmulArgs {
        let [m, n, cols, rw, ox, lx, ow, lw, oo, lo] =
            ["m", "n", "cols", "rw", "ox", "lx", "ow", "lw", "oo", "lo"].map(|a| k.arg_index(a));
        let x = k.arg_buffer("x", true);
        let w = k.arg_buffer("w", true);
        let out = k.arg_buffer("out", false);
        let zero = k.offset(0);
        let xv = k.buffer_view(x, zero, [lx.into()], Scalar::F32);
        let wv = k.buffer_view(w, zero, [lw.into()], Scalar::U32);
        let ov = k.buffer_view(out, zero, [lo.into()], Scalar::F32);
        MatmulArgs {
            m,
            n,
            x: XRows {
                view: xv,
                cols,
                quads: xvec,
                tail,
            },
            w: Weights {
                format,
                view: wv,
                row_words: rw,
                tail,
            },
            ox,
            ow,
            oo,
            out: ov,
        }
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
    let a = MatmulArgs::declare(&mut k, key.format, key.xvec, key.tail);
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
    let n1 = k.sub(a.n, c1);
    let cols7 = k.add(a.x.cols, c7);
    let spans = k.div(cols7, c8);
    let spans1 = k.sub(spans, c1);
    // Spans per lane per trip: two for few rows (twice the weight bytes in
    // flight, which the DRAM-bound vocabulary projection needs), one for
    // many (their loads of x already keep a lane busy).
    let unroll = if mt <= 4 { 2 } else { 1 };
    let cu = k.index(n64(unroll));
    let stride = k.mul(sgsize, cu);
    let zf = k.float(0.0, Scalar::F32);
    // Rows of the tile, clamped into x (dropped at the store).
    let rows: Vec<(Value<Index>, Value<Index>)> = (0..mt)
        .map(|r| {
            let dr = k.index(n64(r));
            let row = k.add(row0, dr);
            let rc = k.min(row, m1);
            (row, k.madd(rc, a.x.cols, a.ox))
        })
        .collect();
    let first = k.cmp(IntPredicate::Eq, lane, c0);
    k.for_each(sg, cp, nsg, |b, jj| {
        let j = b.add(j0, jj);
        let jc = b.min(j, n1);
        let wrow = b.madd(jc, a.w.row_words, a.ow);
        let init = vec![zf; mt];
        let acc = b.for_carry(lane, spans, stride, &init, |b, s, acc| {
            // Every span of the trip loads before any is used, so each
            // lane has `unroll` spans of weights in flight; a span past the
            // row's end rereads the last one and adds nothing.
            let spans_of_trip: Vec<_> = (0..unroll)
                .map(|u| {
                    if u == 0 {
                        return (None, span_values(b, &a.w, wrow, s));
                    }
                    let du = b.index(n64(u));
                    let su = b.madd(sgsize, du, s);
                    let ok = b.cmp(IntPredicate::Ult, su, spans);
                    let sc = b.min(su, spans1);
                    (Some((ok, sc)), span_values(b, &a.w, wrow, sc))
                })
                .collect();
            let mut acc = acc.to_vec();
            for (guard, wv) in &spans_of_trip {
                let at = guard.map_or(s, |(_, sc)| sc);
                for (r, &(_, xrow)) in rows.iter().enumerate() {
                    let xs = x_span(b, &a.x, xrow, at);
                    // Two chains per row, so the adds overlap.
                    let mut even = zf;
                    let mut odd = zf;
                    for (i, (&xv, &wi)) in xs.iter().zip(wv).enumerate() {
                        if i % 2 == 0 {
                            even = b.fmaf(xv, wi, even);
                        } else {
                            odd = b.fmaf(xv, wi, odd);
                        }
                    }
                    let mut part = b.addf(even, odd);
                    if let Some((ok, _)) = guard {
                        part = b.select(*ok, part, zf);
                    }
                    acc[r] = b.addf(acc[r], part);
                }
            }
            acc
        });
        let tot: Vec<_> = acc
            .iter()
            .map(|&v| b.subgroup_reduce(ReduceOp::AddF, v))
            .collect();
        let jok = b.cmp(IntPredicate::Ult, j, a.n);
        let store = b.and(first, jok);
        b.if_(store, |b| {
            for (r, &(row, _)) in rows.iter().enumerate() {
                let rok = b.cmp(IntPredicate::Ult, row, a.m);
                b.if_(rok, |b| {
                    let orow = b.madd(row, a.n, a.oo);
                    let oi = b.add(orow, j);
                    b.store(tot[r], a.out, &[oi]);
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
    let start = k.dispatch_id(Axis::X);
    let size = k.workgroup_size(Axis::X);
    let count = k.workgroup_count(Axis::X);
    let step = k.mul(size, count);
    k.for_each(start, n, step, |b, e| {
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

    const FORMATS: [QuantFormat; 4] = [
        QuantFormat::F32,
        QuantFormat::F16,
        QuantFormat::Q8_0,
        QuantFormat::Q4_1,
    ];

    /// Every format, row tile and load variant builds kernels the
    /// verifier and naga accept.
    #[test]
    fn every_variant_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for format in FORMATS {
                for (mt, xvec, tail) in [(1, true, false), (4, false, true), (16, false, false)] {
                    let key = GemvKey {
                        format,
                        mt,
                        xvec,
                        tail,
                        subgroup: target.subgroup_size_min as usize,
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

//! Span readers shared by the quantised kernels (`kernels`,
//! `tiled`), on the [`hrx_loom::build`] builder.
//!
//! A *span* is 8 consecutive values of one weight row (layouts in
//! `format`): [`span_values`] loads and dequantises one, [`x_span`] loads
//! the matching 8 values of a row of x (two 16-byte loads where x's
//! binding and rows align, else element loads). A row of an unblocked
//! format whose length is not a multiple of 8 has a partial last span:
//! the kernels built with `tail` clamp its reads into the row and zero
//! the values past its end, so no read leaves the bound ranges.

use crate::ops::QuantFormat;
use crate::ops::token::kernels::{narrow, widen};
use hrx_loom::build::{Body, Bool, Builder, Index, Num, Value, View};
use hrx_loom::ir::{IntPredicate, Scalar};

/// Values per span.
pub(crate) const SPAN: usize = 8;

/// Reads weight rows in spans: the word view and the row stride.
#[derive(Clone, Copy)]
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
    let words = span_words(b, w, row, s);
    decode_span(b, w, &words)
}

/// The loaded words of one span, not yet used: a kernel may load them
/// early and decode them ([`decode_span`]) later, so that the loads'
/// latency passes under other work (a GPU waits for a load only where
/// its value is first used).
pub(crate) struct SpanWords {
    /// Blocked formats: the block's scale words (one word of f16 halves,
    /// or the K-quants' f32 scale and minimum).
    head: Vec<Value<Num>>,
    /// The words holding the span's values, each with whether it lies
    /// inside the row (a partial last span; `None`: inside).
    words: Vec<(Value<Num>, Option<Value<Bool>>)>,
    /// Nibble formats: the nibbles' shift in each byte (0 or 4).
    shift: Option<Value<Num>>,
    /// 5-bit formats: the block's fifth bits shifted so that bit `t` is
    /// the span's value `t`'s.
    fifth: Option<Value<Num>>,
}

/// How a value is made from its scale `d`, its integer `q` and the
/// block's minimum `m`, as GGML makes it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Combine {
    /// `d * q`.
    Scale,
    /// `d * q + m` in one rounding (Q4_1).
    Fused,
    /// `d * q + m`, two roundings (Q5_1).
    AddMin,
    /// `d * q - m`, two roundings (the K-quants).
    SubMin,
}

/// How a blocked format lays out one device block (`format`'s
/// documentation): its values and words, the scale words before the
/// values (f32, else one word of f16 halves), a word of fifth bits, and
/// whether the values are nibbles (else signed bytes), offset by
/// `offset`, combined with the scales as `combine` says.
struct Block {
    values: u64,
    words: u64,
    head_words: u64,
    f32_head: bool,
    fifth: bool,
    nibbles: bool,
    offset: u32,
    combine: Combine,
}

impl Block {
    fn of(format: QuantFormat) -> Option<Block> {
        let nibbles = |words, head_words, f32_head, fifth, offset, combine| Block {
            values: 32,
            words,
            head_words,
            f32_head,
            fifth,
            nibbles: true,
            offset,
            combine,
        };
        let bytes = |values, words, f32_head| Block {
            values,
            words,
            head_words: 1,
            f32_head,
            fifth: false,
            nibbles: false,
            offset: 0,
            combine: Combine::Scale,
        };
        match format {
            QuantFormat::F16 | QuantFormat::F32 => None,
            QuantFormat::Q8_0 => Some(bytes(32, 9, false)),
            QuantFormat::Q6_K => Some(bytes(16, 5, true)),
            QuantFormat::Q4_0 => Some(nibbles(5, 1, false, false, 8, Combine::Scale)),
            QuantFormat::Q4_1 => Some(nibbles(5, 1, false, false, 0, Combine::Fused)),
            QuantFormat::Q5_0 => Some(nibbles(6, 1, false, true, 16, Combine::Scale)),
            QuantFormat::Q5_1 => Some(nibbles(6, 1, false, true, 0, Combine::AddMin)),
            QuantFormat::Q4_K => Some(nibbles(6, 2, true, false, 0, Combine::SubMin)),
            QuantFormat::Q5_K => Some(nibbles(7, 2, true, true, 0, Combine::SubMin)),
        }
    }
}

/// Load the words of span `s` of the row whose first word is `row`.
pub(crate) fn span_words(
    b: &mut Builder,
    w: &Weights,
    row: Value<Index>,
    s: Value<Index>,
) -> SpanWords {
    let [c1, c2, c4] = [1, 2, 4].map(|v| b.index(v));
    let load = |b: &mut Builder, i: Value<Index>| b.load(w.view, &[i]);
    if let Some(block) = Block::of(w.format) {
        let spans = b.index(block.values / SPAN as u64);
        let block_words = b.index(block.words);
        let blk = b.div(s, spans);
        let sp = b.rem(s, spans);
        let bw = b.madd(blk, block_words, row);
        let head = (0..block.head_words)
            .map(|i| {
                let ci = b.index(i);
                let at = b.add(bw, ci);
                load(b, at)
            })
            .collect();
        let head_words = b.index(block.head_words);
        let mut w1 = b.add(bw, head_words);
        // Span `sp` holds values 8 sp .. 8 sp + 8 of the block: its fifth
        // bits from there.
        let fifth = block.fifth.then(|| {
            let bits = load(b, w1);
            w1 = b.add(w1, c1);
            let c8 = b.index(8);
            let first = b.mul(sp, c8);
            let first = b.index_cast(first, Scalar::U32);
            b.shrui(bits, first)
        });
        // Nibbles: the pair of nibble words (first or second half of the
        // block's 16 bytes), low or high nibbles. Bytes: the span's pair
        // of byte words.
        let (pair, shift) = if block.nibbles {
            let half = b.rem(sp, c2);
            let hi = b.div(sp, c2);
            let sh = b.mul(hi, c4);
            (half, Some(b.index_cast(sh, Scalar::U32)))
        } else {
            (sp, None)
        };
        let wa = b.madd(pair, c2, w1);
        let wb = b.add(wa, c1);
        return SpanWords {
            head,
            words: vec![(load(b, wa), None), (load(b, wb), None)],
            shift,
            fifth,
        };
    }
    // Words of the span, and the row's words to clamp them to.
    let per = if w.format == QuantFormat::F16 {
        SPAN / 2
    } else {
        SPAN
    };
    let cper = b.index(per as u64);
    let first = b.mul(s, cper);
    let last = b.sub(w.row_words, c1);
    let words = (0..per)
        .map(|i| {
            let ci = b.index(i as u64);
            let wi = b.add(first, ci);
            if w.tail {
                let ok = b.cmp(IntPredicate::Ult, wi, w.row_words);
                let wc = b.min(wi, last);
                let p = b.add(row, wc);
                (load(b, p), Some(ok))
            } else {
                let p = b.add(row, wi);
                (load(b, p), None)
            }
        })
        .collect();
    SpanWords {
        head: Vec::new(),
        words,
        shift: None,
        fifth: None,
    }
}

/// The 8 values of a span from its loaded words (zeros past the row).
pub(crate) fn decode_span(b: &mut Builder, w: &Weights, span: &SpanWords) -> Vec<Value<Num>> {
    let [c0, c1] = [0, 1].map(|v| b.index(v));
    let mut out = Vec::with_capacity(SPAN);
    let Some(block) = Block::of(w.format) else {
        let zu = b.int(0, Scalar::U32);
        for &(word, inside) in &span.words {
            let word = match inside {
                Some(ok) => b.select(ok, word, zu),
                None => word,
            };
            if w.format == QuantFormat::F16 {
                let pair = b.unpackf16(word);
                out.push(b.extract(pair, c0));
                out.push(b.extract(pair, c1));
            } else {
                out.push(b.bitcast(word, Scalar::F32));
            }
        }
        return out;
    };
    // The scale and the minimum (read where the format has one).
    let has_min = block.combine != Combine::Scale;
    let (d, min) = if block.f32_head {
        let d = b.bitcast(span.head[0], Scalar::F32);
        let min = has_min.then(|| b.bitcast(span.head[1], Scalar::F32));
        (d, min)
    } else {
        let dm = b.unpackf16(span.head[0]);
        let d = b.extract(dm, c0);
        let min = has_min.then(|| b.extract(dm, c1));
        (d, min)
    };
    let offset = (block.offset > 0).then(|| b.float(f64::from(block.offset), Scalar::F32));
    let value = |b: &mut Builder, q: Value<Num>| {
        // Small integers: the offset subtracts exactly.
        let q = match offset {
            Some(o) => b.subf(q, o),
            None => q,
        };
        match (block.combine, min) {
            (Combine::Fused, Some(m)) => b.fmaf(d, q, m),
            (Combine::AddMin, Some(m)) => {
                let scaled = b.mulf(d, q);
                b.addf(scaled, m)
            }
            (Combine::SubMin, Some(m)) => {
                let scaled = b.mulf(d, q);
                b.subf(scaled, m)
            }
            _ => b.mulf(d, q),
        }
    };
    for (w_index, &(word, _)) in span.words.iter().enumerate() {
        if let Some(sh) = span.shift {
            let t = b.shrui(word, sh);
            let mask = b.int(15, Scalar::U32);
            for j in 0..4 {
                let bits = b.int(8 * j, Scalar::U32);
                let n = b.shrui(t, bits);
                let mut q = b.andi(n, mask);
                if let Some(fifth) = span.fifth {
                    // Bit `t` of the shifted fifth bits is value `t`'s,
                    // moved to bit 4.
                    let at = 4 * w_index as i64 + j;
                    let from = b.int(at, Scalar::U32);
                    let bit = b.shrui(fifth, from);
                    let one = b.int(1, Scalar::U32);
                    let bit = b.andi(bit, one);
                    let four = b.int(4, Scalar::U32);
                    let high = b.shli(bit, four);
                    q = b.ori(q, high);
                }
                let f = b.uitofp(q, Scalar::F32);
                out.push(value(b, f));
            }
        } else {
            let t = b.bitcast(word, Scalar::I32);
            let c24 = b.int(24, Scalar::I32);
            for j in 0..4 {
                let up = b.int(24 - 8 * j, Scalar::I32);
                let hi = b.shli(t, up);
                let q = b.shrsi(hi, c24);
                let f = b.sitofp(q, Scalar::F32);
                out.push(value(b, f));
            }
        }
    }
    out
}

/// How a kernel reads spans of x rows.
pub(crate) struct XRows {
    pub(crate) view: Value<View>,
    /// Row length (the weights' cols).
    pub(crate) cols: Value<Index>,
    /// 4-lane loads (binding 16-byte aligned, offset and cols multiples
    /// of 4). The view may hold f32 or f16, widened as it is read.
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
            let q = widen(b, q);
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
                let v = widen(b, v);
                b.select(ok, v, zf)
            } else {
                let p = b.add(first, ci);
                let v = b.load(x.view, &[p]);
                widen(b, v)
            }
        })
        .collect()
}

/// The element types of a product's x and output (f32 or f16 each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Elements {
    pub(crate) x: Scalar,
    pub(crate) out: Scalar,
}

#[cfg(test)]
impl Elements {
    /// f32 in and out.
    pub(crate) const F32: Elements = Elements {
        x: Scalar::F32,
        out: Scalar::F32,
    };
}

/// The launch arguments shared by the matmul kernels, in the order
/// `Ops::record_quant_matmul` pushes them, then the buffers.
pub(crate) struct QuantMatmulArgs {
    pub(crate) m: Value<Index>,
    pub(crate) n: Value<Index>,
    pub(crate) x: XRows,
    pub(crate) w: Weights,
    /// Element offsets of x, the words and out in their bindings.
    pub(crate) ox: Value<Index>,
    pub(crate) ow: Value<Index>,
    pub(crate) oo: Value<Index>,
    pub(crate) out: Value<View>,
    /// out's element type.
    pub(crate) out_element: Scalar,
}

impl QuantMatmulArgs {
    /// Declare the arguments on `k`, x read in quads (`xvec`), rows
    /// ending in a partial span (`tail`), x and out of `elements`.
    pub(crate) fn declare(
        k: &mut Body,
        format: QuantFormat,
        (xvec, tail): (bool, bool),
        elements: Elements,
    ) -> QuantMatmulArgs {
        let [m, n, cols, rw, ox, lx, ow, lw, oo, lo] =
            ["m", "n", "cols", "rw", "ox", "lx", "ow", "lw", "oo", "lo"].map(|a| k.arg_index(a));
        let x = k.arg_buffer("x", true);
        let w = k.arg_buffer("w", true);
        let out = k.arg_buffer("out", false);
        let zero = k.offset(0);
        let xv = k.buffer_view(x, zero, [lx.into()], elements.x);
        let wv = k.buffer_view(w, zero, [lw.into()], Scalar::U32);
        let ov = k.buffer_view(out, zero, [lo.into()], elements.out);
        QuantMatmulArgs {
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
            out_element: elements.out,
        }
    }

    /// Store the f32 `v` at element `at` of out.
    pub(crate) fn store_out(&self, b: &mut Builder, v: Value<Num>, at: Value<Index>) {
        let v = narrow(b, v, self.out_element);
        b.store(v, self.out, &[at]);
    }
}

//! The cast kernels, built: a grid-stride loop over the elements of a
//! possibly strided input (at most four coalesced axes) into a contiguous
//! output, every value through one 32-bit register value (floats widened
//! to f32, i32 kept) as [`Ops::record_cast`](crate::ops::Ops::record_cast)
//! describes; and its 4-wide form for float-to-float casts whose
//! innermost axis is unit-stride (on the H200 the scalar form ran at about
//! a third of the memory bandwidth on the encoder's f16 casts).

use super::kernels::{grid, strided_offset, unravel4};
use crate::DType;
use hrx_loom::build::AtomicRmw;
use hrx_loom::build::{Builder, Built, Index, Num, Value, View};
use hrx_loom::ir::{FloatPredicate, Scalar};

const F32: Scalar = Scalar::F32;
const U32: Scalar = Scalar::U32;
const I32: Scalar = Scalar::I32;

/// The element type `dtype` is stored as (bf16 as u32 words of two).
fn storage(dtype: DType) -> Scalar {
    match dtype {
        DType::I32 => I32,
        DType::BF16 => U32,
        DType::F16 => Scalar::F16,
        _ => F32,
    }
}

/// The element at `pa` as f32 (i32 for i32).
fn load(b: &mut Builder, dtype: DType, av: Value<View>, pa: Value<Index>) -> Value<Num> {
    match dtype {
        DType::F16 => {
            let h = b.load(av, &[pa]);
            b.extf(h, F32)
        }
        DType::BF16 => {
            // The element's half of its word, moved to the top of an f32.
            let two = b.index(2);
            let sixteen = b.index(16);
            let w = b.div(pa, two);
            let odd = b.rem(pa, two);
            let sh = b.mul(odd, sixteen);
            let shu = b.index_cast(sh, U32);
            let word = b.load(av, &[w]);
            let hi = b.shrui(word, shu);
            let c16 = b.int(16, U32);
            let bits = b.shli(hi, c16);
            b.bitcast(bits, F32)
        }
        _ => b.load(av, &[pa]),
    }
}

/// `x` converted between i32 and f32 where the types differ: floats to
/// i32 truncate and saturate (NaN to 0) like Rust's `as`.
fn convert(b: &mut Builder, from: DType, to: DType, x: Value<Num>) -> Value<Num> {
    match (from == DType::I32, to == DType::I32) {
        (true, false) => b.sitofp(x, F32),
        (false, true) => {
            let lo = b.float(-2147483648.0, F32);
            let hi = b.float(2147483648.0, F32);
            let t = b.fptosi(x, I32);
            let big = b.cmpf(FloatPredicate::Oge, x, hi);
            let small = b.cmpf(FloatPredicate::Olt, x, lo);
            let num = b.cmpf(FloatPredicate::Oeq, x, x);
            let max = b.int(2147483647, I32);
            let min = b.int(-2147483648, I32);
            let zero = b.int(0, I32);
            let t1 = b.select(big, max, t);
            let t2 = b.select(small, min, t1);
            b.select(num, t2, zero)
        }
        _ => x,
    }
}

/// Store `y` (f32, or i32 for i32) at `po`.
fn store(b: &mut Builder, dtype: DType, y: Value<Num>, ov: Value<View>, po: Value<Index>) {
    match dtype {
        DType::F16 => {
            let h = b.truncf(y, Scalar::F16);
            b.store(h, ov, &[po]);
        }
        DType::BF16 => store_bf16(b, y, ov, po),
        _ => b.store(y, ov, &[po]),
    }
}

/// Round `y` to bf16 bits, nearest-even (NaN: truncated, quiet bit set),
/// and write them into their half of the output word with two atomics, so
/// the neighbouring element's half is never overwritten.
fn store_bf16(b: &mut Builder, y: Value<Num>, ov: Value<View>, po: Value<Index>) {
    let bits = b.bitcast(y, U32);
    let c16 = b.int(16, U32);
    let one = b.int(1, U32);
    let top = b.shrui(bits, c16);
    let lsb = b.andi(top, one);
    let bias = b.int(32767, U32);
    let r0 = b.addi(bits, bias);
    let r1 = b.addi(r0, lsb);
    let rn = b.shrui(r1, c16);
    let quiet = b.int(64, U32);
    let qn = b.ori(top, quiet);
    let num = b.cmpf(FloatPredicate::Oeq, y, y);
    let h = b.select(num, rn, qn);
    let two = b.index(2);
    let sixteen = b.index(16);
    let w = b.div(po, two);
    let odd = b.rem(po, two);
    let sh = b.mul(odd, sixteen);
    let shu = b.index_cast(sh, U32);
    let val = b.shli(h, shu);
    let low = b.int(65535, U32);
    let mine = b.shli(low, shu);
    let all = b.int(4294967295, U32);
    let keep = b.xori(mine, all);
    b.atomic(AtomicRmw::And, keep, ov, &[w]);
    b.atomic(AtomicRmw::Or, val, ov, &[w]);
}

/// The cast kernel from `from` to `to`.
pub(crate) fn cast(from: DType, to: DType) -> Built {
    let (mut module, mut k) = grid("cast", "n", None);
    let n = k.arg_index("n");
    let [d1, d2, d3, sa0, sa1, sa2, sa3, oa, la, oo, lo] = [
        "d1", "d2", "d3", "sa0", "sa1", "sa2", "sa3", "oa", "la", "oo", "lo",
    ]
    .map(|x| k.arg_index(x));
    let a = k.arg_buffer("a", false);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], storage(from));
    let ov = k.buffer_view(out, zero, [lo.into()], storage(to));
    k.for_each_in_grid(n, |b, i| {
        let at = unravel4(b, i, [d1, d2, d3]);
        let pa = strided_offset(b, at, [sa0, sa1, sa2, sa3], oa);
        let x = load(b, from, av, pa);
        let y = convert(b, from, to, x);
        let po = b.add(oo, i);
        store(b, to, y, ov, po);
    });
    module.kernel(k.finish());
    module.finish()
}

/// The 4-wide cast between floats (f32, f16) of inputs whose innermost
/// axis is unit-stride: a grid-stride loop over quads, every quad one
/// vector load, one conversion and one vector store. The quad's position
/// is decomposed once per four elements, and f16 is written 8 bytes at a
/// time rather than 2.
pub(crate) fn cast4(from: DType, to: DType) -> Built {
    let (mut module, mut k) = grid("cast4", "n4", None);
    let n4 = k.arg_index("n4");
    let [d1, d2, d3, sa0, sa1, sa2, qa, la, qo, lo] = [
        "d1", "d2", "d3", "sa0", "sa1", "sa2", "qa", "la", "qo", "lo",
    ]
    .map(|x| k.arg_index(x));
    let a = k.arg_buffer("a", false);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], storage(from));
    let ov = k.buffer_view(out, zero, [lo.into()], storage(to));
    let four = k.index(4);
    k.for_each_in_grid(n4, |b, i| {
        let [i0, i1, i2, i3] = unravel4(b, i, [d1, d2, d3]);
        let pa0 = b.madd(i0, sa0, qa);
        let pa1 = b.madd(i1, sa1, pa0);
        let pa2 = b.madd(i2, sa2, pa1);
        let pa = b.add(pa2, i3);
        let ea = b.mul(pa, four);
        let x = b.vector_load(av, &[ea], 4);
        let y = match (from, to) {
            (DType::F16, DType::F32) => b.extf(x, F32),
            (DType::F32, DType::F16) => b.truncf(x, Scalar::F16),
            _ => x,
        };
        let po = b.add(qo, i);
        let eo = b.mul(po, four);
        b.vector_store(y, ov, &[eo]);
    });
    module.kernel(k.finish());
    module.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pair of dtypes builds a kernel the verifier and naga accept.
    #[test]
    fn every_pair_compiles() {
        let compiler = hrx_loom::Compiler::for_target(None, &hrx_core::Target::hopper()).unwrap();
        let all = [DType::F32, DType::F16, DType::BF16, DType::I32];
        for from in all {
            for to in all {
                compiler
                    .built(&cast(from, to))
                    .and_then(|m| m.compile_uncached(&hrx_loom::Specialization::new("@cast")))
                    .unwrap_or_else(|e| panic!("{from:?} -> {to:?}: {e}"));
            }
        }
        for (from, to) in [(DType::F32, DType::F16), (DType::F16, DType::F32)] {
            compiler
                .built(&cast4(from, to))
                .and_then(|m| m.compile_uncached(&hrx_loom::Specialization::new("@cast4")))
                .unwrap_or_else(|e| panic!("4-wide {from:?} -> {to:?}: {e}"));
        }
    }
}

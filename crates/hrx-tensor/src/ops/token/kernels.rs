//! The per-token kernels of a decoder layer, built: rotary position
//! embedding, the key/value cache store, both fused (RoPE of the new keys
//! stored with the new values, one dispatch where a decode step would
//! take three) and the SwiGLU gate. Each is one
//! grid-stride loop over the output elements (memory-bound, one dispatch).
//!
//! Every token row carries its position (and, for the cache store, its
//! sequence slot) as device data, so a prepared graph is replayed with new
//! rows; rows whose slot or position is out of range are inactive.
//!
//! The loom IR has no sine or cosine, so RoPE evaluates them itself: the
//! angle (never negative) is reduced by the nearest multiple of pi/2 in
//! three fused steps (pi/2 split so that the leading parts multiply the
//! quadrant count exactly), then sine and cosine of the remainder in
//! [-pi/4, pi/4] come from their Taylor series to degree 11 and 12
//! (truncation below 1e-11, under f32 rounding), and the quadrant picks
//! and signs them.

use crate::ops::elementwise::kernels::grid;
use hrx_loom::build::{Builder, Built, Index, Num, Value, View};
use hrx_loom::ir::{IntPredicate, Scalar};
use std::f64::consts::FRAC_PI_2;

const F32: Scalar = Scalar::F32;

/// The three parts of pi/2 for the angle reduction: the first has 8
/// significant bits and the second 11, so their products with a quadrant
/// count below 2^13 are exact even where fma is not fused.
fn half_pi_parts() -> [f64; 3] {
    let c1 = 1.5703125;
    let quantum = 2f64.powi(-22);
    let c2 = ((FRAC_PI_2 - c1) / quantum).round() * quantum;
    let c3 = FRAC_PI_2 - c1 - c2;
    [c1, c2, c3]
}

/// `(sin a, cos a)` for an f32 angle `a >= 0`.
pub(crate) fn sin_cos(b: &mut Builder, a: Value<Num>) -> (Value<Num>, Value<Num>) {
    let two_over_pi = b.float(2.0 / std::f64::consts::PI, F32);
    let half = b.float(0.5, F32);
    let q = b.fmaf(a, two_over_pi, half);
    // Truncation is the floor here: the angle is not negative.
    let k = b.fptosi(q, Scalar::I32);
    let kf = b.sitofp(k, F32);
    let nk = b.negf(kf);
    let mut r = a;
    for part in half_pi_parts() {
        let c = b.float(part, F32);
        r = b.fmaf(nk, c, r);
    }
    let r2 = b.mulf(r, r);
    // sin r = r + r^3 * (S3 + r^2 (S5 + ...)), Horner from the top term.
    let horner = |b: &mut Builder, coefficients: &[f64]| {
        let mut acc = b.float(coefficients[0], F32);
        for &c in &coefficients[1..] {
            let cv = b.float(c, F32);
            acc = b.fmaf(acc, r2, cv);
        }
        acc
    };
    let factorial = |n: u32| (1..=n).map(f64::from).product::<f64>();
    let sin_terms: Vec<f64> = [11u32, 9, 7, 5, 3]
        .iter()
        .map(|&n| if n % 4 == 3 { -1.0 } else { 1.0 } / factorial(n))
        .collect();
    let cos_terms: Vec<f64> = [12u32, 10, 8, 6, 4, 2, 0]
        .iter()
        .map(|&n| if n % 4 == 2 { -1.0 } else { 1.0 } / factorial(n))
        .collect();
    let sp = horner(b, &sin_terms);
    let r3 = b.mulf(r2, r);
    let s = b.fmaf(r3, sp, r);
    let c = horner(b, &cos_terms);
    // Quadrant k mod 4: 1 and 3 swap sine and cosine; the sine is
    // negative in 2 and 3, the cosine in 1 and 2.
    let [one, two] = [1, 2].map(|v| b.int(v, Scalar::I32));
    let zero = b.int(0, Scalar::I32);
    let odd = b.andi(k, one);
    let swap = b.cmpi(IntPredicate::Ne, odd, zero);
    let high = b.andi(k, two);
    let neg_s = b.cmpi(IntPredicate::Ne, high, zero);
    let k1 = b.addi(k, one);
    let high1 = b.andi(k1, two);
    let neg_c = b.cmpi(IntPredicate::Ne, high1, zero);
    let sin0 = b.select(swap, c, s);
    let cos0 = b.select(swap, s, c);
    let nsin = b.negf(sin0);
    let ncos = b.negf(cos0);
    (b.select(neg_s, nsin, sin0), b.select(neg_c, ncos, cos0))
}

/// Where one RoPE output element reads: the row's elements in `xv` from
/// `xbase` at stride `xs2`, element `d` (below the rotated width), the
/// row's position `pos >= 0` (i32) and the frequency exponent `c`.
#[derive(Clone, Copy)]
pub(crate) struct Pair {
    pub(crate) xv: Value<View>,
    pub(crate) xbase: Value<Index>,
    pub(crate) xs2: Value<Index>,
    pub(crate) d: Value<Index>,
    pub(crate) pos: Value<Num>,
    pub(crate) c: Value<Num>,
}

/// Element `d` of a row after its pair `i = d / 2` turns by `pos *
/// exp(-i * c)`: `out0 = x0 cos - x1 sin`, `out1 = x0 sin + x1 cos`. One
/// fragment for every kernel that rotates (rope, rope_kv_store, the
/// rotary attention), so their results are bit-identical.
pub(crate) fn rotated(b: &mut Builder, at: Pair) -> Value<Num> {
    let Pair {
        xv,
        xbase,
        xs2,
        d,
        pos,
        c,
    } = at;
    let [c1, c2] = [1, 2].map(|v| b.index(v));
    let i = b.div(d, c2);
    let d0 = b.mul(i, c2);
    let d1 = b.add(d0, c1);
    let p0 = b.madd(d0, xs2, xbase);
    let p1 = b.madd(d1, xs2, xbase);
    let (x0, x1) = (b.load(xv, &[p0]), b.load(xv, &[p1]));
    let (x0, x1) = (widen(b, x0), widen(b, x1));
    let (out0, out1) = turned(b, (x0, x1), i, pos, c);
    let odd = b.cmp(IntPredicate::Ne, d, d0);
    b.select(odd, out1, out0)
}

/// Pair `i` of a row at position `pos` (i32) turned by `pos * exp(-i *
/// c)`: `(x0 cos - x1 sin, x0 sin + x1 cos)`, the arithmetic of
/// [`rotated`] for a pair already in registers (the same bits).
pub(crate) fn turned(
    b: &mut Builder,
    (x0, x1): (Value<Num>, Value<Num>),
    i: Value<Index>,
    pos: Value<Num>,
    c: Value<Num>,
) -> (Value<Num>, Value<Num>) {
    let iu = b.index_cast(i, Scalar::U32);
    let fi = b.uitofp(iu, F32);
    let nc = b.negf(c);
    let t = b.mulf(fi, nc);
    let freq = b.expf(t);
    let pf = b.sitofp(pos, F32);
    let angle = b.mulf(pf, freq);
    let (sin, cos) = sin_cos(b, angle);
    let x1s = b.mulf(x1, sin);
    let nx1s = b.negf(x1s);
    let out0 = b.fmaf(x0, cos, nx1s);
    let x1c = b.mulf(x1, cos);
    let out1 = b.fmaf(x0, sin, x1c);
    (out0, out1)
}

/// RoPE on adjacent pairs of `x: [rows, heads, hd]` (strided), written to
/// a contiguous `out`: pair `i < rope/2` of a row at position `p >= 0`
/// turns by `p * exp(-i * c)`, `c = 2 ln(base) / rope`; the rest (and
/// every element of a row at a negative position) is copied.
pub(crate) fn rope() -> Built {
    let (mut module, mut k) = grid("rope", "n", None);
    let [n, heads, hd, rope] = ["n", "heads", "hd", "rope"].map(|x| k.arg_index(x));
    let c = k.arg_scalar("c", F32);
    let [xs0, xs1, xs2, ox, lx, op, lp, oo, lo] =
        ["xs0", "xs1", "xs2", "ox", "lx", "op", "lp", "oo", "lo"].map(|x| k.arg_index(x));
    let x = k.arg_buffer("x", true);
    let position = k.arg_buffer("position", true);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let xv = k.buffer_view(x, zero, [lx.into()], F32);
    let pv = k.buffer_view(position, zero, [lp.into()], Scalar::I32);
    let ov = k.buffer_view(out, zero, [lo.into()], F32);
    let izero = k.int(0, Scalar::I32);
    k.for_each_in_grid(n, |b, e| {
        let d = b.rem(e, hd);
        let t = b.div(e, hd);
        let h = b.rem(t, heads);
        let r = b.div(t, heads);
        let pp = b.add(op, r);
        let pos = b.load(pv, &[pp]);
        let xb0 = b.madd(r, xs0, ox);
        let xbase = b.madd(h, xs1, xb0);
        let inside = b.cmp(IntPredicate::Ult, d, rope);
        let placed = b.cmpi(IntPredicate::Sge, pos, izero);
        let turn = b.and(inside, placed);
        let y = b.if_else(
            turn,
            |b| {
                vec![rotated(
                    b,
                    Pair {
                        xv,
                        xbase,
                        xs2,
                        d,
                        pos,
                        c,
                    },
                )]
            },
            |b| {
                let p = b.madd(d, xs2, xbase);
                vec![b.load(xv, &[p])]
            },
        )[0];
        let po = b.add(oo, e);
        b.store(y, ov, &[po]);
    });
    module.kernel(k.finish());
    module.finish()
}

/// `v` (a value or vector) as f32: f16 is widened, exactly; f32 is
/// itself. For f16 operands (caches, activations) read by f32 arithmetic.
pub(crate) fn widen(b: &mut Builder, v: Value<Num>) -> Value<Num> {
    match b.ty(v).element() {
        Some(Scalar::F32) => v,
        _ => b.extf(v, F32),
    }
}

/// An f32 value `x` as a tensor of `element` stores it: itself, or
/// rounded to the nearest f16.
pub(crate) fn narrow(b: &mut Builder, x: Value<Num>, element: Scalar) -> Value<Num> {
    match element {
        Scalar::F32 => x,
        _ => b.truncf(x, element),
    }
}

/// Where new key/value rows `[rows, kvh, hd]` go in a contiguous cache
/// `[slots, kvh, cap, hd]`: each row's slot and position are device data
/// (`sequence[os + r]`, `position[op + r]`), and a row takes part only
/// when `slot < slots` and `position < cap`, both compared as u32 so that
/// negative values fail the test.
struct CacheRows {
    sequence: Value<View>,
    position: Value<View>,
    os: Value<Index>,
    op: Value<Index>,
    kvh: Value<Index>,
    hd: Value<Index>,
    cap: Value<Index>,
    slots_u32: Value<Num>,
    cap_u32: Value<Num>,
}

/// One element of a row that takes part: its row, head and column, the
/// row's position, and the element's offset in the cache (before the
/// cache's own offset).
struct CacheElement {
    r: Value<Index>,
    h: Value<Index>,
    d: Value<Index>,
    pos: Value<Num>,
    at: Value<Index>,
}

impl CacheRows {
    /// Run `body` for element `e` of the new rows when its row takes part.
    fn store(
        &self,
        b: &mut Builder,
        e: Value<Index>,
        body: impl FnOnce(&mut Builder, CacheElement),
    ) {
        let d = b.rem(e, self.hd);
        let t = b.div(e, self.hd);
        let h = b.rem(t, self.kvh);
        let r = b.div(t, self.kvh);
        let ps = b.add(self.os, r);
        let pp = b.add(self.op, r);
        let seq = b.load(self.sequence, &[ps]);
        let pos = b.load(self.position, &[pp]);
        let sequ = b.bitcast(seq, Scalar::U32);
        let posu = b.bitcast(pos, Scalar::U32);
        let in_slots = b.cmpi(IntPredicate::Ult, sequ, self.slots_u32);
        let in_cap = b.cmpi(IntPredicate::Ult, posu, self.cap_u32);
        let active = b.and(in_slots, in_cap);
        b.if_(active, |b| {
            let s = b.to_index(sequ);
            let p = b.to_index(posu);
            let row = b.madd(s, self.kvh, h);
            let at = b.madd(row, self.cap, p);
            let at = b.madd(at, self.hd, d);
            body(b, CacheElement { r, h, d, pos, at });
        });
    }
}

/// `cache[seq[r], h, pos[r], j] = new[r, h, j]` for `new: [rows, kvh, hd]`
/// (strided) into a contiguous `cache: [slots, kvh, cap, hd]`, for rows
/// with `0 <= seq < slots` and `0 <= pos < cap` (negatives read as u32
/// fail the test); other rows write nothing. A `cache` of f16 takes
/// each value rounded to nearest.
pub(crate) fn kv_store(cache_element: Scalar) -> Built {
    let (mut module, mut k) = grid("kv_store", "n", None);
    let [n, kvh, hd, slots, cap] = ["n", "kvh", "hd", "slots", "cap"].map(|x| k.arg_index(x));
    let [ns0, ns1, ns2, on, ln, os, ls, op, lp, oc, lc] = [
        "ns0", "ns1", "ns2", "on", "ln", "os", "ls", "op", "lp", "oc", "lc",
    ]
    .map(|x| k.arg_index(x));
    let new = k.arg_buffer("new", true);
    let sequence = k.arg_buffer("sequence", true);
    let position = k.arg_buffer("position", true);
    let cache = k.arg_buffer("cache", false);
    let zero = k.offset(0);
    let nv = k.buffer_view(new, zero, [ln.into()], F32);
    let sv = k.buffer_view(sequence, zero, [ls.into()], Scalar::I32);
    let pv = k.buffer_view(position, zero, [lp.into()], Scalar::I32);
    let cv = k.buffer_view(cache, zero, [lc.into()], cache_element);
    let rows = CacheRows {
        sequence: sv,
        position: pv,
        os,
        op,
        kvh,
        hd,
        cap,
        slots_u32: k.index_cast(slots, Scalar::U32),
        cap_u32: k.index_cast(cap, Scalar::U32),
    };
    k.for_each_in_grid(n, |b, e| {
        rows.store(b, e, |b, CacheElement { r, h, d, at, .. }| {
            let n0 = b.madd(r, ns0, on);
            let n1 = b.madd(h, ns1, n0);
            let pn = b.madd(d, ns2, n1);
            let x = b.load(nv, &[pn]);
            let pc = b.add(at, oc);
            let x = narrow(b, x, cache_element);
            b.store(x, cv, &[pc]);
        });
    });
    module.kernel(k.finish());
    module.finish()
}

/// RoPE of the new keys and the cache store of keys and values in one
/// pass: for `k, v: [rows, kvh, hd]` (strided) and rows with `0 <= seq <
/// slots` and `0 <= pos < cap`, `k_cache[seq, h, pos, j]` takes element
/// `j` of `rope`'s output for `k[r, h]` (the same fragment, so the same
/// bits) and `v_cache[seq, h, pos, j] = v[r, h, j]`; both caches are
/// contiguous `[slots, kvh, cap, hd]` of `cache_element` (f16: rounded
/// to nearest), `k` and `v` of `input` (f16: widened as read). Other rows
/// write nothing.
pub(crate) fn rope_kv_store(input: Scalar, cache_element: Scalar) -> Built {
    let (mut module, mut k) = grid("rope_kv_store", "n", None);
    let [n, kvh, hd, slots, cap, rope] =
        ["n", "kvh", "hd", "slots", "cap", "rope"].map(|x| k.arg_index(x));
    let c = k.arg_scalar("c", F32);
    let [
        ks0,
        ks1,
        ks2,
        vs0,
        vs1,
        vs2,
        ok,
        lk,
        ov,
        lv,
        os,
        ls,
        op,
        lp,
        okc,
        lkc,
        ovc,
        lvc,
    ] = [
        "ks0", "ks1", "ks2", "vs0", "vs1", "vs2", "ok", "lk", "ov", "lv", "os", "ls", "op", "lp",
        "okc", "lkc", "ovc", "lvc",
    ]
    .map(|x| k.arg_index(x));
    let [kb, vb, sequence, position] =
        ["k", "v", "sequence", "position"].map(|x| k.arg_buffer(x, true));
    let [kcb, vcb] = ["k_cache", "v_cache"].map(|x| k.arg_buffer(x, false));
    let zero = k.offset(0);
    let kv = k.buffer_view(kb, zero, [lk.into()], input);
    let vv = k.buffer_view(vb, zero, [lv.into()], input);
    let sv = k.buffer_view(sequence, zero, [ls.into()], Scalar::I32);
    let pv = k.buffer_view(position, zero, [lp.into()], Scalar::I32);
    let kcv = k.buffer_view(kcb, zero, [lkc.into()], cache_element);
    let vcv = k.buffer_view(vcb, zero, [lvc.into()], cache_element);
    let rows = CacheRows {
        sequence: sv,
        position: pv,
        os,
        op,
        kvh,
        hd,
        cap,
        slots_u32: k.index_cast(slots, Scalar::U32),
        cap_u32: k.index_cast(cap, Scalar::U32),
    };
    k.for_each_in_grid(n, |b, e| {
        rows.store(b, e, |b, CacheElement { r, h, d, pos, at }| {
            let k0 = b.madd(r, ks0, ok);
            let kbase = b.madd(h, ks1, k0);
            // An active row's position is not negative: only the width
            // decides whether the element turns.
            let inside = b.cmp(IntPredicate::Ult, d, rope);
            let y = b.if_else(
                inside,
                |b| {
                    let at = Pair {
                        xv: kv,
                        xbase: kbase,
                        xs2: ks2,
                        d,
                        pos,
                        c,
                    };
                    vec![rotated(b, at)]
                },
                |b| {
                    let pk = b.madd(d, ks2, kbase);
                    let y = b.load(kv, &[pk]);
                    vec![widen(b, y)]
                },
            )[0];
            let v0 = b.madd(r, vs0, ov);
            let v1 = b.madd(h, vs1, v0);
            let pvv = b.madd(d, vs2, v1);
            let x = b.load(vv, &[pvv]);
            let x = widen(b, x);
            let pkc = b.add(at, okc);
            let y = narrow(b, y, cache_element);
            b.store(y, kcv, &[pkc]);
            let pvc = b.add(at, ovc);
            let x = narrow(b, x, cache_element);
            b.store(x, vcv, &[pvc]);
        });
    });
    module.kernel(k.finish());
    module.finish()
}

/// `silu(g) * u = g / (1 + exp(-g)) * u`: one fragment for the SwiGLU
/// kernel and the gated matrix-vector kernel, so they agree bit for bit.
pub(crate) fn silu_times(b: &mut Builder, g: Value<Num>, u: Value<Num>) -> Value<Num> {
    let one = b.float(1.0, F32);
    let ng = b.negf(g);
    let ex = b.expf(ng);
    let den = b.addf(one, ex);
    let silu = b.divf(g, den);
    b.mulf(silu, u)
}

/// `out = silu(gate) * up` over `[rows, width]` (both inputs strided, `out`
/// contiguous), gate and up of `input` elements and out of `output` (f32,
/// or f16: widened on load, rounded to nearest on store).
pub(crate) fn swiglu((input, output): (Scalar, Scalar)) -> Built {
    let (mut module, mut k) = grid("swiglu", "n", None);
    let [n, width, gs0, gs1, og, lg, us0, us1, ou, lu, oo, lo] = [
        "n", "width", "gs0", "gs1", "og", "lg", "us0", "us1", "ou", "lu", "oo", "lo",
    ]
    .map(|x| k.arg_index(x));
    let gate = k.arg_buffer("gate", true);
    let up = k.arg_buffer("up", true);
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let gv = k.buffer_view(gate, zero, [lg.into()], input);
    let uv = k.buffer_view(up, zero, [lu.into()], input);
    let ov = k.buffer_view(out, zero, [lo.into()], output);
    k.for_each_in_grid(n, |b, e| {
        let j = b.rem(e, width);
        let r = b.div(e, width);
        let g0 = b.madd(r, gs0, og);
        let pg = b.madd(j, gs1, g0);
        let u0 = b.madd(r, us0, ou);
        let pu = b.madd(j, us1, u0);
        let (g, u) = (b.load(gv, &[pg]), b.load(uv, &[pu]));
        let (g, u) = (widen(b, g), widen(b, u));
        let y = silu_times(b, g, u);
        let y = narrow(b, y, output);
        let po = b.add(oo, e);
        b.store(y, ov, &[po]);
    });
    module.kernel(k.finish());
    module.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split of pi/2 sums back to it, its leading parts are short
    /// enough for exact products, and the kernels compile.
    #[test]
    fn parts_and_kernels() {
        let [c1, c2, c3] = half_pi_parts();
        assert!((c1 + c2 + c3 - FRAC_PI_2).abs() < 1e-16);
        assert_eq!(c2 * 2f64.powi(22), (c2 * 2f64.powi(22)).round());
        assert!(c2.abs() < 2f64.powi(-10));
        for target in [hrx_core::Target::lavapipe(), hrx_core::Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for (symbol, built) in [
                ("rope", rope()),
                ("kv_store", kv_store(Scalar::F32)),
                ("kv_store", kv_store(Scalar::F16)),
                ("rope_kv_store", rope_kv_store(F32, F32)),
                ("rope_kv_store", rope_kv_store(F32, Scalar::F16)),
                ("rope_kv_store", rope_kv_store(Scalar::F16, Scalar::F16)),
                ("rope_kv_store", rope_kv_store(Scalar::F16, F32)),
                ("swiglu", swiglu((F32, F32))),
                ("swiglu", swiglu((F32, Scalar::F16))),
                ("swiglu", swiglu((Scalar::F16, Scalar::F16))),
            ] {
                compiler
                    .built(&built)
                    .and_then(|m| m.compile_uncached(&hrx_loom::Specialization::new(symbol)))
                    .unwrap_or_else(|e| panic!("{symbol}: {e}"));
            }
        }
    }
}

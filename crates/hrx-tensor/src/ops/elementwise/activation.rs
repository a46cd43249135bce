//! The elementwise operations as built fragments: one definition each,
//! inlined by the elementwise kernels and the matmul epilogues (with fresh
//! names, so they never collide with the kernel around them) and
//! vectorized for the 4-wide kernels.

use crate::ops::{BinaryOp, UnaryOp};
use hrx_loom::build::{Builder, Fragment, Num, Ty, Value};
use hrx_loom::ir::{FloatPredicate, IntPredicate, Scalar};

/// GELU through the complementary error function, without a division or
/// a compare (so it vectorizes): with `a = |x|`, `erfc(a / sqrt 2) =
/// exp(a * S(a))` for a degree-7 polynomial `S` (a weighted minimax fit
/// of `ln(erfc(a / sqrt 2)) / a` on [0, 6]), and `GELU(x) = max(x, 0) -
/// a/2 * erfc(a / sqrt 2)` on both sides of zero. That is one
/// exponential, eight multiply-adds and no cancellation for negative `x`;
/// the fit's error in GELU is below 7e-8 before f32 rounding. Beyond
/// |x| = 6 the factor `a/2` is held at 3: `a * S(a)` keeps decreasing, so
/// the term is below 6e-9 there and +inf maps to +inf; NaN propagates
/// through the exponential. Coefficients from `c0` (constant term) up.
const GELU_POLY: [f64; 8] = [
    -0.79790837,
    -0.31813794,
    -0.03679607,
    0.0054002567,
    -0.0004293809,
    -7.802581e-6,
    4.7419685e-6,
    -2.8494506e-7,
];

/// `1 / (1 + e^-x)`, named `name`.
fn sigmoid(b: &mut Builder, x: Value<Num>, t: Scalar, name: &str) -> Value<Num> {
    let one = b.hint("onef").float(1.0, t);
    let nx = b.hint("nx").negf(x);
    let e = b.hint("e").expf(nx);
    let den = b.hint("den").addf(e, one);
    b.hint(name).divf(one, den)
}

fn gelu(b: &mut Builder, x: Value<Num>, t: Scalar) -> Value<Num> {
    let a = b.hint("ge_a").absf(x);
    let c: Vec<Value<Num>> = GELU_POLY
        .iter()
        .enumerate()
        .map(|(i, &v)| b.hint(&format!("ge_c{i}")).float(v, t))
        .collect();
    // Horner from the top coefficient: p6 = c7 * a + c6, ..., p0.
    let mut p = c[7];
    for i in (0..7).rev() {
        p = b.hint(&format!("ge_p{i}")).fmaf(p, a, c[i]);
    }
    let tt = b.hint("ge_t").mulf(a, p);
    let e = b.hint("ge_e").expf(tt);
    let lim = b.hint("ge_lim").float(6.0, t);
    let mhalf = b.hint("ge_mhalf").float(-0.5, t);
    let zero = b.hint("ge_zero").float(0.0, t);
    let ac = b.hint("ge_ac").minnumf(a, lim);
    let h = b.hint("ge_h").mulf(ac, mhalf);
    let pos = b.hint("ge_pos").maxnumf(x, zero);
    b.hint("r").fmaf(h, e, pos)
}

fn gelu_tanh(b: &mut Builder, x: Value<Num>, t: Scalar) -> Value<Num> {
    let half = b.hint("half").float(0.5, t);
    let one = b.hint("onef").float(1.0, t);
    let k0 = b.hint("k0").float(0.7978845608028654, t);
    let k1 = b.hint("k1").float(0.044715, t);
    let x2 = b.hint("x2").mulf(x, x);
    let x3 = b.hint("x3").mulf(x2, x);
    let inner = b.hint("inner").fmaf(k1, x3, x);
    let arg = b.hint("arg").mulf(k0, inner);
    let th = b.hint("th").tanhf(arg);
    let onep = b.hint("onep").addf(one, th);
    let hx = b.hint("hx").mulf(half, x);
    b.hint("r").mulf(hx, onep)
}

impl UnaryOp {
    /// The operation on one value of type `t` (f32 or f16).
    pub(crate) fn fragment(self, t: Scalar) -> Fragment {
        Fragment::unary(Ty::Scalar(t), |b, x| match self {
            UnaryOp::Neg => b.hint("r").negf(x),
            UnaryOp::Abs => b.hint("r").absf(x),
            UnaryOp::Exp => b.hint("r").expf(x),
            UnaryOp::Log => b.hint("r").logf(x),
            UnaryOp::Sqrt => b.hint("r").sqrtf(x),
            UnaryOp::Rsqrt => b.hint("r").rsqrtf(x),
            UnaryOp::Tanh => b.hint("r").tanhf(x),
            UnaryOp::Sigmoid => sigmoid(b, x, t, "r"),
            UnaryOp::Relu => {
                let zero = b.hint("zf").float(0.0, t);
                b.hint("r").maxnumf(x, zero)
            }
            UnaryOp::Gelu => gelu(b, x, t),
            UnaryOp::GeluTanh => gelu_tanh(b, x, t),
            UnaryOp::Silu => {
                let s = sigmoid(b, x, t, "s");
                b.hint("r").mulf(x, s)
            }
        })
    }
}

/// `x ^ y` in f32 (see [`BinaryOp::Pow`]).
fn pow(b: &mut Builder, x: Value<Num>, y: Value<Num>) -> Value<Num> {
    let f = Scalar::F32;
    let zf = b.hint("zf").float(0.0, f);
    let onef = b.hint("onef").float(1.0, f);
    let ax = b.hint("ax").absf(x);
    let lx = b.hint("lx").logf(ax);
    let p = b.hint("p").mulf(y, lx);
    let m = b.hint("m").expf(p);
    let yi = b.hint("yi").fptosi(y, Scalar::I32);
    let yb = b.hint("yb").sitofp(yi, f);
    let isint = b.hint("isint").cmpf(FloatPredicate::Oeq, yb, y);
    let c1 = b.hint("c1").int(1, Scalar::I32);
    let oddbit = b.hint("oddbit").andi(yi, c1);
    let odd = b.hint("odd").cmpi(IntPredicate::Eq, oddbit, c1);
    let nm = b.hint("nm").negf(m);
    let signed = b.hint("signed").select(odd, nm, m);
    let nanbits = b.hint("nanbits").int(2143289344, Scalar::I32);
    let nan = b.hint("nan").bitcast(nanbits, f);
    let negres = b.hint("negres").select(isint, signed, nan);
    let neg = b.hint("neg").cmpf(FloatPredicate::Olt, x, zf);
    let r0 = b.hint("r0").select(neg, negres, m);
    let yz = b.hint("yz").cmpf(FloatPredicate::Oeq, y, zf);
    b.hint("r").select(yz, onef, r0)
}

impl BinaryOp {
    /// The operation on two values of type `t` (f32 or f16).
    pub(crate) fn fragment(self, t: Scalar) -> Fragment {
        Fragment::build(&[Ty::Scalar(t), Ty::Scalar(t)], |b, p| {
            let (x, y) = (p[0], p[1]);
            vec![match self {
                BinaryOp::Add => b.hint("r").addf(x, y),
                BinaryOp::Sub => b.hint("r").subf(x, y),
                BinaryOp::Mul => b.hint("r").mulf(x, y),
                BinaryOp::Div => b.hint("r").divf(x, y),
                BinaryOp::Max => b.hint("r").maxnumf(x, y),
                BinaryOp::Min => b.hint("r").minnumf(x, y),
                BinaryOp::Pow if t == Scalar::F32 => pow(b, x, y),
                // f16 pow widens to f32 and rounds once at the end: loom
                // has no 16-bit bitcast to make the NaN from, and in f16
                // the exponent would scale log's error (up to 2^-7 near 1)
                // by |b|.
                BinaryOp::Pow => {
                    let wx = b.hint("pw_x").extf(x, Scalar::F32);
                    let wy = b.hint("pw_y").extf(y, Scalar::F32);
                    let r = pow(b, wx, wy);
                    b.hint("r").truncf(r, t)
                }
            }]
        })
    }
}

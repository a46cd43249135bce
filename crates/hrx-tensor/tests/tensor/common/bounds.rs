//! Error bounds for comparing kernels with f64 references. The seeds are
//! random on every run, so a tolerance must hold for every draw: each one
//! here is a worst-case bound on what a correct kernel may return, built
//! from the Vulkan precision requirements (SPIR-V environment appendix,
//! "Precision of Individual Operations"):
//!
//! - add, sub, mul and conversions are correctly rounded: to nearest on
//!   lavapipe and the H200, where one rounding moves a value by at most
//!   `u` times its magnitude, `u` the unit roundoff (2^-24 in f32, 2^-11
//!   in f16); one ULP is at most `2u` relative. (Without RoundingModeRTE
//!   the rules also allow directed rounding, up to 1 ULP: a lone add, sub
//!   or mul gets that much, so it never sits on the edge of its bound);
//! - division 2.5 ULP (`5u`), inversesqrt 2 ULP (`4u`), sqrt inherits
//!   `1 / inversesqrt` (`9u`), an unfused fma rounds twice;
//! - exp: `3 + 2|t|` ULP;
//! - log: 3 ULP outside [0.5, 2], inside it an absolute 2^-21 (f32) or
//!   2^-7 (f16);
//! - tanh, which the rules only inherit from exponentials: computed from
//!   one exponential of `2|t|`, so off by that exponential's error times
//!   `1 - |tanh t|`, plus `8u` for the divisions and roundings around it;
//! - results below the smallest normal may be flushed to zero.
//!
//! Bounds are first order (products of two roundings are below anything
//! the tests resolve). A missed, doubled or misplaced element, an
//! unwritten (poisoned) output or a wrong formula moves a result by far
//! more than these bounds.

use super::cases::unary_ref;
use hrx_tensor::{
    DType,
    ops::{BinaryOp, UnaryOp},
};

/// The unit roundoff of f32 arithmetic.
pub const U32: f64 = f32::EPSILON as f64 / 2.0;

/// What one dtype's arithmetic may do.
#[derive(Clone, Copy, Debug)]
pub struct Precision {
    /// Unit roundoff.
    pub u: f64,
    /// log's absolute error bound inside [0.5, 2].
    log_near_one: f64,
    /// Slack for results (or intermediates) flushed from the subnormal
    /// range: a few times the smallest normal.
    tiny: f64,
}

impl Precision {
    /// Arithmetic carried out in `dtype` (f32 or f16).
    pub fn of(dtype: DType) -> Self {
        match dtype {
            DType::F16 => Precision {
                u: 2f64.powi(-11),
                log_near_one: 2f64.powi(-7),
                tiny: 4.0 * 2f64.powi(-14),
            },
            _ => Precision {
                u: U32,
                log_near_one: 2f64.powi(-21),
                tiny: 4.0 * f64::from(f32::MIN_POSITIVE),
            },
        }
    }

    /// Relative error of `exp(t)`: 3 + 2|t| ULP.
    pub fn exp(&self, t: f64) -> f64 {
        (3.0 + 2.0 * t.abs()) * 2.0 * self.u
    }

    /// Absolute error of `log(x)`, x > 0.
    pub fn log(&self, x: f64) -> f64 {
        if (0.5..=2.0).contains(&x) {
            self.log_near_one
        } else {
            6.0 * self.u * x.ln().abs()
        }
    }

    /// Absolute error of `tanh(t)`.
    pub fn tanh(&self, t: f64) -> f64 {
        (1.0 - t.tanh().abs()) * self.exp(2.0 * t) + 8.0 * self.u
    }
}

/// Bound on `|kernel(x) - f(x)|` for the unary operator `op` on an exactly
/// held input `x`, computed in `p`'s arithmetic with the kernel's formula
/// (ops/elementwise/activation.rs).
pub fn unary_bound(op: UnaryOp, x: f64, p: &Precision) -> f64 {
    let u = p.u;
    let y = unary_ref(op, x);
    let sigmoid = 1.0 / (1.0 + (-x).exp());
    let bound = match op {
        // Exact, and normal inputs give normal results or zero.
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => return 0.0,
        UnaryOp::Exp => y.abs() * p.exp(x),
        UnaryOp::Log => p.log(x),
        UnaryOp::Sqrt => 9.0 * u * y.abs(),
        UnaryOp::Rsqrt => 4.0 * u * y.abs(),
        UnaryOp::Tanh => p.tanh(x),
        // 1 / (1 + exp(-x)): the exponential's error scaled by 1 - s, an
        // add and a division; silu multiplies by x once more.
        UnaryOp::Sigmoid => y.abs() * ((1.0 - sigmoid) * p.exp(x) + 6.0 * u),
        UnaryOp::Silu => y.abs() * ((1.0 - sigmoid) * p.exp(x) + 7.0 * u),
        UnaryOp::Gelu => gelu_bound(x, y, p),
        UnaryOp::GeluTanh => gelu_tanh_bound(x, y, p),
    };
    bound + p.tiny
}

/// Magnitudes (rounded up) of the coefficients of GELU's fit of
/// `ln(erfc(a / sqrt 2)) / a` in ops/elementwise/activation.rs: they scale the
/// rounding of its Horner evaluation.
const GELU_FIT: [f64; 8] = [
    0.7980, 0.3182, 0.0368, 0.00541, 0.000430, 7.81e-6, 4.75e-6, 2.85e-7,
];

/// GELU as the kernel computes it: `max(x, 0) - a/2 * exp(t)` with
/// `t = a * S(a)`, `a = |x|`, `S` a degree-7 polynomial (Horner, 7 fmas,
/// coefficients rounded to the dtype). `t` may be off by `16u * a * sum
/// |c_i| a^i`; exp adds its own error; `a/2 * exp(t)` is `|y - max(x,
/// 0)|`. The fit itself is within 7e-8; beyond |x| = 6 the kernel holds
/// the tail term below 6e-9.
fn gelu_bound(x: f64, y: f64, p: &Precision) -> f64 {
    let a = x.abs();
    if a > 6.0 {
        return 1e-8 + p.u * y.abs();
    }
    let t = a * GELU_FIT.iter().rev().fold(0.0, |acc, c| acc * a + c);
    let dt = 16.0 * p.u * t;
    (y - x.max(0.0)).abs() * (dt + p.exp(t) + p.u) + p.u * y.abs() + 7e-8
}

/// GELU (tanh form) as the kernel computes it: `0.5x * (1 + tanh(k0 *
/// fma(k1, x^3, x)))`, constants rounded to the dtype. Near saturation
/// `1 + tanh` cancels, so tanh's absolute error is what counts.
fn gelu_tanh_bound(x: f64, y: f64, p: &Precision) -> f64 {
    let u = p.u;
    let k0 = (2.0 / std::f64::consts::PI).sqrt();
    let cube = 0.044715 * x.powi(3);
    let inner = x + cube;
    let arg = k0 * inner;
    let th = arg.tanh();
    // x^3 (two roundings), k1 (one), an unfused fma (two) and k0 (one).
    let d_inner = 4.0 * u * cube.abs() + 2.0 * u * inner.abs();
    let d_arg = k0 * d_inner + 2.0 * u * arg.abs();
    let d_th = (1.0 - th * th) * d_arg + p.tanh(arg);
    let d_onep = d_th + u * (1.0 + th);
    0.5 * x.abs() * d_onep + u * y.abs()
}

/// Bound on `|kernel(x, y) - f(x, y)|` for the binary operator `op` on
/// exactly held inputs.
pub fn binary_bound(op: BinaryOp, x: f64, y: f64, p: &Precision) -> f64 {
    let u = p.u;
    let r = super::cases::binary_ref(op, x, y);
    let bound = match op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => 2.0 * u * r.abs(),
        BinaryOp::Div => 5.0 * u * r.abs(),
        BinaryOp::Max | BinaryOp::Min => return 0.0,
        // exp(y * log|x|) (the sign is selected exactly).
        BinaryOp::Pow => {
            let t = y * x.abs().ln();
            let dt = y.abs() * p.log(x.abs()) + u * t.abs();
            r.abs() * (dt + p.exp(t))
        }
    };
    bound + p.tiny
}

/// Assert `|got - want| <= tol` element by element (NaN only where the
/// reference is NaN, infinities equal), naming the first element outside.
pub fn assert_within(got: &[f64], want: &[f64], tol: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, ((g, w), t)) in got.iter().zip(want).zip(tol).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= *t
        };
        assert!(
            ok,
            "{what}: element {i}: got {g}, want {w} (error {:e}, bound {t:e})",
            (g - w).abs()
        );
    }
}

//! Elementwise operators: binary with numpy broadcasting, and unary.

use super::{
    Ops,
    indexing::{broadcast_shapes, broadcast_strides, coalesce},
    operand::{Operand, check_inputs, check_output, operand, quad_offset},
    registry::{KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

const BINARY: &str = include_str!("../../kernels/binary.loom");
const UNARY: &str = include_str!("../../kernels/unary.loom");
const BINARY4: &str = include_str!("../../kernels/binary4.loom");
const UNARY4: &str = include_str!("../../kernels/unary4.loom");

/// The vector type of the 4-wide kernels.
const VEC4: &str = "vector<4xf32>";

/// Axes a strided elementwise kernel addresses after coalescing.
const MAX_RANK: usize = 4;

/// A binary elementwise operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
    /// The larger of `a` and `b` (the number when one is NaN).
    Max,
    /// The smaller of `a` and `b` (the number when one is NaN).
    Min,
    /// `a` to the power `b`: `exp(b * ln|a|)`, negated for a negative base
    /// with an odd integer exponent, NaN for a negative base with a
    /// non-integer exponent, 1 when `b` is 0.
    Pow,
}

/// A unary elementwise operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `e^x`
    Exp,
    /// `ln x`
    Log,
    /// `sqrt x`
    Sqrt,
    /// `1 / sqrt x`
    Rsqrt,
    /// `tanh x`
    Tanh,
    /// `1 / (1 + e^-x)`
    Sigmoid,
    /// `max(x, 0)`
    Relu,
    /// `x * Phi(x)` with the error function: `max(x, 0) - |x|/2 *
    /// erfc(|x| / sqrt 2)`, erfc from one exponential of a polynomial
    /// (error in GELU below 7e-8 before f32 rounding).
    Gelu,
    /// The tanh approximation of GELU.
    GeluTanh,
    /// `x * sigmoid(x)`
    Silu,
}

impl UnaryOp {
    /// Every unary operation, in declaration order.
    pub const ALL: [UnaryOp; 12] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Silu,
    ];
}

impl BinaryOp {
    fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Pow => "pow",
        }
    }

    /// loom lines computing `%r` from `%x` and `%y` of type `t`.
    fn body(self, t: &str) -> String {
        let simple = |op: &str| format!("    %r = scalar.{op} %x, %y : {t}");
        match self {
            BinaryOp::Add => simple("addf"),
            BinaryOp::Sub => simple("subf"),
            BinaryOp::Mul => simple("mulf"),
            BinaryOp::Div => simple("divf"),
            BinaryOp::Max => simple("maxnumf"),
            BinaryOp::Min => simple("minnumf"),
            BinaryOp::Pow if t == "f32" => POW.to_string(),
            // f16 pow widens to f32 and rounds once at the end: loom has
            // no 16-bit bitcast to make the NaN from, and in f16 the
            // exponent would scale log's error (up to 2^-7 near 1) by |b|.
            BinaryOp::Pow => format!(
                "    %pw_x = scalar.extf %x : {t} -> f32
    %pw_y = scalar.extf %y : {t} -> f32
{}
    %r = scalar.truncf %pw_r : f32 -> {t}",
                POW.replace('%', "%pw_")
            ),
        }
    }
}

/// `%r = %x ^ %y` in f32 (see [`BinaryOp::Pow`]).
const POW: &str = "    %zf = scalar.constant 0.0 : f32
    %onef = scalar.constant 1.0 : f32
    %ax = scalar.absf %x : f32
    %lx = scalar.logf %ax : f32
    %p = scalar.mulf %y, %lx : f32
    %m = scalar.expf %p : f32
    %yi = scalar.fptosi %y : f32 -> i32
    %yb = scalar.sitofp %yi : i32 -> f32
    %isint = scalar.cmpf oeq, %yb, %y : f32
    %c1 = scalar.constant 1 : i32
    %oddbit = scalar.andi %yi, %c1 : i32
    %odd = scalar.cmpi eq, %oddbit, %c1 : i32
    %nm = scalar.negf %m : f32
    %signed = scalar.select %odd, %nm, %m : f32
    %nanbits = scalar.constant 2143289344 : i32
    %nan = scalar.bitcast %nanbits : i32 -> f32
    %negres = scalar.select %isint, %signed, %nan : f32
    %neg = scalar.cmpf olt, %x, %zf : f32
    %r0 = scalar.select %neg, %negres, %m : f32
    %yz = scalar.cmpf oeq, %y, %zf : f32
    %r = scalar.select %yz, %onef, %r0 : f32";

/// `${S} = 1 / (1 + e^-x)`.
const SIGMOID: &str = "    %onef = scalar.constant 1.0 : ${T}
    %nx = scalar.negf %x : ${T}
    %e = scalar.expf %nx : ${T}
    %den = scalar.addf %e, %onef : ${T}
    ${S} = scalar.divf %onef, %den : ${T}";

/// GELU through the complementary error function, without a division or
/// a compare (so the same lines run on 4-vectors): with `a = |x|`,
/// `erfc(a / sqrt 2) = exp(a * S(a))` for a degree-7 polynomial `S` (a
/// weighted minimax fit of `ln(erfc(a / sqrt 2)) / a` on [0, 6]), and
/// `GELU(x) = max(x, 0) - a/2 * erfc(a / sqrt 2)` on both sides of zero.
/// That is one exponential, eight multiply-adds and no cancellation for
/// negative `x`; the fit's error in GELU is below 7e-8 before f32 rounding.
/// Beyond |x| = 6 the factor `a/2` is held at 3: `a * S(a)` keeps
/// decreasing, so the term is below 6e-9 there and +inf maps to +inf; NaN
/// propagates through the exponential. Names carry a `ge_` prefix because
/// the matmul epilogues splice these lines into their kernels.
const GELU: &str = "    %ge_a = scalar.absf %x : ${T}
    %ge_c0 = scalar.constant -0.79790837 : ${T}
    %ge_c1 = scalar.constant -0.31813794 : ${T}
    %ge_c2 = scalar.constant -0.03679607 : ${T}
    %ge_c3 = scalar.constant 0.0054002567 : ${T}
    %ge_c4 = scalar.constant -0.0004293809 : ${T}
    %ge_c5 = scalar.constant -7.802581e-6 : ${T}
    %ge_c6 = scalar.constant 4.7419685e-6 : ${T}
    %ge_c7 = scalar.constant -2.8494506e-7 : ${T}
    %ge_p6 = scalar.fmaf %ge_c7, %ge_a, %ge_c6 : ${T}
    %ge_p5 = scalar.fmaf %ge_p6, %ge_a, %ge_c5 : ${T}
    %ge_p4 = scalar.fmaf %ge_p5, %ge_a, %ge_c4 : ${T}
    %ge_p3 = scalar.fmaf %ge_p4, %ge_a, %ge_c3 : ${T}
    %ge_p2 = scalar.fmaf %ge_p3, %ge_a, %ge_c2 : ${T}
    %ge_p1 = scalar.fmaf %ge_p2, %ge_a, %ge_c1 : ${T}
    %ge_p0 = scalar.fmaf %ge_p1, %ge_a, %ge_c0 : ${T}
    %ge_t = scalar.mulf %ge_a, %ge_p0 : ${T}
    %ge_e = scalar.expf %ge_t : ${T}
    %ge_lim = scalar.constant 6.0 : ${T}
    %ge_mhalf = scalar.constant -0.5 : ${T}
    %ge_zero = scalar.constant 0.0 : ${T}
    %ge_ac = scalar.minnumf %ge_a, %ge_lim : ${T}
    %ge_h = scalar.mulf %ge_ac, %ge_mhalf : ${T}
    %ge_pos = scalar.maxnumf %x, %ge_zero : ${T}
    %r = scalar.fmaf %ge_h, %ge_e, %ge_pos : ${T}";

const GELU_TANH: &str = "    %half = scalar.constant 0.5 : ${T}
    %onef = scalar.constant 1.0 : ${T}
    %k0 = scalar.constant 0.7978845608028654 : ${T}
    %k1 = scalar.constant 0.044715 : ${T}
    %x2 = scalar.mulf %x, %x : ${T}
    %x3 = scalar.mulf %x2, %x : ${T}
    %inner = scalar.fmaf %k1, %x3, %x : ${T}
    %arg = scalar.mulf %k0, %inner : ${T}
    %th = scalar.tanhf %arg : ${T}
    %onep = scalar.addf %onef, %th : ${T}
    %hx = scalar.mulf %half, %x : ${T}
    %r = scalar.mulf %hx, %onep : ${T}";

impl UnaryOp {
    fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Silu => "silu",
        }
    }

    /// loom lines computing `%r` from `%x` of type `t`.
    pub(crate) fn body(self, t: &str) -> String {
        let simple = |op: &str| format!("    %r = scalar.{op} %x : {t}");
        let text = match self {
            UnaryOp::Neg => return simple("negf"),
            UnaryOp::Abs => return simple("absf"),
            UnaryOp::Exp => return simple("expf"),
            UnaryOp::Log => return simple("logf"),
            UnaryOp::Sqrt => return simple("sqrtf"),
            UnaryOp::Rsqrt => return simple("rsqrtf"),
            UnaryOp::Tanh => return simple("tanhf"),
            UnaryOp::Sigmoid => SIGMOID.replace("${S}", "%r"),
            UnaryOp::Relu => "    %zf = scalar.constant 0.0 : ${T}
    %r = scalar.maxnumf %x, %zf : ${T}"
                .to_string(),
            UnaryOp::Gelu => GELU.to_string(),
            UnaryOp::GeluTanh => GELU_TANH.to_string(),
            UnaryOp::Silu => SIGMOID.replace("${S}", "%s") + "\n    %r = scalar.mulf %x, %s : ${T}",
        };
        text.replace("${T}", t)
    }
}

/// An f32 operation body (`%r` from `%x`, `%y`) rewritten for
/// `vector<4xf32>` operands: each `scalar.constant` becomes a constant and
/// a splat, every other line changes its type. Bodies with compares or
/// integer lines (pow) have no vector form.
fn vectorize(body: &str) -> Option<String> {
    let mut out = String::with_capacity(body.len() * 2);
    for line in body.lines() {
        let (head, ty) = line.rsplit_once(" : ")?;
        if ty != "f32" || head.contains("cmp") || head.contains("fpto") {
            return None;
        }
        if let Some((name, value)) = head.split_once(" = scalar.constant ") {
            let name = name.trim();
            out.push_str(&format!(
                "    {name}_s = scalar.constant {value} : f32\n    {name} = vector.splat {name}_s : f32 -> {VEC4}\n"
            ));
        } else {
            out.push_str(&format!("{head} : {VEC4}\n"));
        }
    }
    Some(out.trim_end().to_string())
}

/// A 4-wide body for one of the wide kernels' slots (`OP_A`, `OP_B`,
/// `OP_T`): every value renamed `%x` to `%a_x` (the slot's letter, lower
/// case), so the kernel can hold two quads' lines side by side.
fn renamed(body: &str, slot: &str) -> String {
    let letter = slot.trim_start_matches("OP_").to_ascii_lowercase();
    body.replace('%', &format!("%{letter}_"))
}

/// Whether coalesced operands are all plain contiguous runs: one axis of
/// unit stride (the leading axes padded to extent 1).
fn one_run(dims: &[usize], strides: &[Vec<usize>]) -> bool {
    dims[..MAX_RANK - 1].iter().all(|&d| d == 1) && strides.iter().all(|s| s[MAX_RANK - 1] == 1)
}

/// Launch arguments of the strided kernels: the count, the inner extents,
/// then for each input its strides, element offset and length, then the
/// output's offset and length. `skip` elements are skipped at the start of
/// every operand (the tail after a 4-wide dispatch).
fn strided_scalars(
    n: u64,
    dims: &[usize],
    strides: &[Vec<usize>],
    inputs: &[&Operand],
    out: &Operand,
    skip: u64,
) -> Vec<ScalarValue> {
    let mut scalars = vec![ScalarValue::Index(n)];
    scalars.extend(dims_scalars(dims));
    for (stride, operand) in strides.iter().zip(inputs) {
        scalars.extend(stride_scalars(stride));
        scalars.push(ScalarValue::Index(operand.offset + skip));
        scalars.push(ScalarValue::Index(operand.len));
    }
    scalars.push(ScalarValue::Index(out.offset + skip));
    scalars.push(ScalarValue::Index(out.len));
    scalars
}

/// The kernels of one elementwise arity.
#[derive(Clone, Copy)]
struct Family {
    strided: &'static str,
    wide: &'static str,
    symbol: &'static str,
    wide_symbol: &'static str,
    /// Config keys of the workgroup size and grid cap, strided then wide.
    grid: [&'static str; 4],
}

/// The loom element type of a float dtype the elementwise kernels support.
fn float_type(ops: &Ops, operation: &str, dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::F16 => {
            let target = ops.registry.target()?;
            if target.shader_f16 && target.storage_16bit {
                Ok("f16")
            } else {
                Err(Error::Unsupported(format!(
                    "{operation}: the device lacks f16 arithmetic or 16-bit storage"
                )))
            }
        }
        other => Err(Error::Unsupported(format!(
            "{operation}: dtype {other} is not supported (f32, f16)"
        ))),
    }
}

fn dims_scalars(dims: &[usize]) -> impl Iterator<Item = ScalarValue> + '_ {
    dims[1..].iter().map(|&d| ScalarValue::Index(d as u64))
}

fn stride_scalars(strides: &[usize]) -> impl Iterator<Item = ScalarValue> + '_ {
    strides.iter().map(|&s| ScalarValue::Index(s as u64))
}

impl Ops {
    /// Record `out = op(a, b)` with numpy broadcasting. Inputs may be
    /// strided; `out` must be contiguous with the broadcast shape. f32, and
    /// f16 where the device has it (computed in f16, except `pow`: in f32,
    /// rounded to f16 once).
    ///
    /// The broadcast operands' axes are merged where both step through
    /// them contiguously; when more than four axes remain (e.g. strided
    /// slices along five axes), this returns [`Error::Unsupported`] naming
    /// the operator and both operands, and records nothing.
    pub fn record_binary(
        &self,
        graph: &mut Graph,
        op: BinaryOp,
        a: &DeviceTensor,
        b: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("{} of {} and {}", op.name(), a.desc(), b.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a, b])?;
        if a.desc().dtype() != b.desc().dtype() {
            return Err(Error::Message(format!("{operation}: the dtypes differ")));
        }
        let dtype = a.desc().dtype();
        let shape = broadcast_shapes(a.desc().shape(), b.desc().shape())
            .map_err(|e| Error::Message(format!("{operation}: {e}")))?;
        check_output(runtime, operation, out, dtype, &shape)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let t = float_type(self, operation, dtype)?;
        let strides = [
            broadcast_strides(a.desc().shape(), a.desc().strides(), &shape),
            broadcast_strides(b.desc().shape(), b.desc().strides(), &shape),
        ];
        let (dims, strides) = coalesce(&shape, &strides, MAX_RANK).ok_or_else(|| {
            Error::Unsupported(format!(
                "{operation}: more than {MAX_RANK} axes remain after merging"
            ))
        })?;
        let target = self.registry.target()?;
        let (ka, kb, ko) = (
            operand(a, &target, operation)?,
            operand(b, &target, operation)?,
            operand(out, &target, operation)?,
        );
        let family = Family {
            strided: BINARY,
            wide: BINARY4,
            symbol: "binary",
            wide_symbol: "binary4",
            grid: [
                "binary.wg",
                "binary.max_groups",
                "binary4.wg",
                "binary4.max_groups",
            ],
        };
        let body = op.body(t);
        let wide = (t == "f32").then(|| vectorize(&body)).flatten();
        self.record_elementwise(
            graph,
            operation,
            family,
            (t, body, wide),
            (&dims, &strides),
            &[&ka, &kb],
            &ko,
        )
    }

    /// `op(a, b)` with broadcasting, run eagerly.
    pub fn binary(&self, op: BinaryOp, a: &DeviceTensor, b: &DeviceTensor) -> Result<DeviceTensor> {
        let shape = broadcast_shapes(a.desc().shape(), b.desc().shape()).map_err(|e| {
            Error::Message(format!(
                "{} of {} and {}: {e}",
                op.name(),
                a.desc(),
                b.desc()
            ))
        })?;
        let desc = TensorDesc::new(a.desc().dtype(), shape)?;
        self.eager(&[a, b], desc, |g, out| self.record_binary(g, op, a, b, out))
    }

    /// Record `out = op(a)`. The input may be strided; `out` must be a
    /// contiguous tensor of the same shape and dtype (f32, or f16 where the
    /// device has it).
    ///
    /// When more than four axes of `a` remain after merging those it steps
    /// through contiguously, this returns [`Error::Unsupported`] naming the
    /// operator and `a`, and records nothing.
    pub fn record_unary(
        &self,
        graph: &mut Graph,
        op: UnaryOp,
        a: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("{} of {}", op.name(), a.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a])?;
        let dtype = a.desc().dtype();
        let shape = a.desc().shape().to_vec();
        check_output(runtime, operation, out, dtype, &shape)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let t = float_type(self, operation, dtype)?;
        let strides = [a.desc().strides().to_vec()];
        let (dims, strides) = coalesce(&shape, &strides, MAX_RANK).ok_or_else(|| {
            Error::Unsupported(format!(
                "{operation}: more than {MAX_RANK} axes remain after merging"
            ))
        })?;
        let target = self.registry.target()?;
        let (ka, ko) = (
            operand(a, &target, operation)?,
            operand(out, &target, operation)?,
        );
        let family = Family {
            strided: UNARY,
            wide: UNARY4,
            symbol: "unary",
            wide_symbol: "unary4",
            grid: [
                "unary.wg",
                "unary.max_groups",
                "unary4.wg",
                "unary4.max_groups",
            ],
        };
        let body = op.body(t);
        let wide = (t == "f32").then(|| vectorize(&body)).flatten();
        self.record_elementwise(
            graph,
            operation,
            family,
            (t, body, wide),
            (&dims, &strides),
            &[&ka],
            &ko,
        )
    }

    /// Record one elementwise operation: the 4-wide kernel over the
    /// leading quads when every operand is one aligned contiguous f32 run
    /// (then the strided kernel over the tail of 0..3 elements), else the
    /// strided kernel over everything.
    #[allow(clippy::too_many_arguments)]
    fn record_elementwise(
        &self,
        graph: &mut Graph,
        operation: &str,
        family: Family,
        (t, body, wide): (&str, String, Option<String>),
        (dims, strides): (&[usize], &[Vec<usize>]),
        inputs: &[&Operand],
        out: &Operand,
    ) -> Result<()> {
        let n = dims.iter().product::<usize>() as u64;
        let views = || -> Vec<_> {
            inputs
                .iter()
                .map(|o| o.view.clone())
                .chain([out.view.clone()])
                .collect()
        };
        let quads: Option<Vec<u64>> = inputs
            .iter()
            .copied()
            .chain([out])
            .map(quad_offset)
            .collect();
        let mut done = 0;
        if let (Some(wide), Some(quads), true) = (wide, quads, one_run(dims, strides)) {
            let n4 = n / 4;
            if n4 > 0 {
                let kernel = self.registry.kernel(KernelKey {
                    source: KernelSource::Template {
                        template: family.wide,
                        substitutions: ["OP_A", "OP_B", "OP_T"]
                            .into_iter()
                            .map(|slot| (slot, renamed(&wide, slot)))
                            .collect(),
                    },
                    symbol: family.wide_symbol,
                    config: self.grid_config(family.grid[2], family.grid[3])?,
                })?;
                let mut scalars = vec![ScalarValue::Index(n4)];
                for (q, operand) in quads.iter().zip(inputs.iter().copied().chain([out])) {
                    scalars.push(ScalarValue::Index(*q));
                    scalars.push(ScalarValue::Index(operand.len));
                }
                kernel.record(graph, operation, &views(), &scalars, &[n4])?;
                done = n4 * 4;
            }
        }
        if done == n {
            return Ok(());
        }
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Template {
                template: family.strided,
                substitutions: vec![("T", t.into()), ("OP", body)],
            },
            symbol: family.symbol,
            config: self.grid_config(family.grid[0], family.grid[1])?,
        })?;
        let rest = n - done;
        // The tail of a contiguous run is itself a contiguous run.
        let tail_dims = [1, 1, 1, rest as usize];
        let (dims, skip) = if done > 0 {
            (&tail_dims[..], done)
        } else {
            (dims, 0)
        };
        let scalars = strided_scalars(rest, dims, strides, inputs, out, skip);
        kernel.record(graph, operation, &views(), &scalars, &[rest])
    }

    /// `op(a)`, run eagerly.
    pub fn unary(&self, op: UnaryOp, a: &DeviceTensor) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(a.desc().dtype(), a.desc().shape().to_vec())?;
        self.eager(&[a], desc, |g, out| self.record_unary(g, op, a, out))
    }

    /// Workgroup size and grid cap for the grid-stride kernels, from the
    /// target: 256 invocations (or the device maximum) and the device's
    /// workgroup-count limit.
    pub(crate) fn grid_config(
        &self,
        wg_key: &'static str,
        max_key: &'static str,
    ) -> Result<Vec<(&'static str, u64)>> {
        let target = self.registry.target()?;
        let wg = 256u32
            .min(target.max_workgroup_invocations)
            .min(target.max_workgroup_size[0]);
        let groups = target.max_workgroup_count[0].min(1 << 20);
        Ok(vec![(wg_key, u64::from(wg)), (max_key, u64::from(groups))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contiguous aligned f32 runs take the 4-wide kernels only when the
    /// body vectorizes; a compare slipping into GELU would silently send
    /// it to the strided kernel (index divisions per element).
    #[test]
    fn f32_bodies_have_vector_forms() {
        for op in UnaryOp::ALL {
            let wide = vectorize(&op.body("f32"));
            assert!(wide.is_some(), "{op:?} has no 4-wide form");
            assert!(!wide.unwrap().contains(": f32\n    %r"), "{op:?}");
        }
        for op in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Max,
            BinaryOp::Min,
        ] {
            assert!(vectorize(&op.body("f32")).is_some(), "{op:?}");
        }
        assert!(vectorize(&BinaryOp::Pow.body("f32")).is_none());
    }

    /// GELU stays free of divisions and compares: one exponential and
    /// multiply-adds (the H200 ran the division form at a quarter of the
    /// bandwidth of add).
    #[test]
    fn gelu_has_no_division() {
        let body = UnaryOp::Gelu.body("f32");
        assert!(!body.contains("divf") && !body.contains("cmpf"));
        assert_eq!(body.matches("expf").count(), 1);
    }

    #[test]
    fn renamed_bodies_do_not_collide() {
        let wide = vectorize(&UnaryOp::Gelu.body("f32")).unwrap();
        let a = renamed(&wide, "OP_A");
        assert!(a.contains("%a_r = ") && a.contains("%a_x") && !a.contains(" %x"));
        assert!(renamed(&wide, "OP_T").contains("%t_r = "));
    }
}

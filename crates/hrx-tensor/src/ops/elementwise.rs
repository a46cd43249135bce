//! Elementwise operators: binary with numpy broadcasting, and unary.

use super::{
    Ops,
    indexing::{broadcast_shapes, broadcast_strides, coalesce},
    operand::{check_inputs, check_output, operand},
    registry::KernelKey,
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

const BINARY: &str = include_str!("../../kernels/binary.loom");
const UNARY: &str = include_str!("../../kernels/unary.loom");

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
    /// `x * Phi(x)` with the error function (Abramowitz-Stegun 7.1.26,
    /// absolute error below 1.5e-7).
    Gelu,
    /// The tanh approximation of GELU.
    GeluTanh,
    /// `x * sigmoid(x)`
    Silu,
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
            BinaryOp::Pow => POW.replace("${T}", t),
        }
    }
}

const POW: &str = "    %zf = scalar.constant 0.0 : ${T}
    %onef = scalar.constant 1.0 : ${T}
    %ax = scalar.absf %x : ${T}
    %lx = scalar.logf %ax : ${T}
    %p = scalar.mulf %y, %lx : ${T}
    %m = scalar.expf %p : ${T}
    %yi = scalar.fptosi %y : ${T} -> i32
    %yb = scalar.sitofp %yi : i32 -> ${T}
    %isint = scalar.cmpf oeq, %yb, %y : ${T}
    %c1 = scalar.constant 1 : i32
    %oddbit = scalar.andi %yi, %c1 : i32
    %odd = scalar.cmpi eq, %oddbit, %c1 : i32
    %nm = scalar.negf %m : ${T}
    %signed = scalar.select %odd, %nm, %m : ${T}
    %nanbits = scalar.constant 2143289344 : i32
    %nan = scalar.bitcast %nanbits : i32 -> f32
    %negres = scalar.select %isint, %signed, %nan : ${T}
    %neg = scalar.cmpf olt, %x, %zf : ${T}
    %r0 = scalar.select %neg, %negres, %m : ${T}
    %yz = scalar.cmpf oeq, %y, %zf : ${T}
    %r = scalar.select %yz, %onef, %r0 : ${T}";

/// `${S} = 1 / (1 + e^-x)`.
const SIGMOID: &str = "    %onef = scalar.constant 1.0 : ${T}
    %nx = scalar.negf %x : ${T}
    %e = scalar.expf %nx : ${T}
    %den = scalar.addf %e, %onef : ${T}
    ${S} = scalar.divf %onef, %den : ${T}";

const GELU: &str = "    %half = scalar.constant 0.5 : ${T}
    %onef = scalar.constant 1.0 : ${T}
    %zf = scalar.constant 0.0 : ${T}
    %rs2 = scalar.constant 0.70710678118654752 : ${T}
    %u = scalar.mulf %x, %rs2 : ${T}
    %z = scalar.absf %u : ${T}
    %pc = scalar.constant 0.3275911 : ${T}
    %a1 = scalar.constant 0.254829592 : ${T}
    %a2 = scalar.constant -0.284496736 : ${T}
    %a3 = scalar.constant 1.421413741 : ${T}
    %a4 = scalar.constant -1.453152027 : ${T}
    %a5 = scalar.constant 1.061405429 : ${T}
    %den = scalar.fmaf %pc, %z, %onef : ${T}
    %t = scalar.divf %onef, %den : ${T}
    %p4 = scalar.fmaf %t, %a5, %a4 : ${T}
    %p3 = scalar.fmaf %t, %p4, %a3 : ${T}
    %p2 = scalar.fmaf %t, %p3, %a2 : ${T}
    %p1 = scalar.fmaf %t, %p2, %a1 : ${T}
    %poly = scalar.mulf %t, %p1 : ${T}
    %z2 = scalar.mulf %z, %z : ${T}
    %nz2 = scalar.negf %z2 : ${T}
    %e = scalar.expf %nz2 : ${T}
    %tail = scalar.mulf %poly, %e : ${T}
    %erfz = scalar.subf %onef, %tail : ${T}
    %nerf = scalar.negf %erfz : ${T}
    %isneg = scalar.cmpf olt, %u, %zf : ${T}
    %erf = scalar.select %isneg, %nerf, %erfz : ${T}
    %onep = scalar.addf %onef, %erf : ${T}
    %hx = scalar.mulf %half, %x : ${T}
    %r = scalar.mulf %hx, %onep : ${T}";

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

/// The loom element type of a float dtype the elementwise kernels support.
fn float_type(ops: &Ops, operation: &str, dtype: DType, exotic_ok: bool) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::F16 if exotic_ok => {
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
            "{operation}: dtype {other} is not supported (f32{})",
            if exotic_ok { ", f16" } else { "" }
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
    /// f16 (computed in f16) where the device has it; `pow` is f32 only.
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
        let t = float_type(self, operation, dtype, op != BinaryOp::Pow)?;
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
        let kernel = self.registry.kernel(KernelKey {
            template: BINARY,
            substitutions: vec![("T", t.into()), ("OP", op.body(t))],
            symbol: "binary",
            config: self.grid_config("binary.wg", "binary.max_groups")?,
        })?;
        let n = out.desc().elements() as u64;
        let scalars: Vec<ScalarValue> = std::iter::once(ScalarValue::Index(n))
            .chain(dims_scalars(&dims))
            .chain(stride_scalars(&strides[0]))
            .chain(ka.scalars())
            .chain(stride_scalars(&strides[1]))
            .chain(kb.scalars())
            .chain(ko.scalars())
            .collect();
        kernel.record(
            graph,
            operation,
            &[ka.view, kb.view, ko.view],
            &scalars,
            &[n],
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
        let t = float_type(self, operation, dtype, true)?;
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
        let kernel = self.registry.kernel(KernelKey {
            template: UNARY,
            substitutions: vec![("T", t.into()), ("OP", op.body(t))],
            symbol: "unary",
            config: self.grid_config("unary.wg", "unary.max_groups")?,
        })?;
        let n = out.desc().elements() as u64;
        let scalars: Vec<ScalarValue> = std::iter::once(ScalarValue::Index(n))
            .chain(dims_scalars(&dims))
            .chain(stride_scalars(&strides[0]))
            .chain(ka.scalars())
            .chain(ko.scalars())
            .collect();
        kernel.record(graph, operation, &[ka.view, ko.view], &scalars, &[n])
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

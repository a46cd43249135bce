//! Elementwise operators: binary with numpy broadcasting, and unary.

pub(super) mod activation;
pub(super) mod cast;
pub(super) mod cast_kernel;
pub(super) mod kernels;

use crate::ops::{
    Ops,
    indexing::{broadcast_shapes, broadcast_strides, coalesce},
    operand::{Operand, check_inputs, check_output, operand, quad_offset},
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_loom::build::{Fragment, passes};
use hrx_loom::ir::Scalar;
use hrx_runtime::Graph;

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
}

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
}

/// The operation of one elementwise call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Elementwise {
    Unary(UnaryOp),
    Binary(BinaryOp),
}

impl Elementwise {
    fn fragment(self, t: Scalar) -> Fragment {
        match self {
            Elementwise::Unary(op) => op.fragment(t),
            Elementwise::Binary(op) => op.fragment(t),
        }
    }

    /// The 4-wide form, where the operation is lane-wise (pow is not).
    fn wide(self) -> Option<Fragment> {
        passes::vectorize(&self.fragment(Scalar::F32), 4).ok()
    }
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
    symbol: &'static str,
    wide_symbol: &'static str,
    /// Config keys of the workgroup size and grid cap, strided then wide.
    grid: [&'static str; 4],
}

/// The loom element type of a float dtype the elementwise kernels support.
fn float_type(ops: &Ops, operation: &str, dtype: DType) -> Result<Scalar> {
    match dtype {
        DType::F32 => Ok(Scalar::F32),
        DType::F16 => {
            let target = ops.registry.target()?;
            if target.shader_f16 && target.storage_16bit {
                Ok(Scalar::F16)
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
            symbol: "binary",
            wide_symbol: "binary4",
            grid: [
                "binary.wg",
                "binary.max_groups",
                "binary4.wg",
                "binary4.max_groups",
            ],
        };
        self.record_elementwise(
            graph,
            operation,
            family,
            (t, Elementwise::Binary(op)),
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
            symbol: "unary",
            wide_symbol: "unary4",
            grid: [
                "unary.wg",
                "unary.max_groups",
                "unary4.wg",
                "unary4.max_groups",
            ],
        };
        self.record_elementwise(
            graph,
            operation,
            family,
            (t, Elementwise::Unary(op)),
            (&dims, &strides),
            &[&ka],
            &ko,
        )
    }

    /// Record one elementwise operation: the 4-wide kernel over the
    /// leading quads when every operand is one aligned contiguous f32 run
    /// and the operation is lane-wise (then the strided kernel over the
    /// tail of 0..3 elements), else the strided kernel over everything.
    #[allow(clippy::too_many_arguments)]
    fn record_elementwise(
        &self,
        graph: &mut Graph,
        operation: &str,
        family: Family,
        (t, op): (Scalar, Elementwise),
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
        let wide = (t == Scalar::F32).then(|| op.wide()).flatten();
        if let (Some(wide), Some(quads), true) = (wide, quads, one_run(dims, strides)) {
            let n4 = n / 4;
            if n4 > 0 {
                let symbol = family.wide_symbol;
                let kernel = self.registry.kernel(KernelKey {
                    source: KernelSource::Built(Generator::new(
                        format!("{symbol} {op:?}"),
                        move || kernels::wide(symbol, &wide),
                    )),
                    symbol,
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
        let symbol = family.symbol;
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("{symbol} {t:?} {op:?}"),
                move || kernels::strided(symbol, t, &op.fragment(t)),
            )),
            symbol,
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

    const BINARY_OPS: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
    ];

    /// Contiguous aligned f32 runs take the 4-wide kernels only when the
    /// operation vectorizes; a compare slipping into GELU would silently
    /// send it to the strided kernel (index divisions per element).
    #[test]
    fn f32_operations_have_vector_forms() {
        for op in UnaryOp::ALL {
            assert!(Elementwise::Unary(op).wide().is_some(), "{op:?}");
        }
        for op in BINARY_OPS {
            let wide = Elementwise::Binary(op).wide();
            assert_eq!(wide.is_some(), op != BinaryOp::Pow, "{op:?}");
        }
    }

    /// GELU stays free of divisions and compares: one exponential and
    /// multiply-adds (the H200 ran the division form at a quarter of the
    /// bandwidth of add).
    #[test]
    fn gelu_has_no_division() {
        let gelu = UnaryOp::Gelu.fragment(Scalar::F32);
        let names: Vec<&str> = gelu.ops().iter().map(|o| o.name.text.as_str()).collect();
        assert!(
            !names
                .iter()
                .any(|n| n.contains("divf") || n.contains("cmpf"))
        );
        assert_eq!(names.iter().filter(|n| **n == "scalar.expf").count(), 1);
    }

    /// Every kernel of the family compiles, in both element types, with
    /// the target's validation of naga.
    #[test]
    fn every_kernel_compiles() {
        let target = hrx_core::Target::hopper();
        let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
        let ops = UnaryOp::ALL
            .map(Elementwise::Unary)
            .into_iter()
            .chain(BINARY_OPS.map(Elementwise::Binary));
        for op in ops {
            let (symbol, wide_symbol) = match op {
                Elementwise::Unary(_) => ("unary", "unary4"),
                Elementwise::Binary(_) => ("binary", "binary4"),
            };
            let mut built = vec![];
            for t in [Scalar::F32, Scalar::F16] {
                built.push((symbol, kernels::strided(symbol, t, &op.fragment(t))));
            }
            if let Some(wide) = op.wide() {
                built.push((wide_symbol, kernels::wide(wide_symbol, &wide)));
            }
            for (symbol, b) in built {
                compiler
                    .built(&b)
                    .and_then(|m| {
                        m.compile_uncached(&hrx_loom::Specialization::new(format!("@{symbol}")))
                    })
                    .unwrap_or_else(|e| panic!("{op:?} {symbol}: {e}"));
            }
        }
    }
}

//! Batched matrix multiplication with optional transposes, bias and an
//! activation epilogue.

use super::{
    Ops, UnaryOp,
    indexing::{broadcast_shapes, broadcast_strides, coalesce},
    operand::{Operand, check_inputs, check_output, operand},
    registry::KernelKey,
};
use crate::{DType, DeviceTensor, TensorDesc, contiguous_strides};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

const MATMUL: &str = include_str!("../../kernels/matmul.loom");

/// Options of [`Ops::matmul`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatmulOptions {
    /// `a` is given as `[.., k, m]` and used transposed.
    pub transpose_a: bool,
    /// `b` is given as `[.., n, k]` and used transposed.
    pub transpose_b: bool,
    /// Applied to every output element after the bias.
    pub activation: Option<UnaryOp>,
}

/// A matrix operand's batch shape, rows, columns and element strides as
/// used (after an optional transpose of the last two axes).
struct Matrix {
    batch: Vec<usize>,
    batch_strides: Vec<usize>,
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

fn matrix(desc: &TensorDesc, transpose: bool) -> Option<Matrix> {
    let rank = desc.rank();
    if rank < 2 {
        return None;
    }
    let (shape, strides) = (desc.shape(), desc.strides());
    let (r, c) = if transpose {
        (rank - 1, rank - 2)
    } else {
        (rank - 2, rank - 1)
    };
    Some(Matrix {
        batch: shape[..rank - 2].to_vec(),
        batch_strides: strides[..rank - 2].to_vec(),
        rows: shape[r],
        cols: shape[c],
        row_stride: strides[r],
        col_stride: strides[c],
    })
}

fn index(v: usize) -> ScalarValue {
    ScalarValue::Index(v as u64)
}

impl Ops {
    /// The output shape of `a @ b` under `options`, or an error naming the
    /// operator and shapes.
    pub fn matmul_shape(
        a: &TensorDesc,
        b: &TensorDesc,
        options: MatmulOptions,
    ) -> Result<Vec<usize>> {
        let fail = |why: &str| {
            Err(Error::Message(format!(
                "matmul of {a} and {b} (transposed: {}, {}): {why}",
                options.transpose_a, options.transpose_b
            )))
        };
        let (Some(ma), Some(mb)) = (
            matrix(a, options.transpose_a),
            matrix(b, options.transpose_b),
        ) else {
            return fail("both operands need at least two axes");
        };
        if ma.cols != mb.rows {
            return fail(&format!("inner extents {} and {} differ", ma.cols, mb.rows));
        }
        let Ok(mut shape) = broadcast_shapes(&ma.batch, &mb.batch) else {
            return fail("the batch axes do not broadcast");
        };
        shape.extend([ma.rows, mb.cols]);
        Ok(shape)
    }

    /// Record `out = act(a @ b + bias)`: batched over leading axes (numpy
    /// broadcasting), f32, either operand transposed or strided, `bias` of
    /// shape `[n]`. `out` must be contiguous with the result shape.
    pub fn record_matmul(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        b: &DeviceTensor,
        bias: Option<&DeviceTensor>,
        options: MatmulOptions,
        out: &DeviceTensor,
    ) -> Result<()> {
        let shape = Self::matmul_shape(a.desc(), b.desc(), options)?;
        let operation = format!("matmul of {} and {}", a.desc(), b.desc());
        let operation = operation.as_str();
        let fail = |why: String| Err(Error::Message(format!("{operation}: {why}")));
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a, b])?;
        for t in [a, b].into_iter().chain(bias) {
            if t.desc().dtype() != DType::F32 {
                return Err(Error::Unsupported(format!(
                    "{operation}: dtype {} (f32 only)",
                    t.desc().dtype()
                )));
            }
        }
        let (ma, mb) = (
            matrix(a.desc(), options.transpose_a).expect("checked by matmul_shape"),
            matrix(b.desc(), options.transpose_b).expect("checked by matmul_shape"),
        );
        let (m, k, n) = (ma.rows, ma.cols, mb.cols);
        if let Some(bias) = bias {
            check_inputs(runtime, operation, &[bias])?;
            if bias.desc().shape() != [n] {
                return fail(format!("bias {} must have shape [{n}]", bias.desc()));
            }
        }
        check_output(runtime, operation, out, DType::F32, &shape)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let batch_shape = &shape[..shape.len() - 2];
        let batch_strides = [
            broadcast_strides(&ma.batch, &ma.batch_strides, batch_shape),
            broadcast_strides(&mb.batch, &mb.batch_strides, batch_shape),
            contiguous_strides(&shape)?[..batch_shape.len()].to_vec(),
        ];
        let Some((batch, strides)) = coalesce(batch_shape, &batch_strides, 1) else {
            return Err(Error::Unsupported(format!(
                "{operation}: the batch axes do not merge into one"
            )));
        };
        let target = self.registry.target()?;
        let dummy = || -> Result<Operand> {
            Ok(Operand {
                view: self.registry.zeros()?,
                offset: 0,
                len: 4,
            })
        };
        let bind = |t: &DeviceTensor| {
            if t.desc().is_empty() {
                dummy()
            } else {
                operand(t, &target, operation)
            }
        };
        let (ka, kb, kc) = (bind(a)?, bind(b)?, operand(out, &target, operation)?);
        let (kbias, bias_stride) = match bias {
            Some(t) => (bind(t)?, t.desc().strides()[0]),
            None => (dummy()?, 0),
        };
        let tile: usize = if target.max_workgroup_invocations >= 256 {
            16
        } else {
            8
        };
        let (act, result) = match options.activation {
            None => (String::new(), "%x"),
            Some(op) => (op.body("f32"), "%r"),
        };
        let kernel = self.registry.kernel(KernelKey {
            template: MATMUL,
            substitutions: vec![
                ("TILE_BYTES", (tile * tile * 4).to_string()),
                ("TILE", tile.to_string()),
                ("ACT", act),
                ("R", result.into()),
            ],
            symbol: "matmul",
            config: Vec::new(),
        })?;
        let scalars: Vec<ScalarValue> = [m, n, k, strides[0][0], ma.row_stride, ma.col_stride]
            .map(index)
            .into_iter()
            .chain(ka.scalars())
            .chain([strides[1][0], mb.row_stride, mb.col_stride].map(index))
            .chain(kb.scalars())
            .chain([index(bias_stride)])
            .chain(kbias.scalars())
            .chain([index(strides[2][0])])
            .chain(kc.scalars())
            .collect();
        let workload = [m as u64, n as u64, batch[0] as u64];
        kernel.record(
            graph,
            operation,
            &[ka.view, kb.view, kbias.view, kc.view],
            &scalars,
            &workload,
        )
    }

    /// `act(a @ b + bias)`, run eagerly.
    pub fn matmul(
        &self,
        a: &DeviceTensor,
        b: &DeviceTensor,
        bias: Option<&DeviceTensor>,
        options: MatmulOptions,
    ) -> Result<DeviceTensor> {
        let shape = Self::matmul_shape(a.desc(), b.desc(), options)?;
        let desc = TensorDesc::new(DType::F32, shape)?;
        let inputs: Vec<&DeviceTensor> = [a, b].into_iter().chain(bias).collect();
        self.eager(&inputs, desc, |g, out| {
            self.record_matmul(g, a, b, bias, options, out)
        })
    }
}

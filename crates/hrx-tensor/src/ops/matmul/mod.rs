//! Batched matrix multiplication with optional transposes, bias and an
//! activation epilogue.

pub(super) mod abi;
pub(super) mod coop;
pub(super) mod dot;
pub(super) mod gemv;
pub(super) mod quads;
pub(super) mod splitk;
pub(super) mod tiled;

use crate::ops::{
    Ops, Tuning, UnaryOp,
    indexing::{broadcast_shapes, broadcast_strides, coalesce},
    operand::{Operand, check_inputs, check_output, operand, quad_offset},
};
use crate::{DType, DeviceTensor, TensorDesc, contiguous_strides};
use coop::{CoopLayout, CoopTiles};
use dot::{dot_applies, dot_key, dot_max_rows};
use gemv::{BLayout, BLoad, b_load, gemv_key, gemv_max_rows};
use hrx_core::{DeviceKind, Error, Result, Target};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;
use quads::QuadShape;
use splitk::{SplitK, SplitKCall, splitk_plan};
use tiled::tiled_key;

/// The tensor-core tiling lives with its kernel; kernel choices elsewhere
/// ask it through here.
pub(crate) use coop::coop_tiles_for;

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

impl Matrix {
    /// This matrix as the kernel choice sees it (rows along "k", columns
    /// along "n"), with its batch stride and placement in its binding.
    fn layout(&self, batch_stride: usize, (offset, binding_offset): (u64, u64)) -> BLayout {
        BLayout {
            k_stride: self.row_stride,
            n_stride: self.col_stride,
            batch_stride,
            offset,
            binding_offset,
            n: self.cols,
        }
    }
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
    /// broadcasting), `a` and `b` both f32 or both f16 (accumulated in
    /// f32), either operand transposed or strided, an f32 `bias` of shape
    /// `[n]`. `out` must be a contiguous f32 tensor of the result shape,
    /// or for f16 operands an f16 one where the cooperative-matrix kernel
    /// runs (the result rounded once, as it is stored, so an f16 operand
    /// of a next product needs no cast); elsewhere an f16 `out` is
    /// [`Error::Unsupported`] and nothing is recorded. Up to 8 rows (64
    /// without cooperative matrices) run on a
    /// decode kernel that streams B with 16-byte loads where its layout
    /// allows; otherwise f16 runs on cooperative matrices where the target
    /// reports a 16x16x16 f16 -> f32 shape, f32 on a GPU on the quad kernel
    /// where the operands lie in aligned 16-byte quads and the product
    /// makes at least 128 tiles of 128 x 128, else on the tiled kernel.
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
        let input = a.desc().dtype();
        let dtypes_ok = matches!(input, DType::F32 | DType::F16)
            && b.desc().dtype() == input
            && bias.is_none_or(|t| t.desc().dtype() == DType::F32);
        if !dtypes_ok {
            return Err(Error::Unsupported(format!(
                "{operation}: a and b must both be f32 or both f16, the bias f32 (found {}, {}{})",
                input,
                b.desc().dtype(),
                bias.map(|t| format!(", {}", t.desc().dtype()))
                    .unwrap_or_default()
            )));
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
        // f16 operands may write an f16 output (see below); anything else
        // is refused as "must be f32".
        let out_f16 = input == DType::F16 && out.desc().dtype() == DType::F16;
        let out_dtype = if out_f16 { DType::F16 } else { DType::F32 };
        check_output(runtime, operation, out, out_dtype, &shape)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let (batch, strides) = batch_layout(&shape, &ma, &mb, operation)?;
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
        let a_layout = ma.layout(strides[0][0], (ka.offset, ka.view.offset() as u64));
        let b_layout = mb.layout(strides[1][0], (kb.offset, kb.view.offset() as u64));
        let sizes = (m, n, k, batch[0]);
        let choice = choose(&target, self.tuning, input, sizes, &a_layout, &b_layout);
        if out_f16 && !matches!(choice, Choice::Coop(_)) {
            return Err(Error::Unsupported(format!(
                "{operation}: an f16 output is written only by the cooperative-matrix \
                 kernel, and the {} kernel runs here",
                choice.name()
            )));
        }
        // Epilogues that store quads: C's rows, batches and binding, and a
        // contiguous bias (an absent one reads the zeros) all aligned.
        let bias_quads = bias.is_none() || (bias_stride == 1 && quad_offset(&kbias).is_some());
        let wide_c = n.is_multiple_of(4)
            && strides[2][0].is_multiple_of(4)
            && quad_offset(&kc).is_some()
            && bias_quads;
        let key = match choice {
            Choice::SplitK(plan) => {
                return self.record_splitk(
                    graph,
                    SplitKCall {
                        operation,
                        plan,
                        dims: sizes,
                        a: (ka, [strides[0][0], ma.row_stride, ma.col_stride]),
                        b: (kb, [strides[1][0], mb.row_stride, mb.col_stride]),
                        bias: (kbias, bias_stride),
                        out: (kc, strides[2][0]),
                        activation: options.activation,
                    },
                );
            }
            Choice::Decode(load) => gemv_key(&target, input, load, m, options.activation),
            Choice::Dot => dot_key(&target, m, options.activation),
            Choice::Coop(tiles) => {
                // 16-byte copies need the same alignment as the decode
                // kernel's 16-byte f16 loads, along each operand's rows (or,
                // for B, along k when it is transposed).
                let quads = |l: &BLayout| b_load(DType::F16, l) == BLoad::Quad16;
                let layout = CoopLayout {
                    a_k_fast: ma.col_stride == 1,
                    b_n_fast: mb.col_stride == 1,
                    wide_a: quads(&a_layout),
                    wide_b: quads(&b_layout),
                    wide_bt: quads(&b_layout.along_k(k)),
                    wide_c,
                };
                tiles.key(layout, options.activation, out_f16)
            }
            Choice::Quads(shape) => {
                quads::quads_key(QuadShape { wide_c, ..shape }, options.activation)
            }
            Choice::Tiled => tiled_key(
                &target,
                input,
                (m, n, batch[0]),
                (ma.col_stride == 1, mb.col_stride == 1),
                options.activation,
            ),
        };
        let kernel = self.registry.kernel(key)?;
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

    /// Which kernel [`Ops::record_matmul`] runs for these operands on this
    /// device: `"decode (16-byte loads)"`, `"decode (4-byte words)"`,
    /// `"decode (elements)"`, `"decode (rows of a transposed B)"`,
    /// `"cooperative matrix (split k)"`,
    /// `"cooperative matrix"`, `"tiled (16-byte quads)"` or `"tiled"`.
    pub fn matmul_kernel(
        &self,
        a: &DeviceTensor,
        b: &DeviceTensor,
        options: MatmulOptions,
    ) -> Result<&'static str> {
        let shape = Self::matmul_shape(a.desc(), b.desc(), options)?;
        let operation = format!("matmul of {} and {}", a.desc(), b.desc());
        let (ma, mb) = (
            matrix(a.desc(), options.transpose_a).expect("checked by matmul_shape"),
            matrix(b.desc(), options.transpose_b).expect("checked by matmul_shape"),
        );
        let (m, k, n) = (ma.rows, ma.cols, mb.cols);
        let (batch, strides) = batch_layout(&shape, &ma, &mb, &operation)?;
        let target = self.registry.target()?;
        let placed = |t: &DeviceTensor| -> Result<(u64, u64)> {
            if t.desc().is_empty() {
                return Ok((0, 0));
            }
            let o = operand(t, &target, &operation)?;
            Ok((o.offset, o.view.offset() as u64))
        };
        let a_layout = ma.layout(strides[0][0], placed(a)?);
        let b_layout = mb.layout(strides[1][0], placed(b)?);
        let sizes = (m, n, k, batch[0]);
        Ok(choose(
            &target,
            self.tuning,
            a.desc().dtype(),
            sizes,
            &a_layout,
            &b_layout,
        )
        .name())
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

/// The batch axes of the output merged into one, with the element stride
/// of A, B and the output along it.
fn batch_layout(
    shape: &[usize],
    ma: &Matrix,
    mb: &Matrix,
    operation: &str,
) -> Result<(Vec<usize>, Vec<Vec<usize>>)> {
    let batch_shape = &shape[..shape.len() - 2];
    let batch_strides = [
        broadcast_strides(&ma.batch, &ma.batch_strides, batch_shape),
        broadcast_strides(&mb.batch, &mb.batch_strides, batch_shape),
        contiguous_strides(shape)?[..batch_shape.len()].to_vec(),
    ];
    coalesce(batch_shape, &batch_strides, 1).ok_or_else(|| {
        Error::Unsupported(format!("{operation}: the batch axes do not merge into one"))
    })
}

/// The kernel family for one matmul.
enum Choice {
    Decode(BLoad),
    Dot,
    SplitK(SplitK),
    Coop(CoopTiles),
    /// The f32 quad kernel: its k step and B's layout.
    Quads(quads::QuadShape),
    Tiled,
}

impl Choice {
    /// The kernel's name, as [`Ops::matmul_kernel`] reports it.
    fn name(&self) -> &'static str {
        match self {
            Choice::SplitK(_) => "cooperative matrix (split k)",
            Choice::Decode(BLoad::Quad16 | BLoad::Quad32) => "decode (16-byte loads)",
            Choice::Decode(BLoad::Word16) => "decode (4-byte words)",
            Choice::Decode(BLoad::Scalar) => "decode (elements)",
            Choice::Dot => "decode (rows of a transposed B)",
            Choice::Coop(_) => "cooperative matrix",
            Choice::Quads(..) => "tiled (16-byte quads)",
            Choice::Tiled => "tiled",
        }
    }
}

/// Few rows run on the decode kernel, which streams B once per 8 rows, or,
/// for a B contiguous along k (transposed), on the dot kernel; where
/// tensor cores exist they take B layouts the decode kernels could only
/// read element by element, and every larger m: up to 64 rows on the
/// split-k kernel (more workgroups than column tiles alone give), above on
/// the tiled cooperative-matrix kernel.
fn choose(
    target: &Target,
    tuning: Tuning,
    input: DType,
    (m, n, k, batch): (usize, usize, usize, usize),
    a: &BLayout,
    b: &BLayout,
) -> Choice {
    let coop = (input == DType::F16)
        .then(|| coop_tiles_for(target, tuning.coop_tiles, (m, n, k), batch))
        .flatten();
    let load = b_load(input, b);
    let few = k > 0 && m <= gemv_max_rows(coop.is_some(), batch);
    let dot = few
        && m <= dot_max_rows(coop.is_some())
        && load != BLoad::Quad16
        && dot_applies(target, input, k, a, b);
    let decode = few && (coop.is_none() || load != BLoad::Scalar);
    match coop {
        _ if dot => Choice::Dot,
        _ if decode => Choice::Decode(load),
        Some(tiles) => splitk_plan(target, tuning.splitk, true, (m, n, k, batch), a, b)
            .map_or(Choice::Coop(tiles), Choice::SplitK),
        None => quads_choice(target, tuning, input, (m, n, batch), a, b).unwrap_or(Choice::Tiled),
    }
}

/// The f32 quad kernel where A runs along k and B along n or k in
/// aligned quads (see `quads`), the device fits its workgroup, and
/// the tuning or the built-in rule (a GPU, at least 128 tiles of 128 x
/// 128) asks for it; workgroups of 64 columns unless the tuning says.
fn quads_choice(
    target: &Target,
    tuning: Tuning,
    input: DType,
    (m, n, batch): (usize, usize, usize),
    a: &BLayout,
    b: &BLayout,
) -> Option<Choice> {
    let quads = |l: &BLayout| b_load(DType::F32, l) == BLoad::Quad32;
    let b_n_fast = quads(b);
    let layout = input == DType::F32 && quads(a) && (b_n_fast || quads(&b.along_k(a.n)));
    // A tuned k step or width that is invalid or does not fit leaves the
    // built-in one.
    let tuned = tuning
        .f32_quad_columns
        .filter(|c| quads::COLUMNS.contains(c));
    let (bk, bn) = [(tuning.f32_quad_depth, tuned.unwrap_or(64)), (None, 64)]
        .into_iter()
        .find_map(|(depth, bn)| Some((QuadShape::depth(target, depth, bn)?, bn)))?;
    let count = m.div_ceil(128) * n.div_ceil(128) * batch.max(1);
    let wanted = tuning
        .f32_quads
        .unwrap_or(target.kind != DeviceKind::Cpu && m >= 128 && n >= 128 && count >= 128);
    (layout && wanted).then_some(Choice::Quads(QuadShape {
        bk,
        bn,
        b_n_fast,
        wide_c: false,
    }))
}

/// The decode kernel's loom source for `target`, `dtype` inputs and B
/// given as `[k, n]` (or `[n, k]` when `transpose_b`), with B aligned for
/// the widest loads (for offline compilation and SPIR-V checks).
#[cfg(feature = "kernel-sources")]
pub fn decode_matmul_source(
    target: &Target,
    dtype: DType,
    transpose_b: bool,
    activation: Option<UnaryOp>,
) -> String {
    let b = BLayout {
        k_stride: if transpose_b { 1 } else { 4096 },
        n_stride: if transpose_b { 4096 } else { 1 },
        batch_stride: 4096 * 4096,
        offset: 0,
        binding_offset: 0,
        n: 4096,
    };
    gemv_key(target, dtype, b_load(dtype, &b), 8, activation).source()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row-major `[k, n]` (or, `along_k`, `[n, k]`) operand at offset 0.
    fn layout(rows: usize, cols: usize) -> BLayout {
        BLayout {
            k_stride: cols,
            n_stride: 1,
            batch_stride: rows * cols,
            offset: 0,
            binding_offset: 0,
            n: cols,
        }
    }

    /// The built-in rule: the quad kernel for an encoder-sized f32 product
    /// on a GPU (64 columns a workgroup, k steps of 16), not for one of
    /// few tiles, not for f16, not on a CPU device unless forced, and
    /// never with an A that is not in quads; a tuning's k step or columns
    /// are taken where the workgroup memory holds them.
    #[test]
    fn the_quad_kernel_is_chosen_where_the_rule_says() {
        let (hopper, lavapipe) = (Target::hopper(), Target::lavapipe());
        let none = Tuning::default();
        let forced = Tuning {
            f32_quads: Some(true),
            ..Tuning::default()
        };
        let (m, k, n) = (131_072, 384, 1152);
        let (a, b) = (layout(m, k), layout(k, n));
        let choice = |t: &Target, tuning, dtype, (m, n), a: &BLayout, b: &BLayout| {
            quads_choice(t, tuning, dtype, (m, n, 1), a, b).map(|c| c.name())
        };
        let quads = Some("tiled (16-byte quads)");
        let shape = |t: &Target, tuning, b: &BLayout| match quads_choice(
            t,
            tuning,
            DType::F32,
            (m, n, 1),
            &a,
            b,
        ) {
            Some(Choice::Quads(shape)) => Some(shape),
            _ => None,
        };
        let (bk, bn) = (16, 64);
        let b_n_fast = true;
        assert_eq!(
            shape(&hopper, none, &b),
            Some(QuadShape {
                bk,
                bn,
                b_n_fast,
                wide_c: false
            })
        );
        // B along k (a linear layer's [out, in] weight used transposed).
        let bt = layout(n, k).along_k(k);
        let b_n_fast = false;
        assert_eq!(
            shape(&hopper, none, &bt),
            Some(QuadShape {
                bk,
                bn,
                b_n_fast,
                wide_c: false
            })
        );
        assert_eq!(choice(&hopper, none, DType::F32, (256, 256), &a, &b), None);
        assert_eq!(choice(&hopper, none, DType::F16, (m, n), &a, &b), None);
        assert_eq!(choice(&lavapipe, none, DType::F32, (m, n), &a, &b), None);
        let b_n_fast = true;
        assert_eq!(
            shape(&lavapipe, forced, &b),
            Some(QuadShape {
                bk,
                bn,
                b_n_fast,
                wide_c: false
            })
        );
        let odd = BLayout {
            offset: 2,
            ..layout(m, k)
        };
        assert_eq!(choice(&hopper, forced, DType::F32, (m, n), &odd, &b), None);
        // A k step or columns asked for: taken where they fit (k steps of
        // 16 over 128 columns need 33 KiB), else the built-in ones.
        let tuned = |bk, bn| Tuning {
            f32_quad_depth: Some(bk),
            f32_quad_columns: Some(bn),
            ..forced
        };
        let (bk, bn) = (8, 128);
        assert_eq!(
            shape(&hopper, tuned(bk, bn), &b),
            Some(QuadShape {
                bk,
                bn,
                b_n_fast,
                wide_c: false
            })
        );
        let (bk, bn) = (16, 128);
        assert_eq!(
            shape(&hopper, tuned(bk, bn), &b),
            Some(QuadShape {
                bk,
                bn,
                b_n_fast,
                wide_c: false
            })
        );
        let (bk, bn) = (16, 64);
        assert_eq!(
            shape(&lavapipe, tuned(16, 128), &b),
            Some(QuadShape {
                bk,
                bn,
                b_n_fast,
                wide_c: false
            })
        );
        assert_eq!(
            shape(&hopper, tuned(4, 100), &b),
            Some(QuadShape {
                bk,
                bn,
                b_n_fast,
                wide_c: false
            })
        );
        assert_eq!(choice(&hopper, none, DType::F32, (m, n), &a, &b), quads);
    }
}

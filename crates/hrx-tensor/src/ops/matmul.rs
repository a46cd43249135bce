//! Batched matrix multiplication with optional transposes, bias and an
//! activation epilogue.

use super::{
    Ops, UnaryOp,
    indexing::{broadcast_shapes, broadcast_strides, coalesce},
    matmul_gemv::{BLayout, BLoad, b_load, gemv_key, gemv_max_rows},
    matmul_tiled::tiled_key,
    operand::{Operand, check_inputs, check_output, operand},
    registry::KernelKey,
};
use crate::{DType, DeviceTensor, TensorDesc, contiguous_strides};
use hrx_core::{CooperativeMatrixShape, Error, Result, ScalarKind, Target};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

const MATMUL_COOP: &str = include_str!("../../kernels/matmul_coop.loom");

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
    /// broadcasting), `a` and `b` both f32 or both f16 (accumulated and
    /// written as f32), either operand transposed or strided, an f32 `bias`
    /// of shape `[n]`. `out` must be a contiguous f32 tensor of the result
    /// shape. Up to 8 rows (64 without cooperative matrices) run on a
    /// decode kernel that streams B with 16-byte loads where its layout
    /// allows; otherwise f16 runs on cooperative matrices where the target
    /// reports a 16x16x16 f16 -> f32 shape, else on the tiled kernel.
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
        check_output(runtime, operation, out, DType::F32, &shape)?;
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
        let (act, result) = match options.activation {
            None => (String::new(), "%x"),
            Some(op) => (op.body("f32"), "%r"),
        };
        let b_layout = BLayout {
            k_stride: mb.row_stride,
            n_stride: mb.col_stride,
            batch_stride: strides[1][0],
            offset: kb.offset,
            binding_offset: kb.view.offset() as u64,
            n,
        };
        let key = match choose(&target, input, m, k, &b_layout) {
            Choice::Decode(load) => gemv_key(&target, input, load, m, act, result),
            Choice::Coop(tiles) => KernelKey {
                template: MATMUL_COOP,
                substitutions: tiles.substitutions(
                    ma.col_stride == 1,
                    mb.col_stride == 1,
                    act,
                    result,
                ),
                symbol: "matmul_coop",
                config: Vec::new(),
            },
            Choice::Tiled => tiled_key(
                &target,
                input,
                (m, n),
                (ma.col_stride == 1, mb.col_stride == 1),
                act,
                result,
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
    /// `"decode (elements)"`, `"cooperative matrix"` or `"tiled"`.
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
        let (_, strides) = batch_layout(&shape, &ma, &mb, &operation)?;
        let target = self.registry.target()?;
        let (offset, binding_offset) = if b.desc().is_empty() {
            (0, 0)
        } else {
            let kb = operand(b, &target, &operation)?;
            (kb.offset, kb.view.offset() as u64)
        };
        let b_layout = BLayout {
            k_stride: mb.row_stride,
            n_stride: mb.col_stride,
            batch_stride: strides[1][0],
            offset,
            binding_offset,
            n,
        };
        Ok(match choose(&target, a.desc().dtype(), m, k, &b_layout) {
            Choice::Decode(BLoad::Quad16 | BLoad::Quad32) => "decode (16-byte loads)",
            Choice::Decode(BLoad::Word16) => "decode (4-byte words)",
            Choice::Decode(BLoad::Scalar) => "decode (elements)",
            Choice::Coop(_) => "cooperative matrix",
            Choice::Tiled => "tiled",
        })
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
    Coop(CoopTiles),
    Tiled,
}

/// Few rows run on the decode kernel, which streams B once per 8 rows;
/// where tensor cores exist they take B layouts the decode kernel could
/// only read element by element, and every larger m.
fn choose(target: &Target, input: DType, m: usize, k: usize, b: &BLayout) -> Choice {
    let coop = (input == DType::F16)
        .then(|| coop_tiles(target, m))
        .flatten();
    let load = b_load(input, b);
    let decode =
        k > 0 && m <= gemv_max_rows(coop.is_some()) && (coop.is_none() || load != BLoad::Scalar);
    match coop {
        _ if decode => Choice::Decode(load),
        Some(tiles) => Choice::Coop(tiles),
        None => Choice::Tiled,
    }
}

/// The decode kernel's loom source for `target`, `dtype` inputs and B
/// given as `[k, n]` (or `[n, k]` when `transpose_b`), with B aligned for
/// the widest loads (for offline compilation and SPIR-V checks).
pub fn decode_matmul_source(
    target: &Target,
    dtype: DType,
    transpose_b: bool,
    activation: Option<UnaryOp>,
) -> String {
    let (act, result) = match activation {
        None => (String::new(), "%x"),
        Some(op) => (op.body("f32"), "%r"),
    };
    let b = BLayout {
        k_stride: if transpose_b { 1 } else { 4096 },
        n_stride: if transpose_b { 4096 } else { 1 },
        batch_stride: 4096 * 4096,
        offset: 0,
        binding_offset: 0,
        n: 4096,
    };
    gemv_key(target, dtype, b_load(dtype, &b), 8, act, result).source()
}

/// Tile shape of the cooperative-matrix kernel: a `bm x bn` tile of C per
/// workgroup, k steps of `bk`, `sgm x sgn` subgroups of `sg` invocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopTiles {
    bm: usize,
    bn: usize,
    bk: usize,
    sgm: usize,
    sgn: usize,
    sg: usize,
}

/// The cooperative-matrix tiling for `target` and `m` rows, or `None` when
/// the target lacks a 16x16x16 f16 -> f32 shape, has a variable subgroup
/// size (the kernel maps subgroups to fragments), or the tiles do not fit.
pub(crate) fn coop_tiles(target: &Target, m: usize) -> Option<CoopTiles> {
    let shape = CooperativeMatrixShape {
        m: 16,
        n: 16,
        k: 16,
        input: ScalarKind::F16,
        accumulator: ScalarKind::F32,
    };
    let sg = target.subgroup_size_max as usize;
    if !target.cooperative_matrix.contains(&shape)
        || target.subgroup_size_min != target.subgroup_size_max
        || !(target.shader_f16 && target.storage_16bit)
        || sg == 0
    {
        return None;
    }
    // Small m (decode): narrow tiles so more workgroups share the stream
    // of B; large m: 128 x 128 tiles, 8 subgroups of 4 x 2 fragments.
    let candidates = [
        (m <= 16, [16, 64, 32, 1, 4]),
        (m <= 32, [32, 64, 32, 2, 2]),
        (m <= 64, [64, 64, 32, 2, 2]),
        (true, [128, 128, 32, 2, 4]),
        (true, [64, 64, 32, 2, 2]),
    ];
    candidates
        .into_iter()
        .filter(|(fits_m, _)| *fits_m)
        .map(|(_, [bm, bn, bk, sgm, sgn])| CoopTiles {
            bm,
            bn,
            bk,
            sgm,
            sgn,
            sg,
        })
        .find(|t| {
            (t.threads() as u32) <= target.max_workgroup_invocations
                && (t.threads() as u32) <= target.max_workgroup_size[0]
                && (t.a_bytes() + t.b_bytes() + t.c_bytes()) as u64
                    <= u64::from(target.workgroup_memory_bytes)
        })
}

impl CoopTiles {
    fn threads(&self) -> usize {
        self.sgm * self.sgn * self.sg
    }
    fn pa(&self) -> usize {
        self.bk + 8
    }
    fn pb(&self) -> usize {
        self.bn + 8
    }
    fn a_bytes(&self) -> usize {
        self.bm * self.pa() * 2
    }
    fn b_bytes(&self) -> usize {
        self.bk * self.pb() * 2
    }
    fn c_bytes(&self) -> usize {
        self.sgm * self.sgn * 256 * 4
    }

    /// The template substitutions; `a_k_fast` / `b_n_fast` say which axis
    /// of A and B is contiguous, so consecutive invocations load
    /// consecutive elements.
    fn substitutions(
        &self,
        a_k_fast: bool,
        b_n_fast: bool,
        act: String,
        result: &str,
    ) -> Vec<(&'static str, String)> {
        let (wm, wn) = (self.bm / 16 / self.sgm, self.bn / 16 / self.sgn);
        let ty_c = "coopmat<16x16xf32, c>";
        let pos = |fast_inner: bool, rows: usize, cols: usize, r: &str, c: &str| {
            if fast_inner {
                format!(
                    "      %{r}_d = index.constant {cols} : index\n      %{r} = index.div %e, %{r}_d : index\n      %{c} = index.rem %e, %{r}_d : index"
                )
            } else {
                format!(
                    "      %{r}_d = index.constant {rows} : index\n      %{r} = index.rem %e, %{r}_d : index\n      %{c} = index.div %e, %{r}_d : index"
                )
            }
        };
        let frags: Vec<(usize, usize)> =
            (0..wm).flat_map(|i| (0..wn).map(move |j| (i, j))).collect();
        let mut zeros = String::new();
        for i in 0..wm {
            zeros += &format!(
                "  %fo_c{i} = index.constant {} : index\n  %fro_{i} = index.add %frow, %fo_c{i} : index\n",
                16 * i
            );
        }
        for j in 0..wn {
            zeros += &format!(
                "  %go_c{j} = index.constant {} : index\n  %fco_{j} = index.add %fcol, %go_c{j} : index\n",
                16 * j
            );
        }
        for (i, j) in &frags {
            zeros += &format!("  %z_{i}_{j} = coop.zero : {ty_c}\n");
        }
        let carried = frags
            .iter()
            .map(|(i, j)| format!("%cc_{i}_{j} = %z_{i}_{j} : {ty_c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let types = vec![ty_c; frags.len()].join(", ");
        let results = frags
            .iter()
            .map(|(i, j)| format!("%res_{i}_{j}"))
            .collect::<Vec<_>>()
            .join(", ");
        let steps = self.bk / 16;
        let mut body = String::new();
        let name = |i: &usize, j: &usize, s: usize| {
            if s == 0 {
                format!("%cc_{i}_{j}")
            } else {
                format!("%acc_{i}_{j}_{s}")
            }
        };
        for s in 0..steps {
            body += &format!("    %ko_{s} = index.constant {} : index\n", 16 * s);
            for i in 0..wm {
                body += &format!(
                    "    %fa_{s}_{i} = coop.load<row_major> %ta[%fro_{i}, %ko_{s}] : view<{}x{}xf16> -> coopmat<16x16xf16, a>\n",
                    self.bm,
                    self.pa()
                );
            }
            for j in 0..wn {
                body += &format!(
                    "    %fb_{s}_{j} = coop.load<row_major> %tb[%ko_{s}, %fco_{j}] : view<{}x{}xf16> -> coopmat<16x16xf16, b>\n",
                    self.bk,
                    self.pb()
                );
            }
            for (i, j) in &frags {
                body += &format!(
                    "    {} = coop.mma %fa_{s}_{i}, %fb_{s}_{j}, {} : coopmat<16x16xf16, a>, coopmat<16x16xf16, b>, {ty_c}\n",
                    name(i, j, s + 1),
                    name(i, j, s)
                );
            }
        }
        let yields = frags
            .iter()
            .map(|(i, j)| name(i, j, steps))
            .collect::<Vec<_>>()
            .join(", ");
        let crows = self.sgm * self.sgn * 16;
        let mut epilogue = String::new();
        for (i, j) in &frags {
            epilogue += &format!(
                "  coop.store<row_major> %res_{i}_{j}, %tc[%srow, %c0] : {ty_c}, view<{crows}x16xf32>
  kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
  scf.for %mm_e = [%lane to %c256 step %sgsize] {{
    %mm_r = index.div %mm_e, %c16 : index
    %mm_c = index.rem %mm_e, %c16 : index
    %mm_r1 = index.add %fro_{i}, %mm_r : index
    %mm_c1 = index.add %fco_{j}, %mm_c : index
    %mm_gr = index.add %row0, %mm_r1 : index
    %mm_gc = index.add %col0, %mm_c1 : index
    %mm_okr = index.cmp ult, %mm_gr, %m : index
    %mm_okc = index.cmp ult, %mm_gc, %n : index
    %mm_ok = scalar.andi %mm_okr, %mm_okc : i1
    scf.if %mm_ok {{
      %mm_sr = index.add %srow, %mm_r : index
      %mm_acc = view.load %tc[%mm_sr, %mm_c] : view<{crows}x16xf32> -> f32
      %mm_pb = index.madd %mm_gc, %sbias, %obias : index
      %mm_bj = view.load %biasv[%mm_pb] : view<[%lbias]xf32> -> f32
      %x = scalar.addf %mm_acc, %mm_bj : f32
{act}
      %mm_crow = index.madd %mm_gr, %n, %oc : index
      %mm_cb = index.madd %bi, %scb, %mm_crow : index
      %mm_cidx = index.add %mm_cb, %mm_gc : index
      view.store {result}, %cv[%mm_cidx] : f32, view<[%lc]xf32>
    }}
  }}
  kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
"
            );
        }
        vec![
            ("BM1", (self.bm - 1).to_string()),
            ("BN1", (self.bn - 1).to_string()),
            ("BK1", (self.bk - 1).to_string()),
            ("BM", self.bm.to_string()),
            ("BN", self.bn.to_string()),
            ("BK", self.bk.to_string()),
            ("THREADS", self.threads().to_string()),
            ("SGN", self.sgn.to_string()),
            ("FM", (self.bm / self.sgm).to_string()),
            ("FN", (self.bn / self.sgn).to_string()),
            ("PA", self.pa().to_string()),
            ("PB", self.pb().to_string()),
            ("A_ELEMS", (self.bm * self.bk).to_string()),
            ("B_ELEMS", (self.bk * self.bn).to_string()),
            ("A_BYTES", self.a_bytes().to_string()),
            ("B_BYTES", self.b_bytes().to_string()),
            ("C_BYTES", self.c_bytes().to_string()),
            ("CROWS", crows.to_string()),
            ("A_POS", pos(a_k_fast, self.bm, self.bk, "ar", "ac")),
            ("B_POS", pos(b_n_fast, self.bk, self.bn, "br", "bc")),
            ("ZEROS", zeros),
            ("CARRIED", carried),
            ("TYPES", types),
            ("BODY", body),
            ("YIELDS", yields),
            ("RESULTS", results),
            ("EPILOGUE", epilogue),
        ]
    }
}

/// The cooperative-matrix matmul kernel's loom source for `target` (for
/// offline compilation and SPIR-V checks), or `None` when the target has
/// no suitable shape.
pub fn coop_matmul_source(
    target: &Target,
    m: usize,
    activation: Option<UnaryOp>,
) -> Option<String> {
    let tiles = coop_tiles(target, m)?;
    let (act, result) = match activation {
        None => (String::new(), "%x"),
        Some(op) => (op.body("f32"), "%r"),
    };
    let mut text = MATMUL_COOP.to_string();
    for (name, value) in tiles.substitutions(true, true, act, result) {
        text = text.replace(&format!("${{{name}}}"), &value);
    }
    Some(text)
}

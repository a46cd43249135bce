//! Quantised weight matrices: stored packed on the device and dequantised
//! inside the kernels that read them (matmul and row gather), so a model's
//! weights take about their GGUF size in device memory (the K-quants a
//! quarter to a half more: `format`).
//!
//! A [`QuantMatrix`] is `rows` x `cols` (rows = output features, each row
//! `cols` contiguous inputs, as GGUF stores linear layers), held in a
//! contiguous U32 tensor of `rows * row_words(cols)` words, in the device
//! layout of its [`QuantFormat`] (`format`: GGML's blocks as they are or
//! repacked once on the host, `repack`).
//!
//! The kernels (`kernels`, `tiled`) read a row in *spans* of 8
//! consecutive values (`spans`): a block's scale words, then two words of
//! bytes, or two nibble words (low nibbles for the block's first 16
//! values, high for the rest) and the block's word of fifth bits; an F16
//! span 4 words, an F32 span 8. Which
//! kernel runs depends on `m`, the rows of x (see [`quant_kernel_for`]);
//! a tiled product of few tiles on a GPU is split along k
//! (`tiled::TiledPlan`), its partial sums in the graph's scratch.
//!
//! Contracts: bad input (dtype, shape, domain, a byte count that does not
//! match) is an error naming the operator and shapes before anything is
//! recorded; a gathered id outside `0..rows` yields a row of zeros.

mod format;
pub(super) mod fused;
pub(super) mod kernels;
pub(super) mod kv;
pub(super) mod logits;
pub(super) mod logits_kernel;
mod repack;
pub(super) mod resident;
pub(super) mod spans;
pub(super) mod tiled;

use crate::ops::{
    Ops,
    operand::{check_inputs, check_output, float_out_dtype, float_output, operand, quad_offset},
};
use crate::{DType, DeviceTensor, TensorDesc};
pub use format::QuantFormat;
use fused::QuantFusion;
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;
use kernels::GemvKey;
use spans::Elements;
use tiled::TiledPlan;

/// A `rows` x `cols` weight matrix (rows = output features, each row
/// `cols` contiguous inputs, as GGUF stores them) in a device tensor of
/// packed u32 words (layout in the module documentation).
#[derive(Clone, Debug)]
pub struct QuantMatrix {
    format: QuantFormat,
    rows: usize,
    cols: usize,
    words: DeviceTensor,
}

impl QuantMatrix {
    /// Checks `words` is a contiguous U32 tensor of exactly
    /// `rows * format.row_words(cols)` elements.
    pub fn new(format: QuantFormat, rows: usize, cols: usize, words: DeviceTensor) -> Result<Self> {
        let row_words = format.row_words(cols)?;
        let want = rows
            .checked_mul(row_words)
            .ok_or_else(|| format.fail(rows, cols, "the size overflows"))?;
        let desc = words.desc();
        if desc.dtype() != DType::U32 || !desc.is_contiguous() || desc.elements() != want {
            return Err(format.fail(
                rows,
                cols,
                &format!("the words {desc} must be a contiguous u32 tensor of {want} elements"),
            ));
        }
        Ok(QuantMatrix {
            format,
            rows,
            cols,
            words,
        })
    }

    /// The storage format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// Rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (input features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The packed words.
    pub fn words(&self) -> &DeviceTensor {
        &self.words
    }

    pub(crate) fn label(&self) -> String {
        format!("{:?} [{}, {}]", self.format, self.rows, self.cols)
    }
}

/// The most rows of x [`Ops::record_quant_swiglu`] takes (the
/// matrix-vector kernel's).
pub const QUANT_GATED_MAX_ROWS: usize = kernels::GEMV_MAX_ROWS;

/// Which kernel computes `m` rows of x: the matrix-vector kernel for up to
/// [`kernels::GEMV_MAX_ROWS`] rows (weights streamed once per row
/// tile of up to 16 rows; the tiles share them through L2), the tiled
/// kernel beyond (weights dequantised once per 32 rows).
pub(crate) fn quant_kernel_for(m: usize) -> Option<usize> {
    (m <= kernels::GEMV_MAX_ROWS).then(|| kernels::gemv_row_tile(m))
}

impl Ops {
    /// Record `out[m, rows] = x[m, cols] @ w^T`, dequantising `w` on the
    /// fly and accumulating in f32. `x` and `out` are contiguous (`x` may
    /// be a row range of a larger tensor, with an element offset), each
    /// f32 or f16: f16 x is widened exactly as it is read, and an f16 out
    /// holds the f32 result rounded to nearest, so the f16 forms give the
    /// f32 form's values on f16 inputs, rounded once. f16 needs a device
    /// with f16 arithmetic and 16-bit storage (`Unsupported` elsewhere).
    pub fn record_quant_matmul(
        &self,
        graph: &mut Graph,
        x: &DeviceTensor,
        w: &QuantMatrix,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("quant_matmul of {} by {}", x.desc(), w.label());
        self.record_quant(graph, &operation, x, w, out, false, &QuantFusion::default())
    }

    /// [`Ops::record_quant_matmul`] with `fusion`'s norm of x and residual
    /// in the same dispatch: `out[i, j] = residual[i, j] + norm(x)[i, :] .
    /// w[j, :]`. For decode-sized `m` only: a fusion over more than
    /// [`QUANT_GATED_MAX_ROWS`] rows is `Unsupported` (record the norm and
    /// the add as their own operators).
    ///
    /// ```
    /// use hrx_tensor::{DType, DeviceTensor, Ops};
    /// use hrx_tensor::ops::{QuantFormat, QuantFusion, QuantMatrix, RowNorm};
    /// let runtime = hrx_runtime::Runtime::new()?;
    /// let ops = Ops::new(&runtime);
    /// // An F32 "quantised" 2 x 8 matrix: rows e0 and e1.
    /// let mut rows = [0f32; 16];
    /// (rows[0], rows[9]) = (1.0, 1.0);
    /// let words: Vec<f64> = rows.iter().map(|v| f64::from(v.to_bits())).collect();
    /// let words = DeviceTensor::from_values(&runtime, DType::U32, vec![16], &words)?;
    /// let w = QuantMatrix::new(QuantFormat::F32, 2, 8, words)?;
    /// let x = DeviceTensor::from_values(&runtime, DType::F32, vec![1, 8], &[3.; 8])?;
    /// let gain = DeviceTensor::from_values(&runtime, DType::F32, vec![8], &[2.; 8])?;
    /// let residual = DeviceTensor::from_values(&runtime, DType::F32, vec![1, 2], &[10., 20.])?;
    /// let norm = Some(RowNorm { weight: &gain, eps: 0.0 });
    /// let fusion = QuantFusion { norm, residual: Some(&residual), kv_store: None };
    /// let mut out = ops.output(hrx_tensor::TensorDesc::new(DType::F32, vec![1, 2])?)?;
    /// let mut graph = runtime.graph();
    /// ops.record_quant_matmul_fused(&mut graph, &x, &w, &fusion, &out)?;
    /// let inputs = [&x, &gain, &residual, w.words()].map(|t| t.completion().clone());
    /// out.set_producer(graph.prepare()?.submit_after(&inputs)?);
    /// // x normalises to ones, times the gain 2: 10 + 2 and 20 + 2.
    /// assert_eq!(out.to_values()?, [12., 22.]);
    /// # Ok::<(), hrx_tensor::Error>(())
    /// ```
    pub fn record_quant_matmul_fused(
        &self,
        graph: &mut Graph,
        x: &DeviceTensor,
        w: &QuantMatrix,
        fusion: &QuantFusion,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("quant_matmul of {} by {}", x.desc(), w.label());
        self.record_quant(graph, &operation, x, w, out, false, fusion)
    }

    /// Record a feed-forward gate on a stacked gate-and-up matrix `w` of
    /// `2n` rows (gate rows first): `out[i, j] = silu(g) * u` with `g =
    /// x[i, :] . w[j, :]` and `u = x[i, :] . w[n + j, :]`, `silu(g) = g /
    /// (1 + exp(-g))`; the same values as [`Ops::record_quant_matmul`]
    /// followed by [`Ops::record_swiglu`], in one dispatch. `x` is f32
    /// `[m, cols]` as for `record_quant_matmul`, `out` contiguous f32 `[m,
    /// n]`. For decode-sized `m` only: more than
    /// [`QUANT_GATED_MAX_ROWS`] rows is `Unsupported` (use the two
    /// operators).
    pub fn record_quant_swiglu(
        &self,
        graph: &mut Graph,
        x: &DeviceTensor,
        w: &QuantMatrix,
        out: &DeviceTensor,
    ) -> Result<()> {
        self.record_quant_swiglu_fused(graph, x, w, &QuantFusion::default(), out)
    }

    /// [`Ops::record_quant_swiglu`] with `fusion`'s norm of x (and
    /// residual, added after the gate) in the same dispatch; see
    /// [`Ops::record_quant_matmul_fused`].
    pub fn record_quant_swiglu_fused(
        &self,
        graph: &mut Graph,
        x: &DeviceTensor,
        w: &QuantMatrix,
        fusion: &QuantFusion,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("quant_swiglu of {} by {}", x.desc(), w.label());
        if !w.rows.is_multiple_of(2) {
            return Err(Error::Message(format!(
                "{operation}: a stacked gate-and-up matrix has an even number of rows"
            )));
        }
        self.record_quant(graph, &operation, x, w, out, true, fusion)
    }

    /// `quant_matmul` or its gated form, with fused work: the checks and
    /// the kernel choice.
    #[allow(clippy::too_many_arguments)]
    fn record_quant(
        &self,
        graph: &mut Graph,
        operation: &str,
        x: &DeviceTensor,
        w: &QuantMatrix,
        out: &DeviceTensor,
        gated: bool,
        fusion: &QuantFusion,
    ) -> Result<()> {
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[x, w.words()])?;
        let m = self.quant_matmul_rows(operation, x, w)?;
        // Output columns: one per weight row, or per gate-and-up pair.
        let n = if gated { w.rows / 2 } else { w.rows };
        let out_dtype = float_out_dtype(out);
        check_output(runtime, operation, out, out_dtype, &[m, n])?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let target = self.registry.target()?;
        let io = Elements {
            x: float_output(&target, x.desc().dtype(), operation)?,
            out: float_output(&target, out_dtype, operation)?,
        };
        if w.cols == 0 {
            return Err(Error::Unsupported(format!(
                "{operation}: a matrix without columns is not multiplied"
            )));
        }
        if !target.subgroup_ops.arithmetic {
            return Err(Error::Unsupported(format!(
                "{operation}: the device has no subgroup reductions"
            )));
        }
        let (kx, kw, ko) = (
            operand(x, &target, operation)?,
            operand(w.words(), &target, operation)?,
            operand(out, &target, operation)?,
        );
        let row_words = w.format.row_words(w.cols)?;
        let index = |v: usize| ScalarValue::Index(v as u64);
        let scalars: Vec<ScalarValue> = [index(m), index(n), index(w.cols)]
            .into_iter()
            .chain([index(row_words)])
            .chain(kx.scalars())
            .chain(kw.scalars())
            .chain(ko.scalars())
            .collect();
        let views = [kx.view.clone(), kw.view.clone(), ko.view.clone()];
        let workload = [m as u64, n as u64];
        // Quads of x where its binding and every row start align.
        let tail = !w.cols.is_multiple_of(8);
        let xvec = quad_offset(&kx).is_some() && !tail;
        if !fusion.is_empty() && quant_kernel_for(m).is_none() {
            return Err(Error::Unsupported(format!(
                "{operation}: {m} rows of x are over the fused kernel's \
                 {QUANT_GATED_MAX_ROWS}; record the norm and the add on their own"
            )));
        }
        match quant_kernel_for(m) {
            Some(mt) => {
                let shape = (m, w.cols, n, gated);
                let operands = [&kx, &kw, &ko];
                let fused = fused::bind(runtime, &target, operation, fusion, shape, operands)?;
                // The paired form's subgroups take two columns each.
                let paired = fusion.kv_store.is_some();
                let workload = [m as u64, if paired { n / 2 } else { n } as u64];
                let scalars: Vec<ScalarValue> = scalars.into_iter().chain(fused.scalars).collect();
                let views: Vec<_> = views.into_iter().chain(fused.views).collect();
                let key = GemvKey {
                    format: w.format,
                    mt,
                    xvec: xvec && fused.norm_quads,
                    tail,
                    subgroup: target.subgroup_size_min as usize,
                    gated,
                    norm: fusion.norm.is_some(),
                    residual: fusion.residual.is_some(),
                    kv_store: fused.cache,
                    elements: io,
                };
                let kernel = self.registry.kernel(kernels::gemv_key(key))?;
                kernel.record(graph, operation, &views, &scalars, &workload)
            }
            None if gated => Err(Error::Unsupported(format!(
                "{operation}: {m} rows of x are over the gated kernel's \
                 {QUANT_GATED_MAX_ROWS}; use quant_matmul and swiglu"
            ))),
            None => {
                let plan = TiledPlan::new(&target, self.tuning.quant_tiling, m, n, w.cols);
                let elements = plan.scratch_elements(m, n);
                let split =
                    plan.splits > 1 && (4 * elements) as u64 <= target.max_storage_buffer_range;
                let kernel = self
                    .registry
                    .kernel(plan.key(w.format, (xvec, tail, split), io))?;
                if !split {
                    return kernel.record(graph, operation, &views, &scalars, &workload);
                }
                let tiles = plan.tiles(m, n);
                let scalars: Vec<ScalarValue> = scalars
                    .into_iter()
                    .chain([plan.splits, plan.steps, plan.npad(n)].map(index))
                    .chain([elements / plan.splits, elements, tiles].map(index))
                    .collect();
                let launch = kernel.launch(
                    operation,
                    &scalars,
                    &[m as u64, n as u64, plan.splits as u64],
                )?;
                // Scratch is taken only now, when nothing else can fail.
                // The partial sums are bound whole from the scratch's
                // first byte; every finishing workgroup leaves its tile's
                // counter at zero, so the graph's split products share
                // one zeroed storage.
                let scratch = graph.scratch(4 * elements)?;
                let counters = graph.zeroed_scratch(4 * tiles)?;
                let [vx, vw, vo] = views;
                launch.record(graph, &[vx, vw, vo, scratch, counters])
            }
        }
    }

    /// The rows of x, after checking it against `w`.
    fn quant_matmul_rows(
        &self,
        operation: &str,
        x: &DeviceTensor,
        w: &QuantMatrix,
    ) -> Result<usize> {
        let d = x.desc();
        let float = matches!(d.dtype(), DType::F32 | DType::F16);
        if !float || d.rank() != 2 || d.shape()[1] != w.cols || !d.is_contiguous() {
            return Err(Error::Message(format!(
                "{operation}: x must be a contiguous f32 or f16 [m, {}]",
                w.cols
            )));
        }
        Ok(d.shape()[0])
    }

    /// `x @ w^T` (see [`Ops::record_quant_matmul`]), run eagerly.
    pub fn quant_matmul(&self, x: &DeviceTensor, w: &QuantMatrix) -> Result<DeviceTensor> {
        let operation = format!("quant_matmul of {} by {}", x.desc(), w.label());
        let m = self.quant_matmul_rows(&operation, x, w)?;
        let desc = TensorDesc::new(DType::F32, vec![m, w.rows])?;
        self.eager(&[x, w.words()], desc, |g, out| {
            self.record_quant_matmul(g, x, w, out)
        })
    }

    /// The gate of `x` by the stacked gate-and-up matrix `w` (see
    /// [`Ops::record_quant_swiglu`]), run eagerly.
    pub fn quant_swiglu(&self, x: &DeviceTensor, w: &QuantMatrix) -> Result<DeviceTensor> {
        let operation = format!("quant_swiglu of {} by {}", x.desc(), w.label());
        let m = self.quant_matmul_rows(&operation, x, w)?;
        let desc = TensorDesc::new(DType::F32, vec![m, w.rows / 2])?;
        self.eager(&[x, w.words()], desc, |g, out| {
            self.record_quant_swiglu(g, x, w, out)
        })
    }

    /// Record `out[i, :] = ` dequantised row `ids[i]` of `w` (an embedding
    /// lookup): `ids` a contiguous i32 `[m]`, `out` a contiguous f32
    /// `[m, cols]`. An id outside `0..rows` gives a row of zeros and reads
    /// nothing.
    pub fn record_quant_gather(
        &self,
        graph: &mut Graph,
        w: &QuantMatrix,
        ids: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("quant_gather of {} by {}", w.label(), ids.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[w.words(), ids])?;
        let m = Self::quant_gather_rows(operation, ids)?;
        check_output(runtime, operation, out, DType::F32, &[m, w.cols])?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let target = self.registry.target()?;
        let (ki, ko) = (
            operand(ids, &target, operation)?,
            operand(out, &target, operation)?,
        );
        // A matrix without rows binds zeros that are never read.
        let (wview, wscalars) = if w.rows == 0 {
            let view = self.registry.zeros()?;
            let len = view.len() as u64 / 4;
            (view, [ScalarValue::Index(0), ScalarValue::Index(len)])
        } else {
            let kw = operand(w.words(), &target, operation)?;
            let s = kw.scalars();
            (kw.view, s)
        };
        let spans = w.cols.div_ceil(8);
        let items = m
            .checked_mul(spans)
            .filter(|n| u32::try_from(*n).is_ok())
            .ok_or_else(|| Error::Unsupported(format!("{operation}: too many values")))?;
        let index = |v: usize| ScalarValue::Index(v as u64);
        let row_words = w.format.row_words(w.cols)?;
        let scalars: Vec<ScalarValue> = [index(items), index(w.rows), index(w.cols)]
            .into_iter()
            .chain([index(row_words)])
            .chain(wscalars)
            .chain(ki.scalars())
            .chain(ko.scalars())
            .collect();
        let kernel = self.registry.kernel(kernels::gather_key(
            w.format,
            !w.cols.is_multiple_of(8),
            self.grid_config("quant_gather.wg", "quant_gather.max_groups")?,
        ))?;
        kernel.record(
            graph,
            operation,
            &[wview, ki.view, ko.view],
            &scalars,
            &[items as u64],
        )
    }

    fn quant_gather_rows(operation: &str, ids: &DeviceTensor) -> Result<usize> {
        let d = ids.desc();
        if d.dtype() != DType::I32 || d.rank() != 1 || !d.is_contiguous() {
            return Err(Error::Message(format!(
                "{operation}: the ids must be a contiguous i32 [m]"
            )));
        }
        Ok(d.shape()[0])
    }

    /// Dequantised rows of `w` picked by `ids` (see
    /// [`Ops::record_quant_gather`]), run eagerly.
    pub fn quant_gather(&self, w: &QuantMatrix, ids: &DeviceTensor) -> Result<DeviceTensor> {
        let operation = format!("quant_gather of {} by {}", w.label(), ids.desc());
        let m = Self::quant_gather_rows(&operation, ids)?;
        let desc = TensorDesc::new(DType::F32, vec![m, w.cols])?;
        self.eager(&[w.words(), ids], desc, |g, out| {
            self.record_quant_gather(g, w, ids, out)
        })
    }
}

//! Quantised weight matrices: stored packed on the device and dequantised
//! inside the kernels that read them (matmul and row gather), so a model's
//! weights take their GGUF size in device memory (K-quants a third to a
//! half more, below).
//!
//! A [`QuantMatrix`] is `rows` x `cols` (rows = output features, each row
//! `cols` contiguous inputs, as GGUF stores linear layers), held in a
//! contiguous U32 tensor of `rows * row_words(cols)` words. The device
//! layout of one row, per [`QuantFormat`]:
//!
//! - `F32`: one word per value, its bits;
//! - `F16`: two values per word, the lower column in the low half; an odd
//!   `cols` pads the row's last upper half with zero;
//! - `Q8_0`: 9 words per block of 32 values: word 0 holds the f16 scale
//!   `d` in its low half (upper half zero), words 1..=8 the 32 signed
//!   bytes `q` in order, little-endian (value `j` is byte `j % 4` of word
//!   `1 + j / 4`); value = `d * q`;
//! - `Q4_1`: GGML's 20-byte block as 5 words: word 0 = f16 `d` (low half)
//!   and f16 `m` (high half), words 1..=4 the 16 bytes of nibbles; value
//!   `j < 16` is the low nibble of byte `j`, value `j + 16` its high
//!   nibble; value = `d * nibble + m`.
//! - `Q4_K`: each sub-block of 32 values unpacked from its 144-byte
//!   super-block into 6 words: word 0 the f32 scale `d * sc`, word 1 the
//!   f32 `dmin * m` (the sub-block's 6-bit scale and minimum times the
//!   super-block's f16 pair, as GGML computes them), words 2..=5 the 16
//!   bytes of nibbles in Q4_1's order; value = `scale * nibble - min`.
//!   24 bytes per 32 values: 1.33 times the file's size.
//! - `Q6_K`: each sub-block of 16 values unpacked from its 210-byte
//!   super-block into 5 words: word 0 the f32 scale `d * sc`, words 1..=4
//!   the 16 values `q - 32` as signed bytes in order; value = `scale * q`.
//!   20 bytes per 16 values: 1.52 times the file's size.
//!
//! The K-quant sub-blocks are unpacked on the host once, when the matrix is
//! packed, so that every kernel reads their scales as it reads Q4_1's
//! and Q8_0's, with the same arithmetic GGML dequantises with.
//!
//! The kernels (`kernels`, `tiled`) read a row in *spans* of 8
//! consecutive values: a Q8_0 or Q6_K span is two words of bytes after
//! the block's scale, a Q4_1 or Q4_K span the block's scale words and two
//! nibble words (low nibbles for the block's first 16 values, high for
//! the rest), an F16 span 4 words, an F32 span 8. Which
//! kernel runs depends on `m`, the rows of x (see [`quant_kernel_for`]);
//! a tiled product of few tiles on a GPU is split along k
//! (`tiled::TiledPlan`), its partial sums in the graph's scratch.
//!
//! Contracts: bad input (dtype, shape, domain, a byte count that does not
//! match) is an error naming the operator and shapes before anything is
//! recorded; a gathered id outside `0..rows` yields a row of zeros.

pub(super) mod fused;
pub(super) mod kernels;
mod kquant;
pub(super) mod kv;
pub(super) mod logits;
pub(super) mod logits_kernel;
pub(super) mod resident;
pub(super) mod spans;
pub(super) mod tiled;

use crate::ops::{
    Ops,
    operand::{check_inputs, check_output, float_out_dtype, float_output, operand, quad_offset},
};
use crate::{DType, DeviceTensor, TensorDesc};
use fused::QuantFusion;
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;
use kernels::GemvKey;
use spans::Elements;
use tiled::TiledPlan;

/// How a weight matrix is stored on the device.
// The variants keep GGML's names, which users know the files by.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// f32 values, one per word.
    F32,
    /// f16 values, two per word.
    F16,
    /// GGML Q8_0: blocks of 32 signed bytes and an f16 scale.
    Q8_0,
    /// GGML Q4_1: blocks of 32 nibbles, an f16 scale and an f16 minimum.
    Q4_1,
    /// GGML Q4_K: super-blocks of 256 nibbles in 8 sub-blocks of 32, each
    /// with a 6-bit scale and minimum of the super-block's f16 pair.
    Q4_K,
    /// GGML Q6_K: super-blocks of 256 6-bit values in 16 sub-blocks of
    /// 16, each with a signed 8-bit scale of the super-block's f16 scale.
    Q6_K,
}

impl QuantFormat {
    /// Every format, in the order of the enum.
    pub const ALL: [QuantFormat; 6] = [
        QuantFormat::F32,
        QuantFormat::F16,
        QuantFormat::Q8_0,
        QuantFormat::Q4_1,
        QuantFormat::Q4_K,
        QuantFormat::Q6_K,
    ];

    /// Values per GGML block (1 for F32/F16, 32 for Q8_0/Q4_1, 256 for
    /// Q4_K/Q6_K): a row's length must be a multiple.
    pub fn block_len(self) -> usize {
        match self {
            QuantFormat::F32 | QuantFormat::F16 => 1,
            QuantFormat::Q8_0 | QuantFormat::Q4_1 => 32,
            QuantFormat::Q4_K | QuantFormat::Q6_K => 256,
        }
    }

    /// Bytes of one GGML block.
    fn block_bytes(self) -> usize {
        match self {
            QuantFormat::F32 => 4,
            QuantFormat::F16 => 2,
            QuantFormat::Q8_0 => 34,
            QuantFormat::Q4_1 => 20,
            QuantFormat::Q4_K => 144,
            QuantFormat::Q6_K => 210,
        }
    }

    fn fail(self, rows: usize, cols: usize, why: &str) -> Error {
        Error::Message(format!("{self:?} matrix of {rows} x {cols}: {why}"))
    }

    /// Blocks in one row, checked.
    fn row_blocks(self, rows: usize, cols: usize) -> Result<usize> {
        if !cols.is_multiple_of(self.block_len()) {
            return Err(self.fail(
                rows,
                cols,
                &format!("cols must be a multiple of {}", self.block_len()),
            ));
        }
        Ok(cols / self.block_len())
    }

    /// u32 words of one packed row (the device row stride).
    pub fn row_words(self, cols: usize) -> Result<usize> {
        let blocks = self.row_blocks(0, cols)?;
        let times = |n: usize, words: usize| {
            n.checked_mul(words)
                .ok_or_else(|| self.fail(0, cols, "too many words"))
        };
        match self {
            QuantFormat::F32 => Ok(cols),
            QuantFormat::F16 => Ok(cols.div_ceil(2)),
            QuantFormat::Q8_0 => times(blocks, 9),
            QuantFormat::Q4_1 => times(blocks, 5),
            // Sub-blocks of 32 values in 6 words, of 16 values in 5.
            QuantFormat::Q4_K => times(cols / 32, 6),
            QuantFormat::Q6_K => times(cols / 16, 5),
        }
    }

    /// Repack a row-major matrix of `rows` rows of `cols` values, given in
    /// GGML's byte layout (GGUF tensor data), into the device layout the
    /// module documentation describes. Errors (never panics) when `cols`
    /// is not a multiple of [`block_len`](Self::block_len), the byte
    /// length is not exactly `rows * cols / block_len * block_bytes`, or a
    /// count overflows.
    pub fn pack(self, rows: usize, cols: usize, ggml: &[u8]) -> Result<Vec<u32>> {
        let blocks = self.row_blocks(rows, cols)?;
        let row_words = self.row_words(cols)?;
        let overflow = || self.fail(rows, cols, "the size overflows");
        let row_bytes = blocks
            .checked_mul(self.block_bytes())
            .ok_or_else(overflow)?;
        let bytes = rows.checked_mul(row_bytes).ok_or_else(overflow)?;
        let words = rows.checked_mul(row_words).ok_or_else(overflow)?;
        if ggml.len() != bytes {
            return Err(self.fail(
                rows,
                cols,
                &format!("{} bytes given, {bytes} expected", ggml.len()),
            ));
        }
        let le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let half = |b: &[u8]| u32::from(u16::from_le_bytes([b[0], b[1]]));
        let mut out = Vec::with_capacity(words);
        if row_bytes == 0 {
            return Ok(out);
        }
        for row in ggml.chunks_exact(row_bytes) {
            match self {
                QuantFormat::F32 | QuantFormat::Q4_1 => out.extend(row.chunks_exact(4).map(le)),
                QuantFormat::F16 => out.extend(row.chunks(4).map(|p| {
                    let hi = if p.len() == 4 { half(&p[2..]) } else { 0 };
                    half(p) | hi << 16
                })),
                QuantFormat::Q8_0 => {
                    for block in row.chunks_exact(34) {
                        out.push(half(block));
                        out.extend(block[2..].chunks_exact(4).map(le));
                    }
                }
                QuantFormat::Q4_K => row
                    .chunks_exact(144)
                    .for_each(|b| kquant::pack_q4_k(b, &mut out)),
                QuantFormat::Q6_K => row
                    .chunks_exact(210)
                    .for_each(|b| kquant::pack_q6_k(b, &mut out)),
            }
        }
        Ok(out)
    }
}

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

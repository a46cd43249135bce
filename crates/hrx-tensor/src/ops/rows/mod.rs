//! Row operators over the last axis: softmax, log-softmax, layer norm and
//! RMS norm, and the residual add fused into an RMS norm
//! ([`Ops::record_add_rms_norm`]: a decode step is bound by its count of
//! dependent dispatches, and each layer adds a residual right before a
//! norm). One workgroup per row, except the norms of rows of aligned
//! quads short enough for a subgroup's registers: one subgroup per row
//! (`norm_kernel`), which the embeddings' norm
//! (`embedding_norm`) shares.

pub(super) mod biased_softmax;
pub(super) mod biased_softmax_kernel;
pub(super) mod embedding_norm;
pub(super) mod kernels;
pub(super) mod norm_kernel;

use crate::ops::{
    Ops,
    indexing::coalesce,
    operand::{
        Operand, check_inputs, check_output, disjoint, float_out_dtype, float_output, operand,
        quad_offset,
    },
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::{ScalarValue, ir::Scalar};
use hrx_runtime::Graph;
use kernels::Residual;

fn index(v: usize) -> ScalarValue {
    ScalarValue::Index(v as u64)
}

/// Rows of a tensor over its last axis: count, length, row and element
/// strides. A scalar is one row of one element.
struct Rows {
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

fn rows(desc: &TensorDesc, operation: &str) -> Result<Rows> {
    let rank = desc.rank();
    if rank == 0 {
        return Ok(Rows {
            rows: 1,
            cols: 1,
            row_stride: 0,
            col_stride: 0,
        });
    }
    let (shape, strides) = (desc.shape(), desc.strides());
    let outer = &shape[..rank - 1];
    let (merged, merged_strides) =
        coalesce(outer, &[strides[..rank - 1].to_vec()], 1).ok_or_else(|| {
            Error::Unsupported(format!(
                "{operation}: the leading axes do not merge into one"
            ))
        })?;
    Ok(Rows {
        rows: merged[0],
        cols: shape[rank - 1],
        row_stride: merged_strides[0][0],
        col_stride: strides[rank - 1],
    })
}

impl Rows {
    /// The quad offsets of input and output rows when the 4-wide kernels
    /// may address them: rows of unit stride whose length and row stride
    /// are multiples of 4, both operands 16-byte aligned.
    fn quads(&self, a: &Operand, out: &Operand) -> Option<(u64, u64)> {
        let fits = self.col_stride == 1
            && self.cols.is_multiple_of(4)
            && self.row_stride.is_multiple_of(4);
        fits.then(|| Some((quad_offset(a)?, quad_offset(out)?)))
            .flatten()
    }
}

/// The checks every norm makes of its operands: `inputs` and the
/// parameters f32 (`Unsupported` otherwise), the weight and the bias (each
/// optional) of shape `[cols]`, and `eps` finite and >= 0.
pub(super) fn check_norm_operands(
    operation: &str,
    inputs: &[&DeviceTensor],
    (weight, bias): (Option<&DeviceTensor>, Option<&DeviceTensor>),
    cols: usize,
    eps: f32,
) -> Result<()> {
    let params = [("weight", weight), ("bias", bias)];
    let present = params.iter().filter_map(|(_, t)| *t);
    for t in inputs.iter().copied().chain(present) {
        if t.desc().dtype() != DType::F32 {
            return Err(Error::Unsupported(format!(
                "{operation}: {} is not f32",
                t.desc()
            )));
        }
    }
    for (what, t) in params {
        if let Some(t) = t.filter(|t| t.desc().shape() != [cols]) {
            return Err(Error::Message(format!(
                "{operation}: {what} must have shape [{cols}], got {}",
                t.desc()
            )));
        }
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::Message(format!(
            "{operation}: eps {eps} must be finite and >= 0"
        )));
    }
    Ok(())
}

/// Work items per row on CPU devices. llvmpipe runs a workgroup's
/// invocations as coroutines that switch at every barrier, so 256 of them
/// per row cost far more than the arithmetic: on lavapipe (1024 x 1024
/// f32) softmax went from 0.06 to 0.8-1.6 GB/s and layer norm from 0.09 to
/// 1.1-1.6 GB/s with 16 (8 and 32 measured about the same, 64 half).
const CPU_ROW_WG: usize = 16;

/// Normalisation variants.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Norm {
    Layer,
    Rms,
}

/// A checked norm: everything [`Ops::record_norm_rows`] takes besides the
/// graph and the (possibly packed) input.
#[derive(Clone, Copy)]
struct NormCall<'a> {
    kind: Norm,
    weight: Option<&'a DeviceTensor>,
    bias: Option<&'a DeviceTensor>,
    eps: f32,
    out: &'a DeviceTensor,
    /// The addend and the sum's output (where kept) of a fused add: the
    /// norm is then of `a + addend`, stored to the sum. Both contiguous
    /// like `a`.
    add: Option<(&'a DeviceTensor, Option<&'a DeviceTensor>)>,
    /// An f16 copy of `out` (contiguous like it), written by the same
    /// pass; only the quad kernel writes one.
    copy: Option<&'a DeviceTensor>,
    operation: &'a str,
}

impl Ops {
    /// Storage to pack `a` into when its leading axes do not merge into
    /// one; `None` when they merge.
    fn row_packing(&self, a: &DeviceTensor, operation: &str) -> Result<Option<DeviceTensor>> {
        if rows(a.desc(), operation).is_ok() {
            return Ok(None);
        }
        self.packing_storage(a).map(Some)
    }

    /// Work items per row for rows of `items` vectors (or scalars). On a
    /// GPU one work item per item, as a power of two from 32 (a warp) to
    /// 256: short rows such as attention scores would otherwise leave most
    /// of a 256-wide workgroup idle (on the H200, softmax over rows of 128
    /// f32 ran at 0.29 TB/s with 256 work items a row).
    /// The subgroup-a-row norm's shape for rows of `quads` quads: the
    /// subgroup size, rows a workgroup and quads a lane; `None` where the
    /// device's subgroup size varies or a lane would hold more than
    /// [`norm_kernel::MAX_QUADS_PER_LANE`] quads. Workgroups hold
    /// as many work items as the per-row kernel's would (256 on a GPU,
    /// [`CPU_ROW_WG`] on a CPU).
    pub(super) fn subgroup_rows(&self, quads: usize) -> Result<Option<(usize, usize, usize)>> {
        let target = self.registry.target()?;
        let sg = target.subgroup_size_max as usize;
        let per_lane = quads.div_ceil(sg.max(1));
        let wanted = if target.kind == hrx_core::DeviceKind::Cpu {
            CPU_ROW_WG
        } else {
            256
        };
        let size = wanted
            .min(target.max_workgroup_invocations as usize)
            .min(target.max_workgroup_size[0] as usize);
        let fits = sg != 0
            && target.subgroup_size_min == target.subgroup_size_max
            && size >= sg
            && (1..=norm_kernel::MAX_QUADS_PER_LANE).contains(&per_lane);
        Ok(fits.then_some((sg, size / sg, per_lane)))
    }

    fn row_workgroup(&self, items: usize) -> Result<usize> {
        let target = self.registry.target()?;
        let wanted = if target.kind == hrx_core::DeviceKind::Cpu {
            CPU_ROW_WG
        } else {
            items.next_power_of_two().clamp(32, 256)
        };
        Ok(wanted
            .min(target.max_workgroup_invocations as usize)
            .min(target.max_workgroup_size[0] as usize))
    }

    fn record_softmax_kind(
        &self,
        graph: &mut Graph,
        log: bool,
        a: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let name = if log { "log_softmax" } else { "softmax" };
        let operation = format!("{name} of {}", a.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a])?;
        if a.desc().dtype() != DType::F32 {
            return Err(Error::Unsupported(format!("{operation}: f32 only")));
        }
        check_output(runtime, operation, out, DType::F32, a.desc().shape())?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let packed = self.row_packing(a, operation)?;
        self.record_after_packing(graph, a, packed.as_ref(), |g, a| {
            self.record_softmax_rows(g, log, a, out, operation)
        })
    }

    /// Record the softmax kernel over the rows of `a`, whose leading axes
    /// merge.
    fn record_softmax_rows(
        &self,
        graph: &mut Graph,
        log: bool,
        a: &DeviceTensor,
        out: &DeviceTensor,
        operation: &str,
    ) -> Result<()> {
        let r = rows(a.desc(), operation)?;
        let target = self.registry.target()?;
        let (ka, ko) = (
            operand(a, &target, operation)?,
            operand(out, &target, operation)?,
        );
        let quads = r.quads(&ka, &ko);
        let wg = self.row_workgroup(if quads.is_some() { r.cols / 4 } else { r.cols })?;
        if let Some((qa, qo)) = quads {
            let kernel = self.registry.kernel(KernelKey {
                source: KernelSource::Built(Generator::new(
                    format!("softmax4 {wg} {log}"),
                    move || kernels::softmax4(wg, log),
                )),
                symbol: "softmax4",
                config: Vec::new(),
            })?;
            let scalars = [r.cols / 4, r.row_stride / 4]
                .map(index)
                .into_iter()
                .chain([ScalarValue::Index(qa), ScalarValue::Index(ka.len)])
                .chain([ScalarValue::Index(qo), ScalarValue::Index(ko.len)])
                .collect::<Vec<_>>();
            return kernel.record(
                graph,
                operation,
                &[ka.view, ko.view],
                &scalars,
                &[r.rows as u64],
            );
        }
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(format!("softmax {wg} {log}"), move || {
                kernels::softmax(wg, log)
            })),
            symbol: "softmax",
            config: Vec::new(),
        })?;
        let scalars: Vec<ScalarValue> = [r.cols, r.row_stride, r.col_stride]
            .map(index)
            .into_iter()
            .chain(ka.scalars())
            .chain(ko.scalars())
            .collect();
        kernel.record(
            graph,
            operation,
            &[ka.view, ko.view],
            &scalars,
            &[r.rows as u64],
        )
    }

    /// Record `out = softmax(a)` over the last axis (numerically stable:
    /// the row maximum is subtracted first). f32; `a` may be strided.
    pub fn record_softmax(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        self.record_softmax_kind(graph, false, a, out)
    }

    /// Record `out = log_softmax(a)` over the last axis: `x - max - ln sum
    /// exp(x - max)`.
    pub fn record_log_softmax(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        self.record_softmax_kind(graph, true, a, out)
    }

    /// Softmax over the last axis, run eagerly.
    pub fn softmax(&self, a: &DeviceTensor) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(a.desc().dtype(), a.desc().shape().to_vec())?;
        self.eager(&[a], desc, |g, out| self.record_softmax(g, a, out))
    }

    /// Log-softmax over the last axis, run eagerly.
    pub fn log_softmax(&self, a: &DeviceTensor) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(a.desc().dtype(), a.desc().shape().to_vec())?;
        self.eager(&[a], desc, |g, out| self.record_log_softmax(g, a, out))
    }

    #[allow(clippy::too_many_arguments)]
    fn record_norm(
        &self,
        graph: &mut Graph,
        kind: Norm,
        a: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        bias: Option<&DeviceTensor>,
        eps: f32,
        out: &DeviceTensor,
    ) -> Result<()> {
        let name = if kind == Norm::Layer {
            "layer_norm"
        } else {
            "rms_norm"
        };
        let operation = format!("{name} of {}", a.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        let params: Vec<&DeviceTensor> = weight.into_iter().chain(bias).collect();
        check_inputs(runtime, operation, &[a])?;
        check_inputs(runtime, operation, &params)?;
        let cols = a.desc().shape().last().copied().unwrap_or(1);
        check_norm_operands(operation, &[a], (weight, bias), cols, eps)?;
        let out_dtype = self.norm_output(operation, out)?;
        check_output(runtime, operation, out, out_dtype, a.desc().shape())?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let packed = self.row_packing(a, operation)?;
        let call = NormCall {
            kind,
            weight,
            bias,
            eps,
            out,
            add: None,
            copy: None,
            operation,
        };
        self.record_after_packing(graph, a, packed.as_ref(), |g, a| {
            self.record_norm_rows(g, a, &call)
        })
    }

    /// Record the norm kernel over the rows of `a`, whose leading axes
    /// merge.
    fn record_norm_rows(&self, graph: &mut Graph, a: &DeviceTensor, call: &NormCall) -> Result<()> {
        let NormCall {
            kind,
            weight,
            bias,
            eps,
            out,
            add,
            copy,
            operation,
        } = *call;
        let r = rows(a.desc(), operation)?;
        let target = self.registry.target()?;
        let dummy = || -> Result<Operand> {
            Ok(Operand {
                view: self.registry.zeros()?,
                offset: 0,
                len: 4,
            })
        };
        let param = |t: Option<&DeviceTensor>| -> Result<(Operand, usize, usize)> {
            match t {
                Some(t) => Ok((operand(t, &target, operation)?, t.desc().strides()[0], 1)),
                None => Ok((dummy()?, 0, 0)),
            }
        };
        let (ka, ko) = (
            operand(a, &target, operation)?,
            operand(out, &target, operation)?,
        );
        let ((kw, sw, hw), (kb, sb, hb)) = (param(weight)?, param(bias)?);
        // The fused add's addend and sum, laid out like `a` and `out`.
        let added = match add {
            Some((c, sum)) => Some((
                operand(c, &target, operation)?,
                sum.map(|s| operand(s, &target, operation)).transpose()?,
            )),
            None => None,
        };
        if let Some((kc, ks)) = &added {
            let read = [
                ("a", &ka),
                ("b", kc),
                ("the weight", &kw),
                ("the bias", &kb),
            ];
            if let Some(ks) = ks {
                for (name, k) in read.into_iter().chain([("out", &ko)]) {
                    disjoint(operation, ("sum", ks), (name, k))?;
                }
            }
            for (name, k) in read {
                disjoint(operation, ("out", &ko), (name, k))?;
            }
        }
        let copied = match copy {
            Some(t) => Some(operand(t, &target, operation)?),
            None => None,
        };
        if let Some(kk) = &copied {
            let others = [
                ("a", &ka),
                ("out", &ko),
                ("the weight", &kw),
                ("the bias", &kb),
            ];
            let added_ops = added.iter().flat_map(|(kc, ks)| {
                std::iter::once(("b", kc)).chain(ks.iter().map(|ks| ("sum", ks)))
            });
            for (name, k) in others.into_iter().chain(added_ops) {
                disjoint(operation, ("the f16 copy", kk), (name, k))?;
            }
        }
        let residual = match &added {
            None => Residual::None,
            Some((_, Some(_))) => Residual::Kept,
            Some((_, None)) => Residual::Unkept,
        };
        let quads = r.quads(&ka, &ko).and_then(|(qa, qo)| {
            // Present parameters must be unit-stride and aligned too; the
            // absent ones read quad 0 of the 16-byte dummy.
            let param = |k: &Operand, stride: usize, present: usize| match present {
                0 => Some(0),
                _ if stride == 1 => quad_offset(k),
                _ => None,
            };
            let qcs = match &added {
                Some((kc, ks)) => {
                    let qs = match ks {
                        Some(ks) => Some(quad_offset(ks)?),
                        None => None,
                    };
                    Some((quad_offset(kc)?, qs))
                }
                None => None,
            };
            let qk = match &copied {
                Some(kk) => Some(quad_offset(kk)?),
                None => None,
            };
            Some((qa, qo, param(&kw, sw, hw)?, param(&kb, sb, hb)?, qcs, qk))
        });
        if copied.is_some() && quads.is_none() {
            return Err(Error::Unsupported(format!(
                "{operation}: the f16 copy needs rows a multiple of 4 long in aligned, \
                 contiguous tensors"
            )));
        }
        let out_element = match out.desc().dtype() {
            DType::F16 if quads.is_none() => {
                return Err(Error::Unsupported(format!(
                    "{operation}: an f16 output needs rows a multiple of 4 long in aligned, \
                     contiguous tensors"
                )));
            }
            DType::F16 => Scalar::F16,
            _ => Scalar::F32,
        };
        let wg = self.row_workgroup(if quads.is_some() { r.cols / 4 } else { r.cols })?;
        let mut views = vec![
            ka.view.clone(),
            kw.view.clone(),
            kb.view.clone(),
            ko.view.clone(),
        ];
        if let Some((kc, ks)) = &added {
            views.push(kc.view.clone());
            views.extend(ks.iter().map(|ks| ks.view.clone()));
        }
        if let Some(kk) = &copied {
            views.push(kk.view.clone());
        }
        if let Some((qa, qo, qw, qb, qcs, qk)) = quads {
            let center = kind == Norm::Layer;
            let copy = qk.is_some();
            let by_subgroup = self.subgroup_rows(r.cols / 4)?;
            let (symbol, source) = match by_subgroup {
                Some((sg, rows_per_wg, per_lane)) => {
                    let input = norm_kernel::RowInput::Rows { residual };
                    let symbol = input.symbol();
                    let flags = (input, center, copy);
                    let source = Generator::new(
                        format!("{symbol} {sg} {rows_per_wg} {per_lane} {flags:?} {out_element:?}"),
                        move || {
                            norm_kernel::norm4_rows(sg, rows_per_wg, per_lane, flags, out_element)
                        },
                    );
                    (symbol, source)
                }
                None => {
                    let symbol = if residual.adds() {
                        "add_norm4"
                    } else {
                        "norm4"
                    };
                    let writes = (copy, out_element);
                    let source = Generator::new(
                        format!("{symbol} {wg} {center} {residual:?} {writes:?}"),
                        move || kernels::norm4(wg, center, residual, writes),
                    );
                    (symbol, source)
                }
            };
            let kernel = self.registry.kernel(KernelKey {
                source: KernelSource::Built(source),
                symbol,
                config: Vec::new(),
            })?;
            let q = ScalarValue::Index;
            let mut scalars = vec![
                index(r.cols / 4),
                ScalarValue::F32(eps),
                index(hw),
                index(hb),
                index(r.row_stride / 4),
                q(qa),
                q(ka.len),
                index(sw),
                q(qw),
                q(kw.len),
                index(sb),
                q(qb),
                q(kb.len),
                q(qo),
                q(ko.len),
            ];
            if let (Some((qc, qs)), Some((kc, ks))) = (qcs, &added) {
                scalars.extend([q(qc), q(kc.len)]);
                if let (Some(qs), Some(ks)) = (qs, ks) {
                    scalars.extend([q(qs), q(ks.len)]);
                }
            }
            if let (Some(qk), Some(kk)) = (qk, &copied) {
                scalars.extend([q(qk), q(kk.len)]);
            }
            if by_subgroup.is_some() {
                scalars.push(index(r.rows));
            }
            return kernel.record(graph, operation, &views, &scalars, &[r.rows as u64]);
        }
        let center = kind == Norm::Layer;
        let symbol = if residual.adds() { "add_norm" } else { "norm" };
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("{symbol} {wg} {center} {residual:?}"),
                move || kernels::norm(wg, center, residual),
            )),
            symbol,
            config: Vec::new(),
        })?;
        let mut scalars: Vec<ScalarValue> =
            [index(r.cols), ScalarValue::F32(eps), index(hw), index(hb)]
                .into_iter()
                .chain([r.row_stride, r.col_stride].map(index))
                .chain(ka.scalars())
                .chain([index(sw)])
                .chain(kw.scalars())
                .chain([index(sb)])
                .chain(kb.scalars())
                .chain(ko.scalars())
                .collect();
        if let Some((kc, ks)) = &added {
            scalars.extend(kc.scalars());
            scalars.extend(ks.iter().flat_map(|ks| ks.scalars()));
        }
        kernel.record(graph, operation, &views, &scalars, &[r.rows as u64])
    }

    /// The dtype a norm writes to `out` (checked against it): f32, or f16
    /// where the device has f16 arithmetic and 16-bit storage.
    fn norm_output(&self, operation: &str, out: &DeviceTensor) -> Result<DType> {
        let dtype = float_out_dtype(out);
        float_output(&self.registry.target()?, dtype, operation)?;
        Ok(dtype)
    }

    /// Record layer norm over the last axis: `(x - mean) / sqrt(var + eps)
    /// * weight + bias` with the biased variance; weight and bias (shape
    /// `\[last\]`) are optional.
    ///
    /// `out` is f32, or f16: the f32 result rounded to nearest, the next
    /// matmul's f16 operand without a cast (on devices with f16
    /// arithmetic and 16-bit storage, for rows a multiple of 4 long in
    /// aligned, contiguous tensors; `Unsupported` elsewhere). The same
    /// holds for every norm here.
    #[allow(clippy::too_many_arguments)]
    pub fn record_layer_norm(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        bias: Option<&DeviceTensor>,
        eps: f32,
        out: &DeviceTensor,
    ) -> Result<()> {
        self.record_norm(graph, Norm::Layer, a, weight, bias, eps, out)
    }

    /// Record RMS norm over the last axis: `x / sqrt(mean(x^2) + eps) *
    /// weight + bias`; weight and bias are optional.
    pub fn record_rms_norm(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        bias: Option<&DeviceTensor>,
        eps: f32,
        out: &DeviceTensor,
    ) -> Result<()> {
        self.record_norm(graph, Norm::Rms, a, weight, bias, eps, out)
    }

    /// Record `sum = a + b` and `out = rms_norm(sum) * weight` over the
    /// last axis in one dispatch: the values of [`Ops::record_binary`]
    /// (`Add`) followed by [`Ops::record_rms_norm`] with this weight and
    /// no bias (the same reductions; equal up to the order of f32
    /// roundings).
    ///
    /// `a`, `b`, `sum` and `out` are f32 of one shape, contiguous (they
    /// may start anywhere in their storage, such as rows of a larger
    /// tensor); `weight` is f32 `[last]`, possibly strided. `sum` and
    /// `out` must not overlap each other or any input. Where `sum` is
    /// `None` the sums are not stored: a post-norm layer, which needs
    /// only the norm, writes one tensor less.
    #[allow(clippy::too_many_arguments)]
    pub fn record_add_rms_norm(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        b: &DeviceTensor,
        weight: &DeviceTensor,
        eps: f32,
        sum: Option<&DeviceTensor>,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("add_rms_norm of {} and {}", a.desc(), b.desc());
        let norm = (Norm::Rms, Some(weight), None, eps);
        self.record_add_norm(graph, &operation, (a, b), norm, (sum, out, None))
    }

    /// Record `sum = a + b` and `out = layer_norm(sum) * weight + bias`
    /// over the last axis in one dispatch (a post-norm encoder layer's
    /// residual update): the values of [`Ops::record_binary`] (`Add`)
    /// followed by [`Ops::record_layer_norm`], with the operands of
    /// [`Ops::record_add_rms_norm`]; weight and bias optional.
    #[allow(clippy::too_many_arguments)]
    pub fn record_add_layer_norm(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        b: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        bias: Option<&DeviceTensor>,
        eps: f32,
        sum: Option<&DeviceTensor>,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("add_layer_norm of {} and {}", a.desc(), b.desc());
        let norm = (Norm::Layer, weight, bias, eps);
        self.record_add_norm(graph, &operation, (a, b), norm, (sum, out, None))
    }

    /// [`Ops::record_add_layer_norm`] that also writes `out` rounded to f16
    /// into `out_f16` (contiguous, `out`'s shape, apart from every other
    /// operand) in the same pass: the next matmul's f16 operand without a
    /// cast. Where the device lacks f16 arithmetic and 16-bit storage, or
    /// the rows do not run on the kernel for aligned rows of quads (rows
    /// a multiple of 4 long, every tensor 16-byte aligned and, but the
    /// parameters, contiguous), `Unsupported` and nothing recorded.
    ///
    /// ```
    /// use hrx_tensor::{DType, DeviceTensor, Ops, TensorDesc};
    /// let runtime = hrx_runtime::Runtime::new()?;
    /// let ops = Ops::new(&runtime);
    /// let a = DeviceTensor::from_values(&runtime, DType::F32, vec![1, 4], &[1., 2., 3., 4.])?;
    /// let b = DeviceTensor::from_values(&runtime, DType::F32, vec![1, 4], &[1., 0., -1., 0.])?;
    /// let f32s = || ops.output(TensorDesc::new(DType::F32, vec![1, 4])?);
    /// let (mut sum, mut out) = (f32s()?, f32s()?);
    /// let mut low = ops.output(TensorDesc::new(DType::F16, vec![1, 4])?)?;
    /// let mut graph = runtime.graph();
    /// match ops.record_add_layer_norm_with_f16(&mut graph, &a, &b, None, None, 0.0, Some(&sum), &out, &low) {
    ///     Ok(()) => {
    ///         let done = graph.prepare()?.submit_after(&[a.completion().clone(), b.completion().clone()])?;
    ///         for t in [&mut sum, &mut out, &mut low] {
    ///             t.set_producer(done.clone());
    ///         }
    ///         // a + b = [2, 2, 2, 4]: mean 2.5, variance 0.75.
    ///         assert_eq!(sum.to_values()?, [2., 2., 2., 4.]);
    ///         let (got, rounded) = (out.to_values()?, low.to_values()?);
    ///         assert!((got[3] - 1.5 / 0.75f64.sqrt()).abs() < 1e-6);
    ///         for (x, h) in got.iter().zip(&rounded) {
    ///             assert_eq!(*h, f64::from(half::f16::from_f64(*x)));
    ///         }
    ///     }
    ///     Err(hrx_tensor::Error::Unsupported(why)) => println!("no f16 here: {why}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), hrx_tensor::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn record_add_layer_norm_with_f16(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        b: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        bias: Option<&DeviceTensor>,
        eps: f32,
        sum: Option<&DeviceTensor>,
        out: &DeviceTensor,
        out_f16: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!(
            "add_layer_norm with an f16 copy of {} and {}",
            a.desc(),
            b.desc()
        );
        let target = self.registry.target()?;
        float_output(&target, out_f16.desc().dtype(), &operation)?;
        if out_f16.desc().dtype() != DType::F16 {
            return Err(Error::Message(format!(
                "{operation}: the copy {} must be f16",
                out_f16.desc()
            )));
        }
        let norm = (Norm::Layer, weight, bias, eps);
        self.record_add_norm(graph, &operation, (a, b), norm, (sum, out, Some(out_f16)))
    }

    /// The fused residual add and norm: checks, then the row kernels.
    fn record_add_norm(
        &self,
        graph: &mut Graph,
        operation: &str,
        (a, b): (&DeviceTensor, &DeviceTensor),
        (kind, weight, bias, eps): (Norm, Option<&DeviceTensor>, Option<&DeviceTensor>, f32),
        (sum, out, copy): (Option<&DeviceTensor>, &DeviceTensor, Option<&DeviceTensor>),
    ) -> Result<()> {
        let runtime = self.runtime();
        let params: Vec<&DeviceTensor> = weight.into_iter().chain(bias).collect();
        check_inputs(runtime, operation, &[a, b])?;
        check_inputs(runtime, operation, &params)?;
        let shape = a.desc().shape();
        if b.desc().shape() != shape {
            return Err(Error::Message(format!(
                "{operation}: the inputs must have the same shape"
            )));
        }
        for t in [a, b] {
            if !t.desc().is_contiguous() {
                return Err(Error::Unsupported(format!(
                    "{operation}: input {} must be contiguous",
                    t.desc()
                )));
            }
        }
        let cols = shape.last().copied().unwrap_or(1);
        check_norm_operands(operation, &[a, b], (weight, bias), cols, eps)?;
        if let Some(sum) = sum {
            check_output(runtime, operation, sum, DType::F32, shape)?;
        }
        let out_dtype = self.norm_output(operation, out)?;
        check_output(runtime, operation, out, out_dtype, shape)?;
        if let Some(copy) = copy {
            check_output(runtime, operation, copy, DType::F16, shape)?;
        }
        if out.desc().is_empty() {
            return Ok(());
        }
        let call = NormCall {
            kind,
            weight,
            bias,
            eps,
            out,
            add: Some((b, sum)),
            copy,
            operation,
        };
        self.record_norm_rows(graph, a, &call)
    }

    /// Layer norm over the last axis, run eagerly.
    pub fn layer_norm(
        &self,
        a: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        bias: Option<&DeviceTensor>,
        eps: f32,
    ) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(a.desc().dtype(), a.desc().shape().to_vec())?;
        let inputs: Vec<&DeviceTensor> = std::iter::once(a).chain(weight).chain(bias).collect();
        self.eager(&inputs, desc, |g, out| {
            self.record_layer_norm(g, a, weight, bias, eps, out)
        })
    }

    /// RMS norm over the last axis, run eagerly.
    pub fn rms_norm(
        &self,
        a: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        bias: Option<&DeviceTensor>,
        eps: f32,
    ) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(a.desc().dtype(), a.desc().shape().to_vec())?;
        let inputs: Vec<&DeviceTensor> = std::iter::once(a).chain(weight).chain(bias).collect();
        self.eager(&inputs, desc, |g, out| {
            self.record_rms_norm(g, a, weight, bias, eps, out)
        })
    }
}

//! An encoder's embeddings in one dispatch: the table row of each id plus
//! its position's row, layer-normalised, optionally with an f16 copy
//! ([`Ops::record_embedding_layer_norm`]). The same values as a gather,
//! an add and a layer norm recorded one after another (the norm's
//! subgroup-a-row form: bit for bit), without the two intermediate
//! tensors' trips through memory.

use super::check_norm_operands;
use super::norm_kernel;
use super::norm_kernel::RowInput;
use crate::ops::{
    Ops,
    operand::{Operand, check_inputs, check_output, disjoint, float_output, operand, quad_offset},
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor};
use hrx_core::{Error, Result};
use hrx_loom::{ScalarValue, ir::Scalar::F32};
use hrx_runtime::Graph;

fn index(v: usize) -> ScalarValue {
    ScalarValue::Index(v as u64)
}

/// The parameters of one embedding norm, checked.
pub struct EmbeddingNorm<'a> {
    /// `[vocab, d]` f32: one row per id.
    pub table: &'a DeviceTensor,
    /// `[seq, d]` f32: one row per position of a sequence.
    pub positions: &'a DeviceTensor,
    /// The norm's `[d]` f32 weight (absent: 1).
    pub weight: Option<&'a DeviceTensor>,
    /// The norm's `[d]` f32 bias (absent: 0).
    pub bias: Option<&'a DeviceTensor>,
    /// Added to the variance.
    pub eps: f32,
}

impl Ops {
    /// Record `out[.., s, :] = layer_norm(table[ids[.., s]] +
    /// positions[s]) * weight + bias` for ids of shape `[.., seq]` (i32,
    /// contiguous), `out` f32 of shape `ids.shape + [d]`, and where given
    /// `out_f16` (f16, the same shape) the output rounded once to f16.
    /// An id outside `0..vocab` (negative included) adds a row of zeros,
    /// as [`Ops::record_gather`] gives.
    ///
    /// One dispatch, a row a subgroup. It runs where every tensor is
    /// contiguous along `d` in aligned 16-byte quads, `d` is a multiple of
    /// 4 that a subgroup holds in registers, and the device's subgroup
    /// size is fixed; elsewhere it answers [`Error::Unsupported`] and
    /// records nothing, and the caller records the gather, the add and
    /// the norm apart (the same values).
    ///
    /// ```
    /// use hrx_tensor::{DType, DeviceTensor, Ops, TensorDesc, ops::EmbeddingNorm};
    /// let runtime = hrx_runtime::Runtime::new()?;
    /// let ops = Ops::new(&runtime);
    /// let f32s = |shape: Vec<usize>, v: &[f64]| DeviceTensor::from_values(&runtime, DType::F32, shape, v);
    /// let table = f32s(vec![2, 4], &[1., 2., 3., 4., 0., 0., 0., 8.])?;
    /// let positions = f32s(vec![1, 4], &[1., 0., -1., 0.])?;
    /// let ids = DeviceTensor::from_values(&runtime, DType::I32, vec![2, 1], &[0., 7.])?;
    /// let mut out = ops.output(TensorDesc::new(DType::F32, vec![2, 1, 4])?)?;
    /// let mut graph = runtime.graph();
    /// let norm = EmbeddingNorm { table: &table, positions: &positions, weight: None, bias: None, eps: 0.0 };
    /// match ops.record_embedding_layer_norm(&mut graph, &norm, &ids, &out, None) {
    ///     Ok(()) => {
    ///         let inputs = [&table, &positions, &ids].map(|t| t.completion().clone());
    ///         out.set_producer(graph.prepare()?.submit_after(&inputs)?);
    ///         let got = out.to_values()?;
    ///         // Row 0: [2, 2, 2, 4], mean 2.5, variance 0.75. Row 1: id 7 is
    ///         // past the table, so the position row alone.
    ///         assert!((got[3] - 1.5 / 0.75f64.sqrt()).abs() < 1e-6);
    ///         assert!((got[4] - 1.0 / 0.5f64.sqrt()).abs() < 1e-6);
    ///     }
    ///     Err(hrx_tensor::Error::Unsupported(why)) => println!("not here: {why}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), hrx_tensor::Error>(())
    /// ```
    pub fn record_embedding_layer_norm(
        &self,
        graph: &mut Graph,
        norm: &EmbeddingNorm<'_>,
        ids: &DeviceTensor,
        out: &DeviceTensor,
        out_f16: Option<&DeviceTensor>,
    ) -> Result<()> {
        let operation = format!(
            "embedding layer_norm of {} by {}",
            norm.table.desc(),
            ids.desc()
        );
        let operation = operation.as_str();
        let runtime = self.runtime();
        let params: Vec<&DeviceTensor> = norm.weight.into_iter().chain(norm.bias).collect();
        check_inputs(runtime, operation, &[norm.table, norm.positions, ids])?;
        check_inputs(runtime, operation, &params)?;
        let (table, positions) = (norm.table.desc(), norm.positions.desc());
        if table.rank() != 2 || positions.rank() != 2 {
            return Err(Error::Message(format!(
                "{operation}: the table and the positions must have rank 2, got {table} and \
                 {positions}"
            )));
        }
        let d = table.shape()[1];
        let seq = ids.desc().shape().last().copied().unwrap_or(0);
        if ids.desc().rank() == 0 || ids.desc().dtype() != DType::I32 {
            return Err(Error::Message(format!(
                "{operation}: the ids must be i32 of rank 1 or more"
            )));
        }
        if positions.shape() != [seq, d] {
            return Err(Error::Message(format!(
                "{operation}: the positions must have shape [{seq}, {d}], got {positions}"
            )));
        }
        let inputs = [norm.table, norm.positions];
        check_norm_operands(operation, &inputs, (norm.weight, norm.bias), d, norm.eps)?;
        let mut shape = ids.desc().shape().to_vec();
        shape.push(d);
        check_output(runtime, operation, out, DType::F32, &shape)?;
        if let Some(copy) = out_f16 {
            let target = self.registry.target()?;
            float_output(&target, copy.desc().dtype(), operation)?;
            check_output(runtime, operation, copy, DType::F16, &shape)?;
        }
        let rows = ids.desc().elements();
        if rows == 0 || d == 0 {
            return Ok(());
        }
        let unsupported = |why: &str| Err(Error::Unsupported(format!("{operation}: {why}")));
        let Some((sg, rows_per_wg, per_lane)) = self.subgroup_rows(d / 4)? else {
            return unsupported("rows this long take a workgroup each, not a subgroup");
        };
        let target = self.registry.target()?;
        let bound = |t: &DeviceTensor| operand(t, &target, operation);
        let dummy = || -> Result<Operand> {
            Ok(Operand {
                view: self.registry.zeros()?,
                offset: 0,
                len: 4,
            })
        };
        // An empty table binds the zeros: no id is in it, so none is read.
        let kt = match table.is_empty() {
            true => dummy()?,
            false => bound(norm.table)?,
        };
        let (kp, ki, ko) = (bound(norm.positions)?, bound(ids)?, bound(out)?);
        let kk = out_f16.map(bound).transpose()?;
        let param = |t: Option<&DeviceTensor>| -> Result<Option<(Operand, usize)>> {
            t.map(|t| Ok((bound(t)?, t.desc().strides()[0])))
                .transpose()
        };
        let (kw, kb) = (param(norm.weight)?, param(norm.bias)?);
        for (name, k) in [("the table", &kt), ("the positions", &kp), ("the ids", &ki)]
            .into_iter()
            .chain(kw.iter().map(|(k, _)| ("the weight", k)))
            .chain(kb.iter().map(|(k, _)| ("the bias", k)))
        {
            disjoint(operation, ("out", &ko), (name, k))?;
            if let Some(kk) = &kk {
                disjoint(operation, ("the f16 copy", kk), (name, k))?;
            }
        }
        if let Some(kk) = &kk {
            disjoint(operation, ("the f16 copy", kk), ("out", &ko))?;
        }
        // Quads along d: contiguous rows a multiple of 4 apart, aligned.
        let rows_of = |t: &DeviceTensor| {
            let s = t.desc().strides();
            s[1] == 1 && s[0].is_multiple_of(4)
        };
        let aligned = d.is_multiple_of(4)
            && rows_of(norm.table)
            && rows_of(norm.positions)
            && out.desc().is_contiguous()
            && out_f16.is_none_or(|t| t.desc().is_contiguous())
            && ids.desc().is_contiguous()
            && [&kt, &kp, &ko]
                .into_iter()
                .chain(&kk)
                .all(|k| quad_offset(k).is_some())
            && [&kw, &kb]
                .into_iter()
                .flatten()
                .all(|(k, stride)| *stride == 1 && quad_offset(k).is_some());
        if !aligned {
            return unsupported("it needs rows of whole quads, contiguous and 16-byte aligned");
        }
        let present = |p: Option<(Operand, usize)>| -> Result<(Operand, usize)> {
            match p {
                Some((k, _)) => Ok((k, 1)),
                None => Ok((dummy()?, 0)),
            }
        };
        let ((kw, hw), (kb, hb)) = (present(kw)?, present(kb)?);
        let quad = |k: &Operand| ScalarValue::Index(quad_offset(k).unwrap_or(0));
        let input = RowInput::Embedding;
        let copy = kk.is_some();
        let flags = (input, true, copy);
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("{} {sg} {rows_per_wg} {per_lane} {flags:?}", input.symbol()),
                move || norm_kernel::norm4_rows(sg, rows_per_wg, per_lane, flags, F32),
            )),
            symbol: input.symbol(),
            config: Vec::new(),
        })?;
        let q = ScalarValue::Index;
        let mut scalars = vec![
            index(d / 4),
            ScalarValue::F32(norm.eps),
            index(hw),
            index(hb),
            index(table.strides()[0] / 4),
            quad(&kt),
            q(kt.len),
            index(hw),
            quad(&kw),
            q(kw.len),
            index(hb),
            quad(&kb),
            q(kb.len),
            quad(&ko),
            q(ko.len),
        ];
        let mut views = vec![
            kt.view.clone(),
            kw.view.clone(),
            kb.view.clone(),
            ko.view.clone(),
        ];
        if let Some(kk) = &kk {
            scalars.extend([quad(kk), q(kk.len)]);
            views.push(kk.view.clone());
        }
        scalars.extend([
            index(table.shape()[0]),
            index(seq),
            index(positions.strides()[0] / 4),
            quad(&kp),
            q(kp.len),
            q(ki.offset),
            q(ki.len),
            index(rows),
        ]);
        views.extend([ki.view.clone(), kp.view.clone()]);
        kernel.record(graph, operation, &views, &scalars, &[rows as u64])
    }
}

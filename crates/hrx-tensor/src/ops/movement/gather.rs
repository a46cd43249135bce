//! Row gather (embedding lookup): `out[i.., :] = table[indices[i..], :]`.

use super::kernels;
use crate::ops::{
    Ops,
    operand::{Operand, check_inputs, check_output, operand},
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result};
use hrx_loom::ScalarValue;
use hrx_loom::ir::Scalar;
use hrx_runtime::Graph;

impl Ops {
    /// The shape of gathering rows of `table` by `indices`: the indices'
    /// shape followed by the table's row length.
    fn gather_shape(
        operation: &str,
        table: &DeviceTensor,
        indices: &DeviceTensor,
    ) -> Result<Vec<usize>> {
        if table.desc().rank() != 2 {
            return Err(Error::Message(format!(
                "{operation}: the table must have rank 2 (rows, row length)"
            )));
        }
        if indices.desc().dtype() != DType::I32 {
            return Err(Error::Message(format!(
                "{operation}: the indices must be i32"
            )));
        }
        let mut shape = indices.desc().shape().to_vec();
        shape.push(table.desc().shape()[1]);
        Ok(shape)
    }

    /// Record `out[i.., :] = table[indices[i..], :]`: `table` is a rank-2
    /// `[rows, d]` tensor (may be strided), `indices` a contiguous i32
    /// tensor of any shape, `out` a contiguous tensor of shape
    /// `indices.shape + [d]` and the table's dtype. An index outside
    /// `0..rows` (negative included) gives a row of zeros (all-zero bits)
    /// and reads nothing. Bits are moved unchanged: 4-byte dtypes, and
    /// 2-byte ones (f16, bf16) where the device has f16 and 16-bit storage.
    pub fn record_gather(
        &self,
        graph: &mut Graph,
        table: &DeviceTensor,
        indices: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("gather of {} by {}", table.desc(), indices.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[table, indices])?;
        let shape = Self::gather_shape(operation, table, indices)?;
        let dtype = table.desc().dtype();
        check_output(runtime, operation, out, dtype, &shape)?;
        if !indices.desc().is_contiguous() {
            return Err(Error::Unsupported(format!(
                "{operation}: the indices must be contiguous"
            )));
        }
        let t = match dtype.bytes() {
            4 => Scalar::U32,
            2 => {
                let target = self.registry.target()?;
                if !(target.shader_f16 && target.storage_16bit) {
                    return Err(Error::Unsupported(format!(
                        "{operation}: 2-byte elements need f16 and 16-bit storage on the device"
                    )));
                }
                Scalar::F16
            }
            _ => {
                return Err(Error::Unsupported(format!(
                    "{operation}: only 4-byte and 2-byte elements are gathered"
                )));
            }
        };
        if out.desc().is_empty() {
            return Ok(());
        }
        let target = self.registry.target()?;
        let (rows, d) = (table.desc().shape()[0], table.desc().shape()[1]);
        let (st0, st1) = (table.desc().strides()[0], table.desc().strides()[1]);
        // An empty table (no rows) binds zeros that are never read.
        let kt = if table.desc().is_empty() {
            let view = self.registry.zeros()?;
            let len = (view.len() / dtype.bytes()) as u64;
            Operand {
                view,
                offset: 0,
                len,
            }
        } else {
            operand(table, &target, operation)?
        };
        let (ki, ko) = (
            operand(indices, &target, operation)?,
            operand(out, &target, operation)?,
        );
        if u32::try_from(rows).is_err() {
            return Err(Error::Unsupported(format!(
                "{operation}: more rows than 32-bit indices reach"
            )));
        }
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(format!("gather {t:?}"), move || {
                kernels::gather(t)
            })),
            symbol: "gather",
            config: self.grid_config("gather.wg", "gather.max_groups")?,
        })?;
        let n = out.desc().elements() as u64;
        let index = |v: usize| ScalarValue::Index(v as u64);
        let scalars: Vec<ScalarValue> = [
            ScalarValue::Index(n),
            index(d),
            index(rows),
            index(st0),
            index(st1),
        ]
        .into_iter()
        .chain(kt.scalars())
        .chain(ki.scalars())
        .chain(ko.scalars())
        .collect();
        kernel.record(
            graph,
            operation,
            &[kt.view, ki.view, ko.view],
            &scalars,
            &[n],
        )
    }

    /// Rows of `table` gathered by `indices`, run eagerly.
    pub fn gather(&self, table: &DeviceTensor, indices: &DeviceTensor) -> Result<DeviceTensor> {
        let operation = format!("gather of {} by {}", table.desc(), indices.desc());
        let shape = Self::gather_shape(&operation, table, indices)?;
        let desc = TensorDesc::new(table.desc().dtype(), shape)?;
        self.eager(&[table, indices], desc, |g, out| {
            self.record_gather(g, table, indices, out)
        })
    }
}

//! Casts between f32, f16, bf16 and i32 (conventions in
//! [`Ops::record_cast`]; the kernel in `cast_kernel.rs` beside it).

use super::cast_kernel;
use crate::ops::{
    Ops,
    indexing::coalesce,
    operand::{Operand, check_inputs, check_output, operand, quad_offset},
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result, Target};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

/// Axes the cast kernel addresses after coalescing.
const MAX_RANK: usize = 4;

/// Bind a non-empty bf16 tensor as u32 words: the range is widened to end
/// on a 4-byte boundary; offset in 16-bit halves, length in words.
fn word_operand(tensor: &DeviceTensor, target: &Target, operation: &str) -> Result<Operand> {
    let fail = |why: &str| {
        Err(Error::Unsupported(format!(
            "{operation}: bf16 tensor {} {why}",
            tensor.desc()
        )))
    };
    let Some((storage, offset)) = tensor.storage() else {
        return fail("is empty and cannot be bound");
    };
    let align = target.storage_buffer_offset_alignment.max(4) as usize;
    let absolute = storage.offset() + offset;
    let aligned = absolute - absolute % align;
    let Some(start) = aligned.checked_sub(storage.offset()) else {
        return fail("starts in storage at a byte that cannot be bound aligned");
    };
    let end = start + (offset + tensor.desc().bytes() - start).next_multiple_of(4);
    if end > storage.len() {
        return fail(
            "ends half-way through the last 4-byte word of its storage \
             (allocate whole words, as Ops::output does)",
        );
    }
    let words = (end - start) / 4;
    if u32::try_from(words * 2).is_err() {
        return fail("has more elements than 32-bit indices reach");
    }
    Ok(Operand {
        view: storage.slice(start..end)?,
        offset: ((absolute - aligned) / 2) as u64,
        len: words as u64,
    })
}

/// How the 4-wide kernel addresses a cast: its axes and strides in quads
/// (d1, d2, d3, sa0, sa1, sa2, then the input's quad offset) and the
/// output's quad offset.
struct Quads {
    scalars: [u64; 7],
    output: u64,
}

impl Quads {
    /// The quads of a float-to-float cast whose coalesced innermost axis is
    /// unit-stride and a multiple of 4 long, every other stride a multiple
    /// of 4, both operands 16-byte aligned at a multiple of 4 elements.
    fn of(
        from: DType,
        to: DType,
        dims: &[usize],
        strides: &[usize],
        a: &Operand,
        out: &Operand,
    ) -> Option<Quads> {
        let floats = |d| matches!(d, DType::F32 | DType::F16);
        let fits = floats(from)
            && floats(to)
            && strides[3] == 1
            && dims[3].is_multiple_of(4)
            && strides[..3].iter().all(|s| s.is_multiple_of(4));
        if !fits {
            return None;
        }
        let (qa, qo) = (quad_offset(a)?, quad_offset(out)?);
        let q = |v: usize| (v / 4) as u64;
        Some(Quads {
            scalars: [
                dims[1] as u64,
                dims[2] as u64,
                q(dims[3]),
                q(strides[0]),
                q(strides[1]),
                q(strides[2]),
                qa,
            ],
            output: qo,
        })
    }
}

impl Ops {
    /// Whether the cast kernel handles `dtype` on this device.
    fn check_cast_type(&self, operation: &str, dtype: DType) -> Result<()> {
        match dtype {
            DType::F32 | DType::I32 | DType::BF16 => Ok(()),
            DType::F16 => {
                let target = self.registry.target()?;
                if target.shader_f16 && target.storage_16bit {
                    Ok(())
                } else {
                    Err(Error::Unsupported(format!(
                        "{operation}: the device lacks f16 arithmetic or 16-bit storage"
                    )))
                }
            }
            other => Err(Error::Unsupported(format!(
                "{operation}: dtype {other} is not supported (f32, f16, bf16, i32)"
            ))),
        }
    }

    /// Record `out = a` converted to `out`'s dtype. `a` may be strided;
    /// `out` must be a contiguous tensor of `a`'s shape. Dtypes f32, bf16,
    /// i32, and f16 where the device has f16 and 16-bit storage.
    ///
    /// Every cast goes through one 32-bit value (floats widen exactly to
    /// f32, i32 stays i32):
    /// - float to a narrower float rounds to nearest, ties to even; values
    ///   past the range become infinities; infinities stay; NaN stays NaN
    ///   (bf16 keeps the sign and top payload bits and sets the quiet bit);
    ///   f16 subnormals may be flushed to zero by the device;
    /// - float to i32 truncates toward zero and saturates like Rust's
    ///   `as`: at or above 2^31 gives `i32::MAX`, below -2^31 `i32::MIN`,
    ///   NaN gives 0;
    /// - i32 to float goes through f32 (exact up to 2^24 in magnitude;
    ///   beyond that, i32 to bf16 rounds twice);
    /// - bf16 storage is read and written as u32 words (two elements each;
    ///   writes touch only their own half), so the bound range must end on
    ///   a 4-byte boundary inside the tensor's storage: [`Ops::output`]
    ///   rounds storage up to whole words, while an odd-length bf16 tensor
    ///   filling exact-size storage (e.g. a plain upload) is refused.
    pub fn record_cast(
        &self,
        graph: &mut Graph,
        a: &DeviceTensor,
        out: &DeviceTensor,
    ) -> Result<()> {
        let (from, to) = (a.desc().dtype(), out.desc().dtype());
        let operation = format!("cast of {} to {to}", a.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[a])?;
        let shape = a.desc().shape().to_vec();
        check_output(runtime, operation, out, to, &shape)?;
        self.check_cast_type(operation, from)?;
        self.check_cast_type(operation, to)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let strides = [a.desc().strides().to_vec()];
        let (dims, strides) = coalesce(&shape, &strides, MAX_RANK).ok_or_else(|| {
            Error::Unsupported(format!(
                "{operation}: more than {MAX_RANK} axes remain after merging"
            ))
        })?;
        let target = self.registry.target()?;
        let bind = |t: &DeviceTensor| {
            if t.desc().dtype() == DType::BF16 {
                word_operand(t, &target, operation)
            } else {
                operand(t, &target, operation)
            }
        };
        let (ka, ko) = (bind(a)?, bind(out)?);
        if let Some(quads) = Quads::of(from, to, &dims, &strides[0], &ka, &ko) {
            let kernel = self.registry.kernel(KernelKey {
                source: KernelSource::Built(Generator::new(
                    format!("cast4 {from:?} {to:?}"),
                    move || cast_kernel::cast4(from, to),
                )),
                symbol: "cast4",
                config: self.grid_config("cast4.wg", "cast4.max_groups")?,
            })?;
            let n4 = (out.desc().elements() / 4) as u64;
            let scalars: Vec<ScalarValue> = std::iter::once(n4)
                .chain(quads.scalars)
                .chain([ka.len, quads.output, ko.len])
                .map(ScalarValue::Index)
                .collect();
            return kernel.record(graph, operation, &[ka.view, ko.view], &scalars, &[n4]);
        }
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("cast {from:?} {to:?}"),
                move || cast_kernel::cast(from, to),
            )),
            symbol: "cast",
            config: self.grid_config("cast.wg", "cast.max_groups")?,
        })?;
        let n = out.desc().elements() as u64;
        let index = |v: usize| ScalarValue::Index(v as u64);
        let scalars: Vec<ScalarValue> = std::iter::once(ScalarValue::Index(n))
            .chain(dims[1..].iter().map(|&d| index(d)))
            .chain(strides[0].iter().map(|&s| index(s)))
            .chain(ka.scalars())
            .chain(ko.scalars())
            .collect();
        kernel.record(graph, operation, &[ka.view, ko.view], &scalars, &[n])
    }

    /// `a` converted to `dtype`, run eagerly.
    pub fn cast(&self, a: &DeviceTensor, dtype: DType) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(dtype, a.desc().shape().to_vec())?;
        self.eager(&[a], desc, |g, out| self.record_cast(g, a, out))
    }
}

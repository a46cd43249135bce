//! Binding tensors to kernels: an aligned storage range and the element
//! offset of the tensor within it.

use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result, Target};
use hrx_loom::{ScalarValue, ir::Scalar};
use hrx_runtime::{BufferView, Runtime};

/// A tensor as a kernel sees it: a bound range whose start satisfies the
/// device's storage offset alignment, the element offset of element 0 in it,
/// and the range's length in elements.
pub(crate) struct Operand {
    pub(crate) view: BufferView,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

impl Operand {
    /// The offset and length as `index` launch arguments.
    pub(crate) fn scalars(&self) -> [ScalarValue; 2] {
        [
            ScalarValue::Index(self.offset),
            ScalarValue::Index(self.len),
        ]
    }
}

/// Bind a non-empty tensor. Fails when its storage cannot be bound at an
/// aligned offset or its elements are not addressable with 32-bit indices.
pub(crate) fn operand(tensor: &DeviceTensor, target: &Target, operation: &str) -> Result<Operand> {
    let fail = |why: &str| {
        Err(Error::Message(format!(
            "{operation}: tensor {} {why}",
            tensor.desc()
        )))
    };
    let Some((storage, offset)) = tensor.storage() else {
        return fail("is empty and cannot be bound");
    };
    let element = tensor.desc().dtype().bytes();
    let align = (target.storage_buffer_offset_alignment.max(4) as usize).max(element);
    let absolute = storage.offset() + offset;
    let aligned = absolute - absolute % align;
    let Some(start) = aligned.checked_sub(storage.offset()) else {
        return fail(&format!(
            "starts in storage at byte {} that is not aligned to {align} bytes",
            storage.offset()
        ));
    };
    let end = offset + tensor.desc().bytes();
    let view = storage.slice(start..end)?;
    let len = (end - start) / element;
    if u32::try_from(len).is_err() {
        return fail("has more elements than 32-bit indices reach");
    }
    Ok(Operand {
        view,
        offset: ((absolute - aligned) / element) as u64,
        len: len as u64,
    })
}

/// In a kernel, the element index `x` rounded down to a multiple of 4 in
/// a way the loom compiler can see, so that 4-lane accesses at it are
/// provably aligned and the buffer is declared as 4-vectors. `x` is a
/// multiple of 4 already wherever this is used: the host chose the kernel
/// because the operands' offsets and strides are (see [`quad_offset`]).
pub(crate) fn quad_aligned(
    b: &mut hrx_loom::build::Builder,
    x: hrx_loom::build::Value<hrx_loom::build::Index>,
) -> hrx_loom::build::Value<hrx_loom::build::Index> {
    let four = b.index(4);
    let quads = b.div(x, four);
    b.mul(quads, four)
}

/// The offset of a bound operand in 4-element quads, when the kernel may
/// address it with 16-byte vectors: its binding starts 16-byte aligned and
/// element 0 sits at a multiple of 4 elements (f32).
pub(crate) fn quad_offset(operand: &Operand) -> Option<u64> {
    (operand.view.offset().is_multiple_of(16) && operand.offset.is_multiple_of(4))
        .then_some(operand.offset / 4)
}

/// Check an output tensor: same domain, the expected dtype and shape, and
/// contiguous (it may start anywhere in its storage).
pub(crate) fn check_output(
    runtime: &Runtime,
    operation: &str,
    out: &DeviceTensor,
    dtype: DType,
    shape: &[usize],
) -> Result<()> {
    out.check_runtime(runtime, operation)?;
    let desc = out.desc();
    if desc.dtype() != dtype || desc.shape() != shape || !desc.is_contiguous() {
        return Err(Error::Message(format!(
            "{operation}: output {desc} must be a contiguous {}",
            TensorDesc::new(dtype, shape.to_vec())?
        )));
    }
    Ok(())
}

/// The dtype an operator that writes f32 or f16 checks `out` against: f16
/// where `out` is f16, else f32 (so any other dtype is refused naming
/// f32). Whether the device writes f16 is [`float_output`]'s question.
pub(crate) fn float_out_dtype(out: &DeviceTensor) -> DType {
    match out.desc().dtype() {
        DType::F16 => DType::F16,
        _ => DType::F32,
    }
}

/// The element type a kernel writes for an f32 or f16 output `dtype`
/// (f16 only where the device has f16 arithmetic and 16-bit storage), or
/// `Unsupported` naming `operation`.
pub(crate) fn float_output(target: &Target, dtype: DType, operation: &str) -> Result<Scalar> {
    let refuse = |why: String| Err(Error::Unsupported(format!("{operation}: {why}")));
    match dtype {
        DType::F32 => Ok(Scalar::F32),
        DType::F16 if target.shader_f16 && target.storage_16bit => Ok(Scalar::F16),
        DType::F16 => refuse("the device lacks f16 arithmetic or 16-bit storage".into()),
        other => refuse(format!("the output must be f32 or f16, not {other}")),
    }
}

/// Check that inputs belong to `runtime`.
pub(crate) fn check_inputs(
    runtime: &Runtime,
    operation: &str,
    inputs: &[&DeviceTensor],
) -> Result<()> {
    inputs
        .iter()
        .try_for_each(|t| t.check_runtime(runtime, operation))
}

/// Refuse a written tensor whose bound range overlaps another operand's
/// (kernels that read an input in several passes, or after other work
/// items have stored, would read their own output).
pub(crate) fn disjoint(
    operation: &str,
    written: (&str, &Operand),
    other: (&str, &Operand),
) -> Result<()> {
    if written.1.view.overlaps(&other.1.view) {
        return Err(Error::Message(format!(
            "{operation}: {} must not overlap {}",
            written.0, other.0
        )));
    }
    Ok(())
}

//! Casts between f32, f16, bf16 and i32 (conventions in
//! [`Ops::record_cast`]).

use super::{
    Ops,
    indexing::coalesce,
    operand::{Operand, check_inputs, check_output, operand},
    registry::{KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{Error, Result, Target};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

const CAST: &str = include_str!("../../kernels/cast.loom");

/// Axes the cast kernel addresses after coalescing.
const MAX_RANK: usize = 4;

/// loom lines loading `%x` (f32 for floats, i32 for i32) at `%pa` of `%av`.
fn load(dtype: DType) -> String {
    let plain = |t: &str| format!("    %x = view.load %av[%pa] : view<[%la]x{t}> -> {t}");
    match dtype {
        DType::F32 => plain("f32"),
        DType::I32 => plain("i32"),
        DType::F16 => "    %ldh = view.load %av[%pa] : view<[%la]xf16> -> f16
    %x = scalar.extf %ldh : f16 -> f32"
            .into(),
        _ => "    %ldtwo = index.constant 2 : index
    %ldsixteen = index.constant 16 : index
    %ldw = index.div %pa, %ldtwo : index
    %ldodd = index.rem %pa, %ldtwo : index
    %ldsh = index.mul %ldodd, %ldsixteen : index
    %ldshu = index.cast %ldsh : index -> u32
    %ldword = view.load %av[%ldw] : view<[%la]xu32> -> u32
    %ldhi = scalar.shrui %ldword, %ldshu : u32
    %ldc16 = scalar.constant 16 : u32
    %ldbits = scalar.shli %ldhi, %ldc16 : u32
    %x = scalar.bitcast %ldbits : u32 -> f32"
            .into(),
    }
}

/// loom lines turning `%x` into the value stored; returns them and the
/// value's name.
fn convert(from: DType, to: DType) -> (String, &'static str) {
    match (from == DType::I32, to == DType::I32) {
        (true, false) => ("    %y = scalar.sitofp %x : i32 -> f32".into(), "%y"),
        (false, true) => (
            "    %cvlo = scalar.constant -2147483648.0 : f32
    %cvhi = scalar.constant 2147483648.0 : f32
    %cvt = scalar.fptosi %x : f32 -> i32
    %cvbig = scalar.cmpf oge, %x, %cvhi : f32
    %cvsmall = scalar.cmpf olt, %x, %cvlo : f32
    %cvnum = scalar.cmpf oeq, %x, %x : f32
    %cvmax = scalar.constant 2147483647 : i32
    %cvmin = scalar.constant -2147483648 : i32
    %cvzero = scalar.constant 0 : i32
    %cvt1 = scalar.select %cvbig, %cvmax, %cvt : i32
    %cvt2 = scalar.select %cvsmall, %cvmin, %cvt1 : i32
    %y = scalar.select %cvnum, %cvt2, %cvzero : i32"
                .into(),
            "%y",
        ),
        _ => (String::new(), "%x"),
    }
}

/// loom lines storing `value` at `%po` of `%ov`.
fn store(dtype: DType, value: &str) -> String {
    let plain = |t: &str| format!("    view.store {value}, %ov[%po] : {t}, view<[%lo]x{t}>");
    match dtype {
        DType::F32 => plain("f32"),
        DType::I32 => plain("i32"),
        DType::F16 => format!(
            "    %sth = scalar.truncf {value} : f32 -> f16
    view.store %sth, %ov[%po] : f16, view<[%lo]xf16>"
        ),
        _ => BF16_STORE.replace("${V}", value),
    }
}

/// Round `${V}` (f32) to bf16 bits, nearest-even (NaN: truncated, quiet bit
/// set), and write them into their half of the output word.
const BF16_STORE: &str = "    %stb = scalar.bitcast ${V} : f32 -> u32
    %stc16 = scalar.constant 16 : u32
    %stone = scalar.constant 1 : u32
    %sttop = scalar.shrui %stb, %stc16 : u32
    %stlsb = scalar.andi %sttop, %stone : u32
    %stbias = scalar.constant 32767 : u32
    %str0 = scalar.addi %stb, %stbias : u32
    %str1 = scalar.addi %str0, %stlsb : u32
    %strn = scalar.shrui %str1, %stc16 : u32
    %stquiet = scalar.constant 64 : u32
    %stqn = scalar.ori %sttop, %stquiet : u32
    %stnum = scalar.cmpf oeq, ${V}, ${V} : f32
    %sth = scalar.select %stnum, %strn, %stqn : u32
    %sttwo = index.constant 2 : index
    %stsixteen = index.constant 16 : index
    %stw = index.div %po, %sttwo : index
    %stodd = index.rem %po, %sttwo : index
    %stsh = index.mul %stodd, %stsixteen : index
    %stshu = index.cast %stsh : index -> u32
    %stval = scalar.shli %sth, %stshu : u32
    %stlow = scalar.constant 65535 : u32
    %stmine = scalar.shli %stlow, %stshu : u32
    %stall = scalar.constant 4294967295 : u32
    %stkeep = scalar.xori %stmine, %stall : u32
    %stold0 = view.atomic.rmw<andi> %stkeep, %ov[%stw] : u32, view<[%lo]xu32> -> u32
    %stold1 = view.atomic.rmw<ori> %stval, %ov[%stw] : u32, view<[%lo]xu32> -> u32";

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

impl Ops {
    /// The loom view type for `dtype` in a cast, checking device support.
    fn cast_type(&self, operation: &str, dtype: DType) -> Result<&'static str> {
        match dtype {
            DType::F32 => Ok("f32"),
            DType::I32 => Ok("i32"),
            DType::BF16 => Ok("u32"),
            DType::F16 => {
                let target = self.registry.target()?;
                if target.shader_f16 && target.storage_16bit {
                    Ok("f16")
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
        let (it, ot) = (
            self.cast_type(operation, from)?,
            self.cast_type(operation, to)?,
        );
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
        let (lines, value) = convert(from, to);
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Template {
                template: CAST,
                substitutions: vec![
                    ("IT", it.into()),
                    ("OT", ot.into()),
                    ("LOAD", load(from)),
                    ("CONVERT", lines),
                    ("STORE", store(to, value)),
                ],
            },
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

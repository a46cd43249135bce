//! Parsing a GGUF file's header: magic, version, counts, metadata, tensor
//! infos, alignment and the data section.
//!
//! Every count, length and dimension is checked against the bytes left in
//! the file (each item has a minimum encoded size, so a count can claim no
//! more items than the rest of the file could hold) and against a sane
//! limit before anything is allocated for it. Nested arrays are limited in
//! depth, so a hostile file cannot exhaust the stack. Errors carry the byte
//! offset of the field at fault.

use super::error::{GgufError, GgufErrorKind};
use super::tensor::{self, MAX_DIMS, TensorInfo, TensorType};
use super::value::{Array, Metadata, Value};

/// The largest `general.alignment` accepted (1 MiB).
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// The alignment when the file does not say (GGUF's default).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The most tensors a file may declare.
pub const MAX_TENSORS: u64 = 1 << 20;
/// The most metadata entries a file may declare.
pub const MAX_KEYS: u64 = 1 << 20;
/// The longest key or tensor name, in bytes.
pub const MAX_NAME_LEN: u64 = 1 << 16;
/// The most elements of one metadata array.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// The deepest nesting of arrays in a metadata value (an array of
/// arrays is depth 2).
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Bytes of the smallest tensor info: an empty name (8), one dim (4 + 8),
/// the type (4) and the offset (8).
const MIN_TENSOR_INFO: u64 = 32;
/// Bytes of the smallest metadata entry: an empty key (8), the type (4)
/// and a one-byte value.
const MIN_ENTRY: u64 = 13;

/// A header as parsed: everything but the data.
#[derive(Debug)]
pub(crate) struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// Reads fields from the front of the file's bytes, checking each against
/// the end.
struct Cursor<'b> {
    bytes: &'b [u8],
    pos: usize,
}

impl<'b> Cursor<'b> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// The next `n` bytes, for field `what`.
    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'b [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::at(
                self.offset(),
                GgufErrorKind::Truncated {
                    what: what(),
                    needed: n,
                    available: self.remaining(),
                },
            ));
        }
        // n <= remaining, which is a usize.
        let slice = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(slice)
    }

    fn array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N], GgufError> {
        let bytes = self.take(N as u64, what)?;
        Ok(bytes.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items each at least `min_item` bytes long: no more than
    /// `limit` ([`GgufErrorKind::TooLarge`]), nor than the rest of the file
    /// could hold ([`GgufErrorKind::Truncated`]).
    fn count(
        &mut self,
        min_item: u64,
        limit: u64,
        what: impl Fn() -> String,
    ) -> Result<u64, GgufError> {
        let start = self.offset();
        let count = self.u64(&what)?;
        if count > limit {
            return Err(GgufError::at(
                start,
                GgufErrorKind::TooLarge {
                    what: what(),
                    value: count,
                    limit,
                },
            ));
        }
        if count > self.remaining() / min_item {
            return Err(GgufError::at(
                self.offset(),
                GgufErrorKind::Truncated {
                    what: format!("the {count} items of {}", what()),
                    needed: count * min_item,
                    available: self.remaining(),
                },
            ));
        }
        Ok(count)
    }

    /// A length-prefixed UTF-8 string of at most `limit` bytes.
    fn string(&mut self, limit: u64, what: impl Fn() -> String) -> Result<String, GgufError> {
        let start = self.offset();
        let len = self.u64(|| format!("the length of {}", what()))?;
        if len > limit {
            return Err(GgufError::at(
                start,
                GgufErrorKind::TooLarge {
                    what: format!("the length of {}", what()),
                    value: len,
                    limit,
                },
            ));
        }
        let text_start = self.offset();
        let bytes = self.take(len, &what)?;
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(text.to_owned()),
            Err(e) => Err(GgufError::at(
                text_start + e.valid_up_to() as u64,
                GgufErrorKind::InvalidUtf8 { what: what() },
            )),
        }
    }
}

/// Parses the header of `bytes`, a whole GGUF file.
pub(crate) fn parse(bytes: &[u8]) -> Result<Header, GgufError> {
    let mut cursor = Cursor { bytes, pos: 0 };
    let magic: [u8; 4] = cursor.array(|| "the magic".into())?;
    if &magic != b"GGUF" {
        return Err(GgufError::at(0, GgufErrorKind::BadMagic(magic)));
    }
    let version = cursor.u32(|| "the version".into())?;
    // Version 1 had 32-bit counts; 2 and 3 share a layout (3 added
    // big-endian files, which announce themselves by a byte-swapped
    // version and so fail here).
    if !(2..=3).contains(&version) {
        return Err(GgufError::at(4, GgufErrorKind::UnsupportedVersion(version)));
    }
    let tensor_count = cursor.count(MIN_TENSOR_INFO, MAX_TENSORS, || "the tensor count".into())?;
    let key_count = cursor.count(MIN_ENTRY, MAX_KEYS, || "the metadata count".into())?;

    let mut metadata = Metadata::default();
    for index in 0..key_count {
        let key_offset = cursor.offset();
        let key = cursor.string(MAX_NAME_LEN, || format!("metadata key {index}"))?;
        let value = read_value(&mut cursor, &key)?;
        metadata
            .insert(key, value)
            .map_err(|kind| GgufError::at(key_offset, kind))?;
    }
    let alignment = alignment(&metadata)?;

    let file_len = bytes.len() as u64;
    let mut tensors = Vec::with_capacity(tensor_count as usize);
    let mut names = std::collections::HashSet::with_capacity(tensor_count as usize);
    for index in 0..tensor_count {
        let info_offset = cursor.offset();
        let info = read_tensor_info(&mut cursor, index, file_len)?;
        if !names.insert(info.name.clone()) {
            return Err(GgufError::at(
                info_offset,
                GgufErrorKind::DuplicateTensor(info.name),
            ));
        }
        tensors.push(info);
    }

    // The data section starts at the next multiple of the alignment; a file
    // without tensors may end before it.
    let data_offset = cursor.offset().next_multiple_of(alignment);
    if data_offset > file_len && !tensors.is_empty() {
        return Err(GgufError::at(
            cursor.offset(),
            GgufErrorKind::Truncated {
                what: "the padding before the tensor data".into(),
                needed: data_offset - cursor.offset(),
                available: cursor.remaining(),
            },
        ));
    }
    let data_len = file_len.saturating_sub(data_offset);
    tensor::check_layout(&tensors, alignment, data_len)?;
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// `general.alignment`, or the default: a power of two up to the limit.
fn alignment(metadata: &Metadata) -> Result<u64, GgufError> {
    const KEY: &str = "general.alignment";
    if metadata.get(KEY).is_none() {
        return Ok(DEFAULT_ALIGNMENT);
    }
    let alignment = metadata.u64(KEY)?;
    if !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
        return Err(GgufError::whole(GgufErrorKind::BadAlignment(alignment)));
    }
    Ok(alignment)
}

fn read_tensor_info(
    cursor: &mut Cursor<'_>,
    index: u64,
    file_len: u64,
) -> Result<TensorInfo, GgufError> {
    let name = cursor.string(MAX_NAME_LEN, || format!("the name of tensor {index}"))?;
    let dims_offset = cursor.offset();
    let n_dims = cursor.u32(|| format!("the dim count of tensor {name:?}"))?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(GgufError::at(
            dims_offset,
            GgufErrorKind::BadDimensions {
                tensor: name,
                why: format!("{n_dims} dims (1 to {MAX_DIMS} are allowed)"),
            },
        ));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for axis in 0..n_dims {
        dims.push(cursor.u64(|| format!("dim {axis} of tensor {name:?}"))?);
    }
    let type_offset = cursor.offset();
    let type_id = cursor.u32(|| format!("the type of tensor {name:?}"))?;
    let ty = TensorType::from_id(type_id).ok_or_else(|| {
        GgufError::at(
            type_offset,
            GgufErrorKind::UnknownTensorType {
                tensor: name.clone(),
                type_id,
            },
        )
    })?;
    let byte_len = tensor::checked_byte_len(&name, ty, &dims, file_len)
        .map_err(|kind| GgufError::at(dims_offset, kind))?;
    let offset = cursor.u64(|| format!("the data offset of tensor {name:?}"))?;
    Ok(TensorInfo {
        name,
        ty,
        dims,
        offset,
        byte_len,
    })
}

/// GGUF's value type ids.
mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// The smallest encoding of a value of type `id`: its bytes for scalars,
/// the length for a string, element type and length for an array.
fn min_size(id: u32) -> Option<u64> {
    use type_id::*;
    Some(match id {
        U8 | I8 | BOOL => 1,
        U16 | I16 => 2,
        U32 | I32 | F32 => 4,
        U64 | I64 | F64 | STRING => 8,
        ARRAY => 12,
        _ => return None,
    })
}

/// The value of metadata `key`: its type id, then the value.
fn read_value(cursor: &mut Cursor<'_>, key: &str) -> Result<Value, GgufError> {
    let type_offset = cursor.offset();
    let id = cursor.u32(|| format!("the value type of metadata {key:?}"))?;
    let what = || format!("the value of metadata {key:?}");
    use type_id::*;
    Ok(match id {
        U8 => Value::U8(cursor.array::<1>(what)?[0]),
        I8 => Value::I8(i8::from_le_bytes(cursor.array(what)?)),
        U16 => Value::U16(u16::from_le_bytes(cursor.array(what)?)),
        I16 => Value::I16(i16::from_le_bytes(cursor.array(what)?)),
        U32 => Value::U32(u32::from_le_bytes(cursor.array(what)?)),
        I32 => Value::I32(i32::from_le_bytes(cursor.array(what)?)),
        F32 => Value::F32(f32::from_le_bytes(cursor.array(what)?)),
        U64 => Value::U64(u64::from_le_bytes(cursor.array(what)?)),
        I64 => Value::I64(i64::from_le_bytes(cursor.array(what)?)),
        F64 => Value::F64(f64::from_le_bytes(cursor.array(what)?)),
        BOOL => Value::Bool(read_bool(cursor, &what)?),
        STRING => Value::String(cursor.string(u64::MAX, what)?),
        ARRAY => Value::Array(read_array(cursor, key, 1)?),
        _ => {
            return Err(GgufError::at(
                type_offset,
                GgufErrorKind::UnknownValueType {
                    what: format!("metadata {key:?}"),
                    type_id: id,
                },
            ));
        }
    })
}

fn read_bool(cursor: &mut Cursor<'_>, what: &dyn Fn() -> String) -> Result<bool, GgufError> {
    let offset = cursor.offset();
    match cursor.array::<1>(what)?[0] {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(GgufError::at(
            offset,
            GgufErrorKind::InvalidBool {
                what: what(),
                value,
            },
        )),
    }
}

/// An array (element type, length, elements) at nesting `depth`.
fn read_array(cursor: &mut Cursor<'_>, key: &str, depth: usize) -> Result<Array, GgufError> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::at(
            cursor.offset(),
            GgufErrorKind::NestingTooDeep {
                key: key.into(),
                limit: MAX_ARRAY_DEPTH,
            },
        ));
    }
    let type_offset = cursor.offset();
    let id = cursor.u32(|| format!("the element type of an array in metadata {key:?}"))?;
    let unknown = || {
        GgufError::at(
            type_offset,
            GgufErrorKind::UnknownValueType {
                what: format!("an array in metadata {key:?}"),
                type_id: id,
            },
        )
    };
    let min = min_size(id).ok_or_else(unknown)?;
    let len = cursor.count(min, MAX_ARRAY_LEN, || {
        format!("the length of an array in metadata {key:?}")
    })?;
    // len <= remaining / min, so the vectors below are at most a small
    // multiple of the file's size.
    let n = len as usize;
    let element = |i: usize| move || format!("element {i} of metadata {key:?}");
    macro_rules! scalars {
        ($variant:ident, $ty:ty) => {{
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                values.push(<$ty>::from_le_bytes(cursor.array(element(i))?));
            }
            Array::$variant(values)
        }};
    }
    use type_id::*;
    Ok(match id {
        U8 => scalars!(U8, u8),
        I8 => scalars!(I8, i8),
        U16 => scalars!(U16, u16),
        I16 => scalars!(I16, i16),
        U32 => scalars!(U32, u32),
        I32 => scalars!(I32, i32),
        F32 => scalars!(F32, f32),
        U64 => scalars!(U64, u64),
        I64 => scalars!(I64, i64),
        F64 => scalars!(F64, f64),
        BOOL => {
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                values.push(read_bool(cursor, &element(i))?);
            }
            Array::Bool(values)
        }
        STRING => {
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                values.push(cursor.string(u64::MAX, element(i))?);
            }
            Array::String(values)
        }
        ARRAY => {
            let mut values = Vec::with_capacity(n);
            for _ in 0..n {
                values.push(read_array(cursor, key, depth + 1)?);
            }
            Array::Array(values)
        }
        // min_size knows the same types, so this is not reached.
        _ => return Err(unknown()),
    })
}

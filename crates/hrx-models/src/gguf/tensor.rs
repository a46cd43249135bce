//! Tensor types and tensor infos: GGML's block layouts, and the checked
//! geometry of each tensor (dims, byte size, place in the data section).
//!
//! Every type GGML defines is known by id, name and block layout, so a
//! file with types hrx does not decode still parses and its layout is
//! still checked; only decoding such a tensor is an error
//! ([`GgufErrorKind::UnsupportedTensorType`]).

use super::error::{GgufError, GgufErrorKind};

/// A GGML tensor type: its id in the file, name and block layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    id: u32,
    name: &'static str,
    block_len: u32,
    block_bytes: u32,
}

/// (id, name, values per block, bytes per block) of every GGML type, as
/// ggml.h and the GGUF specification define them (ids 4, 5 and 31..33,
/// 36..38 were retired and are unknown).
const TYPES: &[(u32, &str, u32, u32)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

impl TensorType {
    /// 32-bit float.
    pub const F32: TensorType = Self::known(0);
    /// 16-bit IEEE float.
    pub const F16: TensorType = Self::known(1);
    /// Blocks of 32: an f16 scale `d`, then 16 bytes of 4-bit `q` (as
    /// Q4_1's); value `d * (q - 8)`.
    pub const Q4_0: TensorType = Self::known(2);
    /// Blocks of 32: an f16 scale `d` and an f16 minimum `m`, then 16
    /// bytes of 4-bit `q` (value `i` in the low nibble of byte `i` for
    /// `i < 16`, in the high nibble of byte `i - 16` after); value
    /// `d * q + m`.
    pub const Q4_1: TensorType = Self::known(3);
    /// Blocks of 32: an f16 scale `d`, 4 bytes of fifth bits (bit `i` of
    /// value `i`), then 16 bytes of low nibbles as Q4_1's; value
    /// `d * (q - 16)`.
    pub const Q5_0: TensorType = Self::known(6);
    /// Q5_0 with an f16 minimum `m` after `d`; value `d * q + m`.
    pub const Q5_1: TensorType = Self::known(7);
    /// Blocks of 32: an f16 scale `d`, then 32 `i8` `q`; value `d * q`.
    pub const Q8_0: TensorType = Self::known(8);
    /// Super-blocks of 256 in 8 sub-blocks of 32: f16 `d` and `dmin`, 12
    /// bytes of 6-bit sub-block scales `sc` and minimums `m`, 128 bytes
    /// of 4-bit `q`; value `(d * sc) * q - dmin * m`.
    pub const Q4_K: TensorType = Self::known(12);
    /// Q4_K with 32 bytes of fifth bits (bit `j` of byte `l` for value `l`
    /// of sub-block `j`) before the nibbles.
    pub const Q5_K: TensorType = Self::known(13);
    /// Super-blocks of 256 in 16 sub-blocks of 16: 6-bit `q` (low 4 bits
    /// in 128 bytes, high 2 in 64), 16 `i8` sub-block scales `sc`, f16
    /// `d`; value `(d * sc) * (q - 32)`.
    pub const Q6_K: TensorType = Self::known(14);

    const fn known(id: u32) -> TensorType {
        let mut i = 0;
        while i < TYPES.len() {
            let (type_id, name, block_len, block_bytes) = TYPES[i];
            if type_id == id {
                return TensorType {
                    id,
                    name,
                    block_len,
                    block_bytes,
                };
            }
            i += 1;
        }
        panic!("not a GGML type id")
    }

    /// The type with GGML id `id`, if GGML defines one.
    pub fn from_id(id: u32) -> Option<TensorType> {
        TYPES.iter().find(|(type_id, ..)| *type_id == id).map(
            |&(id, name, block_len, block_bytes)| TensorType {
                id,
                name,
                block_len,
                block_bytes,
            },
        )
    }

    /// The GGML id, as stored in the file.
    pub fn id(self) -> u32 {
        self.id
    }

    /// The GGML name, such as `Q4_1`.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// Values per block (1 for plain types).
    pub fn block_len(self) -> u32 {
        self.block_len
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u32 {
        self.block_bytes
    }

    /// Whether hrx decodes this type (F32, F16, Q8_0, Q4_0, Q4_1, Q5_0,
    /// Q5_1, Q4_K, Q5_K, Q6_K).
    pub fn is_readable(self) -> bool {
        [
            Self::F32,
            Self::F16,
            Self::Q8_0,
            Self::Q4_0,
            Self::Q4_1,
            Self::Q5_0,
            Self::Q5_1,
            Self::Q4_K,
            Self::Q5_K,
            Self::Q6_K,
        ]
        .contains(&self)
    }
}

/// One tensor of a file: name, type, dims and where its bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub(crate) name: String,
    pub(crate) ty: TensorType,
    pub(crate) dims: Vec<u64>,
    /// From the start of the data section.
    pub(crate) offset: u64,
    pub(crate) byte_len: u64,
}

impl TensorInfo {
    /// The tensor's name, such as `blk.0.attn_q.weight`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its type.
    pub fn tensor_type(&self) -> TensorType {
        self.ty
    }

    /// Its dims in GGML order: `dims()[0]` varies fastest (the row
    /// length); a matrix of `r` rows of `c` values is `[c, r]`.
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// Its shape in row-major order (the dims reversed), as the rest of
    /// hrx writes shapes: `[rows, row_len]` for a matrix.
    pub fn shape(&self) -> Vec<usize> {
        // Every dim fits usize: the element count was checked to fit.
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// The number of values in a row (`dims()[0]`).
    pub fn row_len(&self) -> u64 {
        self.dims[0]
    }

    /// The number of rows (the product of the other dims).
    pub fn rows(&self) -> u64 {
        self.dims[1..].iter().product()
    }

    /// The number of values.
    pub fn element_count(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Its data's offset from the start of the file's data section.
    pub fn data_offset(&self) -> u64 {
        self.offset
    }

    /// The byte length of its data (whole blocks).
    pub fn byte_len(&self) -> u64 {
        self.byte_len
    }

    /// The byte length of one row (whole blocks: rows are block-aligned),
    /// the stride between rows in [`tensor_data`](super::GgufFile::tensor_data).
    pub fn row_bytes(&self) -> u64 {
        self.row_len() / u64::from(self.ty.block_len()) * u64::from(self.ty.block_bytes())
    }
}

/// The most dims a GGML tensor has.
pub const MAX_DIMS: u32 = 4;

/// The byte length of a tensor of type `ty` and dims `dims`, after checking
/// that there is at least one dim, each non-zero, the row a whole number
/// of blocks and the whole no more than `limit` bytes (the data the file
/// could hold), without overflow.
pub(crate) fn checked_byte_len(
    name: &str,
    ty: TensorType,
    dims: &[u64],
    limit: u64,
) -> Result<u64, GgufErrorKind> {
    let bad = |why: String| GgufErrorKind::BadDimensions {
        tensor: name.into(),
        why,
    };
    let row_len = *dims.first().ok_or_else(|| bad("it has no dims".into()))?;
    if let Some(axis) = dims.iter().position(|&d| d == 0) {
        return Err(bad(format!("dim {axis} is 0")));
    }
    let block_len = u64::from(ty.block_len());
    if row_len % block_len != 0 {
        return Err(bad(format!(
            "its rows of {row_len} values are not whole {} blocks of {block_len}",
            ty.name()
        )));
    }
    let too_large = || GgufErrorKind::TooLarge {
        what: format!("the byte size of tensor {name:?} (dims {dims:?})"),
        value: u64::MAX,
        limit,
    };
    let rows = dims[1..]
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(too_large)?;
    let bytes = (row_len / block_len)
        .checked_mul(u64::from(ty.block_bytes()))
        .and_then(|row_bytes| row_bytes.checked_mul(rows))
        .ok_or_else(too_large)?;
    // The element count must also fit the host's usize, for shapes.
    let elements = row_len.checked_mul(rows).ok_or_else(too_large)?;
    if bytes > limit || usize::try_from(elements).is_err() {
        return Err(GgufErrorKind::TooLarge {
            what: format!("the byte size of tensor {name:?} (dims {dims:?})"),
            value: bytes,
            limit,
        });
    }
    Ok(bytes)
}

/// Checks that every tensor is aligned and inside the data section of
/// `data_len` bytes, and that no two overlap.
pub(crate) fn check_layout(
    tensors: &[TensorInfo],
    alignment: u64,
    data_len: u64,
) -> Result<(), GgufError> {
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(GgufError::whole(GgufErrorKind::MisalignedTensor {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            }));
        }
        let end = t.offset.checked_add(t.byte_len);
        if end.is_none_or(|end| end > data_len) {
            return Err(GgufError::whole(GgufErrorKind::TensorOutOfFile {
                tensor: t.name.clone(),
                start: t.offset,
                end: end.unwrap_or(u64::MAX),
                data_len,
            }));
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        if pair[0].offset + pair[0].byte_len > pair[1].offset {
            return Err(GgufError::whole(GgufErrorKind::OverlappingTensors {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            }));
        }
    }
    Ok(())
}

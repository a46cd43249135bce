//! GGUF, the single-file model format of llama.cpp: a header of typed
//! metadata (architecture constants, tokenizer, chat template) and tensor
//! infos, then the tensor data, each tensor a run of quantised blocks.
//!
//! Design choices and contracts:
//!
//! - **Versions 2 and 3, little-endian.** They share one layout; version
//!   1 (32-bit counts) and big-endian files are refused by version.
//! - **Nothing is trusted before it is checked.** Every count, length,
//!   dimension and offset is checked against the bytes the file has left
//!   and against sane limits ([`MAX_TENSORS`], [`MAX_KEYS`],
//!   [`MAX_NAME_LEN`], [`MAX_ARRAY_LEN`], [`MAX_ARRAY_DEPTH`], [`MAX_DIMS`],
//!   [`MAX_ALIGNMENT`]) before anything is allocated for it, so a
//!   truncated or hostile file is a [`GgufError`] naming the field and its
//!   byte offset, never a panic or an allocation of what a header claims.
//!   After parsing, every tensor is known to be aligned, inside the file
//!   and disjoint from every other, with dims whose byte size does not
//!   overflow; keys and tensor names are unique UTF-8.
//! - **Every GGML type is known, ten are decoded.** A file of any type
//!   parses and its layout is checked ([`TensorType`] knows every GGML
//!   type's block layout); decoding is F32, F16, Q8_0, Q4_0, Q4_1, Q5_0,
//!   Q5_1, Q4_K, Q5_K and Q6_K
//!   ([`GgufFile::dequantize`], bit-identical to GGML's arithmetic), and
//!   another type is [`GgufErrorKind::UnsupportedTensorType`].
//! - **Quantised data stays as it is.** [`GgufFile::tensor_data`] is the
//!   tensor's bytes as a slice of the file (whole blocks, in file order),
//!   with [`TensorInfo`]'s type and dims beside it: what a device upload
//!   of quantised weights needs, without a copy or a conversion.
//! - **The file is read whole into memory.** Models of this size are a
//!   few hundred MiB at most and the bytes are needed for upload anyway;
//!   [`GgufFile::from_bytes`] takes any owned buffer.
//! - **Architecture constants come from the file.** [`LlamaConfig`] reads
//!   the `llama.*` keys and checks them for consistency, so other
//!   llama-family files (other sizes, other tensor types) work unchanged.
//!
//! ```text
//! let file = GgufFile::open(Path::new("SmolLM2-135M-Instruct.Q4_1.gguf"))?;
//! let config = LlamaConfig::from_gguf(&file)?;        // 30 layers, width 576, ...
//! let q = file.tensor("blk.0.attn_q.weight")?;        // Q4_1, dims [576, 576]
//! let blocks: &[u8] = file.tensor_data(q);            // for the device
//! let values: Vec<f32> = file.dequantize(q)?;         // for the host
//! ```

mod dequant;
mod error;
mod llama;
mod reader;
mod tensor;
mod value;

use std::collections::HashMap;
use std::path::Path;

pub use error::{GgufError, GgufErrorKind};
pub use llama::LlamaConfig;
pub use reader::{
    DEFAULT_ALIGNMENT, MAX_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_KEYS, MAX_NAME_LEN,
    MAX_TENSORS,
};
pub use tensor::{MAX_DIMS, TensorInfo, TensorType};
pub use value::{Array, Metadata, Value};

/// A parsed GGUF file and its bytes.
pub struct GgufFile {
    bytes: Vec<u8>,
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    /// Tensor index by name.
    by_name: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

/// A summary: the bytes of a model are too many to print.
impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("bytes", &self.bytes.len())
            .field("metadata_entries", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Reads and parses the file at `path`.
    pub fn open(path: &Path) -> Result<Self, GgufError> {
        let bytes = std::fs::read(path)
            .map_err(|e| GgufError::whole(GgufErrorKind::Io(format!("{}: {e}", path.display()))))?;
        Self::from_bytes(bytes)
    }

    /// Parses a whole file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        let header = reader::parse(&bytes)?;
        // Names are unique: parsing refused repeats.
        let by_name = header
            .tensors
            .iter()
            .enumerate()
            .map(|(index, t)| (t.name.clone(), index))
            .collect();
        Ok(Self {
            bytes,
            version: header.version,
            metadata: header.metadata,
            tensors: header.tensors,
            by_name,
            alignment: header.alignment,
            data_offset: header.data_offset,
        })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`, or [`GgufErrorKind::MissingTensor`].
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.by_name
            .get(name)
            .map(|&index| &self.tensors[index])
            .ok_or_else(|| GgufError::whole(GgufErrorKind::MissingTensor(name.into())))
    }

    /// Whether there is a tensor named `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The alignment of the data section and of every tensor in it.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The byte offset of the data section in the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes of `tensor` (whole blocks of its type, rows in order), a
    /// slice of the file.
    ///
    /// # Panics
    ///
    /// If `tensor` is not one of this file's (parsing checked the ranges
    /// of this file's tensors only).
    pub fn tensor_data(&self, tensor: &TensorInfo) -> &[u8] {
        // Parsing checked that the range is inside the file.
        let start = (self.data_offset + tensor.offset) as usize;
        &self.bytes[start..start + tensor.byte_len as usize]
    }

    /// Every value of `tensor` as f32, rows in order. Like
    /// [`tensor_data`](Self::tensor_data), panics if `tensor` is another
    /// file's.
    pub fn dequantize(&self, tensor: &TensorInfo) -> Result<Vec<f32>, GgufError> {
        self.dequantize_rows(tensor, 0..tensor.rows())
    }

    /// The values of rows `rows` of `tensor` as f32 (a row is
    /// `tensor.row_len()` values); rows outside the tensor are an error.
    /// Panics if `tensor` is another file's.
    pub fn dequantize_rows(
        &self,
        tensor: &TensorInfo,
        rows: std::ops::Range<u64>,
    ) -> Result<Vec<f32>, GgufError> {
        let ty = tensor.ty;
        let unsupported = || {
            GgufError::whole(GgufErrorKind::UnsupportedTensorType {
                tensor: tensor.name.clone(),
                type_name: ty.name(),
            })
        };
        if !ty.is_readable() {
            return Err(unsupported());
        }
        if rows.start > rows.end || rows.end > tensor.rows() {
            return Err(GgufError::whole(GgufErrorKind::BadDimensions {
                tensor: tensor.name.clone(),
                why: format!("rows {rows:?} asked of {} rows", tensor.rows()),
            }));
        }
        let row_bytes = tensor.row_bytes();
        let data = self.tensor_data(tensor);
        let bytes = &data[(rows.start * row_bytes) as usize..(rows.end * row_bytes) as usize];
        let mut out = vec![0f32; ((rows.end - rows.start) * tensor.row_len()) as usize];
        dequant::dequantize_into(ty, bytes, &mut out).map_err(|_| unsupported())?;
        Ok(out)
    }
}

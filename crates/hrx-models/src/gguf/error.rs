//! What can be wrong with a GGUF file, and where.
//!
//! Every error names the thing that is wrong (a metadata key, a tensor, a
//! field of the header) and, where the fault is at a place in the file, its
//! byte offset, so that a broken or hostile file can be located with a hex
//! dump. [`GgufError`] converts into [`hrx_core::Error`]: a type or version
//! hrx does not read becomes `Error::Unsupported`, everything else
//! `Error::Message`.

use std::fmt;

/// A GGUF file that cannot be read: what is wrong, and where.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufError {
    /// The byte offset in the file where the fault is, when it is at one
    /// place (a truncated field, a bad string); `None` for faults of the
    /// file as a whole (a missing key, overlapping tensors).
    pub offset: Option<u64>,
    /// What is wrong.
    pub kind: GgufErrorKind,
}

/// The kinds of [`GgufError`]. Each names the item at fault.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufErrorKind {
    /// The file could not be read from disk.
    Io(String),
    /// The file does not start with `GGUF`.
    BadMagic([u8; 4]),
    /// A version other than 2 or 3.
    UnsupportedVersion(u32),
    /// `what` needs `needed` bytes but the file ends after `available`.
    Truncated {
        /// The field being read.
        what: String,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file at that point.
        available: u64,
    },
    /// A count, length or dimension beyond what the file could hold or
    /// beyond a sane limit; refused before anything is allocated for it.
    TooLarge {
        /// The field holding the value.
        what: String,
        /// The value the file claims.
        value: u64,
        /// The largest value accepted there.
        limit: u64,
    },
    /// A string (a key, a value, a tensor name) that is not UTF-8.
    InvalidUtf8 {
        /// The field holding the string.
        what: String,
    },
    /// A metadata value type id that GGUF does not define.
    UnknownValueType {
        /// The key (or array) whose value has it.
        what: String,
        /// The type id found.
        type_id: u32,
    },
    /// A boolean byte other than 0 or 1.
    InvalidBool {
        /// The key (or array) holding it.
        what: String,
        /// The byte found.
        value: u8,
    },
    /// Arrays nested deeper than the reader accepts.
    NestingTooDeep {
        /// The key whose value nests too deep.
        key: String,
        /// The deepest nesting accepted.
        limit: usize,
    },
    /// The same metadata key twice.
    DuplicateKey(String),
    /// The same tensor name twice.
    DuplicateTensor(String),
    /// A tensor type id that GGML does not define.
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The type id found.
        type_id: u32,
    },
    /// A tensor whose type GGML defines but this reader does not decode.
    UnsupportedTensorType {
        /// The tensor.
        tensor: String,
        /// The type's GGML name, such as `Q6_K`.
        type_name: &'static str,
    },
    /// A tensor's dimensions are unusable: none, too many, a zero, or a
    /// row length that is not a whole number of its type's blocks.
    BadDimensions {
        /// The tensor.
        tensor: String,
        /// Why.
        why: String,
    },
    /// `general.alignment` is not a power of two in range.
    BadAlignment(u64),
    /// A tensor's data offset is not a multiple of the alignment.
    MisalignedTensor {
        /// The tensor.
        tensor: String,
        /// Its offset from the start of the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's data runs past the end of the file.
    TensorOutOfFile {
        /// The tensor.
        tensor: String,
        /// Its byte range from the start of the data section.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The length of the data section.
        data_len: u64,
    },
    /// Two tensors' data share bytes.
    OverlappingTensors {
        /// The tensor that starts first.
        first: String,
        /// The tensor that starts inside it.
        second: String,
    },
    /// A metadata key that the caller needs is absent.
    MissingKey(String),
    /// A metadata value of another type than the caller needs.
    WrongType {
        /// The key.
        key: String,
        /// The type needed.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },
    /// A metadata value that has the right type but an unusable value.
    BadValue {
        /// The key.
        key: String,
        /// Why the value is unusable.
        why: String,
    },
    /// A tensor that the caller needs is absent.
    MissingTensor(String),
}

impl GgufError {
    /// An error at byte `offset` of the file.
    pub(crate) fn at(offset: u64, kind: GgufErrorKind) -> Self {
        Self {
            offset: Some(offset),
            kind,
        }
    }

    /// An error of the file as a whole.
    pub(crate) fn whole(kind: GgufErrorKind) -> Self {
        Self { offset: None, kind }
    }
}

impl fmt::Display for GgufErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GgufErrorKind::*;
        match self {
            Io(why) => write!(f, "cannot read the file: {why}"),
            BadMagic(found) => write!(
                f,
                "not a GGUF file: it starts with {found:02x?}, not \"GGUF\""
            ),
            UnsupportedVersion(v) => write!(f, "GGUF version {v} (versions 2 and 3 are read)"),
            Truncated {
                what,
                needed,
                available,
            } => write!(
                f,
                "truncated: {what} needs {needed} bytes but only {available} are left"
            ),
            TooLarge { what, value, limit } => {
                write!(f, "{what} is {value}, more than the {limit} accepted there")
            }
            InvalidUtf8 { what } => write!(f, "{what} is not valid UTF-8"),
            UnknownValueType { what, type_id } => {
                write!(f, "{what} has unknown value type {type_id}")
            }
            InvalidBool { what, value } => {
                write!(f, "{what} is a bool of byte {value} (not 0 or 1)")
            }
            NestingTooDeep { key, limit } => {
                write!(f, "metadata {key:?} nests arrays deeper than {limit}")
            }
            DuplicateKey(key) => write!(f, "metadata key {key:?} appears twice"),
            DuplicateTensor(name) => write!(f, "tensor {name:?} appears twice"),
            UnknownTensorType { tensor, type_id } => {
                write!(f, "tensor {tensor:?} has unknown type id {type_id}")
            }
            UnsupportedTensorType { tensor, type_name } => write!(
                f,
                "tensor {tensor:?} has type {type_name}; F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K are read"
            ),
            BadDimensions { tensor, why } => write!(f, "tensor {tensor:?}: {why}"),
            BadAlignment(a) => write!(
                f,
                "general.alignment is {a}; it must be a power of two from 1 to {}",
                super::reader::MAX_ALIGNMENT
            ),
            MisalignedTensor {
                tensor,
                offset,
                alignment,
            } => write!(
                f,
                "tensor {tensor:?} starts at data offset {offset}, not a multiple of the alignment {alignment}"
            ),
            TensorOutOfFile {
                tensor,
                start,
                end,
                data_len,
            } => write!(
                f,
                "tensor {tensor:?} occupies data bytes {start}..{end} but the data section has {data_len}"
            ),
            OverlappingTensors { first, second } => {
                write!(f, "tensors {first:?} and {second:?} overlap")
            }
            MissingKey(key) => write!(f, "metadata key {key:?} is missing"),
            WrongType {
                key,
                expected,
                found,
            } => {
                write!(f, "metadata {key:?} is {found}, not {expected}")
            }
            BadValue { key, why } => write!(f, "metadata {key:?}: {why}"),
            MissingTensor(name) => write!(f, "tensor {name:?} is missing"),
        }
    }
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            Some(offset) => write!(f, "GGUF file, at byte {offset}: {}", self.kind),
            None => write!(f, "GGUF file: {}", self.kind),
        }
    }
}

impl std::error::Error for GgufError {}

impl From<GgufError> for hrx_core::Error {
    fn from(error: GgufError) -> Self {
        match error.kind {
            GgufErrorKind::UnsupportedVersion(_) | GgufErrorKind::UnsupportedTensorType { .. } => {
                hrx_core::Error::Unsupported(error.to_string())
            }
            _ => hrx_core::Error::Message(error.to_string()),
        }
    }
}

//! Element types.

use std::fmt;

/// The element type of a tensor.
///
/// ```
/// use hrx_tensor::DType;
/// assert_eq!(DType::F16.bytes(), 2);
/// assert_eq!(DType::BF16.to_string(), "bf16");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 8-bit integer.
    I8,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 64-bit integer.
    I64,
    /// IEEE 754 half precision.
    F16,
    /// bfloat16 (the upper half of an f32).
    BF16,
    /// IEEE 754 single precision.
    F32,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 8] = [
        DType::U8,
        DType::I8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
    ];

    /// Bytes one element occupies (also its required alignment).
    pub fn bytes(self) -> usize {
        match self {
            DType::U8 | DType::I8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 => 8,
        }
    }

    /// Whether the type is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32)
    }

    /// The lower-case name, as in loom (`f32`, `bf16`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_names() {
        let sizes: Vec<_> = DType::ALL.iter().map(|d| d.bytes()).collect();
        assert_eq!(sizes, [1, 1, 4, 4, 8, 2, 2, 4]);
        let names: Vec<_> = DType::ALL.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            names,
            ["u8", "i8", "i32", "u32", "i64", "f16", "bf16", "f32"]
        );
        assert!(DType::BF16.is_float() && !DType::I64.is_float());
    }
}

//! Metadata values: GGUF's thirteen value types, arrays kept as typed
//! vectors (so that a vocabulary is a `Vec<String>` and token types a
//! `Vec<i32>`, not a vector of tagged values), and typed lookups that name
//! the key when it is missing or of another type.

use std::collections::HashMap;

use super::error::{GgufError, GgufErrorKind};

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Type 0.
    U8(u8),
    /// Type 1.
    I8(i8),
    /// Type 2.
    U16(u16),
    /// Type 3.
    I16(i16),
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 6.
    F32(f32),
    /// Type 7.
    Bool(bool),
    /// Type 8.
    String(String),
    /// Type 9.
    Array(Array),
    /// Type 10.
    U64(u64),
    /// Type 11.
    I64(i64),
    /// Type 12.
    F64(f64),
}

/// An array value: all elements of one type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// Of `u8`.
    U8(Vec<u8>),
    /// Of `i8`.
    I8(Vec<i8>),
    /// Of `u16`.
    U16(Vec<u16>),
    /// Of `i16`.
    I16(Vec<i16>),
    /// Of `u32`.
    U32(Vec<u32>),
    /// Of `i32`.
    I32(Vec<i32>),
    /// Of `f32`.
    F32(Vec<f32>),
    /// Of `bool`.
    Bool(Vec<bool>),
    /// Of strings.
    String(Vec<String>),
    /// Of arrays (each with its own element type and length).
    Array(Vec<Array>),
    /// Of `u64`.
    U64(Vec<u64>),
    /// Of `i64`.
    I64(Vec<i64>),
    /// Of `f64`.
    F64(Vec<f64>),
}

impl Value {
    /// The GGUF name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
        }
    }

    /// An integer of any width and signedness, as `i128` (which holds
    /// them all), or `None` for other types.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// A float (f32 or f64) as `f64`, or `None` for other types.
    pub fn as_float(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }
}

impl Array {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF name of the element type, for error messages.
    pub fn element_type_name(&self) -> &'static str {
        match self {
            Array::U8(_) => "u8",
            Array::I8(_) => "i8",
            Array::U16(_) => "u16",
            Array::I16(_) => "i16",
            Array::U32(_) => "u32",
            Array::I32(_) => "i32",
            Array::F32(_) => "f32",
            Array::Bool(_) => "bool",
            Array::String(_) => "string",
            Array::Array(_) => "array",
            Array::U64(_) => "u64",
            Array::I64(_) => "i64",
            Array::F64(_) => "f64",
        }
    }
}

/// The metadata of a file: unique keys to values, in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// Adds an entry; a repeated key is an error.
    pub(crate) fn insert(&mut self, key: String, value: Value) -> Result<(), GgufErrorKind> {
        if self.index.contains_key(&key) {
            return Err(GgufErrorKind::DuplicateKey(key));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Every entry, in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `key`, or [`GgufErrorKind::MissingKey`].
    pub fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key)
            .ok_or_else(|| GgufError::whole(GgufErrorKind::MissingKey(key.into())))
    }

    /// The string at `key`.
    pub fn string(&self, key: &str) -> Result<&str, GgufError> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            other => Err(wrong_type(key, "string", other.type_name())),
        }
    }

    /// The bool at `key`.
    pub fn bool(&self, key: &str) -> Result<bool, GgufError> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            other => Err(wrong_type(key, "bool", other.type_name())),
        }
    }

    /// The integer at `key` (any integer type) as `u64`; negative is an
    /// error. Writers differ in the integer width they use for counts, so
    /// any width is accepted.
    pub fn u64(&self, key: &str) -> Result<u64, GgufError> {
        let value = self.require(key)?;
        let integer = value
            .as_integer()
            .ok_or_else(|| wrong_type(key, "an integer", value.type_name()))?;
        u64::try_from(integer).map_err(|_| bad_value(key, format!("{integer} is negative")))
    }

    /// The integer at `key` as `u32`, which it must fit.
    pub fn u32(&self, key: &str) -> Result<u32, GgufError> {
        let value = self.u64(key)?;
        u32::try_from(value).map_err(|_| bad_value(key, format!("{value} does not fit 32 bits")))
    }

    /// The float (f32 or f64) at `key` as `f64`.
    pub fn f64(&self, key: &str) -> Result<f64, GgufError> {
        let value = self.require(key)?;
        value
            .as_float()
            .ok_or_else(|| wrong_type(key, "a float", value.type_name()))
    }

    /// The array at `key`.
    pub fn array(&self, key: &str) -> Result<&Array, GgufError> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            other => Err(wrong_type(key, "array", other.type_name())),
        }
    }

    /// The array of strings at `key`.
    pub fn strings(&self, key: &str) -> Result<&[String], GgufError> {
        match self.array(key)? {
            Array::String(v) => Ok(v),
            other => Err(wrong_array(key, "array of string", other)),
        }
    }

    /// The array of `i32` at `key`.
    pub fn i32s(&self, key: &str) -> Result<&[i32], GgufError> {
        match self.array(key)? {
            Array::I32(v) => Ok(v),
            other => Err(wrong_array(key, "array of i32", other)),
        }
    }
}

fn wrong_type(key: &str, expected: &'static str, found: &'static str) -> GgufError {
    GgufError::whole(GgufErrorKind::WrongType {
        key: key.into(),
        expected,
        found,
    })
}

fn wrong_array(key: &str, expected: &'static str, found: &Array) -> GgufError {
    let found = match found {
        Array::U8(_) => "array of u8",
        Array::I8(_) => "array of i8",
        Array::U16(_) => "array of u16",
        Array::I16(_) => "array of i16",
        Array::U32(_) => "array of u32",
        Array::I32(_) => "array of i32",
        Array::F32(_) => "array of f32",
        Array::Bool(_) => "array of bool",
        Array::String(_) => "array of string",
        Array::Array(_) => "array of array",
        Array::U64(_) => "array of u64",
        Array::I64(_) => "array of i64",
        Array::F64(_) => "array of f64",
    };
    wrong_type(key, expected, found)
}

/// A [`GgufErrorKind::BadValue`] for `key`.
pub(crate) fn bad_value(key: &str, why: String) -> GgufError {
    GgufError::whole(GgufErrorKind::BadValue {
        key: key.into(),
        why,
    })
}

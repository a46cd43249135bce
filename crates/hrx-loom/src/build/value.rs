//! Values and types of the builder: [`Value`] handles, typed by the kind of
//! value they hold, and the exact loom [`Ty`] each one has.
//!
//! A value is a `Copy` handle into its builder's table of names and types
//! (as naga's `Handle`s index its arenas), so kernels pass values around
//! as freely as numbers. The kind parameter sorts values into what the
//! ops accept: index arithmetic takes [`Index`] values, float arithmetic
//! [`Num`] values, loads take a [`View`]; mixing them is a Rust type
//! error. Within a kind (an `f16` against an `f32`, a 2-vector against a
//! 4-vector) the builder writes the types it knows and the verifier judges
//! them, with the same diagnostics as for text.
//!
//! A float where an index goes does not compile:
//!
//! ```compile_fail
//! use hrx_loom::build::KernelBuilder;
//! use hrx_loom::ir::Scalar;
//! let mut k = KernelBuilder::new("k");
//! let one = k.index(1);
//! let x = k.float(1.0, Scalar::F32);
//! k.add(one, x); // index.add takes index values
//! ```
//!
//! nor does loading from a buffer rather than a view:
//!
//! ```compile_fail
//! use hrx_loom::build::KernelBuilder;
//! let mut k = KernelBuilder::new("k");
//! let one = k.index(1);
//! let mut k = k.launch_config([one, one, one], [one, one, one]);
//! let b = k.arg_buffer("b", true);
//! let i = k.index(0);
//! k.load(b, &[i]);
//! ```

use crate::front::ast::{DimExpr, Ident, TypeExpr, TypeKind};
use crate::front::span::Span;
use crate::ir::{CoopMatType, CoopRole, Scalar};
use std::fmt;
use std::marker::PhantomData;

/// A value of a kernel under construction: a handle into the builder that
/// defined it. `K` is its kind ([`Index`], [`Offset`], [`Bool`], [`Num`],
/// [`Buffer`], [`View`], [`Mat`]).
pub struct Value<K> {
    pub(super) id: u32,
    kind: PhantomData<K>,
}

impl<K> Value<K> {
    pub(super) fn new(id: u32) -> Self {
        Value {
            id,
            kind: PhantomData,
        }
    }

    /// The same value with its kind forgotten, for loop-carried lists that
    /// mix kinds (see [`Value::<Any>::to`]).
    pub fn any(self) -> Value<Any> {
        Value::new(self.id)
    }
}

impl<K> Clone for Value<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Value<K> {}

impl<K> PartialEq for Value<K> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<K> Eq for Value<K> {}

impl<K> fmt::Debug for Value<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Value({})", self.id)
    }
}

/// Kind of `index` values: element counts, indices, workgroup sizes.
#[derive(Clone, Copy, Debug)]
pub enum Index {}
/// Kind of `offset` values: byte counts (view offsets, allocation sizes).
#[derive(Clone, Copy, Debug)]
pub enum Offset {}
/// Kind of `i1` values: conditions.
#[derive(Clone, Copy, Debug)]
pub enum Bool {}
/// Kind of numbers: `f32`, `f16`, `i32`, `u32` and vectors of them.
#[derive(Clone, Copy, Debug)]
pub enum Num {}
/// Kind of `buffer` values: buffer arguments and workgroup allocations.
#[derive(Clone, Copy, Debug)]
pub enum Buffer {}
/// Kind of `view` values.
#[derive(Clone, Copy, Debug)]
pub enum View {}
/// Kind of cooperative matrices.
#[derive(Clone, Copy, Debug)]
pub enum Mat {}
/// Any kind: values whose kind the code does not fix (mixed loop-carried
/// lists), turned back with [`Value::<Any>::to`].
#[derive(Clone, Copy, Debug)]
pub enum Any {}

/// Kinds whose values may flow through `scf.for` and `scf.if` results and
/// `scalar.select` (the verifier refuses buffers and views there).
pub trait Data: sealed::Sealed {}
impl Data for Index {}
impl Data for Offset {}
impl Data for Bool {}
impl Data for Num {}
impl Data for Mat {}
impl Data for Any {}

/// The index-like kinds: what `index.*` arithmetic accepts.
pub trait IndexLike: sealed::Sealed {}
impl IndexLike for Index {}
impl IndexLike for Offset {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Index {}
    impl Sealed for super::Offset {}
    impl Sealed for super::Bool {}
    impl Sealed for super::Num {}
    impl Sealed for super::Mat {}
    impl Sealed for super::Any {}
}

impl Value<Any> {
    /// The value as kind `K`. The builder does not check that its type
    /// fits `K`; the verifier does, with a diagnostic.
    pub fn to<K>(self) -> Value<K> {
        Value::new(self.id)
    }
}

/// One dimension of a view type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// A known number of elements (a specialization parameter of the
    /// generator).
    Static(u64),
    /// An `index` value in scope where the view is used (usually a launch
    /// argument).
    Dynamic(Value<Index>),
}

impl From<u64> for Extent {
    fn from(n: u64) -> Self {
        Extent::Static(n)
    }
}

impl From<usize> for Extent {
    fn from(n: usize) -> Self {
        Extent::Static(n as u64)
    }
}

impl From<Value<Index>> for Extent {
    fn from(v: Value<Index>) -> Self {
        Extent::Dynamic(v)
    }
}

/// A loom type, as the builder writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `index`.
    Index,
    /// `offset`.
    Offset,
    /// `i1`.
    I1,
    /// `f32`, `f16`, `i32` or `u32`.
    Scalar(Scalar),
    /// `vector<len x elem>`.
    Vector {
        /// Lanes, 2 to 4.
        len: u8,
        /// Lane type.
        elem: Scalar,
    },
    /// `buffer`.
    Buffer,
    /// `view<dims x elem>`.
    View {
        /// Dimensions, outermost first.
        dims: Vec<Extent>,
        /// Element type.
        elem: Scalar,
    },
    /// `coopmat<rows x cols x elem, role>`.
    CoopMat(CoopMatType),
}

impl Ty {
    /// `f32`.
    pub const F32: Ty = Ty::Scalar(Scalar::F32);
    /// `f16`.
    pub const F16: Ty = Ty::Scalar(Scalar::F16);
    /// `i32`.
    pub const I32: Ty = Ty::Scalar(Scalar::I32);
    /// `u32`.
    pub const U32: Ty = Ty::Scalar(Scalar::U32);

    /// `vector<len x elem>`.
    pub fn vector(len: u8, elem: Scalar) -> Ty {
        Ty::Vector { len, elem }
    }

    /// The scalar of a scalar type or the lane type of a vector type.
    pub fn element(&self) -> Option<Scalar> {
        match self {
            Ty::Scalar(s) | Ty::Vector { elem: s, .. } => Some(*s),
            _ => None,
        }
    }
}

/// The loom spelling of a scalar type.
pub(super) fn scalar_word(s: Scalar) -> &'static str {
    match s {
        Scalar::F32 => "f32",
        Scalar::F16 => "f16",
        Scalar::I32 => "i32",
        Scalar::U32 => "u32",
    }
}

/// A name without position (the builder's trees have no source yet).
pub(super) fn ident(text: impl Into<String>) -> Ident {
    Ident {
        text: text.into(),
        span: Span::default(),
    }
}

/// The syntax of `ty`, view extents named through `name_of`.
pub(super) fn type_expr(ty: &Ty, name_of: &dyn Fn(u32) -> String) -> TypeExpr {
    let named = |n: &str| TypeExpr {
        kind: TypeKind::Named(n.to_string()),
        span: Span::default(),
    };
    let kind = match ty {
        Ty::Index => return named("index"),
        Ty::Offset => return named("offset"),
        Ty::I1 => return named("i1"),
        Ty::Buffer => return named("buffer"),
        Ty::Scalar(s) => return named(scalar_word(*s)),
        Ty::Vector { len, elem } => TypeKind::Vector {
            len: u64::from(*len),
            elem: Box::new(named(scalar_word(*elem))),
        },
        Ty::View { dims, elem } => TypeKind::View {
            dims: dims
                .iter()
                .map(|d| match d {
                    Extent::Static(n) => DimExpr::Static(*n, Span::default()),
                    Extent::Dynamic(v) => DimExpr::Dynamic(ident(name_of(v.id))),
                })
                .collect(),
            elem: Box::new(named(scalar_word(*elem))),
        },
        Ty::CoopMat(m) => TypeKind::CoopMat {
            rows: u64::from(m.rows),
            cols: u64::from(m.cols),
            elem: Box::new(named(scalar_word(m.elem))),
            role: ident(match m.role {
                CoopRole::A => "a",
                CoopRole::B => "b",
                CoopRole::C => "c",
            }),
        },
    };
    TypeExpr {
        kind,
        span: Span::default(),
    }
}

//! The verified intermediate representation: what `verify` produces and
//! `specialize` / `lower` consume.
//!
//! Invariants the verifier guarantees for every [`Module`] it returns (later
//! stages may rely on them without re-checking):
//!
//! - Values are dense [`ValueId`]s per kernel; `kernel.value_types[id]` is the
//!   type of each, and `kernel.value_names[id]` the source name (without `%`).
//! - Every operand is defined before its use and dominates it (defined earlier
//!   in the same block or in an enclosing block of the same function).
//!   Workload arguments and `launch` ops form one function, launch arguments
//!   and `body` another; no value crosses between them except through the
//!   dimensions of view types in the body, which only name launch arguments or
//!   body values.
//! - Types are exact: every operand has the type its op requires, with no
//!   implicit conversion. `index` and `offset` lower as `u32`.
//! - `buffer` and `view` values never flow through `scf.if`/`scf.for` results,
//!   iteration arguments or `scalar.select`, so [`Kernel::buffer_of`] names
//!   the one buffer behind every buffer or view value.
//! - Region blocks of [`OpKind::If`] and [`OpKind::For`] end with exactly one
//!   [`OpKind::Yield`] (inserted empty when the source omitted it) whose
//!   operands match the op's results; `Yield` occurs nowhere else. The body
//!   ends with exactly one [`OpKind::Return`], which occurs nowhere else.
//! - `launch` holds only index arithmetic and config values; the launch
//!   config's `workgroup_size` and every `Alloca`'s `bytes` depend only on
//!   constants and config values, so [`Kernel::evaluate`] can compute them from a
//!   specialization.
//! - Barriers sit in workgroup-uniform control flow and subgroup collectives
//!   in subgroup-uniform control flow.

mod eval;
mod opcodes;

pub use eval::{EvalError, Evaluation, LaunchGrid};
pub use opcodes::{
    AtomicOp, Axis, ConvertOp, FloatPredicate, IndexBinary, IntPredicate, ReduceOp, ScalarBinary,
    ScalarUnary, ShuffleMode, SubgroupQuery, WorkItemKind,
};

use crate::front::span::Span;

/// A value of one kernel, dense from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    /// The id as an index into per-value tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Element types of vectors and views.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// IEEE single precision.
    F32,
    /// IEEE half precision.
    F16,
}

impl Scalar {
    /// The scalar as a [`Type`].
    pub fn to_type(self) -> Type {
        match self {
            Scalar::I32 => Type::I32,
            Scalar::U32 => Type::U32,
            Scalar::F32 => Type::F32,
            Scalar::F16 => Type::F16,
        }
    }

    /// Size in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            Scalar::F16 => 2,
            _ => 4,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, Scalar::F32 | Scalar::F16)
    }
}

/// One dimension of a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// Known extent in elements.
    Static(u64),
    /// Extent held by an `index` value in scope where the view type is used.
    Dynamic(ValueId),
}

/// A typed, row-major window onto a buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ViewType {
    /// Outermost first; the last dimension is contiguous.
    pub dims: Vec<Dim>,
    /// Element type.
    pub elem: Scalar,
}

/// The role of a cooperative matrix in `C = A * B + C`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoopRole {
    /// The left factor, `m x k`.
    A,
    /// The right factor, `k x n`.
    B,
    /// The accumulator and result, `m x n`.
    C,
}

/// `coopmat<rows x cols x elem, role>`: a matrix held jointly by the
/// invocations of one subgroup, in an opaque per-lane layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopMatType {
    /// Rows (8 or 16).
    pub rows: u32,
    /// Columns (8 or 16).
    pub cols: u32,
    /// Element type (`f16` or `f32`).
    pub elem: Scalar,
    /// Which operand of the multiply-add it is.
    pub role: CoopRole,
}

/// Every loom type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// Element counts and indices; lowered as `u32`.
    Index,
    /// Byte quantities; lowered as `u32`.
    Offset,
    /// Boolean.
    I1,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// IEEE single precision.
    F32,
    /// IEEE half precision.
    F16,
    /// `vector<len x elem>`, `len` in 2..=4.
    Vector {
        /// Lane count, 2..=4.
        len: u8,
        /// Lane type.
        elem: Scalar,
    },
    /// A kernel buffer argument or a `buffer.alloca<workgroup>`.
    Buffer,
    /// A view onto a buffer.
    View(ViewType),
    /// A cooperative matrix (`VK_KHR_cooperative_matrix`).
    CoopMat(CoopMatType),
}

impl Type {
    /// The scalar behind a scalar type (not `index`, `offset` or `i1`).
    pub fn scalar(&self) -> Option<Scalar> {
        match self {
            Type::I32 => Some(Scalar::I32),
            Type::U32 => Some(Scalar::U32),
            Type::F32 => Some(Scalar::F32),
            Type::F16 => Some(Scalar::F16),
            _ => None,
        }
    }

    /// The scalar of a scalar type or the lane type of a vector type.
    pub fn element(&self) -> Option<Scalar> {
        match self {
            Type::Vector { elem, .. } => Some(*elem),
            other => other.scalar(),
        }
    }

    /// Whether values of this type may be yielded, selected or loop-carried.
    pub fn is_plain_data(&self) -> bool {
        !matches!(self, Type::Buffer | Type::View(_))
    }
}

/// A literal constant as written in the source.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Literal {
    /// `true` / `false`.
    Bool(bool),
    /// An integer, already checked to fit its type.
    Int(i64),
    /// A float (also `inf`, `-inf`, `nan`).
    Float(f64),
}

/// An argument of either signature.
#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    /// Name without `%`.
    pub name: String,
    /// Its value.
    pub id: ValueId,
    /// Its type.
    pub ty: Type,
    /// Declared `{readonly}` (buffers only): stores through it are rejected.
    pub readonly: bool,
    /// Where it is declared.
    pub span: Span,
}

/// How a buffer argument is used, inferred from every view derived from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferAccess {
    /// Some load or atomic reads it.
    pub read: bool,
    /// Some store or atomic writes it.
    pub written: bool,
}

/// The buffer behind a buffer or view value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferRef {
    /// Launch argument number `n` (index into [`Kernel::args`]).
    Arg(usize),
    /// The workgroup buffer made by the `Alloca` whose result is this value.
    Alloca(ValueId),
}

/// The launch configuration: the grid and the workgroup shape.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchConfig {
    /// Workgroup counts x, y, z (launch-region values).
    pub workgroups: [ValueId; 3],
    /// Workgroup size x, y, z (launch-region values, compile-time constant).
    pub workgroup_size: [ValueId; 3],
    /// Where it is written.
    pub span: Span,
}

/// A sequence of ops.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Block {
    /// In program order.
    pub ops: Vec<Op>,
}

impl Block {
    /// Visit every op of the block and of its nested regions, in program
    /// order (an op before the ops of its regions). Iterative, so deep
    /// nesting cannot overflow the stack.
    pub fn for_each_op<'a>(&'a self, mut f: impl FnMut(&'a Op)) {
        let mut stack: Vec<std::slice::Iter<'a, Op>> = vec![self.ops.iter()];
        while let Some(top) = stack.last_mut() {
            let Some(op) = top.next() else {
                stack.pop();
                continue;
            };
            f(op);
            match &op.kind {
                OpKind::If {
                    then, otherwise, ..
                } => {
                    if let Some(e) = otherwise {
                        stack.push(e.ops.iter());
                    }
                    stack.push(then.ops.iter());
                }
                OpKind::For { body, .. } => stack.push(body.ops.iter()),
                _ => {}
            }
        }
    }
}

/// One operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// Values it defines, in order.
    pub results: Vec<ValueId>,
    /// What it does.
    pub kind: OpKind,
    /// Where it is written.
    pub span: Span,
}

/// What a `kernel.barrier` orders besides the workgroup's control flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierKind {
    /// `<workgroup>`: workgroup memory, at workgroup scope.
    Workgroup,
    /// `<subgroup>`: workgroup memory, at subgroup scope: only the
    /// invocations of one subgroup wait for each other, and what one of
    /// them stored to workgroup memory before it is visible to the others
    /// after it (a subgroup's private tiles, with no workgroup-wide wait).
    Subgroup,
    /// `<storage>`: workgroup memory and storage buffers, at device scope,
    /// so writes made before it are visible to other workgroups that
    /// observe them through an atomic (a "last workgroup" reduction).
    Storage,
}

/// What an op does. Operands are [`ValueId`]s; result types are in
/// [`Kernel::value_types`].
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// `index.constant`; result type `index` or `offset`.
    IndexConstant(u32),
    /// `index.<op> a, b`.
    IndexBinary(IndexBinary, ValueId, ValueId),
    /// `index.madd a, b, c` = a * b + c.
    IndexMadd(ValueId, ValueId, ValueId),
    /// `index.cmp pred, a, b` -> i1.
    IndexCmp(IntPredicate, ValueId, ValueId),
    /// `index.cast a` between index, offset, i32, u32 (bits kept).
    IndexCast {
        /// Source value.
        value: ValueId,
        /// Target type.
        to: Type,
    },
    /// `scalar.constant`; the result type says how to read the literal.
    ScalarConstant(Literal),
    /// `scalar.<op> a, b` on scalars or vectors of one type.
    ScalarBinary(ScalarBinary, ValueId, ValueId),
    /// `scalar.fmaf a, b, c` = a * b + c.
    ScalarFma(ValueId, ValueId, ValueId),
    /// `scalar.<op> a`.
    ScalarUnary(ScalarUnary, ValueId),
    /// `scalar.cmpf pred, a, b` -> i1.
    CmpF(FloatPredicate, ValueId, ValueId),
    /// `scalar.cmpi pred, a, b` -> i1.
    CmpI(IntPredicate, ValueId, ValueId),
    /// `scalar.select p, a, b`.
    Select(ValueId, ValueId, ValueId),
    /// `scalar.<conversion> a : from -> to`.
    Convert {
        /// Which conversion.
        op: ConvertOp,
        /// Source value.
        value: ValueId,
        /// Target type.
        to: Type,
    },
    /// `vector.splat s : elem -> vector<NxT>`: every lane set to `s`.
    VectorSplat(ValueId),
    /// `vector.extract v, lane : vector<NxT> -> T`: one lane (`lane` an
    /// `index`, below N).
    VectorExtract(ValueId, ValueId),
    /// `vector.unpackf16 w : u32 -> vector<2xf32>`: the two IEEE halves of
    /// a 32-bit word widened to f32, lane 0 from the low 16 bits.
    UnpackF16(ValueId),
    /// `buffer.view buffer[byte_offset] : buffer -> view<..>`.
    BufferView {
        /// A buffer value.
        buffer: ValueId,
        /// An `offset` value.
        byte_offset: ValueId,
        /// The view's type (also the result type).
        view: ViewType,
    },
    /// `buffer.alloca<workgroup> align(n) bytes`.
    Alloca {
        /// Alignment in bytes (power of two).
        align: u32,
        /// An `offset` value, compile-time constant.
        bytes: ValueId,
    },
    /// `view.load view[indices]` -> element.
    ViewLoad {
        /// A view value.
        view: ValueId,
        /// One `index` per dimension.
        indices: Vec<ValueId>,
    },
    /// `view.store value, view[indices]`.
    ViewStore {
        /// Element value.
        value: ValueId,
        /// A view value.
        view: ValueId,
        /// One `index` per dimension.
        indices: Vec<ValueId>,
    },
    /// `vector.load view[indices]` -> vector of consecutive elements along
    /// the last dimension, starting at `indices`.
    VectorLoad {
        /// A view value.
        view: ValueId,
        /// One `index` per dimension.
        indices: Vec<ValueId>,
    },
    /// `vector.store value, view[indices]`.
    VectorStore {
        /// Vector value.
        value: ValueId,
        /// A view value.
        view: ValueId,
        /// One `index` per dimension.
        indices: Vec<ValueId>,
    },
    /// `view.atomic.rmw<op> value, view[indices]` -> old element.
    AtomicRmw {
        /// Operation.
        op: AtomicOp,
        /// Operand of the element type (i32 or u32).
        value: ValueId,
        /// A view value.
        view: ValueId,
        /// One `index` per dimension.
        indices: Vec<ValueId>,
    },
    /// `scf.if`; its results are the op's results.
    If {
        /// An `i1` value.
        cond: ValueId,
        /// Runs when true; ends with `Yield`.
        then: Block,
        /// Runs when false; ends with `Yield`. `None` only with no results.
        otherwise: Option<Block>,
    },
    /// `scf.for iv = [lower to upper step step](iter_args)`; its results are
    /// the iteration arguments' final values.
    For {
        /// The induction variable (`index`), defined for the body.
        iv: ValueId,
        /// First value of `iv`.
        lower: ValueId,
        /// Exclusive bound (unsigned comparison).
        upper: ValueId,
        /// Increment.
        step: ValueId,
        /// (block argument defined for the body, initial value).
        iter_args: Vec<(ValueId, ValueId)>,
        /// Ends with `Yield` of the next iteration's values.
        body: Block,
    },
    /// `scf.yield values`: the last op of an `If`/`For` region.
    Yield(Vec<ValueId>),
    /// `kernel.<coordinate><axis>` -> index.
    WorkItem(WorkItemKind, Axis),
    /// `kernel.subgroup.<query>` -> index.
    Subgroup(SubgroupQuery),
    /// `kernel.barrier<workgroup|storage>`: a workgroup control barrier
    /// ordering workgroup memory, or storage buffers too at device scope.
    Barrier(BarrierKind),
    /// `kernel.subgroup.reduce<op> x`.
    SubgroupReduce(ReduceOp, ValueId),
    /// `kernel.subgroup.shuffle<mode> x, lane`.
    SubgroupShuffle(ShuffleMode, ValueId, ValueId),
    /// `kernel.subgroup.broadcast x, lane` (`lane` is subgroup-uniform).
    SubgroupBroadcast(ValueId, ValueId),
    /// `coop.load<row_major|col_major> view[row, col]` -> cooperative
    /// matrix whose element (0, 0) is view element (row, col); the view is
    /// 2-D and its row length is the stride between matrix rows (or
    /// columns, when `col_major`).
    CoopLoad {
        /// A 2-D view value.
        view: ValueId,
        /// Row and column of the matrix's first element.
        indices: Vec<ValueId>,
        /// Memory holds the matrix column by column.
        col_major: bool,
    },
    /// `coop.store<row_major|col_major> value, view[row, col]`.
    CoopStore {
        /// A cooperative matrix value.
        value: ValueId,
        /// A 2-D view value.
        view: ValueId,
        /// Row and column of the matrix's first element.
        indices: Vec<ValueId>,
        /// Memory holds the matrix column by column.
        col_major: bool,
    },
    /// `coop.mma a, b, c` = a * b + c (roles A, B, C).
    CoopMma(ValueId, ValueId, ValueId),
    /// `coop.zero`: a cooperative matrix of zeros (type in `value_types`).
    CoopZero,
    /// `config.value @key`; the key is declared, the type matches its decl.
    ConfigValue(String),
    /// `kernel.return`: the last op of the body.
    Return,
}

/// `config.decl @key = default : type`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigDecl {
    /// The specialization key, without `@` (for example `scale.width`).
    pub key: String,
    /// index, offset, i1, i32, u32 or f32.
    pub ty: Type,
    /// Value used when a specialization does not set the key.
    pub default: Literal,
    /// Where it is declared.
    pub span: Span,
}

/// One verified kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// Symbol without `@`.
    pub name: String,
    /// Where `kernel.def` is written.
    pub span: Span,
    /// Host-side workload arguments (index values), in order.
    pub workload_args: Vec<Arg>,
    /// Launch-region ops (index arithmetic and config values), without the
    /// launch config itself.
    pub launch: Vec<Op>,
    /// The grid and workgroup shape.
    pub launch_config: LaunchConfig,
    /// Device ABI, in order: buffers become storage bindings, scalars one
    /// push-constant block.
    pub args: Vec<Arg>,
    /// Device code; ends with `Return`.
    pub body: Block,
    /// Type of every value.
    pub value_types: Vec<Type>,
    /// Source name of every value (without `%`).
    pub value_names: Vec<String>,
    /// Parallel to `args`: inferred access (default for non-buffer args).
    pub buffer_access: Vec<BufferAccess>,
    /// For every buffer or view value, the buffer behind it.
    pub buffer_of: Vec<Option<BufferRef>>,
}

impl Kernel {
    /// The type of a value.
    pub fn ty(&self, id: ValueId) -> Option<&Type> {
        self.value_types.get(id.index())
    }
}

/// A verified module.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Module {
    /// Kernels in source order; names are unique.
    pub kernels: Vec<Kernel>,
    /// Config declarations in source order; keys are unique.
    pub configs: Vec<ConfigDecl>,
}

impl Module {
    /// The kernel named `name` (with or without `@`).
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        let name = name.strip_prefix('@').unwrap_or(name);
        self.kernels.iter().find(|k| k.name == name)
    }

    /// The config declaration for `key` (with or without `@`).
    pub fn config(&self, key: &str) -> Option<&ConfigDecl> {
        let key = key.strip_prefix('@').unwrap_or(key);
        self.configs.iter().find(|c| c.key == key)
    }
}

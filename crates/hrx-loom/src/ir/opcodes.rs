//! The small enums that name what an op computes (sub-ops, predicates,
//! coordinates).

/// `index.add` and friends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexBinary {
    /// Wrapping add.
    Add,
    /// Wrapping subtract.
    Sub,
    /// Wrapping multiply.
    Mul,
    /// Unsigned divide.
    Div,
    /// Unsigned remainder.
    Rem,
    /// Unsigned minimum.
    Min,
    /// Unsigned maximum.
    Max,
}

/// Integer comparison predicates (index.cmp, scalar.cmpi).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntPredicate {
    /// ==
    Eq,
    /// !=
    Ne,
    /// unsigned <
    Ult,
    /// unsigned <=
    Ule,
    /// unsigned >
    Ugt,
    /// unsigned >=
    Uge,
    /// signed <
    Slt,
    /// signed <=
    Sle,
    /// signed >
    Sgt,
    /// signed >=
    Sge,
}

/// Ordered float comparison predicates (scalar.cmpf).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatPredicate {
    /// ordered ==
    Oeq,
    /// ordered !=
    One,
    /// ordered <
    Olt,
    /// ordered <=
    Ole,
    /// ordered >
    Ogt,
    /// ordered >=
    Oge,
}

/// Two-operand scalar (or lane-wise vector) arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarBinary {
    /// float +
    AddF,
    /// float -
    SubF,
    /// float *
    MulF,
    /// float /
    DivF,
    /// float max (NaN loses)
    MaxNumF,
    /// float min (NaN loses)
    MinNumF,
    /// integer + (wrapping)
    AddI,
    /// integer - (wrapping)
    SubI,
    /// integer * (wrapping)
    MulI,
    /// signed /
    DivSI,
    /// unsigned /
    DivUI,
    /// signed remainder
    RemSI,
    /// unsigned remainder
    RemUI,
    /// bitwise and (also on i1)
    AndI,
    /// bitwise or (also on i1)
    OrI,
    /// bitwise xor (also on i1)
    XorI,
    /// shift left
    ShlI,
    /// arithmetic shift right
    ShrSI,
    /// logical shift right
    ShrUI,
}

/// One-operand float math.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarUnary {
    /// -x
    NegF,
    /// |x|
    AbsF,
    /// e^x
    ExpF,
    /// ln x
    LogF,
    /// sqrt x
    SqrtF,
    /// 1 / sqrt x
    RsqrtF,
    /// tanh x
    TanhF,
}

/// Conversions; the target type is in [`super::OpKind::Convert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConvertOp {
    /// f16 -> f32
    ExtF,
    /// f32 -> f16
    TruncF,
    /// i32 -> float
    SIToFP,
    /// u32 -> float
    UIToFP,
    /// float -> i32
    FPToSI,
    /// float -> u32
    FPToUI,
    /// same-width reinterpretation among i32, u32, f32
    Bitcast,
}

/// Atomic read-modify-write operations on integer views.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// addi
    Add,
    /// subi
    Sub,
    /// maxsi / maxui (signedness from the element type)
    Max,
    /// minsi / minui (signedness from the element type)
    Min,
    /// andi
    And,
    /// ori
    Or,
    /// xori
    Xor,
    /// xchg
    Exchange,
}

/// Which built-in coordinate `kernel.<kind><x|y|z>` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkItemKind {
    /// kernel.workitem.dispatch.id (global invocation id)
    DispatchId,
    /// kernel.workgroup.id
    WorkgroupId,
    /// kernel.workitem.id (local invocation id)
    WorkitemId,
    /// kernel.workgroup.size
    WorkgroupSize,
    /// kernel.workgroup.count
    WorkgroupCount,
}

/// An axis of the 3-D grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Axis {
    /// x
    X,
    /// y
    Y,
    /// z
    Z,
}

/// Subgroup facts `kernel.subgroup.*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubgroupQuery {
    /// kernel.subgroup.size
    Size,
    /// kernel.subgroup.id (within the workgroup)
    Id,
    /// kernel.subgroup.lane.id
    LaneId,
    /// kernel.subgroup.count (subgroups per workgroup)
    Count,
}

/// Subgroup reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// float sum
    AddF,
    /// float max
    MaxNumF,
    /// float min
    MinNumF,
    /// integer sum
    AddI,
    /// signed max
    MaxSI,
    /// signed min
    MinSI,
    /// unsigned max
    MaxUI,
    /// unsigned min
    MinUI,
}

/// Subgroup shuffle modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShuffleMode {
    /// from lane `self ^ lane`
    Xor,
    /// from lane `self - lane`
    Up,
    /// from lane `self + lane`
    Down,
    /// from lane `lane`
    Index,
}

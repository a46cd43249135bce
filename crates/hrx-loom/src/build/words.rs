//! The loom spellings of the predicates, tags and modes the builder
//! writes, and the few choices the IR's enums do not spell out.

use crate::ir::{Axis, FloatPredicate, IntPredicate, ReduceOp, ShuffleMode};

/// `view.atomic.rmw<..>` operations (signedness is part of min and max).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicRmw {
    /// `addi`
    Add,
    /// `subi`
    Sub,
    /// `maxsi`
    MaxSigned,
    /// `minsi`
    MinSigned,
    /// `maxui`
    MaxUnsigned,
    /// `minui`
    MinUnsigned,
    /// `andi`
    And,
    /// `ori`
    Or,
    /// `xori`
    Xor,
    /// `xchg`
    Exchange,
}

/// `kernel.barrier<..>` kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Barrier {
    /// `kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)`:
    /// the workgroup's invocations and its workgroup memory.
    Workgroup,
    /// `kernel.barrier<subgroup> scope(subgroup) ordering(acq_rel)`: the
    /// subgroup's invocations and what they store to workgroup memory.
    Subgroup,
    /// `kernel.barrier<storage> scope(device) ordering(acq_rel)`: also
    /// orders storage-buffer accesses.
    Storage,
}

/// Memory layout of a cooperative-matrix load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoopLayout {
    /// `row_major`
    RowMajor,
    /// `col_major`
    ColMajor,
}

pub(super) fn int_predicate(p: IntPredicate) -> &'static str {
    use IntPredicate::*;
    match p {
        Eq => "eq",
        Ne => "ne",
        Ult => "ult",
        Ule => "ule",
        Ugt => "ugt",
        Uge => "uge",
        Slt => "slt",
        Sle => "sle",
        Sgt => "sgt",
        Sge => "sge",
    }
}

pub(super) fn float_predicate(p: FloatPredicate) -> &'static str {
    use FloatPredicate::*;
    match p {
        Oeq => "oeq",
        One => "one",
        Olt => "olt",
        Ole => "ole",
        Ogt => "ogt",
        Oge => "oge",
    }
}

pub(super) fn axis(a: Axis) -> &'static str {
    match a {
        Axis::X => "x",
        Axis::Y => "y",
        Axis::Z => "z",
    }
}

pub(super) fn reduce(op: ReduceOp) -> &'static str {
    use ReduceOp::*;
    match op {
        AddF => "addf",
        MaxNumF => "maxnumf",
        MinNumF => "minnumf",
        AddI => "addi",
        MaxSI => "maxsi",
        MinSI => "minsi",
        MaxUI => "maxui",
        MinUI => "minui",
    }
}

pub(super) fn shuffle(mode: ShuffleMode) -> &'static str {
    match mode {
        ShuffleMode::Xor => "xor",
        ShuffleMode::Up => "up",
        ShuffleMode::Down => "down",
        ShuffleMode::Index => "index",
    }
}

pub(super) fn atomic(op: AtomicRmw) -> &'static str {
    use AtomicRmw::*;
    match op {
        Add => "addi",
        Sub => "subi",
        MaxSigned => "maxsi",
        MinSigned => "minsi",
        MaxUnsigned => "maxui",
        MinUnsigned => "minui",
        And => "andi",
        Or => "ori",
        Xor => "xori",
        Exchange => "xchg",
    }
}

pub(super) fn coop_layout(l: CoopLayout) -> &'static str {
    match l {
        CoopLayout::RowMajor => "row_major",
        CoopLayout::ColMajor => "col_major",
    }
}

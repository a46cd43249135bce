//! The spellings of op names, predicates and tags, mapped to IR enums.

use crate::ir::{
    AtomicOp, Axis, ConvertOp, FloatPredicate, IndexBinary, IntPredicate, ReduceOp, ScalarBinary,
    ScalarUnary, ShuffleMode, SubgroupQuery, WorkItemKind,
};

/// Integer predicates, for messages.
pub(super) const INT_PREDICATES: &str = "eq ne ult ule ugt uge slt sle sgt sge";
/// Float predicates, for messages.
pub(super) const FLOAT_PREDICATES: &str = "oeq one olt ole ogt oge";

pub(super) fn int_predicate(w: &str) -> Option<IntPredicate> {
    use IntPredicate::*;
    Some(match w {
        "eq" => Eq,
        "ne" => Ne,
        "ult" => Ult,
        "ule" => Ule,
        "ugt" => Ugt,
        "uge" => Uge,
        "slt" => Slt,
        "sle" => Sle,
        "sgt" => Sgt,
        "sge" => Sge,
        _ => return None,
    })
}

pub(super) fn float_predicate(w: &str) -> Option<FloatPredicate> {
    use FloatPredicate::*;
    Some(match w {
        "oeq" => Oeq,
        "one" => One,
        "olt" => Olt,
        "ole" => Ole,
        "ogt" => Ogt,
        "oge" => Oge,
        _ => return None,
    })
}

pub(super) fn index_binary(name: &str) -> Option<IndexBinary> {
    use IndexBinary::*;
    Some(match name {
        "index.add" => Add,
        "index.sub" => Sub,
        "index.mul" => Mul,
        "index.div" => Div,
        "index.rem" => Rem,
        "index.min" => Min,
        "index.max" => Max,
        _ => return None,
    })
}

pub(super) fn scalar_binary(name: &str) -> Option<ScalarBinary> {
    use ScalarBinary::*;
    Some(match name {
        "scalar.addf" => AddF,
        "scalar.subf" => SubF,
        "scalar.mulf" => MulF,
        "scalar.divf" => DivF,
        "scalar.maxnumf" => MaxNumF,
        "scalar.minnumf" => MinNumF,
        "scalar.addi" => AddI,
        "scalar.subi" => SubI,
        "scalar.muli" => MulI,
        "scalar.divsi" => DivSI,
        "scalar.divui" => DivUI,
        "scalar.remsi" => RemSI,
        "scalar.remui" => RemUI,
        "scalar.andi" => AndI,
        "scalar.ori" => OrI,
        "scalar.xori" => XorI,
        "scalar.shli" => ShlI,
        "scalar.shrsi" => ShrSI,
        "scalar.shrui" => ShrUI,
        _ => return None,
    })
}

pub(super) fn scalar_unary(name: &str) -> Option<ScalarUnary> {
    use ScalarUnary::*;
    Some(match name {
        "scalar.negf" => NegF,
        "scalar.absf" => AbsF,
        "scalar.expf" => ExpF,
        "scalar.logf" => LogF,
        "scalar.sqrtf" => SqrtF,
        "scalar.rsqrtf" => RsqrtF,
        "scalar.tanhf" => TanhF,
        _ => return None,
    })
}

pub(super) fn convert_op(name: &str) -> Option<ConvertOp> {
    use ConvertOp::*;
    Some(match name {
        "scalar.extf" => ExtF,
        "scalar.truncf" => TruncF,
        "scalar.sitofp" => SIToFP,
        "scalar.uitofp" => UIToFP,
        "scalar.fptosi" => FPToSI,
        "scalar.fptoui" => FPToUI,
        "scalar.bitcast" => Bitcast,
        _ => return None,
    })
}

pub(super) fn workitem(name: &str) -> Option<WorkItemKind> {
    use WorkItemKind::*;
    Some(match name {
        "kernel.workitem.dispatch.id" => DispatchId,
        "kernel.workgroup.id" => WorkgroupId,
        "kernel.workitem.id" => WorkitemId,
        "kernel.workgroup.size" => WorkgroupSize,
        "kernel.workgroup.count" => WorkgroupCount,
        _ => return None,
    })
}

pub(super) fn subgroup_query(name: &str) -> Option<SubgroupQuery> {
    use SubgroupQuery::*;
    Some(match name {
        "kernel.subgroup.size" => Size,
        "kernel.subgroup.id" => Id,
        "kernel.subgroup.lane.id" => LaneId,
        "kernel.subgroup.count" => Count,
        _ => return None,
    })
}

pub(super) fn axis(w: &str) -> Option<Axis> {
    Some(match w {
        "x" => Axis::X,
        "y" => Axis::Y,
        "z" => Axis::Z,
        _ => return None,
    })
}

/// Reductions, for messages.
pub(super) const REDUCE_OPS: &str = "addf maxnumf minnumf addi maxsi minsi maxui minui";

pub(super) fn reduce_op(w: &str) -> Option<ReduceOp> {
    use ReduceOp::*;
    Some(match w {
        "addf" => AddF,
        "maxnumf" => MaxNumF,
        "minnumf" => MinNumF,
        "addi" => AddI,
        "maxsi" => MaxSI,
        "minsi" => MinSI,
        "maxui" => MaxUI,
        "minui" => MinUI,
        _ => return None,
    })
}

/// Shuffle modes, for messages.
pub(super) const SHUFFLE_MODES: &str = "xor up down index";

pub(super) fn shuffle_mode(w: &str) -> Option<ShuffleMode> {
    Some(match w {
        "xor" => ShuffleMode::Xor,
        "up" => ShuffleMode::Up,
        "down" => ShuffleMode::Down,
        "index" => ShuffleMode::Index,
        _ => return None,
    })
}

/// Atomic operations, for messages.
pub(super) const ATOMIC_OPS: &str = "addi subi maxsi minsi maxui minui andi ori xori xchg";

/// The atomic op and, for signed/unsigned min/max, whether it is signed.
pub(super) fn atomic_op(w: &str) -> Option<(AtomicOp, Option<bool>)> {
    Some(match w {
        "addi" => (AtomicOp::Add, None),
        "subi" => (AtomicOp::Sub, None),
        "maxsi" => (AtomicOp::Max, Some(true)),
        "minsi" => (AtomicOp::Min, Some(true)),
        "maxui" => (AtomicOp::Max, Some(false)),
        "minui" => (AtomicOp::Min, Some(false)),
        "andi" => (AtomicOp::And, None),
        "ori" => (AtomicOp::Or, None),
        "xori" => (AtomicOp::Xor, None),
        "xchg" => (AtomicOp::Exchange, None),
        _ => return None,
    })
}

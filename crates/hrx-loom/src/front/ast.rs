//! The syntax tree: what the source says, with names unresolved and a span
//! on every piece. The verifier turns it into [`crate::ir`].
//!
//! Ops share one shape ([`Op`]) whose [`Form`] follows the syntax family of
//! the op name (see [`form_of`]); which operands and types an op needs is
//! the verifier's business, so operand-count mistakes are reported with the
//! op's meaning, not as syntax errors.

use super::span::Span;
use crate::ir::Literal;

/// A name as written, without its sigil (`%`, `@`) for values and symbols.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    /// The text.
    pub text: String,
    /// Where it is written (sigil included).
    pub span: Span,
}

/// A literal as written.
#[derive(Clone, Debug, PartialEq)]
pub struct LiteralTok {
    /// The source text (for printing back unchanged).
    pub text: String,
    /// Its value, parsed with checked conversions.
    pub value: Literal,
    /// Where it is written.
    pub span: Span,
}

/// A whole source file.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Module {
    /// Kernels and config declarations in source order.
    pub items: Vec<Item>,
}

/// A module-level item.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `kernel.def`.
    Kernel(KernelDef),
    /// `config.decl`.
    Config(ConfigDecl),
}

/// `config.decl @key = literal : type`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigDecl {
    /// The key (symbol text).
    pub key: Ident,
    /// Default value.
    pub default: LiteralTok,
    /// Declared type.
    pub ty: TypeExpr,
    /// The whole declaration.
    pub span: Span,
}

/// `kernel.def @name(workload) { launch } launch(args) { body }`.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelDef {
    /// Kernel symbol.
    pub name: Ident,
    /// Workload arguments.
    pub workload: Vec<ArgDecl>,
    /// Launch-region ops.
    pub launch_ops: Vec<Op>,
    /// Launch (device ABI) arguments.
    pub args: Vec<ArgDecl>,
    /// Body ops.
    pub body: Vec<Op>,
    /// From `kernel.def` to the kernel name (where errors about the whole
    /// kernel point).
    pub span: Span,
}

/// `%name: type {attr, ...}`.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgDecl {
    /// Value name.
    pub name: Ident,
    /// Declared type.
    pub ty: TypeExpr,
    /// Attribute words in braces, for example `readonly`.
    pub attrs: Vec<Ident>,
}

/// A type as written.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeExpr {
    /// Its shape.
    pub kind: TypeKind,
    /// Where it is written.
    pub span: Span,
}

/// The shape of a written type.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeKind {
    /// A plain name: `index`, `f32`, `buffer`, or an unknown word.
    Named(String),
    /// `vector<N x elem>`.
    Vector {
        /// Lane count as written.
        len: u64,
        /// Lane type.
        elem: Box<TypeExpr>,
    },
    /// `view<dim x ... x elem>`.
    View {
        /// Dimensions, outermost first.
        dims: Vec<DimExpr>,
        /// Element type.
        elem: Box<TypeExpr>,
    },
    /// `coopmat<rows x cols x elem, role>`.
    CoopMat {
        /// Rows as written.
        rows: u64,
        /// Columns as written.
        cols: u64,
        /// Element type.
        elem: Box<TypeExpr>,
        /// `a`, `b` or `c`.
        role: Ident,
    },
}

/// One view dimension as written.
#[derive(Clone, Debug, PartialEq)]
pub enum DimExpr {
    /// `16` or `[16]`.
    Static(u64, Span),
    /// `[%n]`.
    Dynamic(Ident),
}

/// A sequence of ops in braces.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Region {
    /// The ops.
    pub ops: Vec<Op>,
    /// From `{` to `}`.
    pub span: Span,
}

/// `%acc = %init : type` in an `scf.for` header.
#[derive(Clone, Debug, PartialEq)]
pub struct IterArg {
    /// The block argument.
    pub name: Ident,
    /// Its initial value.
    pub init: Ident,
    /// Its type.
    pub ty: TypeExpr,
}

/// One op: `%results = name<tag> ...form...`.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// Result names (possibly none).
    pub results: Vec<Ident>,
    /// The op name, for example `index.add`.
    pub name: Ident,
    /// `<word>` right after the name, for example `<x>` or `<addf>`.
    pub tag: Option<Ident>,
    /// The rest of the op.
    pub form: Form,
    /// The whole op.
    pub span: Span,
}

/// The syntax families of ops.
#[derive(Clone, Debug, PartialEq)]
pub enum Form {
    /// `literal : type` (index.constant, scalar.constant).
    Constant {
        /// The literal.
        value: LiteralTok,
        /// Its type.
        ty: TypeExpr,
    },
    /// `%a, %b : t, t -> t` (arithmetic, casts, coordinates, yield ...).
    Operands {
        /// Operand names.
        operands: Vec<Ident>,
        /// Types after `:`.
        types: Vec<TypeExpr>,
        /// Type after `->`.
        to: Option<TypeExpr>,
    },
    /// `pred, %a, %b : t` (comparisons).
    Compare {
        /// The predicate word.
        predicate: Ident,
        /// Operand names.
        operands: Vec<Ident>,
        /// Operand type.
        ty: TypeExpr,
    },
    /// `[%value,] %base[%i, ...] : t, t -> t` (views, loads, stores, atomics).
    Access {
        /// The stored or atomic operand.
        value: Option<Ident>,
        /// The buffer or view.
        base: Ident,
        /// Indices (a byte offset for buffer.view).
        indices: Vec<Ident>,
        /// Types after `:`.
        types: Vec<TypeExpr>,
        /// Type after `->`.
        to: Option<TypeExpr>,
    },
    /// `align(N) %bytes : buffer`.
    Alloca {
        /// Alignment literal.
        align: LiteralTok,
        /// Size operand.
        bytes: Ident,
        /// Result type.
        ty: TypeExpr,
    },
    /// `word(word) ...` (kernel.barrier).
    Barrier {
        /// Attribute name and its argument, for example `scope(workgroup)`.
        attrs: Vec<(Ident, Ident)>,
    },
    /// `@key : type` (config.value).
    ConfigValue {
        /// The key.
        key: Ident,
        /// Result type.
        ty: TypeExpr,
    },
    /// `workgroups(..) workgroup_size(..) : index`.
    LaunchConfig {
        /// Grid operands.
        workgroups: Vec<Ident>,
        /// Workgroup size operands.
        workgroup_size: Vec<Ident>,
        /// Operand type.
        ty: TypeExpr,
    },
    /// Nothing more (kernel.return).
    Bare,
    /// `%cond -> (types) { .. } else { .. }`.
    If {
        /// Condition.
        cond: Ident,
        /// Result types.
        results: Vec<TypeExpr>,
        /// Then region.
        then: Region,
        /// Else region.
        otherwise: Option<Region>,
    },
    /// `%iv = [%lb to %ub step %st](%acc = %init : t) -> (t) { .. }`.
    For {
        /// Induction variable.
        iv: Ident,
        /// Lower bound.
        lower: Ident,
        /// Upper bound (exclusive).
        upper: Ident,
        /// Step.
        step: Ident,
        /// Loop-carried values.
        iter_args: Vec<IterArg>,
        /// Result types.
        results: Vec<TypeExpr>,
        /// Body.
        body: Region,
    },
}

/// Syntax families, to drive the parser and printer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormKind {
    /// [`Form::Constant`]
    Constant,
    /// [`Form::Operands`]
    Operands,
    /// [`Form::Compare`]
    Compare,
    /// [`Form::Access`]
    Access,
    /// [`Form::Alloca`]
    Alloca,
    /// [`Form::Barrier`]
    Barrier,
    /// [`Form::ConfigValue`]
    ConfigValue,
    /// [`Form::LaunchConfig`]
    LaunchConfig,
    /// [`Form::Bare`]
    Bare,
    /// [`Form::If`]
    If,
    /// [`Form::For`]
    For,
}

/// Ops whose rest is `%operands : types [-> type]`.
const OPERAND_OPS: &[&str] = &[
    "index.add",
    "index.sub",
    "index.mul",
    "index.div",
    "index.rem",
    "index.min",
    "index.max",
    "index.madd",
    "index.cast",
    "scalar.addf",
    "scalar.subf",
    "scalar.mulf",
    "scalar.divf",
    "scalar.maxnumf",
    "scalar.minnumf",
    "scalar.fmaf",
    "scalar.negf",
    "scalar.absf",
    "scalar.expf",
    "scalar.logf",
    "scalar.sqrtf",
    "scalar.rsqrtf",
    "scalar.tanhf",
    "scalar.addi",
    "scalar.subi",
    "scalar.muli",
    "scalar.divsi",
    "scalar.divui",
    "scalar.remsi",
    "scalar.remui",
    "scalar.andi",
    "scalar.ori",
    "scalar.xori",
    "scalar.shli",
    "scalar.shrsi",
    "scalar.shrui",
    "scalar.select",
    "scalar.extf",
    "scalar.truncf",
    "scalar.sitofp",
    "scalar.uitofp",
    "scalar.fptosi",
    "scalar.fptoui",
    "scalar.bitcast",
    "vector.splat",
    "vector.extract",
    "vector.unpackf16",
    "coop.mma",
    "coop.zero",
    "scf.yield",
    "kernel.workitem.dispatch.id",
    "kernel.workgroup.id",
    "kernel.workitem.id",
    "kernel.workgroup.size",
    "kernel.workgroup.count",
    "kernel.subgroup.size",
    "kernel.subgroup.id",
    "kernel.subgroup.lane.id",
    "kernel.subgroup.count",
    "kernel.subgroup.reduce",
    "kernel.subgroup.shuffle",
    "kernel.subgroup.broadcast",
];

/// The syntax family of an op name, or `None` for names loom lacks.
pub fn form_of(name: &str) -> Option<FormKind> {
    Some(match name {
        "index.constant" | "scalar.constant" => FormKind::Constant,
        "index.cmp" | "scalar.cmpf" | "scalar.cmpi" => FormKind::Compare,
        "buffer.view" | "view.load" | "view.store" | "vector.load" | "vector.store"
        | "view.atomic.rmw" | "coop.load" | "coop.store" => FormKind::Access,
        "buffer.alloca" => FormKind::Alloca,
        "kernel.barrier" => FormKind::Barrier,
        "config.value" => FormKind::ConfigValue,
        "kernel.launch.config" => FormKind::LaunchConfig,
        "kernel.return" => FormKind::Bare,
        "scf.if" => FormKind::If,
        "scf.for" => FormKind::For,
        n if OPERAND_OPS.contains(&n) => FormKind::Operands,
        _ => return None,
    })
}

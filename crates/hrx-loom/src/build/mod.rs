//! Building kernels in code: a typed builder over loom's syntax tree.
//!
//! Operators whose kernels depend on parameters (element types, tile
//! sizes, unroll counts, the activation of an epilogue) build them here
//! rather than by stitching text. A kernel is either hand-written loom
//! text or built, never text assembled by code.
//!
//! # Design choices
//!
//! - **The builder produces the syntax tree** ([`crate::front::ast`]), not
//!   verified IR. A built module is printed ([`crate::front::print`]) and
//!   compiled by [`crate::Compiler::built`] through the same parser,
//!   verifier, lowering and emission as text, so a built kernel gets the
//!   same checks, the same diagnostics (pointing into the printed text,
//!   which [`crate::Module::source`] returns) and the same SPIR-V as the
//!   equivalent text. The builder checks nothing the verifier checks.
//! - **Values are typed handles** ([`Value`]), `Copy`, indexing the
//!   builder's table of names and types in the way naga's `Handle`s index
//!   its arenas. Their kind parameter ([`Index`], [`Offset`], [`Bool`],
//!   [`Num`], [`Buffer`], [`View`], [`Mat`]) makes the category errors of
//!   text (a float where an index goes, loading from a buffer rather than a
//!   view) Rust type errors. Each op method writes the types of its
//!   operands and result itself, from the types it knows, so a kernel
//!   author never spells a type twice.
//! - **Names are fresh**: every value gets a name unique in its function
//!   (the launch region, the body), from an optional hint
//!   ([`Builder::hint`]) or a short default, so building blocks compose
//!   without prefixes.
//! - **Specialization is Rust**: element types, static extents, unroll
//!   counts are arguments of the generating function; loom's `config.value`
//!   remains for values that vary per device without changing the code.
//! - **Regions are closures**: `scf.for` and `scf.if` take closures that
//!   build their bodies and return the yielded values.
//! - **Passes** over built code live in [`passes`]: a [`Fragment`] (a
//!   parameterised op sequence, such as an activation function) can be
//!   inlined with fresh names ([`Builder::inline`], the rename pass) and
//!   rewritten for vectors ([`passes::vectorize`]).
//!
//! # Example
//!
//! ```
//! use hrx_loom::build::{ModuleBuilder, KernelBuilder};
//! use hrx_loom::ir::{Axis, IntPredicate, Scalar};
//! use hrx_loom::{Compiler, Specialization};
//! use hrx_core::Target;
//!
//! // y[i] = x[i] * 2 for i < n, 64 work items per workgroup.
//! let mut k = KernelBuilder::new("double");
//! let n = k.workload("n");
//! let wg = k.index(64);
//! let one = k.index(1);
//! let groups = k.div_ceil(n, wg);
//! let mut k = k.launch_config([groups, one, one], [wg, one, one]);
//! let n = k.arg_index("n");
//! let x = k.arg_buffer("x", true);
//! let y = k.arg_buffer("y", false);
//! let zero = k.offset(0);
//! let xv = k.buffer_view(x, zero, [n.into()], Scalar::F32);
//! let yv = k.buffer_view(y, zero, [n.into()], Scalar::F32);
//! let i = k.dispatch_id(Axis::X);
//! let inside = k.cmp(IntPredicate::Ult, i, n);
//! k.if_(inside, |k| {
//!     let v = k.load(xv, &[i]);
//!     let two = k.float(2.0, Scalar::F32);
//!     let r = k.mulf(v, two);
//!     k.store(r, yv, &[i]);
//! });
//! let mut module = ModuleBuilder::new();
//! module.kernel(k.finish());
//! let built = module.finish();
//! assert!(built.text().contains("scalar.mulf"));
//!
//! let compiler = Compiler::for_target(None, &Target::lavapipe()).unwrap();
//! let artifact = compiler
//!     .built(&built)
//!     .unwrap()
//!     .compile(&Specialization::new("@double"))
//!     .unwrap();
//! assert_eq!(artifact.workgroup_size(), [64, 1, 1]);
//! ```

mod control;
mod gpu;
mod kernel;
mod memory;
mod ops;
pub mod passes;
mod value;
mod words;

pub use kernel::{Body, Built, ConfigKey, KernelBuilder, ModuleBuilder};
pub use passes::Fragment;
pub use value::{
    Any, Bool, Buffer, Data, Extent, Index, IndexLike, Mat, Num, Offset, Ty, Value, View,
};
pub use words::{AtomicRmw, Barrier, CoopLayout};

use crate::front::ast::{self, Form, Ident};
use crate::front::span::Span;
use std::collections::{HashMap, HashSet};
use value::{ident, type_expr};

/// A value's entry in the builder's table.
#[derive(Clone, Debug)]
struct Slot {
    name: String,
    ty: Ty,
}

/// The op-building half of a kernel under construction: the value table,
/// the names taken in the current function, and the stack of open regions
/// (the function's ops at the bottom, the innermost `scf` body on top).
///
/// [`KernelBuilder`] (the launch region) and [`Body`] (the kernel body)
/// dereference to it, so every op method is available in both; the
/// verifier refuses ops the launch region may not hold.
#[derive(Debug)]
pub struct Builder {
    values: Vec<Slot>,
    names: HashSet<String>,
    suffixes: HashMap<String, u32>,
    regions: Vec<Vec<ast::Op>>,
    hint: Option<String>,
    /// What a handle this builder never made resolves to.
    missing: Slot,
}

impl Builder {
    fn new() -> Self {
        Builder {
            values: Vec::new(),
            names: HashSet::new(),
            suffixes: HashMap::new(),
            regions: vec![Vec::new()],
            hint: None,
            missing: Slot {
                name: "undefined".into(),
                ty: Ty::Index,
            },
        }
    }

    /// Name the next value this builder defines `name` (made unique with a
    /// numeric suffix if taken), for readable printed kernels.
    pub fn hint(&mut self, name: &str) -> &mut Self {
        self.hint = Some(name.to_string());
        self
    }

    /// Use `name` as the hint unless one is pending.
    fn hint_if_none(&mut self, name: &str) {
        if self.hint.is_none() {
            self.hint = Some(name.to_string());
        }
    }

    /// The type of `v`.
    pub fn ty<K>(&self, v: Value<K>) -> &Ty {
        &self.slot(v.id).ty
    }

    /// The name `v` is printed with (without `%`).
    pub fn name<K>(&self, v: Value<K>) -> &str {
        &self.slot(v.id).name
    }

    fn slot(&self, id: u32) -> &Slot {
        // A handle from another builder may name a different value (the
        // verifier then reports the mismatch) or none: that prints as an
        // undefined name, which the verifier reports too.
        self.values.get(id as usize).unwrap_or(&self.missing)
    }

    /// A fresh name from `hint` (or the pending [`Builder::hint`]).
    fn fresh_name(&mut self, default: &str) -> String {
        let base = self.hint.take().unwrap_or_else(|| default.to_string());
        if self.names.insert(base.clone()) {
            return base;
        }
        // Suffixes continue from the last one given for this base, so a
        // kernel of many `%i`s names them in linear time.
        let next = self.suffixes.entry(base.clone()).or_insert(0);
        loop {
            *next += 1;
            let name = format!("{base}_{next}");
            if self.names.insert(name.clone()) {
                return name;
            }
        }
    }

    /// Define a new value of type `ty`.
    fn define<K>(&mut self, default: &str, ty: Ty) -> Value<K> {
        let name = self.fresh_name(default);
        self.values.push(Slot { name, ty });
        Value::new((self.values.len() - 1) as u32)
    }

    /// A value named exactly `name` when free (arguments).
    fn define_named<K>(&mut self, name: &str, ty: Ty) -> Value<K> {
        self.hint = Some(name.to_string());
        self.define(name, ty)
    }

    fn id<K>(&self, v: Value<K>) -> Ident {
        ident(self.slot(v.id).name.clone())
    }

    fn ids<K>(&self, vs: &[Value<K>]) -> Vec<Ident> {
        vs.iter().map(|v| self.id(*v)).collect()
    }

    fn texpr(&self, ty: &Ty) -> ast::TypeExpr {
        type_expr(ty, &|id| self.slot(id).name.clone())
    }

    fn type_of<K>(&self, v: Value<K>) -> ast::TypeExpr {
        self.texpr(&self.slot(v.id).ty.clone())
    }

    /// Append an op to the innermost open region.
    fn push(&mut self, results: Vec<Ident>, name: &str, tag: Option<&str>, form: Form) {
        let op = ast::Op {
            results,
            name: ident(name),
            tag: tag.map(ident),
            form,
            span: Span::default(),
        };
        if let Some(region) = self.regions.last_mut() {
            region.push(op);
        }
    }

    /// `name` over `operands` with `types` (and `-> to`), defining one
    /// result of type `result` (named by [`default_name`] unless hinted).
    fn operands_op<K, R>(
        &mut self,
        name: &str,
        tag: Option<&str>,
        operands: &[Value<K>],
        types: Vec<ast::TypeExpr>,
        to: Option<Ty>,
        result: Ty,
    ) -> Value<R> {
        let default = default_name(&result);
        let operands = self.ids(operands);
        let to = to.map(|t| self.texpr(&t));
        let r: Value<R> = self.define(default, result);
        let results = vec![self.id(r)];
        self.push(
            results,
            name,
            tag,
            Form::Operands {
                operands,
                types,
                to,
            },
        );
        r
    }

    /// Open a region; its ops are collected until [`Builder::close`].
    fn open(&mut self) {
        self.regions.push(Vec::new());
    }

    fn close(&mut self) -> ast::Region {
        ast::Region {
            ops: if self.regions.len() > 1 {
                self.regions.pop().unwrap_or_default()
            } else {
                Vec::new()
            },
            span: Span::default(),
        }
    }

    /// The function's ops, leaving the builder ready for the next function
    /// (whose names start afresh).
    fn take_function(&mut self) -> Vec<ast::Op> {
        // The next function reuses names from the start, so a handle of
        // this one would print as whatever value of the next function took
        // its name. Renamed, it prints as a name no value has, which the
        // verifier reports as undefined.
        for slot in &mut self.values {
            slot.name = format!("{}{}", slot.name, ENDED_FUNCTION);
        }
        self.names.clear();
        self.suffixes.clear();
        self.regions.truncate(1);
        std::mem::take(&mut self.regions[0])
    }
}

/// Marks the printed name of a value of a function already ended (the
/// launch region, used from the body).
const ENDED_FUNCTION: &str = "__of_the_launch_region";

/// The name of a value of type `ty` when no hint is given.
fn default_name(ty: &Ty) -> &'static str {
    match ty {
        Ty::Index => "i",
        Ty::Offset => "off",
        Ty::I1 => "p",
        Ty::Scalar(_) | Ty::Vector { .. } => "x",
        Ty::Buffer => "buf",
        Ty::View { .. } => "v",
        Ty::CoopMat(_) => "mat",
    }
}

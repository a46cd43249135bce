//! Lowering: one specialised `ir::Kernel` to a `naga::Module` with a single
//! compute entry point.
//!
//! - Buffer arguments become storage bindings (group 0, binding = position
//!   among the buffer arguments), read-only unless the kernel writes them;
//!   their element declaration follows the rule documented in `plan.rs`.
//! - Scalar arguments become one push-constant block, loaded once at entry.
//! - `index` and `offset` are `u32`; arithmetic on them wraps like the
//!   device's, views index row-major from a base element
//!   `byte_offset / element_bytes`.
//! - Values leaving `scf.if`/`scf.for` regions travel through function
//!   locals (naga scopes expressions to the block that emits them).

mod builder;
mod control;
mod coop;
mod expr;
mod kernel_ops;
mod memory;
pub(crate) mod plan;
mod types;

use crate::artifact::{Access, Binding, PushConstant, ScalarType};
use crate::diag::Diagnostics;
use crate::front::span::Span;
use crate::ir::{Block, BufferRef, Kernel, OpKind, Scalar, Type, ValueId};
use builder::FnBuilder;
use hrx_core::{Error, Result, Target};
use naga::{Expression, Handle};
use plan::{Layout, Plan};
use std::collections::HashMap;

/// Diagnostic code: a kernel uses something the target or the lowering
/// does not support (f16 without 16-bit storage, vector push constants...).
pub const E_UNSUPPORTED: &str = "E0604";
/// Diagnostic code: workgroup memory too large, or of non-constant size.
pub const E_WORKGROUP_MEMORY: &str = "E0605";
/// Diagnostic code: a view whose constant byte offset is not a multiple of
/// its element size, or whose static extent does not fit 32 bits.
pub const E_VIEW_OFFSET: &str = "E0606";
/// Diagnostic code: an operand known at compile time that the op cannot
/// take (integer division or remainder by zero, a shift by the bit width or
/// more, a vector lane past the end).
pub const E_CONSTANT_OPERAND: &str = "E0607";
/// Diagnostic code: an IR invariant the verifier promised does not hold
/// (a compiler bug, reported instead of panicking).
pub const E_INTERNAL: &str = "E0600";

/// The result of lowering one kernel.
pub struct Lowered {
    /// The module, with one compute entry point named after the kernel.
    pub module: naga::Module,
    /// Entry point name.
    pub entry_point: String,
    /// Storage bindings in buffer-argument order.
    pub bindings: Vec<Binding>,
    /// Push-constant layout, in scalar-argument order.
    pub push_constants: Vec<PushConstant>,
    /// Push-constant block size in bytes.
    pub push_constant_bytes: u32,
}

/// Marker for "a diagnostic was recorded; stop lowering".
pub(crate) struct Fail;
pub(crate) type R<T> = std::result::Result<T, Fail>;

/// A lowered loom value.
#[derive(Clone)]
pub(crate) enum Val {
    /// Not defined yet (or a value with no device form).
    None,
    /// A scalar or vector expression.
    Expr(Handle<Expression>),
    /// A view.
    View(memory::ViewVal),
}

/// A declared buffer: its global and how it is laid out.
#[derive(Clone, Copy)]
pub(crate) struct Global {
    pub(crate) expr: Handle<Expression>,
    pub(crate) layout: Layout,
    pub(crate) atomic: bool,
}

pub(crate) struct Lowerer<'k> {
    pub(crate) kernel: &'k Kernel,
    pub(crate) target: &'k Target,
    pub(crate) module: naga::Module,
    pub(crate) fb: FnBuilder,
    pub(crate) values: Vec<Val>,
    pub(crate) globals: HashMap<(bool, usize), Global>,
    pub(crate) plan: Plan,
    pub(crate) known: Vec<Option<u32>>,
    pub(crate) builtins: HashMap<naga::BuiltIn, u32>,
    pub(crate) arguments: Vec<naga::FunctionArgument>,
    pub(crate) workgroup_size: [u32; 3],
    pub(crate) workgroup_bytes: u64,
    pub(crate) diags: Diagnostics,
}

/// Lower `kernel` (already specialised: no `config.value` left) for `target`.
pub fn lower(
    kernel: &Kernel,
    workgroup_size: [u32; 3],
    target: &Target,
    source: &str,
) -> Result<Lowered> {
    let eval = kernel.evaluate(None, &|_| None);
    let known: Vec<Option<u32>> = (0..kernel.value_types.len())
        .map(|i| eval.get(kernel, ValueId(i as u32)).ok())
        .collect();
    let mut diags = Diagnostics::new();
    let plan = Plan::build(
        kernel,
        &|v| known.get(v.index()).copied().flatten(),
        &mut diags,
    );
    if !diags.is_empty() {
        return Err(diags.into_error(source));
    }
    let mut l = Lowerer {
        kernel,
        target,
        module: naga::Module::default(),
        fb: FnBuilder::new(),
        values: vec![Val::None; kernel.value_types.len()],
        globals: HashMap::new(),
        plan,
        known,
        builtins: HashMap::new(),
        arguments: Vec::new(),
        workgroup_size,
        workgroup_bytes: 0,
        diags,
    };
    match l.run() {
        Ok(out) if l.diags.is_empty() => Ok(out),
        _ if l.diags.is_empty() => Err(Error::msg("lowering failed without a diagnostic")),
        _ => Err(l.diags.into_error(source)),
    }
}

impl<'k> Lowerer<'k> {
    /// Record a diagnostic and return the stop marker.
    pub(crate) fn fail(&mut self, span: Span, code: &'static str, msg: impl Into<String>) -> Fail {
        self.diags.error(span, code, msg);
        Fail
    }

    /// The value of `id` when it is known at compile time (after
    /// specialization).
    pub(crate) fn known_value(&self, id: ValueId) -> Option<u32> {
        self.known.get(id.index()).copied().flatten()
    }

    /// An internal error: an IR invariant broke.
    pub(crate) fn bug(&mut self, span: Span, msg: impl Into<String>) -> Fail {
        let msg = format!("internal compiler error: {}", msg.into());
        self.fail(span, E_INTERNAL, msg)
    }

    fn run(&mut self) -> R<Lowered> {
        self.check_f16()?;
        self.check_coop()?;
        let bindings = self.declare_buffers();
        let (push_constants, push_constant_bytes) = self.declare_scalars()?;
        let body = &self.kernel.body;
        self.block(body, None)?;
        let (block, expressions, locals) =
            std::mem::replace(&mut self.fb, FnBuilder::new()).finish();
        let name = self.kernel.name.clone();
        let function = naga::Function {
            name: Some(name.clone()),
            arguments: std::mem::take(&mut self.arguments),
            result: None,
            local_variables: locals,
            expressions,
            named_expressions: Default::default(),
            body: block,
            diagnostic_filter_leaf: None,
        };
        let mut module = std::mem::take(&mut self.module);
        module.entry_points.push(naga::EntryPoint {
            name: name.clone(),
            stage: naga::ShaderStage::Compute,
            early_depth_test: None,
            workgroup_size: self.workgroup_size,
            workgroup_size_overrides: None,
            function,
            mesh_info: None,
            task_payload: None,
            incoming_ray_payload: None,
        });
        Ok(Lowered {
            module,
            entry_point: name,
            bindings,
            push_constants,
            push_constant_bytes,
        })
    }

    /// f16 values need both f16 arithmetic and 16-bit storage on the target.
    fn check_f16(&mut self) -> R<()> {
        if self.target.shader_f16 && self.target.storage_16bit {
            return Ok(());
        }
        let uses_f16 = self.kernel.value_types.iter().any(|t| match t {
            Type::View(v) => v.elem == Scalar::F16,
            other => other.element() == Some(Scalar::F16),
        });
        if uses_f16 {
            let span = self.kernel.span;
            let msg = format!(
                "kernel @{} uses f16, but target `{}` lacks shaderFloat16 or 16-bit storage",
                self.kernel.name, self.target.name
            );
            return Err(self.fail(span, E_UNSUPPORTED, msg));
        }
        Ok(())
    }

    /// Declare one storage binding per buffer argument.
    fn declare_buffers(&mut self) -> Vec<Binding> {
        let mut bindings = Vec::new();
        let args = &self.kernel.args;
        for (n, arg) in args.iter().enumerate() {
            if arg.ty != Type::Buffer {
                continue;
            }
            let index = bindings.len() as u32;
            let written = self.kernel.buffer_access.get(n).is_some_and(|a| a.written);
            let plan = self.plan.get(BufferRef::Arg(n)).cloned();
            if let Some(p) = &plan {
                let g = types::storage_global(
                    &mut self.module,
                    &arg.name,
                    index,
                    p.layout,
                    p.atomic,
                    written,
                );
                let expr = self.fb.expr(Expression::GlobalVariable(g));
                self.globals.insert(
                    (false, n),
                    Global {
                        expr,
                        layout: p.layout,
                        atomic: p.atomic,
                    },
                );
            }
            let element_bytes = plan.as_ref().map_or(4, |p| p.layout.element_bytes());
            bindings.push(Binding {
                index,
                name: arg.name.clone(),
                access: if written {
                    Access::ReadWrite
                } else {
                    Access::Read
                },
                min_bytes: plan.as_ref().and_then(|p| p.min_bytes),
                element_bytes,
                alignment: element_bytes,
            });
        }
        bindings
    }

    /// Declare the push-constant block and load every scalar at entry.
    fn declare_scalars(&mut self) -> R<(Vec<PushConstant>, u32)> {
        let mut members = Vec::new();
        let mut layout = Vec::new();
        let mut ids = Vec::new();
        for arg in &self.kernel.args {
            let (ty, s) = match arg.ty {
                Type::Buffer => continue,
                Type::Index => (ScalarType::Index, naga::Scalar::U32),
                Type::Offset => (ScalarType::Offset, naga::Scalar::U32),
                Type::I1 => (ScalarType::Bool, naga::Scalar::U32),
                Type::I32 => (ScalarType::I32, naga::Scalar::I32),
                Type::U32 => (ScalarType::U32, naga::Scalar::U32),
                Type::F32 => (ScalarType::F32, naga::Scalar::F32),
                ref other => {
                    let msg = format!(
                        "launch argument %{} has type {other:?}; push constants hold only \
                         index, offset, i1, i32, u32 and f32 (pass f16 as f32)",
                        arg.name
                    );
                    return Err(self.fail(arg.span, E_UNSUPPORTED, msg));
                }
            };
            let offset = 4 * members.len() as u32;
            layout.push(PushConstant {
                name: arg.name.clone(),
                ty,
                offset,
            });
            members.push((arg.name.clone(), s));
            ids.push((arg.id, ty));
        }
        let bytes = 4 * members.len() as u32;
        if bytes > self.target.push_constant_bytes {
            let msg = format!(
                "{bytes} bytes of scalar arguments exceed the target's {} push-constant bytes",
                self.target.push_constant_bytes
            );
            return Err(self.fail(self.kernel.span, E_UNSUPPORTED, msg));
        }
        if members.is_empty() {
            return Ok((layout, 0));
        }
        let g = types::push_constant_global(&mut self.module, &members);
        let base = self.fb.expr(Expression::GlobalVariable(g));
        for (i, (id, ty)) in ids.into_iter().enumerate() {
            let pointer = self.fb.expr(Expression::AccessIndex {
                base,
                index: i as u32,
            });
            let mut value = self.fb.expr(Expression::Load { pointer });
            if ty == ScalarType::Bool {
                let zero = self.lit_u32(0);
                value = self.fb.expr(Expression::Binary {
                    op: naga::BinaryOperator::NotEqual,
                    left: value,
                    right: zero,
                });
            }
            self.set(id, Val::Expr(value));
        }
        Ok((layout, bytes))
    }

    /// Define `id`.
    pub(crate) fn set(&mut self, id: ValueId, v: Val) {
        if let Some(slot) = self.values.get_mut(id.index()) {
            *slot = v;
        }
    }

    /// The expression of a scalar or vector value.
    pub(crate) fn val(&mut self, id: ValueId, span: Span) -> R<Handle<Expression>> {
        match self.values.get(id.index()) {
            Some(Val::Expr(h)) => Ok(*h),
            _ => Err(self.bug(span, format!("value #{} used before definition", id.0))),
        }
    }

    /// The loom type of a value.
    pub(crate) fn ty_of(&mut self, id: ValueId, span: Span) -> R<Type> {
        match self.kernel.ty(id) {
            Some(t) => Ok(t.clone()),
            None => Err(self.bug(span, format!("value #{} has no type", id.0))),
        }
    }

    /// The single result of an op.
    pub(crate) fn result(&mut self, results: &[ValueId], span: Span) -> R<ValueId> {
        match results.first() {
            Some(r) => Ok(*r),
            None => Err(self.bug(span, "op without a result")),
        }
    }

    /// Lower a block. `yields` are the locals an ending `scf.yield` stores
    /// into (the enclosing region's results or loop-carried values).
    pub(crate) fn block(
        &mut self,
        block: &Block,
        yields: Option<&[Handle<naga::LocalVariable>]>,
    ) -> R<()> {
        for op in &block.ops {
            self.fb.span = naga::Span::new(op.span.start as u32, op.span.end as u32);
            match &op.kind {
                OpKind::Yield(values) => self.yield_to(values, yields, op.span)?,
                OpKind::If {
                    cond,
                    then,
                    otherwise,
                } => self.lower_if(op, *cond, then, otherwise.as_ref())?,
                OpKind::For { .. } => self.lower_for(op)?,
                OpKind::Return => self.fb.stmt(naga::Statement::Return { value: None }),
                _ => self.op(op)?,
            }
        }
        Ok(())
    }
}

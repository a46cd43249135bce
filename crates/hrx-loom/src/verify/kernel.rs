//! One kernel: its two signatures, the launch region and its launch
//! config, the body, and the passes over the finished IR.

use super::builder::Builder;
use super::control::Role;
use super::scope::Scopes;
use super::{access, uniformity};
use crate::diag::{Diagnostics, codes};
use crate::front::ast::{self, Form};
use crate::ir::{self, Type, ValueId};
use std::collections::HashMap;

/// Build and check one kernel; `None` when any diagnostic was raised.
pub(super) fn kernel(
    def: &ast::KernelDef,
    diags: &mut Diagnostics,
    configs: &HashMap<String, Type>,
) -> Option<ir::Kernel> {
    let before = diags.len();
    let mut b = Builder::new(diags, configs);
    b.in_launch = true;
    let workload_args = b.args(&def.workload, true);
    let launch = b.block(&def.launch_ops, Role::Launch, def.name.span);
    if !b.launch_seen {
        b.error(
            def.name.span,
            codes::MISSING_LAUNCH_CONFIG,
            format!(
                "kernel @{} has no `kernel.launch.config` in its launch region",
                def.name.text
            ),
        );
    }
    // The body is a separate function: workload values are not visible.
    b.scopes = Scopes::new();
    b.in_launch = false;
    b.workload_names = def.workload.iter().map(|a| a.name.text.clone()).collect();
    let args = b.args(&def.args, false);
    let end = def.body.last().map_or(def.name.span, |op| op.span);
    let body = b.block(&def.body, Role::Body, end);
    let launch_config = b.launch_config.take();
    let failed = b.diags.len() != before || b.diags.is_full();
    let (Some(launch_config), false) = (launch_config, failed) else {
        return None;
    };
    let value_types: Vec<Type> = b
        .types
        .iter()
        .map(|t| t.clone().unwrap_or(Type::Index))
        .collect();
    let n = value_types.len();
    let mut kernel = ir::Kernel {
        name: def.name.text.clone(),
        span: def.span,
        workload_args,
        launch: launch.ops,
        launch_config,
        buffer_access: vec![ir::BufferAccess::default(); args.len()],
        args,
        body,
        value_types,
        value_names: std::mem::take(&mut b.names),
        buffer_of: vec![None; n],
    };
    access::infer(&mut kernel, b.diags);
    uniformity::check(&kernel, b.diags);
    (b.diags.len() == before).then_some(kernel)
}

impl Builder<'_> {
    /// Declare a signature's arguments.
    fn args(&mut self, list: &[ast::ArgDecl], workload: bool) -> Vec<ir::Arg> {
        let mut out = Vec::with_capacity(list.len());
        for a in list {
            let ty = self.resolve_type(&a.ty);
            let allowed = match &ty {
                None => true,
                Some(Type::Index) => true,
                Some(Type::Offset | Type::I32 | Type::U32 | Type::F32 | Type::Buffer) => !workload,
                Some(_) => false,
            };
            if !allowed && let Some(t) = &ty {
                let msg = if workload {
                    format!("workload arguments are index values, not {}", self.show(t))
                } else {
                    format!(
                        "launch arguments are buffer, index, offset, i32, u32 or f32, not {}",
                        self.show(t)
                    )
                };
                self.error(a.ty.span, codes::UNSUPPORTED_TYPE, msg);
            }
            let mut readonly = false;
            for attr in &a.attrs {
                if attr.text == "readonly" && ty == Some(Type::Buffer) {
                    readonly = true;
                } else {
                    self.error(
                        attr.span,
                        codes::UNKNOWN_WORD,
                        format!("unknown argument attribute `{}` (only buffer arguments take `readonly`)", attr.text),
                    );
                }
            }
            let id = self.define(Some(&a.name), ty.clone(), a.name.span);
            out.push(ir::Arg {
                name: a.name.text.clone(),
                id,
                ty: ty.unwrap_or(Type::Index),
                readonly,
                span: a.name.span.to(a.ty.span),
            });
        }
        out
    }

    /// `kernel.launch.config workgroups(..) workgroup_size(..) : index`.
    pub(super) fn launch_config(&mut self, op: &ast::Op) {
        let Form::LaunchConfig {
            workgroups,
            workgroup_size,
            ty,
        } = &op.form
        else {
            return;
        };
        if self.launch_seen {
            self.error(
                op.name.span,
                codes::DUPLICATE_LAUNCH_CONFIG,
                "a second `kernel.launch.config`; a kernel has exactly one",
            );
            return;
        }
        self.launch_seen = true;
        if !op.results.is_empty() {
            self.error(
                op.span,
                codes::RESULT_COUNT,
                "`kernel.launch.config` produces no results",
            );
        }
        if let Some(t) = self.resolve_type(ty)
            && t != Type::Index
        {
            self.error(
                ty.span,
                codes::TYPE_MISMATCH,
                format!(
                    "type mismatch: launch config values are index, not {}",
                    self.show(&t)
                ),
            );
        }
        if workgroups.len() != 3 || workgroup_size.len() != 3 {
            self.error(
                op.name.span,
                codes::OPERAND_COUNT,
                format!(
                    "`workgroups(x, y, z) workgroup_size(x, y, z)` take 3 values each, {} and {} given",
                    workgroups.len(),
                    workgroup_size.len()
                ),
            );
            return;
        }
        let grid: Vec<Option<ValueId>> = workgroups
            .iter()
            .map(|v| self.use_typed(v, &Type::Index))
            .collect();
        let mut size = Vec::with_capacity(3);
        for v in workgroup_size {
            let id = self.use_typed(v, &Type::Index);
            if let Some(id) = id
                && !self.is_static.get(id.index()).copied().unwrap_or(false)
            {
                self.error(
                    v.span,
                    codes::DYNAMIC_WORKGROUP_SIZE,
                    format!(
                        "workgroup size %{} must be a compile-time constant (computed from constants and config values only, not workload arguments)",
                        v.text
                    ),
                );
            }
            size.push(id);
        }
        let to3 = |v: Vec<Option<ValueId>>| -> Option<[ValueId; 3]> {
            let v: Option<Vec<ValueId>> = v.into_iter().collect();
            v?.try_into().ok()
        };
        if let (Some(workgroups), Some(workgroup_size)) = (to3(grid), to3(size)) {
            self.launch_config = Some(ir::LaunchConfig {
                workgroups,
                workgroup_size,
                span: op.span,
            });
        }
    }
}

//! The verifier: syntax tree to checked [`ir::Module`].
//!
//! Checked here, each with its own error code (see [`crate::diag::codes`]):
//! names and SSA dominance (`scope`), types with no implicit casts and
//! operand counts (`arith`, `memory`, `kernel_ops`, `control`), the
//! launch region (index arithmetic, workload arguments and config values
//! only; exactly one `kernel.launch.config`; a compile-time workgroup size),
//! config keys, symbol uniqueness, buffer access and the read-only rule
//! (`access`), and the uniformity of barriers and subgroup collectives
//! (`uniformity`). Region nesting is bounded by [`MAX_DEPTH`].

mod access;
mod arith;
mod builder;
mod control;
mod coop;
mod kernel;
mod kernel_ops;
mod memory;
mod ops;
mod scope;
mod uniformity;
mod words;

use crate::diag::{Diagnostics, codes, diagnostic};
use crate::front::ast;
use crate::ir::{self, Type};
use hrx_core::Result;
use std::collections::HashMap;

/// Deepest region nesting the verifier accepts (the parser stops earlier;
/// this guards trees built by other means).
pub const MAX_DEPTH: usize = 128;

/// Verify a parsed module: every independent error is reported together as
/// one [`hrx_core::Error::Compile`].
pub fn verify(module: &ast::Module, source: &str) -> Result<ir::Module> {
    let mut diags = Diagnostics::new();
    let mut out = ir::Module::default();
    let mut config_types: HashMap<String, Type> = HashMap::new();
    let mut first_at: HashMap<(bool, String), crate::front::Span> = HashMap::new();
    let mut duplicate = |diags: &mut Diagnostics, is_kernel: bool, name: &ast::Ident| {
        if let Some(first) = first_at.get(&(is_kernel, name.text.clone())) {
            let d = diagnostic(source, *first, "", String::new());
            diags.error(
                name.span,
                codes::DUPLICATE_SYMBOL,
                format!(
                    "duplicate symbol @{} (first defined at {}:{})",
                    name.text, d.line, d.column
                ),
            );
            return true;
        }
        first_at.insert((is_kernel, name.text.clone()), name.span);
        false
    };
    // Config declarations first: kernels may use keys declared after them.
    for item in &module.items {
        let ast::Item::Config(c) = item else { continue };
        if duplicate(&mut diags, false, &c.key) {
            continue;
        }
        let empty = HashMap::new();
        let ty = builder::Builder::new(&mut diags, &empty).resolve_type(&c.ty);
        let Some(ty) = ty else { continue };
        if !matches!(
            ty,
            Type::Index | Type::Offset | Type::I1 | Type::I32 | Type::U32 | Type::F32
        ) {
            diags.error(
                c.ty.span,
                codes::CONFIG_TYPE,
                "config values are index, offset, i1, i32, u32 or f32",
            );
            continue;
        }
        match arith::check_literal(c.default.value, &ty) {
            Ok(default) => {
                config_types.insert(c.key.text.clone(), ty.clone());
                out.configs.push(ir::ConfigDecl {
                    key: c.key.text.clone(),
                    ty,
                    default,
                    span: c.span,
                });
            }
            Err(why) => diags.error(
                c.default.span,
                codes::LITERAL_TYPE,
                format!(
                    "default `{}` does not fit the declared type: {why}",
                    c.default.text
                ),
            ),
        }
    }
    for item in &module.items {
        let ast::Item::Kernel(k) = item else { continue };
        if duplicate(&mut diags, true, &k.name) {
            continue;
        }
        if let Some(kernel) = kernel::kernel(k, &mut diags, &config_types) {
            out.kernels.push(kernel);
        }
        if diags.is_full() {
            break;
        }
    }
    diags.finish(source, out)
}

//! The printer: a syntax tree back to canonical loom text.
//!
//! Canonical form: two-space indentation, one op per line, literals as they
//! were written, static view dimensions bare (`view<16x[%n]xf32>`). Parsing
//! the output gives back the same tree up to spans, so printing it again
//! gives the same text.

use super::ast::{ArgDecl, DimExpr, Form, Ident, Item, Module, Op, Region, TypeExpr, TypeKind};
use std::fmt::Write;

/// Print a module as canonical loom text.
pub fn print(module: &Module) -> String {
    let mut out = String::new();
    for (i, item) in module.items.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match item {
            Item::Config(c) => {
                let _ = writeln!(
                    out,
                    "config.decl @{} = {} : {}",
                    c.key.text,
                    c.default.text,
                    ty(&c.ty)
                );
            }
            Item::Kernel(k) => {
                let _ = writeln!(out, "kernel.def @{}({}) {{", k.name.text, args(&k.workload));
                ops(&mut out, &k.launch_ops, 1);
                let _ = writeln!(out, "}} launch({}) {{", args(&k.args));
                ops(&mut out, &k.body, 1);
                out.push_str("}\n");
            }
        }
    }
    out
}

fn args(list: &[ArgDecl]) -> String {
    let parts: Vec<String> = list
        .iter()
        .map(|a| {
            let mut s = format!("%{}: {}", a.name.text, ty(&a.ty));
            if !a.attrs.is_empty() {
                let words: Vec<&str> = a.attrs.iter().map(|w| w.text.as_str()).collect();
                let _ = write!(s, " {{{}}}", words.join(", "));
            }
            s
        })
        .collect();
    parts.join(", ")
}

/// Print a type.
pub fn ty(t: &TypeExpr) -> String {
    match &t.kind {
        TypeKind::Named(n) => n.clone(),
        TypeKind::Vector { len, elem } => format!("vector<{len}x{}>", ty(elem)),
        TypeKind::CoopMat {
            rows,
            cols,
            elem,
            role,
        } => format!("coopmat<{rows}x{cols}x{}, {}>", ty(elem), role.text),
        TypeKind::View { dims, elem } => {
            let mut s = String::from("view<");
            for d in dims {
                match d {
                    DimExpr::Static(n, _) => {
                        let _ = write!(s, "{n}x");
                    }
                    DimExpr::Dynamic(v) => {
                        let _ = write!(s, "[%{}]x", v.text);
                    }
                }
            }
            let _ = write!(s, "{}>", ty(elem));
            s
        }
    }
}

fn values(list: &[Ident]) -> String {
    let parts: Vec<String> = list.iter().map(|v| format!("%{}", v.text)).collect();
    parts.join(", ")
}

fn types(list: &[TypeExpr]) -> String {
    let parts: Vec<String> = list.iter().map(ty).collect();
    parts.join(", ")
}

fn ops(out: &mut String, list: &[Op], depth: usize) {
    for op in list {
        self::op(out, op, depth);
    }
}

fn region(out: &mut String, r: &Region, depth: usize) {
    out.push_str("{\n");
    ops(out, &r.ops, depth + 1);
    out.push_str(&"  ".repeat(depth));
    out.push('}');
}

fn op(out: &mut String, op: &Op, depth: usize) {
    out.push_str(&"  ".repeat(depth));
    if !op.results.is_empty() {
        let _ = write!(out, "{} = ", values(&op.results));
    }
    out.push_str(&op.name.text);
    if let Some(tag) = &op.tag {
        let _ = write!(out, "<{}>", tag.text);
    }
    let mut rest = String::new();
    let typed = |rest: &mut String, list: &[TypeExpr], to: &Option<TypeExpr>| {
        if !list.is_empty() {
            let _ = write!(rest, " : {}", types(list));
        }
        if let Some(to) = to {
            let _ = write!(rest, " -> {}", ty(to));
        }
    };
    match &op.form {
        Form::Constant { value, ty: t } => {
            let _ = write!(rest, " {} : {}", value.text, ty(t));
        }
        Form::Operands {
            operands,
            types: list,
            to,
        } => {
            if !operands.is_empty() {
                let _ = write!(rest, " {}", values(operands));
            }
            typed(&mut rest, list, to);
        }
        Form::Compare {
            predicate,
            operands,
            ty: t,
        } => {
            let _ = write!(
                rest,
                " {}, {} : {}",
                predicate.text,
                values(operands),
                ty(t)
            );
        }
        Form::Access {
            value,
            base,
            indices,
            types: list,
            to,
        } => {
            rest.push(' ');
            if let Some(v) = value {
                let _ = write!(rest, "%{}, ", v.text);
            }
            let _ = write!(rest, "%{}[{}]", base.text, values(indices));
            typed(&mut rest, list, to);
        }
        Form::Alloca {
            align,
            bytes,
            ty: t,
        } => {
            let _ = write!(rest, " align({}) %{} : {}", align.text, bytes.text, ty(t));
        }
        Form::Barrier { attrs } => {
            for (name, arg) in attrs {
                let _ = write!(rest, " {}({})", name.text, arg.text);
            }
        }
        Form::ConfigValue { key, ty: t } => {
            let _ = write!(rest, " @{} : {}", key.text, ty(t));
        }
        Form::LaunchConfig {
            workgroups,
            workgroup_size,
            ty: t,
        } => {
            let _ = write!(
                rest,
                " workgroups({}) workgroup_size({}) : {}",
                values(workgroups),
                values(workgroup_size),
                ty(t)
            );
        }
        Form::Bare => {}
        Form::If {
            cond,
            results,
            then,
            otherwise,
        } => {
            let _ = write!(rest, " %{}", cond.text);
            result_list(&mut rest, results);
            rest.push(' ');
            out.push_str(&rest);
            rest.clear();
            region(out, then, depth);
            if let Some(e) = otherwise {
                out.push_str(" else ");
                region(out, e, depth);
            }
        }
        Form::For {
            iv,
            lower,
            upper,
            step,
            iter_args,
            results,
            body,
        } => {
            let _ = write!(
                rest,
                " %{} = [%{} to %{} step %{}]",
                iv.text, lower.text, upper.text, step.text
            );
            if !iter_args.is_empty() {
                let parts: Vec<String> = iter_args
                    .iter()
                    .map(|a| format!("%{} = %{} : {}", a.name.text, a.init.text, ty(&a.ty)))
                    .collect();
                let _ = write!(rest, "({})", parts.join(", "));
            }
            result_list(&mut rest, results);
            rest.push(' ');
            out.push_str(&rest);
            rest.clear();
            region(out, body, depth);
        }
    }
    out.push_str(&rest);
    out.push('\n');
}

fn result_list(out: &mut String, results: &[TypeExpr]) {
    if !results.is_empty() {
        let _ = write!(out, " -> ({})", types(results));
    }
}

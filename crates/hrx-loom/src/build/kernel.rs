//! Kernels and modules: the launch region ([`KernelBuilder`]), the body
//! ([`Body`]), and the module they go into ([`ModuleBuilder`]).
//!
//! The two halves are two types, so the order of a kernel definition
//! (workload arguments and launch region, exactly one launch config, then
//! launch arguments and body, then one return) holds by construction.

use super::Builder;
use super::value::{Buffer, Index, Num, Ty, Value, ident};
use crate::front::ast::{self, ArgDecl, ConfigDecl, Form, Item, KernelDef, LiteralTok};
use crate::front::span::Span;
use crate::ir::{Literal, Scalar};
use std::ops::{Deref, DerefMut};

/// A kernel's launch region under construction: its workload arguments
/// and the index arithmetic that computes the grid, ended by
/// [`KernelBuilder::launch_config`].
#[derive(Debug)]
pub struct KernelBuilder {
    name: String,
    builder: Builder,
    workload: Vec<ArgDecl>,
}

impl KernelBuilder {
    /// A kernel named `name` (without `@`).
    pub fn new(name: &str) -> Self {
        KernelBuilder {
            name: name.to_string(),
            builder: Builder::new(),
            workload: Vec::new(),
        }
    }

    /// The next workload argument (what the host passes to size the grid).
    pub fn workload(&mut self, name: &str) -> Value<Index> {
        let v = self.builder.define_named(name, Ty::Index);
        self.workload.push(arg_decl(&self.builder, v, false));
        v
    }

    /// End the launch region with `kernel.launch.config`: the grid in
    /// workgroups and the workgroup size. The body starts here.
    pub fn launch_config(
        mut self,
        workgroups: [Value<Index>; 3],
        workgroup_size: [Value<Index>; 3],
    ) -> Body {
        let form = Form::LaunchConfig {
            workgroups: self.builder.ids(&workgroups),
            workgroup_size: self.builder.ids(&workgroup_size),
            ty: self.builder.texpr(&Ty::Index),
        };
        self.builder
            .push(Vec::new(), "kernel.launch.config", None, form);
        let launch_ops = self.builder.take_function();
        Body {
            name: self.name,
            builder: self.builder,
            workload: self.workload,
            launch_ops,
            args: Vec::new(),
        }
    }
}

impl Deref for KernelBuilder {
    type Target = Builder;
    fn deref(&self) -> &Builder {
        &self.builder
    }
}

impl DerefMut for KernelBuilder {
    fn deref_mut(&mut self) -> &mut Builder {
        &mut self.builder
    }
}

/// A kernel's body under construction: its launch arguments (the device
/// ABI: buffers become bindings in order, the rest push constants) and
/// ops, ended by [`Body::finish`].
#[derive(Debug)]
pub struct Body {
    name: String,
    builder: Builder,
    workload: Vec<ArgDecl>,
    launch_ops: Vec<ast::Op>,
    args: Vec<ArgDecl>,
}

impl Body {
    /// The next launch argument, of type `ty`.
    pub fn arg<K>(&mut self, name: &str, ty: Ty) -> Value<K> {
        let v = self.builder.define_named(name, ty);
        self.args.push(arg_decl(&self.builder, v, false));
        v
    }

    /// The next launch argument, an `index`.
    pub fn arg_index(&mut self, name: &str) -> Value<Index> {
        self.arg(name, Ty::Index)
    }

    /// The next launch argument, a scalar of type `ty`.
    pub fn arg_scalar(&mut self, name: &str, ty: Scalar) -> Value<Num> {
        self.arg(name, Ty::Scalar(ty))
    }

    /// The next launch argument, a buffer; `readonly` declares it
    /// `{readonly}` (the verifier then refuses stores through it).
    pub fn arg_buffer(&mut self, name: &str, readonly: bool) -> Value<Buffer> {
        let v = self.builder.define_named(name, Ty::Buffer);
        self.args.push(arg_decl(&self.builder, v, readonly));
        v
    }

    /// End the body with `kernel.return`: the finished kernel definition.
    pub fn finish(mut self) -> KernelDef {
        self.builder
            .push(Vec::new(), "kernel.return", None, Form::Bare);
        let body = self.builder.take_function();
        KernelDef {
            name: ident(self.name),
            workload: self.workload,
            launch_ops: self.launch_ops,
            args: self.args,
            body,
            span: Span::default(),
        }
    }
}

impl Deref for Body {
    type Target = Builder;
    fn deref(&self) -> &Builder {
        &self.builder
    }
}

impl DerefMut for Body {
    fn deref_mut(&mut self) -> &mut Builder {
        &mut self.builder
    }
}

fn arg_decl<K>(builder: &Builder, v: Value<K>, readonly: bool) -> ArgDecl {
    ArgDecl {
        name: builder.id(v),
        ty: builder.type_of(v),
        attrs: if readonly {
            vec![ident("readonly")]
        } else {
            Vec::new()
        },
    }
}

/// A config key declared in a module (`config.decl @key = default :
/// index`), read in its kernels with [`Builder::config_value`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigKey(pub(super) String);

/// A module under construction: config declarations and kernels in order.
#[derive(Debug, Default)]
pub struct ModuleBuilder {
    items: Vec<Item>,
}

impl ModuleBuilder {
    /// An empty module.
    pub fn new() -> Self {
        ModuleBuilder::default()
    }

    /// Declare the `index` config key `key` with `default`.
    pub fn config(&mut self, key: &str, default: u64) -> ConfigKey {
        self.items.push(Item::Config(ConfigDecl {
            key: ident(key),
            default: LiteralTok {
                text: default.to_string(),
                value: Literal::Int(i64::try_from(default).unwrap_or(i64::MAX)),
                span: Span::default(),
            },
            ty: ast::TypeExpr {
                kind: ast::TypeKind::Named("index".into()),
                span: Span::default(),
            },
            span: Span::default(),
        }));
        ConfigKey(key.to_string())
    }

    /// Add a finished kernel.
    pub fn kernel(&mut self, kernel: KernelDef) -> &mut Self {
        self.items.push(Item::Kernel(kernel));
        self
    }

    /// The finished module.
    pub fn finish(self) -> Built {
        let syntax = ast::Module { items: self.items };
        let text = crate::front::print(&syntax);
        Built { syntax, text }
    }
}

/// A built module: its syntax tree and the canonical text it prints as
/// (what the compiler parses, verifies and reports diagnostics against).
#[derive(Clone, Debug, PartialEq)]
pub struct Built {
    syntax: ast::Module,
    text: String,
}

impl Built {
    /// A module holding the one kernel `kernel`.
    pub fn kernel(kernel: KernelDef) -> Built {
        let mut m = ModuleBuilder::new();
        m.kernel(kernel);
        m.finish()
    }

    /// The syntax tree.
    pub fn syntax(&self) -> &ast::Module {
        &self.syntax
    }

    /// The canonical loom text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text, owned.
    pub fn into_text(self) -> String {
        self.text
    }
}

//! Specialization: config values by key, substituted into one kernel, and
//! the launch region compiled into a host [`LaunchProgram`] whose
//! workgroup size must fold to a constant that fits the target.

use crate::diag::{Diagnostics, codes};
use crate::ir::{self, Block, IntPredicate, Kernel, Literal, OpKind, Type};
use crate::launch::{LaunchBinary, LaunchCmp, LaunchInst, LaunchProgram, Reg};
use hrx_core::{Result, Target};
use std::collections::{BTreeMap, HashMap};

/// Diagnostic code: the specialization names a kernel the module lacks.
pub const E_UNKNOWN_KERNEL: &str = "E0510";
/// Diagnostic code: the workgroup size does not fit the target's limits.
pub const E_WORKGROUP_LIMITS: &str = "E0511";

/// A compile-time configuration value, set by key on a [`Specialization`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConfigValue {
    /// For `index` and `offset` keys (must fit 32 bits).
    Index(u64),
    /// For `u32` keys.
    U32(u32),
    /// For `i32` keys.
    I32(i32),
    /// For `f32` keys.
    F32(f32),
    /// For `i1` keys.
    Bool(bool),
}

impl From<u64> for ConfigValue {
    fn from(v: u64) -> Self {
        ConfigValue::Index(v)
    }
}
impl From<usize> for ConfigValue {
    fn from(v: usize) -> Self {
        ConfigValue::Index(v as u64)
    }
}
impl From<u32> for ConfigValue {
    fn from(v: u32) -> Self {
        ConfigValue::U32(v)
    }
}
impl From<i32> for ConfigValue {
    fn from(v: i32) -> Self {
        ConfigValue::I32(v)
    }
}
impl From<f32> for ConfigValue {
    fn from(v: f32) -> Self {
        ConfigValue::F32(v)
    }
}
impl From<bool> for ConfigValue {
    fn from(v: bool) -> Self {
        ConfigValue::Bool(v)
    }
}

impl ConfigValue {
    /// A stable text form for cache keys (`f32` by its bits).
    pub(crate) fn key_text(&self) -> String {
        match self {
            ConfigValue::Index(v) => format!("index:{v}"),
            ConfigValue::U32(v) => format!("u32:{v}"),
            ConfigValue::I32(v) => format!("i32:{v}"),
            ConfigValue::F32(v) => format!("f32:{:08x}", v.to_bits()),
            ConfigValue::Bool(v) => format!("i1:{v}"),
        }
    }

    /// The literal for a declaration of type `ty`, or `None` on mismatch.
    fn literal_for(self, ty: &Type) -> Option<Literal> {
        Some(match (self, ty) {
            (ConfigValue::Index(v), Type::Index | Type::Offset) => {
                Literal::Int(i64::from(u32::try_from(v).ok()?))
            }
            (ConfigValue::U32(v), Type::U32) => Literal::Int(i64::from(v)),
            (ConfigValue::I32(v), Type::I32) => Literal::Int(i64::from(v)),
            (ConfigValue::F32(v), Type::F32) => Literal::Float(f64::from(v)),
            (ConfigValue::Bool(v), Type::I1) => Literal::Bool(v),
            _ => return None,
        })
    }
}

/// Which kernel to compile and with which config values.
#[derive(Clone, Debug, PartialEq)]
pub struct Specialization {
    symbol: String,
    config: BTreeMap<String, ConfigValue>,
}

impl Specialization {
    /// Compile kernel `symbol` (`@name` or `name`) with default config.
    pub fn new(symbol: impl Into<String>) -> Self {
        let symbol = symbol.into();
        let symbol = symbol.strip_prefix('@').unwrap_or(&symbol).to_string();
        Specialization {
            symbol,
            config: BTreeMap::new(),
        }
    }

    /// Set config `key` (with or without `@`), replacing an earlier value.
    pub fn set_config(&mut self, key: impl Into<String>, value: impl Into<ConfigValue>) {
        let key = key.into();
        let key = key.strip_prefix('@').unwrap_or(&key).to_string();
        self.config.insert(key, value.into());
    }

    /// Builder form of [`Specialization::set_config`].
    pub fn with_config(mut self, key: impl Into<String>, value: impl Into<ConfigValue>) -> Self {
        self.set_config(key, value);
        self
    }

    /// The kernel symbol, without `@`.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The config values set, sorted by key.
    pub fn config(&self) -> impl Iterator<Item = (&str, &ConfigValue)> {
        self.config.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// A kernel with its config substituted, ready to lower.
#[derive(Clone, Debug)]
pub struct Specialized {
    /// The kernel, with every `config.value` replaced by a constant.
    pub kernel: Kernel,
    /// The constant workgroup size.
    pub workgroup_size: [u32; 3],
    /// The host launch program.
    pub launch: LaunchProgram,
}

/// Specialise kernel `spec.symbol()` of `module` for `target`.
pub fn specialize(
    module: &ir::Module,
    spec: &Specialization,
    target: &Target,
    source: &str,
) -> Result<Specialized> {
    let mut diags = Diagnostics::new();
    let Some(kernel) = module.kernel(&spec.symbol) else {
        let names: Vec<String> = module
            .kernels
            .iter()
            .map(|k| format!("@{}", k.name))
            .collect();
        let at = crate::front::span::Span::new(0, 0);
        let msg = format!(
            "no kernel @{} in this module (it has: {})",
            spec.symbol,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
        diags.error(at, E_UNKNOWN_KERNEL, msg);
        return Err(diags.into_error(source));
    };
    let mut values: HashMap<&str, Literal> = HashMap::new();
    for decl in &module.configs {
        values.insert(&decl.key, decl.default);
    }
    for (key, value) in &spec.config {
        match module.config(key) {
            None => diags.error(
                kernel.span,
                codes::UNKNOWN_CONFIG,
                format!("specialization sets unknown config key `{key}`"),
            ),
            Some(decl) => match value.literal_for(&decl.ty) {
                Some(lit) => {
                    values.insert(&decl.key, lit);
                }
                None => diags.error(
                    decl.span,
                    codes::CONFIG_TYPE,
                    format!(
                        "config `{key}` is declared {:?} but was given {value:?}",
                        decl.ty
                    ),
                ),
            },
        }
    }
    let mut kernel = kernel.clone();
    let substitute = |op: &mut ir::Op, diags: &mut Diagnostics| {
        let OpKind::ConfigValue(key) = &op.kind else {
            return;
        };
        let Some(&lit) = values.get(key.as_str()) else {
            diags.error(
                op.span,
                codes::UNKNOWN_CONFIG,
                format!("unknown config `{key}`"),
            );
            return;
        };
        let ty = op
            .results
            .first()
            .and_then(|r| kernel_ty(&module.kernels, &spec.symbol, *r));
        op.kind = match (ty, lit) {
            (Some(Type::Index | Type::Offset), Literal::Int(i)) => OpKind::IndexConstant(i as u32),
            _ => OpKind::ScalarConstant(lit),
        };
    };
    for op in &mut kernel.launch {
        substitute(op, &mut diags);
    }
    walk_mut(&mut kernel.body, &mut |op| substitute(op, &mut diags));
    let launch = build_launch(&kernel, &mut diags);
    let workgroup_size = launch
        .as_ref()
        .map(|l| workgroup_size(&kernel, l, target, &mut diags))
        .unwrap_or([1, 1, 1]);
    match launch {
        Some((launch, _)) if diags.is_empty() => Ok(Specialized {
            kernel,
            workgroup_size,
            launch,
        }),
        _ => Err(diags.into_error(source)),
    }
}

fn kernel_ty(kernels: &[Kernel], name: &str, id: ir::ValueId) -> Option<Type> {
    kernels.iter().find(|k| k.name == name)?.ty(id).cloned()
}

/// Visit every op of a block and its regions, without recursion.
fn walk_mut(block: &mut Block, f: &mut dyn FnMut(&mut ir::Op)) {
    let mut stack: Vec<&mut Block> = vec![block];
    while let Some(b) = stack.pop() {
        for op in &mut b.ops {
            f(op);
            match &mut op.kind {
                OpKind::If {
                    then, otherwise, ..
                } => {
                    stack.push(then);
                    if let Some(o) = otherwise {
                        stack.push(o);
                    }
                }
                OpKind::For { body, .. } => stack.push(body),
                _ => {}
            }
        }
    }
}

/// Compile the launch region into a register program.
fn build_launch(kernel: &Kernel, diags: &mut Diagnostics) -> Option<(LaunchProgram, [Reg; 3])> {
    let mut insts = Vec::new();
    let mut regs: HashMap<ir::ValueId, Reg> = HashMap::new();
    let push = |insts: &mut Vec<LaunchInst>, inst| {
        insts.push(inst);
        (insts.len() - 1) as Reg
    };
    for (i, arg) in kernel.workload_args.iter().enumerate() {
        let r = push(&mut insts, LaunchInst::Arg(i as u32));
        regs.insert(arg.id, r);
    }
    for op in &kernel.launch {
        let get = |v: &ir::ValueId| regs.get(v).copied();
        let inst = match &op.kind {
            OpKind::IndexConstant(c) => Some(LaunchInst::Const(u64::from(*c))),
            OpKind::ScalarConstant(Literal::Int(i)) => Some(LaunchInst::Const(*i as u32 as u64)),
            OpKind::ScalarConstant(Literal::Bool(b)) => Some(LaunchInst::Const(u64::from(*b))),
            OpKind::IndexBinary(b, x, y) => Some(LaunchInst::Binary(binary(*b), get(x)?, get(y)?)),
            OpKind::IndexMadd(a, b, c) => Some(LaunchInst::Madd(get(a)?, get(b)?, get(c)?)),
            OpKind::IndexCmp(p, x, y) => Some(LaunchInst::Cmp(cmp(*p), get(x)?, get(y)?)),
            OpKind::Select(c, a, b) => Some(LaunchInst::Select(get(c)?, get(a)?, get(b)?)),
            OpKind::IndexCast { value, to } => match to {
                Type::Index | Type::Offset => {
                    if let (Some(r), Some(res)) = (get(value), op.results.first()) {
                        regs.insert(*res, r);
                    }
                    None
                }
                _ => Some(LaunchInst::Narrow32(get(value)?)),
            },
            other => {
                diags.error(
                    op.span,
                    codes::NOT_IN_LAUNCH,
                    format!("{other:?} cannot be evaluated in the launch region"),
                );
                None
            }
        };
        if let (Some(inst), Some(res)) = (inst, op.results.first()) {
            let r = push(&mut insts, inst);
            regs.insert(*res, r);
        }
    }
    let lc = &kernel.launch_config;
    let reg = |v: &ir::ValueId| regs.get(v).copied();
    let workgroups = [
        reg(&lc.workgroups[0])?,
        reg(&lc.workgroups[1])?,
        reg(&lc.workgroups[2])?,
    ];
    let sizes = [
        reg(&lc.workgroup_size[0])?,
        reg(&lc.workgroup_size[1])?,
        reg(&lc.workgroup_size[2])?,
    ];
    let program = LaunchProgram {
        arg_count: kernel.workload_args.len() as u32,
        insts,
        workgroups,
    };
    Some((program, sizes))
}

/// Fold the workgroup size to constants and check it against `target`.
fn workgroup_size(
    kernel: &Kernel,
    (program, sizes): &(LaunchProgram, [Reg; 3]),
    target: &Target,
    diags: &mut Diagnostics,
) -> [u32; 3] {
    let span = kernel.launch_config.span;
    let folded = match program.fold() {
        Ok(f) => f,
        Err(e) => {
            diags.error(span, codes::DYNAMIC_WORKGROUP_SIZE, e.to_string());
            return [1, 1, 1];
        }
    };
    let mut size = [1u32; 3];
    for (axis, reg) in sizes.iter().enumerate() {
        match folded.get(*reg as usize).copied().flatten() {
            Some(v) => size[axis] = u32::try_from(v).unwrap_or(u32::MAX),
            None => {
                diags.error(
                    span,
                    codes::DYNAMIC_WORKGROUP_SIZE,
                    "workgroup size depends on workload values; it must be a compile-time constant",
                );
                return [1, 1, 1];
            }
        }
    }
    if !target.fits_workgroup(size) {
        diags.error(
            span,
            E_WORKGROUP_LIMITS,
            format!(
                "workgroup size {size:?} does not fit target `{}` (max {:?}, {} invocations)",
                target.name, target.max_workgroup_size, target.max_workgroup_invocations
            ),
        );
    }
    size
}

fn binary(b: ir::IndexBinary) -> LaunchBinary {
    use ir::IndexBinary as B;
    match b {
        B::Add => LaunchBinary::Add,
        B::Sub => LaunchBinary::Sub,
        B::Mul => LaunchBinary::Mul,
        B::Div => LaunchBinary::Div,
        B::Rem => LaunchBinary::Rem,
        B::Min => LaunchBinary::Min,
        B::Max => LaunchBinary::Max,
    }
}

/// Launch values are non-negative, so signed predicates compare as unsigned.
fn cmp(p: IntPredicate) -> LaunchCmp {
    use IntPredicate as P;
    match p {
        P::Eq => LaunchCmp::Eq,
        P::Ne => LaunchCmp::Ne,
        P::Ult | P::Slt => LaunchCmp::Lt,
        P::Ule | P::Sle => LaunchCmp::Le,
        P::Ugt | P::Sgt => LaunchCmp::Gt,
        P::Uge | P::Sge => LaunchCmp::Ge,
    }
}

//! An interpreter of verified loom IR (`hrx_loom::ir::Kernel`) for the
//! subset the program generator emits, written from the IR's documented
//! semantics (`ir.rs`, `ir/opcodes.rs`, docs/loom.md), so that it checks the
//! compiler independently of how a program was generated.
//!
//! Design choices and contracts:
//!
//! - Every invocation of the grid runs the body in turn. Invocations of a
//!   workgroup communicate only through workgroup memory across top-level
//!   barriers, so the body runs phase by phase (a phase ends at a barrier)
//!   for all invocations of a workgroup; workgroup memory starts unknown.
//!   The grid and workgroup size come from interpreting the launch region.
//! - Integers are exact 32-bit patterns; index arithmetic wraps at 32 bits
//!   as on the device. An operation whose result the IR leaves undefined
//!   (division by zero, `i32::MIN / -1`, a shift by 32 or more, an access
//!   out of bounds) is an [`Error`]: the generator promised not to emit it.
//! - Floats carry an error bound: the largest distance the device's result
//!   may be from the interpreter's. Ops Vulkan requires to be correctly
//!   rounded (add, sub, mul, conversions) keep a bound of 0 while their
//!   exact result is representable, which also makes fused multiply-add
//!   contraction harmless; otherwise a rounding term is added (division
//!   2.5 ulp, square root as `1 / inversesqrt`). Non-finite or subnormal
//!   results (NaN propagation, denormal flushing) become unknown.
//! - A value derived from a float whose bound makes the outcome ambiguous
//!   (a compare too close to call, a conversion whose truncation could
//!   differ, a bitcast of an approximate value) is *unknown*; unknown
//!   values propagate, and unknown output words are not compared. A load
//!   at an unknown index reads an unknown value; a store at one is an
//!   [`Error`]. Both branches of an `scf.if` on an unknown condition run,
//!   with their stores leaving unknown words.

use hrx_loom::ir::{
    Axis, ConvertOp, Dim, FloatPredicate, IndexBinary, IntPredicate, Kernel, Literal, Op, OpKind,
    Scalar, ScalarBinary, ScalarUnary, Type, ValueId, WorkItemKind,
};

/// Why a kernel could not be interpreted.
pub type Error = String;

/// One word of memory after the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Word {
    /// These exact bits.
    Exact(u32),
    /// An f32 within `err` of `value` (equal to it, either zero matching
    /// the other, when `err` is 0).
    Approx {
        /// The interpreter's value.
        value: f32,
        /// The largest allowed distance.
        err: f64,
    },
    /// Not predictable (see the module docs).
    Unknown,
}

/// A launch argument's value.
#[derive(Clone, Debug)]
pub enum ArgValue {
    /// A buffer's initial words.
    Buffer(Vec<u32>),
    /// An `index` or `offset` push constant.
    Index(u32),
    /// An `i32` push constant.
    I32(i32),
    /// A `u32` push constant.
    U32(u32),
    /// An `f32` push constant.
    F32(f32),
}

/// A runtime value.
#[derive(Clone, Debug)]
enum Value {
    /// `index`, `offset`, `i32` or `u32` bits; `None` when unknown.
    Int(Option<u32>),
    /// `i1`; `None` when unknown.
    Bool(Option<bool>),
    /// An f32 and its error bound (infinite when unknown).
    Float(f32, f64),
    /// A vector's lanes.
    Vector(Vec<Value>),
    /// A buffer launch argument.
    Buffer(usize),
    /// A view: buffer argument, first element, dimensions, element type.
    View {
        buffer: usize,
        base: u64,
        dims: Vec<u64>,
        elem: Scalar,
    },
}

const UNKNOWN_FLOAT: Value = Value::Float(0.0, f64::INFINITY);

/// The unit in the last place of an f32 of magnitude `x`.
fn ulp(x: f64) -> f64 {
    let x = x.abs().max(f64::from(f32::MIN_POSITIVE));
    let exponent = x.log2().floor();
    2f64.powf(exponent - 23.0)
}

/// An f32 result `exact` (computed in f64) of an op whose inputs carry
/// `input_err`; `rounding_ulps` is the op's own error when the result is
/// inexact (or always, when `always_rounds`).
fn float_result(exact: f64, input_err: f64, rounding_ulps: f64, always_rounds: bool) -> Value {
    let rounded = exact as f32;
    if !rounded.is_finite() || !input_err.is_finite() {
        return UNKNOWN_FLOAT;
    }
    let representable = f64::from(rounded) == exact;
    if input_err == 0.0 && representable && !always_rounds {
        if rounded != 0.0 && rounded.abs() < f32::MIN_POSITIVE {
            // A subnormal: the device may flush it.
            return Value::Float(rounded, f64::from(f32::MIN_POSITIVE));
        }
        return Value::Float(rounded, 0.0);
    }
    let mut err = input_err + rounding_ulps * ulp(exact.abs() + input_err);
    if rounded.abs() < f32::MIN_POSITIVE || exact.abs() < f64::from(f32::MIN_POSITIVE) {
        err += f64::from(f32::MIN_POSITIVE);
    }
    if err > 1.0e30 {
        return UNKNOWN_FLOAT;
    }
    Value::Float(rounded, err)
}

/// The interpreter state of one kernel run.
struct Machine<'k> {
    kernel: &'k Kernel,
    values: Vec<Option<Value>>,
    memory: Vec<Vec<Word>>,
    /// Workgroup size and count, per axis.
    size: [u32; 3],
    count: [u32; 3],
    /// The current invocation's workgroup and local ids.
    group: [u32; 3],
    local: [u32; 3],
    /// This workgroup's allocations: alloca value to memory index.
    allocas: Vec<(ValueId, usize)>,
    /// Inside a branch that may or may not run (its condition is
    /// unknown): stores leave unknown words.
    uncertain: usize,
}

/// Run `kernel` with `workload` values and `args` (one per launch argument,
/// in order); returns every buffer argument's words afterwards (`None` for
/// scalar arguments).
pub fn run(
    kernel: &Kernel,
    workload: &[u32],
    args: &[ArgValue],
) -> Result<Vec<Option<Vec<Word>>>, Error> {
    if args.len() != kernel.args.len() {
        return Err(format!(
            "{} arguments for {}",
            args.len(),
            kernel.args.len()
        ));
    }
    let mut m = Machine {
        kernel,
        values: vec![None; kernel.value_types.len()],
        memory: Vec::new(),
        size: [1; 3],
        count: [1; 3],
        group: [0; 3],
        local: [0; 3],
        uncertain: 0,
        allocas: Vec::new(),
    };
    // The launch region: workload arguments, then index arithmetic.
    for (arg, v) in kernel.workload_args.iter().zip(workload) {
        m.set(arg.id, Value::Int(Some(*v)));
    }
    for op in &kernel.launch {
        m.op(op)?;
    }
    let config = &kernel.launch_config;
    for axis in 0..3 {
        m.count[axis] = m.known_int(config.workgroups[axis])?;
        m.size[axis] = m.known_int(config.workgroup_size[axis])?;
    }
    // Launch arguments.
    let mut buffers = Vec::new();
    for (arg, value) in kernel.args.iter().zip(args) {
        let v = match value {
            ArgValue::Buffer(words) => {
                buffers.push(words.iter().map(|w| Word::Exact(*w)).collect());
                Value::Buffer(buffers.len() - 1)
            }
            ArgValue::Index(v) | ArgValue::U32(v) => Value::Int(Some(*v)),
            ArgValue::I32(v) => Value::Int(Some(*v as u32)),
            ArgValue::F32(v) => Value::Float(*v, 0.0),
        };
        m.set(arg.id, v);
    }
    m.memory = buffers;
    let arguments = m.memory.len();
    // Top-level barriers split the body into phases: every invocation of a
    // workgroup finishes one phase before any starts the next, each keeping
    // its own values across them. (The verifier only admits barriers in
    // workgroup-uniform control flow; nested ones are not supported here.)
    let phases: Vec<&[Op]> = kernel
        .body
        .ops
        .split(|op| matches!(op.kind, OpKind::Barrier(_)))
        .collect();
    let launch_values = m.values.clone();
    let [sx, sy, sz] = m.size;
    let locals: Vec<[u32; 3]> = (0..sz)
        .flat_map(|z| (0..sy).flat_map(move |y| (0..sx).map(move |x| [x, y, z])))
        .collect();
    for gz in 0..m.count[2] {
        for gy in 0..m.count[1] {
            for gx in 0..m.count[0] {
                // Fresh workgroup memory per workgroup.
                m.memory.truncate(arguments);
                m.allocas.clear();
                let mut saved = vec![launch_values.clone(); locals.len()];
                for phase in &phases {
                    for (local, values) in locals.iter().zip(&mut saved) {
                        m.group = [gx, gy, gz];
                        m.local = *local;
                        std::mem::swap(&mut m.values, values);
                        let ran = m.block(phase);
                        std::mem::swap(&mut m.values, values);
                        ran?;
                    }
                }
            }
        }
    }
    m.memory.truncate(arguments);
    let mut memory = m.memory.into_iter();
    Ok(kernel
        .args
        .iter()
        .map(|a| (a.ty == Type::Buffer).then(|| memory.next().unwrap_or_default()))
        .collect())
}

fn axis_index(axis: Axis) -> usize {
    match axis {
        Axis::X => 0,
        Axis::Y => 1,
        Axis::Z => 2,
    }
}

impl Machine<'_> {
    fn name(&self, id: ValueId) -> &str {
        self.kernel.value_names.get(id.index()).map_or("?", |s| s)
    }

    fn set(&mut self, id: ValueId, v: Value) {
        self.values[id.index()] = Some(v);
    }

    fn get(&self, id: ValueId) -> Result<&Value, Error> {
        self.values
            .get(id.index())
            .and_then(Option::as_ref)
            .ok_or_else(|| format!("%{} used before it was defined", self.name(id)))
    }

    fn int(&self, id: ValueId) -> Result<Option<u32>, Error> {
        match self.get(id)? {
            Value::Int(v) => Ok(*v),
            other => Err(format!("%{} is not an integer: {other:?}", self.name(id))),
        }
    }

    fn known_int(&self, id: ValueId) -> Result<u32, Error> {
        self.int(id)?
            .ok_or_else(|| format!("%{} is not predictable", self.name(id)))
    }

    fn bool(&self, id: ValueId) -> Result<Option<bool>, Error> {
        match self.get(id)? {
            Value::Bool(v) => Ok(*v),
            other => Err(format!("%{} is not an i1: {other:?}", self.name(id))),
        }
    }

    fn ty(&self, id: ValueId) -> Result<&Type, Error> {
        self.kernel
            .ty(id)
            .ok_or_else(|| format!("value {} has no type", id.0))
    }

    fn block(&mut self, ops: &[Op]) -> Result<Vec<ValueId>, Error> {
        for op in ops {
            match &op.kind {
                OpKind::Yield(values) => return Ok(values.clone()),
                OpKind::Return => return Ok(Vec::new()),
                _ => self.op(op)?,
            }
        }
        Ok(Vec::new())
    }

    fn op(&mut self, op: &Op) -> Result<(), Error> {
        let result = op.results.first().copied();
        let value = match &op.kind {
            OpKind::IndexConstant(v) => Value::Int(Some(*v)),
            OpKind::IndexBinary(kind, a, b) => self.index_binary(*kind, *a, *b)?,
            OpKind::IndexMadd(a, b, c) => {
                let (a, b, c) = (self.int(*a)?, self.int(*b)?, self.int(*c)?);
                Value::Int(
                    a.zip(b)
                        .zip(c)
                        .map(|((a, b), c)| a.wrapping_mul(b).wrapping_add(c)),
                )
            }
            OpKind::IndexCmp(p, a, b) | OpKind::CmpI(p, a, b) => {
                let (a, b) = (self.int(*a)?, self.int(*b)?);
                Value::Bool(a.zip(b).map(|(a, b)| int_compare(*p, a, b)))
            }
            // Bits are kept between index, offset, i32 and u32.
            OpKind::IndexCast { value, .. } => Value::Int(self.int(*value)?),
            OpKind::ScalarConstant(literal) => {
                let id = result.ok_or("a constant without a result")?;
                constant(*literal, self.ty(id)?)?
            }
            OpKind::ScalarBinary(kind, a, b) => lanewise(&[self.get(*a)?, self.get(*b)?], &|v| {
                binary(*kind, v[0], v[1])
            })?,
            OpKind::ScalarFma(a, b, c) => {
                let operands = [self.get(*a)?, self.get(*b)?, self.get(*c)?];
                lanewise(&operands, &|v| fma(v[0], v[1], v[2]))?
            }
            OpKind::ScalarUnary(kind, a) => lanewise(&[self.get(*a)?], &|v| unary(*kind, v[0]))?,
            OpKind::CmpF(p, a, b) => {
                let ((a, ea), (b, eb)) = (as_float(self.get(*a)?)?, as_float(self.get(*b)?)?);
                let (a, b) = (f64::from(a), f64::from(b));
                let err = ea + eb;
                let clear = err == 0.0 || (a - b).abs() > err;
                Value::Bool(clear.then(|| float_compare(*p, a, b)))
            }
            OpKind::Select(c, a, b) => match self.bool(*c)? {
                Some(true) => self.get(*a)?.clone(),
                Some(false) => self.get(*b)?.clone(),
                None => unknown(self.ty(op.results[0])?),
            },
            OpKind::Convert {
                op: kind,
                value,
                to,
            } => {
                let to_float = to.element() == Some(Scalar::F32);
                lanewise(&[self.get(*value)?], &|v| convert(*kind, v[0], to_float))?
            }
            OpKind::VectorSplat(value) => {
                let Type::Vector { len, .. } = self.ty(op.results[0])? else {
                    return Err("vector.splat to a non-vector".into());
                };
                Value::Vector(vec![self.get(*value)?.clone(); usize::from(*len)])
            }
            OpKind::VectorExtract(vector, lane) => {
                let Value::Vector(lanes) = self.get(*vector)? else {
                    return Err("vector.extract of a non-vector".into());
                };
                match self.int(*lane)? {
                    Some(i) => lanes
                        .get(i as usize)
                        .cloned()
                        .ok_or_else(|| format!("lane {i} of a {}-lane vector", lanes.len()))?,
                    None => unknown(self.ty(op.results[0])?),
                }
            }
            OpKind::BufferView {
                buffer,
                byte_offset,
                view,
            } => {
                let Value::Buffer(index) = self.get(*buffer)? else {
                    return Err("buffer.view of a non-buffer".into());
                };
                let index = *index;
                let offset = self.known_int(*byte_offset)?;
                if offset % view.elem.bytes() != 0 {
                    return Err(format!("view offset {offset} is misaligned"));
                }
                let dims = view
                    .dims
                    .iter()
                    .map(|d| match d {
                        Dim::Static(n) => Ok(*n),
                        Dim::Dynamic(id) => self.known_int(*id).map(u64::from),
                    })
                    .collect::<Result<_, Error>>()?;
                Value::View {
                    buffer: index,
                    base: u64::from(offset / view.elem.bytes()),
                    dims,
                    elem: view.elem,
                }
            }
            OpKind::ViewLoad { view, indices } => {
                // An unpredictable index (computed from an approximate
                // float) reads an unpredictable element.
                let mut predictable = true;
                for index in indices {
                    predictable &= self.int(*index)?.is_some();
                }
                if predictable {
                    let (buffer, element, elem) = self.address(*view, indices)?;
                    load(self.memory[buffer][element], elem)?
                } else {
                    unknown(self.ty(op.results[0])?)
                }
            }
            OpKind::Alloca { bytes, .. } => {
                // One allocation per workgroup, shared by its invocations;
                // not zero-initialised, so unknown until written.
                let id = op.results[0];
                match self.allocas.iter().find(|(a, _)| *a == id) {
                    Some((_, index)) => Value::Buffer(*index),
                    None => {
                        let words = self.known_int(*bytes)?.div_ceil(4) as usize;
                        self.memory.push(vec![Word::Unknown; words]);
                        self.allocas.push((id, self.memory.len() - 1));
                        Value::Buffer(self.memory.len() - 1)
                    }
                }
            }
            OpKind::VectorLoad { view, indices } => {
                let Type::Vector { len, elem } = self.ty(op.results[0])? else {
                    return Err("vector.load to a non-vector".into());
                };
                let (len, lane) = (usize::from(*len), elem.to_type());
                let mut predictable = true;
                for index in indices {
                    predictable &= self.int(*index)?.is_some();
                }
                if predictable {
                    // `len` consecutive elements from the addressed one.
                    let (buffer, element, elem) = self.address(*view, indices)?;
                    let words = self.memory[buffer]
                        .get(element..element + len)
                        .ok_or("vector.load past the end of its buffer")?;
                    Value::Vector(
                        words
                            .iter()
                            .map(|w| load(*w, elem))
                            .collect::<Result<_, _>>()?,
                    )
                } else {
                    Value::Vector(vec![unknown(&lane); len])
                }
            }
            OpKind::VectorStore {
                value,
                view,
                indices,
            } => {
                let (buffer, element, elem) = self.address(*view, indices)?;
                let Value::Vector(lanes) = self.get(*value)? else {
                    return Err("vector.store of a non-vector".into());
                };
                let words: Vec<Word> = lanes
                    .iter()
                    .map(|lane| store(lane, elem))
                    .collect::<Result<_, _>>()?;
                let uncertain = self.uncertain > 0;
                let target = self.memory[buffer]
                    .get_mut(element..element + words.len())
                    .ok_or("vector.store past the end of its buffer")?;
                for (slot, word) in target.iter_mut().zip(words) {
                    *slot = if uncertain { Word::Unknown } else { word };
                }
                return Ok(());
            }
            OpKind::ViewStore {
                value,
                view,
                indices,
            } => {
                let (buffer, element, elem) = self.address(*view, indices)?;
                let word = store(self.get(*value)?, elem)?;
                self.memory[buffer][element] = if self.uncertain > 0 {
                    Word::Unknown
                } else {
                    word
                };
                return Ok(());
            }
            OpKind::If {
                cond,
                then,
                otherwise,
            } => {
                let taken = match self.bool(*cond)? {
                    Some(true) => Some(then),
                    Some(false) => otherwise.as_ref(),
                    None => {
                        // Either branch may run: run both, so that their
                        // stores leave unknown words, and yield unknowns.
                        self.uncertain += 1;
                        let ran = self.block(&then.ops).and_then(|_| match otherwise {
                            Some(region) => self.block(&region.ops),
                            None => Ok(Vec::new()),
                        });
                        self.uncertain -= 1;
                        ran?;
                        for id in &op.results {
                            let v = unknown(self.ty(*id)?);
                            self.set(*id, v);
                        }
                        return Ok(());
                    }
                };
                let yielded = match taken {
                    Some(region) => self.block(&region.ops)?,
                    None => Vec::new(),
                };
                let values: Vec<Value> = yielded
                    .iter()
                    .map(|id| self.get(*id).cloned())
                    .collect::<Result<_, _>>()?;
                for (id, v) in op.results.iter().zip(values) {
                    self.set(*id, v);
                }
                return Ok(());
            }
            OpKind::For {
                iv,
                lower,
                upper,
                step,
                iter_args,
                body,
            } => {
                let (mut i, upper, step) = (
                    self.known_int(*lower)?,
                    self.known_int(*upper)?,
                    self.known_int(*step)?,
                );
                let mut carried: Vec<Value> = iter_args
                    .iter()
                    .map(|(_, init)| self.get(*init).cloned())
                    .collect::<Result<_, _>>()?;
                let mut trips = 0u32;
                while i < upper {
                    trips += 1;
                    if trips > 1 << 16 {
                        return Err("a loop runs more than 65,536 times".into());
                    }
                    self.set(*iv, Value::Int(Some(i)));
                    for ((arg, _), v) in iter_args.iter().zip(&carried) {
                        self.set(*arg, v.clone());
                    }
                    let next = self.block(&body.ops)?;
                    carried = next
                        .iter()
                        .map(|id| self.get(*id).cloned())
                        .collect::<Result<_, _>>()?;
                    // The comparison is unsigned and `i + step` wraps.
                    match i.checked_add(step) {
                        Some(n) => i = n,
                        None => break,
                    }
                }
                for (id, v) in op.results.iter().zip(carried) {
                    self.set(*id, v);
                }
                return Ok(());
            }
            OpKind::WorkItem(kind, axis) => {
                let a = axis_index(*axis);
                Value::Int(Some(match kind {
                    WorkItemKind::DispatchId => self.group[a] * self.size[a] + self.local[a],
                    WorkItemKind::WorkgroupId => self.group[a],
                    WorkItemKind::WorkitemId => self.local[a],
                    WorkItemKind::WorkgroupSize => self.size[a],
                    WorkItemKind::WorkgroupCount => self.count[a],
                }))
            }
            other => return Err(format!("unsupported op {other:?}")),
        };
        let id = result.ok_or_else(|| format!("{:?} without a result", op.kind))?;
        self.set(id, value);
        Ok(())
    }

    fn index_binary(&self, kind: IndexBinary, a: ValueId, b: ValueId) -> Result<Value, Error> {
        let (Some(a), Some(b)) = (self.int(a)?, self.int(b)?) else {
            return Ok(Value::Int(None));
        };
        if matches!(kind, IndexBinary::Div | IndexBinary::Rem) && b == 0 {
            return Err("index division by zero".into());
        }
        Ok(Value::Int(Some(match kind {
            IndexBinary::Add => a.wrapping_add(b),
            IndexBinary::Sub => a.wrapping_sub(b),
            IndexBinary::Mul => a.wrapping_mul(b),
            IndexBinary::Div => a / b,
            IndexBinary::Rem => a % b,
            IndexBinary::Min => a.min(b),
            IndexBinary::Max => a.max(b),
        })))
    }

    /// The buffer, element and element type a view access touches.
    fn address(&self, view: ValueId, indices: &[ValueId]) -> Result<(usize, usize, Scalar), Error> {
        let Value::View {
            buffer,
            base,
            dims,
            elem,
        } = self.get(view)?
        else {
            return Err(format!("%{} is not a view", self.name(view)));
        };
        if indices.len() != dims.len() {
            return Err("index count differs from the view's rank".into());
        }
        let mut element = 0u64;
        for (index, dim) in indices.iter().zip(dims) {
            let i = u64::from(self.known_int(*index)?);
            if i >= *dim {
                return Err(format!("index {i} out of bounds of dimension {dim}"));
            }
            element = element * dim + i;
        }
        let element = usize::try_from(base + element).map_err(|e| e.to_string())?;
        if element >= self.memory[*buffer].len() {
            return Err(format!("element {element} is past the end of its buffer"));
        }
        Ok((*buffer, element, *elem))
    }
}

/// A value read from a word as `elem`.
fn load(word: Word, elem: Scalar) -> Result<Value, Error> {
    Ok(match (word, elem) {
        (Word::Exact(bits), Scalar::F32) => {
            let f = f32::from_bits(bits);
            if f.is_finite() && (f == 0.0 || f.abs() >= f32::MIN_POSITIVE) {
                Value::Float(f, 0.0)
            } else {
                UNKNOWN_FLOAT
            }
        }
        (Word::Exact(bits), Scalar::I32 | Scalar::U32) => Value::Int(Some(bits)),
        (Word::Approx { value, err }, Scalar::F32) => Value::Float(value, err),
        (_, Scalar::F32) => UNKNOWN_FLOAT,
        (_, Scalar::I32 | Scalar::U32) => Value::Int(None),
        (_, Scalar::F16) => return Err("f16 views are not supported".into()),
    })
}

/// The word a store of `value` as `elem` leaves.
fn store(value: &Value, elem: Scalar) -> Result<Word, Error> {
    Ok(match (value, elem) {
        (Value::Int(Some(bits)), Scalar::I32 | Scalar::U32) => Word::Exact(*bits),
        (Value::Int(None), _) => Word::Unknown,
        (Value::Float(v, e), Scalar::F32) if e.is_finite() => Word::Approx { value: *v, err: *e },
        (Value::Float(..), Scalar::F32) => Word::Unknown,
        (other, _) => return Err(format!("store of {other:?} as {elem:?}")),
    })
}

/// A `scalar.constant` of type `ty`.
fn constant(literal: Literal, ty: &Type) -> Result<Value, Error> {
    Ok(match (literal, ty) {
        (Literal::Bool(b), Type::I1) => Value::Bool(Some(b)),
        (Literal::Int(i), Type::I1) => Value::Bool(Some(i != 0)),
        // Literals were range-checked: negative values are i32 patterns.
        (Literal::Int(i), Type::I32 | Type::U32 | Type::Index | Type::Offset) => {
            Value::Int(Some(i as u32))
        }
        (Literal::Float(f), Type::F32) => Value::Float(f as f32, 0.0),
        (Literal::Int(i), Type::F32) => Value::Float(i as f32, 0.0),
        (literal, ty) => return Err(format!("constant {literal:?} of type {ty:?}")),
    })
}

/// Whether `a + b` is exact in f64 (Knuth's two-sum error is zero).
fn two_sum_exact(a: f64, b: f64) -> bool {
    let s = a + b;
    let bb = s - a;
    (a - (s - bb)) + (b - bb) == 0.0
}

fn int_compare(p: IntPredicate, a: u32, b: u32) -> bool {
    let (sa, sb) = (a as i32, b as i32);
    match p {
        IntPredicate::Eq => a == b,
        IntPredicate::Ne => a != b,
        IntPredicate::Ult => a < b,
        IntPredicate::Ule => a <= b,
        IntPredicate::Ugt => a > b,
        IntPredicate::Uge => a >= b,
        IntPredicate::Slt => sa < sb,
        IntPredicate::Sle => sa <= sb,
        IntPredicate::Sgt => sa > sb,
        IntPredicate::Sge => sa >= sb,
    }
}

fn float_compare(p: FloatPredicate, a: f64, b: f64) -> bool {
    match p {
        FloatPredicate::Oeq => a == b,
        FloatPredicate::One => a != b,
        FloatPredicate::Olt => a < b,
        FloatPredicate::Ole => a <= b,
        FloatPredicate::Ogt => a > b,
        FloatPredicate::Oge => a >= b,
    }
}

/// `scalar.<kind> a, b` on scalars.
fn binary(kind: ScalarBinary, a: &Value, b: &Value) -> Result<Value, Error> {
    use ScalarBinary as B;
    if matches!(
        kind,
        B::AddF | B::SubF | B::MulF | B::DivF | B::MaxNumF | B::MinNumF
    ) {
        let ((a, ea), (b, eb)) = (as_float(a)?, as_float(b)?);
        let (a, b) = (f64::from(a), f64::from(b));
        return Ok(match kind {
            // f64 holds these exactly for f32 operands (sums unless the
            // exponents are far apart, where the f32 result is inexact
            // anyway and the check below sees it).
            B::AddF => float_result(a + b, ea + eb, 2.0, !two_sum_exact(a, b)),
            B::SubF => float_result(a - b, ea + eb, 2.0, !two_sum_exact(a, -b)),
            B::MulF => float_result(a * b, a.abs() * eb + b.abs() * ea + ea * eb, 2.0, false),
            B::DivF => {
                let smallest = b.abs() - eb;
                // Vulkan's 2.5 ulp holds for |b| in [2^-126, 2^126].
                if smallest < 2f64.powi(-126) || b.abs() + eb > 2f64.powi(126) {
                    UNKNOWN_FLOAT
                } else {
                    let spread = (a.abs() * eb + b.abs() * ea) / (b.abs() * smallest);
                    float_result(a / b, spread, 3.0, true)
                }
            }
            B::MaxNumF => float_result(a.max(b), ea.max(eb), 0.0, false),
            _ => float_result(a.min(b), ea.max(eb), 0.0, false),
        });
    }
    if let (Value::Bool(a), Value::Bool(b)) = (a, b) {
        let (Some(a), Some(b)) = (*a, *b) else {
            return Ok(Value::Bool(None));
        };
        return match kind {
            B::AndI => Ok(Value::Bool(Some(a & b))),
            B::OrI => Ok(Value::Bool(Some(a | b))),
            B::XorI => Ok(Value::Bool(Some(a ^ b))),
            other => Err(format!("{other:?} on i1")),
        };
    }
    let (Some(a), Some(b)) = (as_int(a)?, as_int(b)?) else {
        return Ok(Value::Int(None));
    };
    let (sa, sb) = (a as i32, b as i32);
    let undefined = match kind {
        B::DivSI | B::RemSI => sb == 0 || (sa == i32::MIN && sb == -1),
        B::DivUI | B::RemUI => b == 0,
        B::ShlI | B::ShrSI | B::ShrUI => b >= 32,
        _ => false,
    };
    if undefined {
        return Err(format!("{kind:?} of {a:#x} and {b:#x} is undefined"));
    }
    Ok(Value::Int(Some(match kind {
        B::AddI => a.wrapping_add(b),
        B::SubI => a.wrapping_sub(b),
        B::MulI => a.wrapping_mul(b),
        B::DivSI => (sa / sb) as u32,
        B::DivUI => a / b,
        B::RemSI => (sa % sb) as u32,
        B::RemUI => a % b,
        B::AndI => a & b,
        B::OrI => a | b,
        B::XorI => a ^ b,
        B::ShlI => a << b,
        B::ShrSI => (sa >> b) as u32,
        B::ShrUI => a >> b,
        other => return Err(format!("unsupported binary op {other:?}")),
    })))
}

/// `scalar.<kind> value` on a scalar, to f32 when `to_float`.
fn convert(kind: ConvertOp, value: &Value, to_float: bool) -> Result<Value, Error> {
    Ok(match kind {
        ConvertOp::SIToFP | ConvertOp::UIToFP => {
            let Some(bits) = as_int(value)? else {
                return Ok(UNKNOWN_FLOAT);
            };
            let exact = if kind == ConvertOp::SIToFP {
                f64::from(bits as i32)
            } else {
                f64::from(bits)
            };
            float_result(exact, 0.0, 1.0, false)
        }
        ConvertOp::FPToSI | ConvertOp::FPToUI => {
            let (v, e) = as_float(value)?;
            if !e.is_finite() {
                return Ok(Value::Int(None));
            }
            let v = f64::from(v);
            // Saturating, truncating toward zero (docs/loom.md): the
            // clamp bounds are the extreme f32s inside the range.
            let convert = |x: f64| -> u32 {
                if kind == ConvertOp::FPToSI {
                    x.clamp(-2_147_483_648.0, 2_147_483_520.0).trunc() as i32 as u32
                } else {
                    x.clamp(0.0, 4_294_967_040.0).trunc() as u32
                }
            };
            let (low, high) = (convert(v - e), convert(v + e));
            Value::Int((low == high).then_some(low))
        }
        ConvertOp::Bitcast => match (value, to_float) {
            // The sign of a zero may differ (min/max of zeros), so a
            // zero's bits are not predictable either.
            (Value::Float(v, e), _) => Value::Int((*e == 0.0 && *v != 0.0).then_some(v.to_bits())),
            (Value::Int(bits), true) => match bits.map(f32::from_bits) {
                Some(f) if f.is_finite() && (f == 0.0 || f.abs() >= f32::MIN_POSITIVE) => {
                    Value::Float(f, 0.0)
                }
                _ => UNKNOWN_FLOAT,
            },
            (Value::Int(bits), _) => Value::Int(*bits),
            (other, _) => return Err(format!("bitcast of {other:?}")),
        },
        other => return Err(format!("unsupported conversion {other:?}")),
    })
}

/// `scalar.fmaf a, b, c` on scalars.
fn fma(a: &Value, b: &Value, c: &Value) -> Result<Value, Error> {
    let ((a, ea), (b, eb), (c, ec)) = (as_float(a)?, as_float(b)?, as_float(c)?);
    let (a, b, c) = (f64::from(a), f64::from(b), f64::from(c));
    let product = a * b; // exact in f64
    // Vulkan lets fmaf round the product separately.
    let unfused = f64::from(product as f32) != product;
    let product_rounding = if unfused { ulp(product) } else { 0.0 };
    let input_err = a.abs() * eb + b.abs() * ea + ea * eb + ec + product_rounding;
    let inexact = unfused || !two_sum_exact(product, c);
    Ok(float_result(a.mul_add(b, c), input_err, 2.0, inexact))
}

/// `scalar.<kind> a` on a scalar.
fn unary(kind: ScalarUnary, a: &Value) -> Result<Value, Error> {
    let (a, ea) = as_float(a)?;
    let a = f64::from(a);
    Ok(match kind {
        ScalarUnary::NegF => float_result(-a, ea, 0.0, false),
        ScalarUnary::AbsF => float_result(a.abs(), ea, 0.0, false),
        ScalarUnary::SqrtF if a < 0.0 => UNKNOWN_FLOAT,
        ScalarUnary::SqrtF => {
            let spread = (a + ea).sqrt() - (a - ea).max(0.0).sqrt();
            // 1 / inversesqrt: 2 ulp, then a 2.5 ulp division.
            float_result(a.sqrt(), spread, 6.0, true)
        }
        other => return Err(format!("unsupported unary op {other:?}")),
    })
}

/// Apply `f` to the operands, lane by lane when they are vectors (all
/// operands of a lane-wise op have the same shape).
fn lanewise(
    operands: &[&Value],
    f: &dyn Fn(&[&Value]) -> Result<Value, Error>,
) -> Result<Value, Error> {
    let Value::Vector(first) = operands[0] else {
        return f(operands);
    };
    (0..first.len())
        .map(|lane| {
            let lanes: Vec<&Value> = operands
                .iter()
                .map(|v| match v {
                    Value::Vector(l) => l.get(lane).ok_or("vectors of different lengths"),
                    _ => Err("a vector mixed with a scalar"),
                })
                .collect::<Result<_, _>>()?;
            f(&lanes)
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Vector)
}

fn as_float(v: &Value) -> Result<(f32, f64), Error> {
    match v {
        Value::Float(v, e) => Ok((*v, *e)),
        other => Err(format!("not an f32: {other:?}")),
    }
}

fn as_int(v: &Value) -> Result<Option<u32>, Error> {
    match v {
        Value::Int(v) => Ok(*v),
        other => Err(format!("not an integer: {other:?}")),
    }
}

/// An unknown value of type `ty`.
fn unknown(ty: &Type) -> Value {
    match ty {
        Type::F32 => UNKNOWN_FLOAT,
        Type::I1 => Value::Bool(None),
        Type::Vector { len, elem } => {
            Value::Vector(vec![unknown(&elem.to_type()); usize::from(*len)])
        }
        _ => Value::Int(None),
    }
}

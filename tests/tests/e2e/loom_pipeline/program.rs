//! Random valid loom programs: the proptest strategy and the renderer.
//!
//! Design choices and contracts:
//!
//! - A [`Program`] is a tree of raw choices (op codes, operand selectors),
//!   not of typed expressions: the renderer resolves every selector modulo
//!   the values of the required type visible at that point, so *every*
//!   value of the tree renders to a well-typed program, and proptest's
//!   shrinking (dropping instructions, lowering numbers) keeps it valid.
//! - Every type (`index`, `i1`, `i32`, `u32`, `f32` and 4-lane vectors of
//!   `i32` and `f32`) always has a visible value (the work-item id, the push constants, constants and a
//!   work-item-dependent condition come first), so a selector always
//!   resolves. Half the selectors favour the newest values, so data flows
//!   through long chains rather than straight from the inputs.
//! - Undefined behaviour is kept out by construction: shift amounts are
//!   masked to 0..31, unsigned and index divisors are forced nonzero, and
//!   signed divisors are forced odd with bit 1 clear (nonzero, never -1, so
//!   `i32::MIN / -1` cannot happen); loops have small constant trip counts.
//!   Float-to-int conversions saturate (documented in docs/loom.md), so
//!   they need no guard.
//! - The kernel reads `inputs.len()` words per work item from `%in` (row
//!   `%i`, or another row for a gather), and writes [`Program::width`]
//!   words per work item to `%out`: one per `outputs` entry at the end,
//!   then one per conditional `Store` (left as the caller filled it when
//!   the condition never held); each buffer is viewed with every element type
//!   it is accessed at, so mixed-type buffers lower to words. Two more
//!   buffers are touched only by 4-lane vector accesses, so they lower as
//!   arrays of 4-vectors: `%vin` (four f32 per work item, read at row `%i`
//!   and gathered from other rows) and `%vout` (one `vector<4xi32>` per
//!   work item). Before the guard every invocation exchanges a word with
//!   its neighbour through workgroup memory and a barrier.

use proptest::collection::vec;
use proptest::prelude::*;
use std::fmt::Write as _;

/// The generator's value types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `index`
    Index,
    /// `i1`
    I1,
    /// `i32`
    I32,
    /// `u32`
    U32,
    /// `f32`
    F32,
    /// `vector<4xi32>`
    V4I32,
    /// `vector<4xf32>`
    V4F32,
}

/// Every type, for selectors.
pub const TYPES: [Ty; 7] = [
    Ty::Index,
    Ty::I1,
    Ty::I32,
    Ty::U32,
    Ty::F32,
    Ty::V4I32,
    Ty::V4F32,
];
/// The scalar types, for stores.
pub const SCALAR_TYPES: [Ty; 5] = [Ty::Index, Ty::I1, Ty::I32, Ty::U32, Ty::F32];
/// The types a buffer holds.
pub const MEMORY_TYPES: [Ty; 3] = [Ty::I32, Ty::U32, Ty::F32];

impl Ty {
    /// The loom spelling.
    pub fn name(self) -> &'static str {
        match self {
            Ty::Index => "index",
            Ty::I1 => "i1",
            Ty::I32 => "i32",
            Ty::U32 => "u32",
            Ty::F32 => "f32",
            Ty::V4I32 => "vector<4xi32>",
            Ty::V4F32 => "vector<4xf32>",
        }
    }

    fn of(selector: u8) -> Ty {
        TYPES[usize::from(selector) % TYPES.len()]
    }

    fn scalar_of(selector: u8) -> Ty {
        SCALAR_TYPES[usize::from(selector) % SCALAR_TYPES.len()]
    }

    /// The lane type of a vector type.
    fn lane(self) -> Option<Ty> {
        match self {
            Ty::V4I32 => Some(Ty::I32),
            Ty::V4F32 => Some(Ty::F32),
            _ => None,
        }
    }
}

/// One instruction of the body. Selectors pick among the visible values of
/// the type the op needs (modulo their count).
#[derive(Clone, Debug)]
pub enum Instr {
    /// `OPS[code % OPS.len()]` applied to the selected operands.
    Op {
        /// Which op (and, for compares, which predicate through `args[2]`).
        code: u16,
        /// Operand selectors.
        args: [u16; 3],
    },
    /// A constant of type `Ty::of(ty)`; `bits` picks the value.
    Const {
        /// Type selector.
        ty: u8,
        /// Value selector.
        bits: u32,
    },
    /// Load input slot `slot` of row `row % n` (another work item's input).
    Gather {
        /// Selects the `index` value the row is computed from.
        row: u16,
        /// Input slot selector.
        slot: u16,
    },
    /// Store a value to this instruction's own output slot (after the
    /// `outputs` slots) when the selected condition holds; inside a loop
    /// the last iteration's store wins.
    Store {
        /// Selects the `i1` condition.
        cond: u16,
        /// Type selector.
        ty: u8,
        /// Value selector.
        value: u16,
    },
    /// Load row `row % n` of `%vin` as a `vector<4xf32>`.
    VectorGather {
        /// Selects the `index` value the row is computed from.
        row: u16,
    },
    /// `scf.if` yielding `results` (type, then-selector, else-selector).
    If {
        /// Selects the `i1` condition.
        cond: u16,
        /// The then region.
        then: Vec<Instr>,
        /// The else region.
        otherwise: Vec<Instr>,
        /// Yielded values.
        results: Vec<(u8, u16, u16)>,
    },
    /// `scf.for` from `lower` by `step`, `trips` times, carrying values
    /// (type, initial selector, next-iteration selector).
    For {
        /// First induction value.
        lower: u8,
        /// Trip count.
        trips: u8,
        /// Increment.
        step: u8,
        /// Loop-carried values.
        carried: Vec<(u8, u16, u16)>,
        /// The loop body.
        body: Vec<Instr>,
    },
}

/// A whole generated kernel and the data it runs on.
#[derive(Clone, Debug)]
pub struct Program {
    /// Workgroup size along x.
    pub workgroup_size: u32,
    /// The element type of each input slot.
    pub inputs: Vec<Ty>,
    /// The body inside the `%i < %n` guard.
    pub body: Vec<Instr>,
    /// Stored results: (type selector, value selector), one slot each.
    pub outputs: Vec<(u8, u16)>,
    /// Work items.
    pub n: u32,
    /// Seeds the input data and push constants.
    pub data_seed: u64,
    /// Whether this case also runs on the device.
    pub on_device: bool,
    /// Selects the `vector<4xi32>` stored to `%vout` row `%i`.
    pub vector_output: u16,
}

/// How an op is written.
#[derive(Clone, Copy)]
enum Form {
    /// `name %a, %b : T`
    Binary(&'static str),
    /// `name %a : T`
    Unary(&'static str),
    /// `name %a, %b, %c : T`
    Ternary(&'static str),
    /// `name pred, %a, %b : T` (predicate from the third selector)
    Compare(&'static str, &'static [&'static str]),
    /// `scalar.select %c, %a, %b : T`
    Select,
    /// `name %a : From -> To`
    Convert(&'static str),
    /// A shift whose amount is masked to 0..31 first.
    Shift(&'static str),
    /// An unsigned division whose divisor is or-ed with 1.
    DivUnsigned(&'static str),
    /// A signed division whose divisor is odd with bit 1 clear.
    DivSigned(&'static str),
    /// An index division whose divisor is at least 1.
    DivIndex(&'static str),
    /// `sqrtf` of `absf`.
    SqrtAbs,
    /// `vector.splat %a : T -> vector<4xT>`
    Splat,
    /// `vector.extract %v, lane` with the lane an `index` reduced modulo 4.
    Extract,
}

/// An op: result type, operand types, spelling.
struct OpDef {
    result: Ty,
    operands: &'static [Ty],
    form: Form,
}

const INT_PREDICATES: &[&str] = &[
    "eq", "ne", "ult", "ule", "ugt", "uge", "slt", "sle", "sgt", "sge",
];
const FLOAT_PREDICATES: &[&str] = &["oeq", "one", "olt", "ole", "ogt", "oge"];

macro_rules! op {
    ($result:ident, [$($operand:ident),*], $form:expr) => {
        OpDef { result: Ty::$result, operands: &[$(Ty::$operand),*], form: $form }
    };
}

/// Every op the generator emits.
const OPS: &[OpDef] = &[
    // index arithmetic
    op!(Index, [Index, Index], Form::Binary("index.add")),
    op!(Index, [Index, Index], Form::Binary("index.sub")),
    op!(Index, [Index, Index], Form::Binary("index.mul")),
    op!(Index, [Index, Index], Form::DivIndex("index.div")),
    op!(Index, [Index, Index], Form::DivIndex("index.rem")),
    op!(Index, [Index, Index], Form::Binary("index.min")),
    op!(Index, [Index, Index], Form::Binary("index.max")),
    op!(Index, [Index, Index, Index], Form::Ternary("index.madd")),
    op!(
        I1,
        [Index, Index],
        Form::Compare("index.cmp", INT_PREDICATES)
    ),
    op!(Index, [I32], Form::Convert("index.cast")),
    op!(Index, [U32], Form::Convert("index.cast")),
    op!(I32, [Index], Form::Convert("index.cast")),
    op!(U32, [Index], Form::Convert("index.cast")),
    // integers, both signednesses of storage
    op!(I32, [I32, I32], Form::Binary("scalar.addi")),
    op!(U32, [U32, U32], Form::Binary("scalar.addi")),
    op!(I32, [I32, I32], Form::Binary("scalar.subi")),
    op!(U32, [U32, U32], Form::Binary("scalar.subi")),
    op!(I32, [I32, I32], Form::Binary("scalar.muli")),
    op!(U32, [U32, U32], Form::Binary("scalar.muli")),
    op!(I32, [I32, I32], Form::Binary("scalar.andi")),
    op!(U32, [U32, U32], Form::Binary("scalar.ori")),
    op!(I32, [I32, I32], Form::Binary("scalar.xori")),
    op!(U32, [U32, U32], Form::Binary("scalar.andi")),
    op!(I32, [I32, I32], Form::Shift("scalar.shli")),
    op!(I32, [I32, I32], Form::Shift("scalar.shrsi")),
    op!(U32, [U32, U32], Form::Shift("scalar.shrui")),
    op!(U32, [U32, U32], Form::Shift("scalar.shrsi")),
    op!(I32, [I32, I32], Form::Shift("scalar.shrui")),
    op!(I32, [I32, I32], Form::DivSigned("scalar.divsi")),
    op!(I32, [I32, I32], Form::DivSigned("scalar.remsi")),
    op!(U32, [U32, U32], Form::DivUnsigned("scalar.divui")),
    op!(U32, [U32, U32], Form::DivUnsigned("scalar.remui")),
    op!(I1, [I32, I32], Form::Compare("scalar.cmpi", INT_PREDICATES)),
    op!(I1, [U32, U32], Form::Compare("scalar.cmpi", INT_PREDICATES)),
    // booleans
    op!(I1, [I1, I1], Form::Binary("scalar.andi")),
    op!(I1, [I1, I1], Form::Binary("scalar.ori")),
    op!(I1, [I1, I1], Form::Binary("scalar.xori")),
    // floats
    op!(F32, [F32, F32], Form::Binary("scalar.addf")),
    op!(F32, [F32, F32], Form::Binary("scalar.subf")),
    op!(F32, [F32, F32], Form::Binary("scalar.mulf")),
    op!(F32, [F32, F32], Form::Binary("scalar.divf")),
    op!(F32, [F32, F32], Form::Binary("scalar.maxnumf")),
    op!(F32, [F32, F32], Form::Binary("scalar.minnumf")),
    op!(F32, [F32, F32, F32], Form::Ternary("scalar.fmaf")),
    op!(F32, [F32], Form::Unary("scalar.negf")),
    op!(F32, [F32], Form::Unary("scalar.absf")),
    op!(F32, [F32], Form::SqrtAbs),
    op!(
        I1,
        [F32, F32],
        Form::Compare("scalar.cmpf", FLOAT_PREDICATES)
    ),
    // selects
    op!(Index, [I1, Index, Index], Form::Select),
    op!(I1, [I1, I1, I1], Form::Select),
    op!(I32, [I1, I32, I32], Form::Select),
    op!(U32, [I1, U32, U32], Form::Select),
    op!(F32, [I1, F32, F32], Form::Select),
    // conversions
    op!(F32, [I32], Form::Convert("scalar.sitofp")),
    op!(F32, [U32], Form::Convert("scalar.uitofp")),
    op!(I32, [F32], Form::Convert("scalar.fptosi")),
    op!(U32, [F32], Form::Convert("scalar.fptoui")),
    op!(U32, [I32], Form::Convert("scalar.bitcast")),
    op!(I32, [U32], Form::Convert("scalar.bitcast")),
    op!(F32, [U32], Form::Convert("scalar.bitcast")),
    op!(I32, [F32], Form::Convert("scalar.bitcast")),
    // vectors: lane-wise arithmetic, splat, extract, select, conversions
    op!(V4I32, [I32], Form::Splat),
    op!(V4F32, [F32], Form::Splat),
    op!(I32, [V4I32, Index], Form::Extract),
    op!(F32, [V4F32, Index], Form::Extract),
    op!(V4I32, [V4I32, V4I32], Form::Binary("scalar.addi")),
    op!(V4I32, [V4I32, V4I32], Form::Binary("scalar.muli")),
    op!(V4I32, [V4I32, V4I32], Form::Binary("scalar.xori")),
    op!(V4I32, [V4I32, V4I32], Form::Shift("scalar.shrsi")),
    op!(V4I32, [V4I32, V4I32], Form::DivSigned("scalar.remsi")),
    op!(V4F32, [V4F32, V4F32], Form::Binary("scalar.addf")),
    op!(V4F32, [V4F32, V4F32], Form::Binary("scalar.mulf")),
    op!(V4F32, [V4F32, V4F32], Form::Binary("scalar.minnumf")),
    op!(V4F32, [V4F32, V4F32, V4F32], Form::Ternary("scalar.fmaf")),
    op!(V4F32, [V4F32], Form::Unary("scalar.negf")),
    op!(V4I32, [I1, V4I32, V4I32], Form::Select),
    op!(V4F32, [I1, V4F32, V4F32], Form::Select),
    op!(V4F32, [V4I32], Form::Convert("scalar.sitofp")),
    op!(V4I32, [V4F32], Form::Convert("scalar.fptosi")),
    op!(V4I32, [V4F32], Form::Convert("scalar.bitcast")),
];

/// Op spellings and constructs every large enough sample of programs
/// contains.
pub const SPELLINGS: &[&str] = &[
    "index.add",
    "index.sub",
    "index.mul",
    "index.div",
    "index.rem",
    "index.min",
    "index.max",
    "index.madd",
    "index.cmp",
    "index.cast",
    "scalar.addi",
    "scalar.subi",
    "scalar.muli",
    "scalar.andi",
    "scalar.ori",
    "scalar.xori",
    "scalar.shli",
    "scalar.shrsi",
    "scalar.shrui",
    "scalar.divsi",
    "scalar.remsi",
    "scalar.divui",
    "scalar.remui",
    "scalar.cmpi",
    "scalar.addf",
    "scalar.subf",
    "scalar.mulf",
    "scalar.divf",
    "scalar.maxnumf",
    "scalar.minnumf",
    "scalar.fmaf",
    "scalar.negf",
    "scalar.absf",
    "scalar.sqrtf",
    "scalar.cmpf",
    "scalar.select",
    "scalar.sitofp",
    "scalar.uitofp",
    "scalar.fptosi",
    "scalar.fptoui",
    "scalar.bitcast",
    "vector.splat",
    "vector.extract",
    "scalar.addf %v",
    ": vector<4xf32>\n",
    ": vector<4xi32>\n",
    "scf.if",
    "} else {",
    "scf.for",
    "scf.yield",
    "view.load",
    "view.store",
    "%neighbour",
    "vector.load %vin_v[%t",
    "-> (",
    "xi32>",
    "xf32>",
    "xu32>",
];

/// The strategy for one instruction (regions nest up to three deep).
fn instr() -> impl Strategy<Value = Instr> {
    let leaf = prop_oneof![
        10 => (any::<u16>(), any::<[u16; 3]>()).prop_map(|(code, args)| Instr::Op { code, args }),
        2 => (any::<u8>(), any::<u32>()).prop_map(|(ty, bits)| Instr::Const { ty, bits }),
        1 => (any::<u16>(), any::<u16>()).prop_map(|(row, slot)| Instr::Gather { row, slot }),
        1 => any::<u16>().prop_map(|row| Instr::VectorGather { row }),
        1 => (any::<u16>(), any::<u8>(), any::<u16>())
            .prop_map(|(cond, ty, value)| Instr::Store { cond, ty, value }),
    ];
    leaf.clone().prop_recursive(3, 64, 8, move |inner| {
        let yielded = (any::<u8>(), any::<u16>(), any::<u16>());
        // Mostly straight-line ops, so regions stay a seasoning and most
        // values reach the stores.
        prop_oneof![
            8 => leaf.clone(),
            1 => (
                any::<u16>(),
                vec(inner.clone(), 0..6),
                vec(inner.clone(), 0..6),
                vec(yielded, 0..4),
            )
                .prop_map(|(cond, then, otherwise, results)| Instr::If {
                    cond,
                    then,
                    otherwise,
                    results,
                }),
            1 => (0u8..3, 0u8..5, 1u8..4, vec(yielded, 0..4), vec(inner, 0..8)).prop_map(
                |(lower, trips, step, carried, body)| Instr::For {
                    lower,
                    trips,
                    step,
                    carried,
                    body,
                }
            ),
        ]
    })
}

/// The strategy for whole programs; `device_share` is the probability
/// that a case also runs on the device.
pub fn program(device_share: f64) -> impl Strategy<Value = Program> {
    (
        prop::sample::select(vec![1u32, 3, 32, 64]),
        vec(prop::sample::select(MEMORY_TYPES.to_vec()), 1..6),
        vec(instr(), 1..40),
        vec((any::<u8>(), any::<u16>()), 1..8),
        1u32..100,
        any::<u64>(),
        prop::bool::weighted(device_share.clamp(0.0, 1.0)),
        any::<u16>(),
    )
        .prop_map(
            |(workgroup_size, inputs, body, outputs, n, data_seed, on_device, vector_output)| {
                Program {
                    workgroup_size,
                    inputs,
                    body,
                    outputs,
                    n,
                    data_seed,
                    on_device,
                    vector_output,
                }
            },
        )
}

/// The visible values, one scope per region.
struct Scopes {
    scopes: Vec<Vec<(Ty, String)>>,
}

impl Scopes {
    fn pick(&self, ty: Ty, selector: u16) -> String {
        let visible: Vec<&String> = self
            .scopes
            .iter()
            .flatten()
            .filter(|(t, _)| *t == ty)
            .map(|(_, name)| name)
            .collect();
        // The prelude defines a value of every type, so this never divides
        // by zero. Half the selectors (and the shrunk ones) pick among the
        // four newest values, so data flows through long chains of ops.
        let choice = usize::from(selector & 0x7fff);
        let at = if selector & 0x8000 == 0 {
            visible.len() - 1 - choice % visible.len().min(4)
        } else {
            choice % visible.len()
        };
        visible[at].clone()
    }

    fn define(&mut self, ty: Ty, name: String) {
        self.scopes
            .last_mut()
            .expect("a scope is open")
            .push((ty, name));
    }
}

/// Writes the loom text of a program.
struct Renderer<'a> {
    program: &'a Program,
    text: String,
    indent: usize,
    next: usize,
    scopes: Scopes,
    /// The output slot the next `Store` writes.
    next_store: usize,
}

impl Renderer<'_> {
    fn line(&mut self, line: &str) {
        for _ in 0..self.indent {
            self.text.push_str("  ");
        }
        self.text.push_str(line);
        self.text.push('\n');
    }

    fn fresh(&mut self, stem: &str) -> String {
        self.next += 1;
        format!("%{stem}{}", self.next)
    }

    /// Emit `%t = <rhs>` for a helper value that is not offered to later
    /// selectors.
    fn temp(&mut self, rhs: &str) -> String {
        let name = self.fresh("t");
        self.line(&format!("{name} = {rhs}"));
        name
    }

    /// A helper constant `literal` of type `ty` (splatted for vectors).
    fn typed_constant(&mut self, ty: Ty, literal: &str) -> String {
        match ty.lane() {
            Some(lane) => {
                let scalar = self.temp(&format!("scalar.constant {literal} : {}", lane.name()));
                self.temp(&format!(
                    "vector.splat {scalar} : {} -> {}",
                    lane.name(),
                    ty.name()
                ))
            }
            None => self.temp(&format!("scalar.constant {literal} : {}", ty.name())),
        }
    }

    fn constant(&mut self, ty: Ty, bits: u32) -> String {
        if let Some(lane) = ty.lane() {
            let scalar = self.constant(lane, bits);
            return self.temp(&format!(
                "vector.splat {scalar} : {} -> {}",
                lane.name(),
                ty.name()
            ));
        }
        let literal = constant_literal(ty, bits);
        let op = if ty == Ty::Index {
            "index.constant"
        } else {
            "scalar.constant"
        };
        self.temp(&format!("{op} {literal} : {}", ty.name()))
    }

    /// `view.store` of `value` (of type `ty`) to output slot `slot` of row
    /// `%i`; `index` and `i1` values are stored as `u32`.
    fn store(&mut self, ty: Ty, value: &str, slot: usize) {
        let value = match ty {
            Ty::Index => self.temp(&format!("index.cast {value} : index -> u32")),
            Ty::I1 => {
                let yes = self.temp("scalar.constant 1 : u32");
                let no = self.temp("scalar.constant 0 : u32");
                self.temp(&format!("scalar.select {value}, {yes}, {no} : u32"))
            }
            _ => value.to_string(),
        };
        let t = stored_type(ty);
        let view = output_view_type(self.program, t);
        self.line(&format!(
            "view.store {value}, %out_{n}[%i, %c{slot}] : {n}, {view}",
            n = t.name()
        ));
    }

    fn block(&mut self, instrs: &[Instr]) {
        for instr in instrs {
            self.instr(instr);
        }
    }

    fn instr(&mut self, instr: &Instr) {
        match instr {
            Instr::Op { code, args } => self.op(*code, *args),
            Instr::Const { ty, bits } => {
                let ty = Ty::of(*ty);
                let name = self.constant(ty, *bits);
                self.scopes.define(ty, name);
            }
            Instr::Gather { row, slot } => {
                let slot = usize::from(*slot) % self.program.inputs.len();
                let ty = self.program.inputs[slot];
                let from = self.scopes.pick(Ty::Index, *row);
                let row = self.temp(&format!("index.rem {from}, %n : index"));
                let name = self.fresh("v");
                let view = input_view_type(self.program, ty);
                self.line(&format!(
                    "{name} = view.load %in_{t}[{row}, %c{slot}] : {view} -> {t}",
                    t = ty.name()
                ));
                self.scopes.define(ty, name);
            }
            Instr::VectorGather { row } => {
                let from = self.scopes.pick(Ty::Index, *row);
                let row = self.temp(&format!("index.rem {from}, %n : index"));
                let name = self.fresh("v");
                self.line(&format!(
                    "{name} = vector.load %vin_v[{row}, %c0] : {VECTOR_VIEW_F32} -> vector<4xf32>"
                ));
                self.scopes.define(Ty::V4F32, name);
            }
            Instr::Store { cond, ty, value } => {
                let cond = self.scopes.pick(Ty::I1, *cond);
                let ty = Ty::scalar_of(*ty);
                let value = self.scopes.pick(ty, *value);
                let slot = self.program.outputs.len() + self.next_store;
                self.next_store += 1;
                self.line(&format!("scf.if {cond} {{"));
                self.indent += 1;
                self.store(ty, &value, slot);
                self.indent -= 1;
                self.line("}");
            }
            Instr::If {
                cond,
                then,
                otherwise,
                results,
            } => self.if_op(*cond, then, otherwise, results),
            Instr::For {
                lower,
                trips,
                step,
                carried,
                body,
            } => self.for_op(*lower, *trips, *step, carried, body),
        }
    }

    fn op(&mut self, code: u16, args: [u16; 3]) {
        let def = &OPS[usize::from(code) % OPS.len()];
        let operands: Vec<String> = def
            .operands
            .iter()
            .zip(args)
            .map(|(ty, selector)| self.scopes.pick(*ty, selector))
            .collect();
        let t = def.operands.last().expect("every op has operands").name();
        let rhs = match def.form {
            Form::Binary(name) => format!("{name} {}, {} : {t}", operands[0], operands[1]),
            Form::Unary(name) => format!("{name} {} : {t}", operands[0]),
            Form::Ternary(name) => format!(
                "{name} {}, {}, {} : {t}",
                operands[0], operands[1], operands[2]
            ),
            Form::Compare(name, predicates) => {
                let predicate = predicates[usize::from(args[2]) % predicates.len()];
                format!("{name} {predicate}, {}, {} : {t}", operands[0], operands[1])
            }
            Form::Select => format!(
                "scalar.select {}, {}, {} : {t}",
                operands[0], operands[1], operands[2]
            ),
            Form::Convert(name) => {
                format!("{name} {} : {t} -> {}", operands[0], def.result.name())
            }
            Form::Splat => {
                let lane = def.operands[0].name();
                format!(
                    "vector.splat {} : {lane} -> {}",
                    operands[0],
                    def.result.name()
                )
            }
            Form::Extract => {
                let four = self.temp("index.constant 4 : index");
                let lane = self.temp(&format!("index.rem {}, {four} : index", operands[1]));
                format!(
                    "vector.extract {}, {lane} : {} -> {}",
                    operands[0],
                    def.operands[0].name(),
                    def.result.name()
                )
            }
            Form::Shift(name) => {
                let mask = self.typed_constant(def.operands[1], "31");
                let amount = self.temp(&format!("scalar.andi {}, {mask} : {t}", operands[1]));
                format!("{name} {}, {amount} : {t}", operands[0])
            }
            Form::DivUnsigned(name) => {
                let one = self.temp(&format!("scalar.constant 1 : {t}"));
                let divisor = self.temp(&format!("scalar.ori {}, {one} : {t}", operands[1]));
                format!("{name} {}, {divisor} : {t}", operands[0])
            }
            Form::DivSigned(name) => {
                // Odd with bit 1 clear: never 0 and never -1.
                let clear = self.typed_constant(def.operands[1], "-3");
                let one = self.typed_constant(def.operands[1], "1");
                let masked = self.temp(&format!("scalar.andi {}, {clear} : {t}", operands[1]));
                let divisor = self.temp(&format!("scalar.ori {masked}, {one} : {t}"));
                format!("{name} {}, {divisor} : {t}", operands[0])
            }
            Form::DivIndex(name) => {
                let divisor = self.temp(&format!("index.max {}, %one_i : index", operands[1]));
                format!("{name} {}, {divisor} : index", operands[0])
            }
            Form::SqrtAbs => {
                let magnitude = self.temp(&format!("scalar.absf {} : f32", operands[0]));
                format!("scalar.sqrtf {magnitude} : f32")
            }
        };
        let name = self.fresh("v");
        self.line(&format!("{name} = {rhs}"));
        self.scopes.define(def.result, name);
    }

    fn if_op(
        &mut self,
        cond: u16,
        then: &[Instr],
        otherwise: &[Instr],
        results: &[(u8, u16, u16)],
    ) {
        let cond = self.scopes.pick(Ty::I1, cond);
        let types: Vec<Ty> = results.iter().map(|(t, _, _)| Ty::of(*t)).collect();
        let names: Vec<String> = types.iter().map(|_| self.fresh("v")).collect();
        if results.is_empty() {
            self.line(&format!("scf.if {cond} {{"));
        } else {
            self.line(&format!(
                "{} = scf.if {cond} -> ({}) {{",
                names.join(", "),
                type_list(&types)
            ));
        }
        let then_yield: Vec<(Ty, u16)> = results.iter().map(|(t, s, _)| (Ty::of(*t), *s)).collect();
        self.region(then, &then_yield);
        if !results.is_empty() || !otherwise.is_empty() {
            self.line("} else {");
            let else_yield: Vec<(Ty, u16)> =
                results.iter().map(|(t, _, s)| (Ty::of(*t), *s)).collect();
            self.region(otherwise, &else_yield);
        }
        self.line("}");
        for (ty, name) in types.into_iter().zip(names) {
            self.scopes.define(ty, name);
        }
    }

    fn for_op(
        &mut self,
        lower: u8,
        trips: u8,
        step: u8,
        carried: &[(u8, u16, u16)],
        body: &[Instr],
    ) {
        let upper = u32::from(lower) + u32::from(trips) * u32::from(step);
        let lo = self.temp(&format!("index.constant {lower} : index"));
        let hi = self.temp(&format!("index.constant {upper} : index"));
        let st = self.temp(&format!("index.constant {step} : index"));
        let iv = self.fresh("iv");
        let types: Vec<Ty> = carried.iter().map(|(t, _, _)| Ty::of(*t)).collect();
        let inits: Vec<String> = carried
            .iter()
            .zip(&types)
            .map(|((_, init, _), ty)| self.scopes.pick(*ty, *init))
            .collect();
        let args: Vec<String> = types.iter().map(|_| self.fresh("a")).collect();
        let names: Vec<String> = types.iter().map(|_| self.fresh("v")).collect();
        if carried.is_empty() {
            self.line(&format!("scf.for {iv} = [{lo} to {hi} step {st}] {{"));
        } else {
            let bindings: Vec<String> = args
                .iter()
                .zip(&inits)
                .zip(&types)
                .map(|((a, init), ty)| format!("{a} = {init} : {}", ty.name()))
                .collect();
            self.line(&format!(
                "{} = scf.for {iv} = [{lo} to {hi} step {st}]({}) -> ({}) {{",
                names.join(", "),
                bindings.join(", "),
                type_list(&types)
            ));
        }
        self.scopes.scopes.push(vec![(Ty::Index, iv)]);
        for (ty, a) in types.iter().zip(&args) {
            self.scopes.define(*ty, a.clone());
        }
        self.scopes.scopes.push(Vec::new());
        let next: Vec<(Ty, u16)> = carried.iter().map(|(t, _, s)| (Ty::of(*t), *s)).collect();
        self.indent += 1;
        self.block(body);
        self.yield_values(&next);
        self.indent -= 1;
        self.scopes.scopes.pop();
        self.scopes.scopes.pop();
        self.line("}");
        for (ty, name) in types.into_iter().zip(names) {
            self.scopes.define(ty, name);
        }
    }

    fn region(&mut self, instrs: &[Instr], yields: &[(Ty, u16)]) {
        self.scopes.scopes.push(Vec::new());
        self.indent += 1;
        self.block(instrs);
        self.yield_values(yields);
        self.indent -= 1;
        self.scopes.scopes.pop();
    }

    fn yield_values(&mut self, yields: &[(Ty, u16)]) {
        if yields.is_empty() {
            return;
        }
        let values: Vec<String> = yields
            .iter()
            .map(|(ty, selector)| self.scopes.pick(*ty, *selector))
            .collect();
        let types: Vec<Ty> = yields.iter().map(|(ty, _)| *ty).collect();
        self.line(&format!(
            "scf.yield {} : {}",
            values.join(", "),
            type_list(&types)
        ));
    }
}

fn type_list(types: &[Ty]) -> String {
    types
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The view `%vin` is read through, only by 4-lane vector loads (so it
/// lowers as an array of 4-vectors).
const VECTOR_VIEW_F32: &str = "view<[%n]x4xf32>";
/// The view `%vout` is written through, only by 4-lane vector stores.
const VECTOR_VIEW_I32: &str = "view<[%n]x4xi32>";

/// The view type through which input slots of type `ty` are read.
fn input_view_type(program: &Program, ty: Ty) -> String {
    format!("view<[%n]x{}x{}>", program.inputs.len(), ty.name())
}

/// The view type through which output slots of type `ty` are written.
fn output_view_type(program: &Program, ty: Ty) -> String {
    format!("view<[%n]x{}x{}>", program.width(), ty.name())
}

/// The `Store` instructions in `instrs` and their regions, and the
/// stored types.
fn stores(instrs: &[Instr], types: &mut Vec<Ty>) {
    for instr in instrs {
        match instr {
            Instr::Store { ty, .. } => types.push(stored_type(Ty::scalar_of(*ty))),
            Instr::If {
                then, otherwise, ..
            } => {
                stores(then, types);
                stores(otherwise, types);
            }
            Instr::For { body, .. } => stores(body, types),
            _ => {}
        }
    }
}

/// A literal of type `ty` chosen by `bits`: mostly interesting small or
/// boundary values, sometimes the raw bits.
fn constant_literal(ty: Ty, bits: u32) -> String {
    const SIGNED: [i32; 10] = [0, 1, -1, 2, 7, -8, 31, 32, i32::MIN, i32::MAX];
    const FLOATS: [f32; 12] = [
        0.0, 1.0, -1.0, 0.5, 2.0, -3.25, 3.0, 0.125, 1024.0, 7.5, 1.0e6, -0.0,
    ];
    let raw = (bits >> 24) & 1 == 1;
    match ty {
        Ty::I1 => if bits & 1 == 1 { "true" } else { "false" }.into(),
        Ty::Index => if raw { bits } else { bits % 64 }.to_string(),
        Ty::U32 => if raw { bits } else { bits % 64 }.to_string(),
        Ty::I32 => if !raw {
            SIGNED[bits as usize % SIGNED.len()]
        } else {
            bits as i32
        }
        .to_string(),
        Ty::F32 => {
            let value = if !raw {
                FLOATS[bits as usize % FLOATS.len()]
            } else {
                // A dyadic value in [-256, 256) with 1/64 steps.
                (bits % 32768) as f32 / 64.0 - 256.0
            };
            format!("{value:?}")
        }
        // Vector constants are splatted lane constants.
        Ty::V4I32 | Ty::V4F32 => unreachable!("constant_literal of a vector type"),
    }
}

impl Program {
    /// Output words per work item: the `outputs` slots, then one per
    /// `Store` instruction.
    pub fn width(&self) -> usize {
        let mut types = Vec::new();
        stores(&self.body, &mut types);
        self.outputs.len() + types.len()
    }

    /// The loom source of the kernel `@prop`.
    pub fn source(&self) -> String {
        let mut r = Renderer {
            program: self,
            text: String::new(),
            indent: 0,
            next: 0,
            scopes: Scopes {
                scopes: vec![Vec::new()],
            },
            next_store: 0,
        };
        let w = self.workgroup_size;
        let _ = write!(
            r.text,
            "kernel.def @prop(%n: index) {{\n\
             \x20 %one = index.constant 1 : index\n\
             \x20 %wg = index.constant {w} : index\n\
             \x20 %wl = index.constant {} : index\n\
             \x20 %np = index.add %n, %wl : index\n\
             \x20 %groups = index.div %np, %wg : index\n\
             \x20 kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%wg, %one, %one) : index\n\
             }} launch(%n: index, %si: i32, %su: u32, %sf: f32, %in: buffer {{readonly}}, %out: buffer, \
             %vin: buffer {{readonly}}, %vout: buffer) {{\n",
            w - 1
        );
        r.indent = 1;
        r.line("%zero = index.constant 0 : offset");
        for ty in MEMORY_TYPES {
            if self.inputs.contains(&ty) {
                let view = input_view_type(self, ty);
                r.line(&format!(
                    "%in_{t} = buffer.view %in[%zero] : buffer -> {view}",
                    t = ty.name()
                ));
            }
        }
        let mut stored: Vec<Ty> = self
            .outputs
            .iter()
            .map(|(t, _)| stored_type(Ty::scalar_of(*t)))
            .collect();
        stores(&self.body, &mut stored);
        for ty in MEMORY_TYPES {
            if stored.contains(&ty) {
                let view = output_view_type(self, ty);
                r.line(&format!(
                    "%out_{t} = buffer.view %out[%zero] : buffer -> {view}",
                    t = ty.name()
                ));
            }
        }
        r.line(&format!(
            "%vin_v = buffer.view %vin[%zero] : buffer -> {VECTOR_VIEW_F32}"
        ));
        r.line(&format!(
            "%vout_v = buffer.view %vout[%zero] : buffer -> {VECTOR_VIEW_I32}"
        ));
        r.line("%i = kernel.workitem.dispatch.id<x> : index");
        // Every invocation, inside the range or not, publishes a word in
        // workgroup memory and reads its neighbour's after a barrier.
        let shared = format!("view<{w}xu32>");
        r.line(&format!("%sh_bytes = index.constant {} : offset", 4 * w));
        r.line("%sh = buffer.alloca<workgroup> align(16) %sh_bytes : buffer");
        r.line(&format!(
            "%sh_v = buffer.view %sh[%zero] : buffer -> {shared}"
        ));
        r.line("%sh_lid = kernel.workitem.id<x> : index");
        r.line("%sh_i = index.cast %i : index -> u32");
        r.line("%sh_mine = scalar.xori %sh_i, %su : u32");
        r.line(&format!(
            "view.store %sh_mine, %sh_v[%sh_lid] : u32, {shared}"
        ));
        r.line("kernel.barrier<workgroup>");
        r.line("%sh_1 = index.constant 1 : index");
        r.line(&format!("%sh_w = index.constant {w} : index"));
        r.line("%sh_next = index.add %sh_lid, %sh_1 : index");
        r.line("%sh_at = index.rem %sh_next, %sh_w : index");
        r.line(&format!(
            "%neighbour = view.load %sh_v[%sh_at] : {shared} -> u32"
        ));
        r.line("%inside = index.cmp ult, %i, %n : index");
        r.line("scf.if %inside {");
        r.indent = 2;
        r.line("%one_i = index.constant 1 : index");
        for c in 0..self.inputs.len().max(self.width()) {
            r.line(&format!("%c{c} = index.constant {c} : index"));
        }
        r.line("%gid = kernel.workgroup.id<x> : index");
        r.line("%lid = kernel.workitem.id<x> : index");
        r.line("%gsize = kernel.workgroup.size<x> : index");
        r.line("%gcount = kernel.workgroup.count<x> : index");
        for (ty, name) in [
            (Ty::Index, "%gid"),
            (Ty::Index, "%lid"),
            (Ty::Index, "%gsize"),
            (Ty::Index, "%gcount"),
            (Ty::Index, "%i"),
            (Ty::Index, "%n"),
            (Ty::I32, "%si"),
            (Ty::U32, "%su"),
            (Ty::U32, "%neighbour"),
            (Ty::F32, "%sf"),
        ] {
            r.scopes.define(ty, name.into());
        }
        for (ty, bits) in [
            (Ty::F32, 1),
            (Ty::I32, 7),
            (Ty::U32, 3),
            (Ty::V4I32, 2),
            (Ty::V4F32, 4),
        ] {
            let name = r.constant(ty, bits);
            r.scopes.define(ty, name);
        }
        // A condition that differs between work items.
        let two = r.temp("index.constant 2 : index");
        let parity = r.temp(&format!("index.rem %i, {two} : index"));
        let odd = r.temp(&format!("index.cmp eq, {parity}, %one_i : index"));
        r.scopes.define(Ty::I1, odd);
        for (slot, ty) in self.inputs.iter().enumerate() {
            let name = r.fresh("x");
            let view = input_view_type(self, *ty);
            r.line(&format!(
                "{name} = view.load %in_{t}[%i, %c{slot}] : {view} -> {t}",
                t = ty.name()
            ));
            r.scopes.define(*ty, name);
        }
        r.line(&format!(
            "%vx = vector.load %vin_v[%i, %c0] : {VECTOR_VIEW_F32} -> vector<4xf32>"
        ));
        r.scopes.define(Ty::V4F32, "%vx".into());
        r.block(&self.body);
        for (slot, (ty, selector)) in self.outputs.iter().enumerate() {
            let ty = Ty::scalar_of(*ty);
            let value = r.scopes.pick(ty, *selector);
            r.store(ty, &value, slot);
        }
        let vector = r.scopes.pick(Ty::V4I32, self.vector_output);
        r.line(&format!(
            "vector.store {vector}, %vout_v[%i, %c0] : vector<4xi32>, {VECTOR_VIEW_I32}"
        ));
        r.indent = 1;
        r.line("}");
        r.line("kernel.return");
        r.text.push_str("}\n");
        r.text
    }
}

/// The element type an output of type `ty` is stored as.
fn stored_type(ty: Ty) -> Ty {
    match ty {
        Ty::Index | Ty::I1 => Ty::U32,
        other => other,
    }
}

/// The input words (row-major, `n` rows of `inputs.len()` slots) and push
/// constants of one run.
#[derive(Clone, Debug)]
pub struct Data {
    /// `%in`.
    pub words: Vec<u32>,
    /// `%vin`: four f32 per work item.
    pub vector_words: Vec<u32>,
    /// `%si`.
    pub si: i32,
    /// `%su`.
    pub su: u32,
    /// `%sf`.
    pub sf: f32,
}

/// splitmix64: reproducible data from the case's seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An integer: small, a boundary value, or any 32 bits.
    fn int(&mut self) -> u32 {
        let r = self.next();
        match r % 5 {
            0 | 1 => (((r >> 8) % 41) as i32 - 20) as u32,
            2 => [0, 1, u32::MAX, 31, 32, 0x8000_0000, 0x7fff_ffff][(r >> 8) as usize % 7],
            _ => (r >> 32) as u32,
        }
    }

    /// A finite, normal (or zero) float: small integers, dyadic values,
    /// uniform values or boundary-ish magnitudes.
    fn float(&mut self) -> f32 {
        let r = self.next();
        let pick = (r >> 8) as u32;
        match r % 10 {
            0..=2 => (pick % 33) as f32 - 16.0,
            3..=5 => (pick % 2049) as f32 / 16.0 - 64.0,
            6..=8 => (pick as f64 / f64::from(u32::MAX) * 2000.0 - 1000.0) as f32,
            _ => [0.0, -0.0, 1.0e10, -1.0e-10, 65536.0, 3.0e9, -5.0e9][pick as usize % 7],
        }
    }
}

impl Program {
    /// The data this case runs on.
    pub fn data(&self) -> Data {
        let mut rng = Rng(self.data_seed);
        let mut words = Vec::with_capacity(self.n as usize * self.inputs.len());
        for _ in 0..self.n {
            for ty in &self.inputs {
                words.push(match ty {
                    Ty::F32 => rng.float().to_bits(),
                    _ => rng.int(),
                });
            }
        }
        let vector_words = (0..4 * self.n).map(|_| rng.float().to_bits()).collect();
        Data {
            words,
            vector_words,
            si: rng.int() as i32,
            su: rng.int(),
            sf: rng.float(),
        }
    }
}

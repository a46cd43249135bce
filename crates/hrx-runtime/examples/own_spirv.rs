//! The runtime with SPIR-V from anywhere: here, a module assembled by hand.
//!
//! hrx-runtime never parses a kernel language: `GpuKernel::new` takes SPIR-V
//! words plus a `KernelContract` that declares each binding's access and
//! size, the push-constant bytes and the workgroup size. This example
//! assembles `y[i] = x[i] * x[i] + c` for `i < n` (u32 arithmetic, so the
//! check is exact) word by word, runs it and checks every element.
//! Run with `cargo run -p hrx-runtime --example own_spirv`.

use hrx_runtime::{
    Access, BindingContract, Error, GpuKernel, KernelContract, MemoryPlacement, Result, Runtime,
};

const WORKGROUP: u32 = 64;

/// A minimal SPIR-V assembler: result ids are handed out in order and each
/// instruction is `(word count << 16) | opcode` followed by its operands.
struct Assembler {
    words: Vec<u32>,
    next_id: u32,
}

impl Assembler {
    fn new() -> Assembler {
        Assembler {
            words: Vec::new(),
            next_id: 1,
        }
    }

    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id - 1
    }

    fn op(&mut self, opcode: u16, operands: &[u32]) {
        let count = u32::try_from(operands.len() + 1).expect("short instruction");
        self.words.push((count << 16) | u32::from(opcode));
        self.words.extend_from_slice(operands);
    }

    /// A literal string operand: UTF-8, NUL-terminated, padded to words.
    fn string(text: &str) -> Vec<u32> {
        let mut bytes = text.as_bytes().to_vec();
        bytes.push(0);
        bytes.resize(bytes.len().div_ceil(4) * 4, 0);
        bytes
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    }

    /// The module: header (magic, SPIR-V 1.3, generator 0, id bound, 0).
    fn finish(self) -> Vec<u32> {
        let mut module = vec![0x0723_0203, 0x0001_0300, 0, self.next_id, 0];
        module.extend(self.words);
        module
    }
}

// The opcodes and enumerants used below, from the SPIR-V specification.
const OP_CAPABILITY: u16 = 17;
const OP_MEMORY_MODEL: u16 = 14;
const OP_ENTRY_POINT: u16 = 15;
const OP_EXECUTION_MODE: u16 = 16;
const OP_DECORATE: u16 = 71;
const OP_MEMBER_DECORATE: u16 = 72;
const OP_TYPE_VOID: u16 = 19;
const OP_TYPE_BOOL: u16 = 20;
const OP_TYPE_INT: u16 = 21;
const OP_TYPE_VECTOR: u16 = 23;
const OP_TYPE_RUNTIME_ARRAY: u16 = 29;
const OP_TYPE_STRUCT: u16 = 30;
const OP_TYPE_POINTER: u16 = 32;
const OP_TYPE_FUNCTION: u16 = 33;
const OP_CONSTANT: u16 = 43;
const OP_FUNCTION: u16 = 54;
const OP_FUNCTION_END: u16 = 56;
const OP_VARIABLE: u16 = 59;
const OP_LOAD: u16 = 61;
const OP_STORE: u16 = 62;
const OP_ACCESS_CHAIN: u16 = 65;
const OP_COMPOSITE_EXTRACT: u16 = 81;
const OP_IADD: u16 = 128;
const OP_IMUL: u16 = 132;
const OP_ULESS_THAN: u16 = 176;
const OP_SELECTION_MERGE: u16 = 247;
const OP_LABEL: u16 = 248;
const OP_BRANCH: u16 = 249;
const OP_BRANCH_CONDITIONAL: u16 = 250;
const OP_RETURN: u16 = 253;

const CAPABILITY_SHADER: u32 = 1;
const ADDRESSING_LOGICAL: u32 = 0;
const MEMORY_GLSL450: u32 = 1;
const MODEL_GL_COMPUTE: u32 = 5;
const MODE_LOCAL_SIZE: u32 = 17;
const DECORATION_BLOCK: u32 = 2;
const DECORATION_ARRAY_STRIDE: u32 = 6;
const DECORATION_NON_WRITABLE: u32 = 24;
const DECORATION_BUILTIN: u32 = 11;
const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;
const DECORATION_OFFSET: u32 = 35;
const BUILTIN_GLOBAL_INVOCATION_ID: u32 = 28;
const STORAGE_INPUT: u32 = 1;
const STORAGE_PUSH_CONSTANT: u32 = 9;
const STORAGE_BUFFER: u32 = 12;

/// `main`: binding 0 `x: u32[]` (read), binding 1 `y: u32[]` (written),
/// push constants `{ n: u32, c: u32 }`, workgroup size 64.
fn square_plus_c() -> Vec<u32> {
    let mut a = Assembler::new();
    let (main, gid) = (a.id(), a.id());
    let (void, func, u32_t, bool_t, uvec3) = (a.id(), a.id(), a.id(), a.id(), a.id());
    let (array, buffer, params) = (a.id(), a.id(), a.id());
    let (buffer_ptr, params_ptr, gid_ptr, u32_sb_ptr, u32_pc_ptr) =
        (a.id(), a.id(), a.id(), a.id(), a.id());
    let (zero, one, x, y, push) = (a.id(), a.id(), a.id(), a.id(), a.id());

    a.op(OP_CAPABILITY, &[CAPABILITY_SHADER]);
    a.op(OP_MEMORY_MODEL, &[ADDRESSING_LOGICAL, MEMORY_GLSL450]);
    // SPIR-V 1.3 lists only Input/Output variables in the interface.
    let mut entry = vec![MODEL_GL_COMPUTE, main];
    entry.extend(Assembler::string("main"));
    entry.push(gid);
    a.op(OP_ENTRY_POINT, &entry);
    a.op(OP_EXECUTION_MODE, &[main, MODE_LOCAL_SIZE, WORKGROUP, 1, 1]);

    a.op(
        OP_DECORATE,
        &[gid, DECORATION_BUILTIN, BUILTIN_GLOBAL_INVOCATION_ID],
    );
    a.op(OP_DECORATE, &[array, DECORATION_ARRAY_STRIDE, 4]);
    a.op(OP_DECORATE, &[buffer, DECORATION_BLOCK]);
    a.op(OP_MEMBER_DECORATE, &[buffer, 0, DECORATION_OFFSET, 0]);
    a.op(OP_DECORATE, &[params, DECORATION_BLOCK]);
    a.op(OP_MEMBER_DECORATE, &[params, 0, DECORATION_OFFSET, 0]);
    a.op(OP_MEMBER_DECORATE, &[params, 1, DECORATION_OFFSET, 4]);
    for (variable, binding) in [(x, 0), (y, 1)] {
        a.op(OP_DECORATE, &[variable, DECORATION_DESCRIPTOR_SET, 0]);
        a.op(OP_DECORATE, &[variable, DECORATION_BINDING, binding]);
    }
    a.op(OP_DECORATE, &[x, DECORATION_NON_WRITABLE]);

    a.op(OP_TYPE_VOID, &[void]);
    a.op(OP_TYPE_FUNCTION, &[func, void]);
    a.op(OP_TYPE_INT, &[u32_t, 32, 0]);
    a.op(OP_TYPE_BOOL, &[bool_t]);
    a.op(OP_TYPE_VECTOR, &[uvec3, u32_t, 3]);
    a.op(OP_TYPE_RUNTIME_ARRAY, &[array, u32_t]);
    a.op(OP_TYPE_STRUCT, &[buffer, array]);
    a.op(OP_TYPE_STRUCT, &[params, u32_t, u32_t]);
    a.op(OP_TYPE_POINTER, &[buffer_ptr, STORAGE_BUFFER, buffer]);
    a.op(
        OP_TYPE_POINTER,
        &[params_ptr, STORAGE_PUSH_CONSTANT, params],
    );
    a.op(OP_TYPE_POINTER, &[gid_ptr, STORAGE_INPUT, uvec3]);
    a.op(OP_TYPE_POINTER, &[u32_sb_ptr, STORAGE_BUFFER, u32_t]);
    a.op(OP_TYPE_POINTER, &[u32_pc_ptr, STORAGE_PUSH_CONSTANT, u32_t]);
    a.op(OP_CONSTANT, &[u32_t, zero, 0]);
    a.op(OP_CONSTANT, &[u32_t, one, 1]);
    a.op(OP_VARIABLE, &[gid_ptr, gid, STORAGE_INPUT]);
    a.op(OP_VARIABLE, &[buffer_ptr, x, STORAGE_BUFFER]);
    a.op(OP_VARIABLE, &[buffer_ptr, y, STORAGE_BUFFER]);
    a.op(OP_VARIABLE, &[params_ptr, push, STORAGE_PUSH_CONSTANT]);

    let (entry_block, body, merge) = (a.id(), a.id(), a.id());
    let (ids, i, n_ptr, n, inside) = (a.id(), a.id(), a.id(), a.id(), a.id());
    let (x_ptr, xi, square, c_ptr, c, sum, y_ptr) =
        (a.id(), a.id(), a.id(), a.id(), a.id(), a.id(), a.id());
    a.op(OP_FUNCTION, &[void, main, 0, func]);
    a.op(OP_LABEL, &[entry_block]);
    a.op(OP_LOAD, &[uvec3, ids, gid]);
    a.op(OP_COMPOSITE_EXTRACT, &[u32_t, i, ids, 0]);
    a.op(OP_ACCESS_CHAIN, &[u32_pc_ptr, n_ptr, push, zero]);
    a.op(OP_LOAD, &[u32_t, n, n_ptr]);
    a.op(OP_ULESS_THAN, &[bool_t, inside, i, n]);
    a.op(OP_SELECTION_MERGE, &[merge, 0]);
    a.op(OP_BRANCH_CONDITIONAL, &[inside, body, merge]);
    a.op(OP_LABEL, &[body]);
    a.op(OP_ACCESS_CHAIN, &[u32_sb_ptr, x_ptr, x, zero, i]);
    a.op(OP_LOAD, &[u32_t, xi, x_ptr]);
    a.op(OP_IMUL, &[u32_t, square, xi, xi]);
    a.op(OP_ACCESS_CHAIN, &[u32_pc_ptr, c_ptr, push, one]);
    a.op(OP_LOAD, &[u32_t, c, c_ptr]);
    a.op(OP_IADD, &[u32_t, sum, square, c]);
    a.op(OP_ACCESS_CHAIN, &[u32_sb_ptr, y_ptr, y, zero, i]);
    a.op(OP_STORE, &[y_ptr, sum]);
    a.op(OP_BRANCH, &[merge]);
    a.op(OP_LABEL, &[merge]);
    a.op(OP_RETURN, &[]);
    a.op(OP_FUNCTION_END, &[]);
    a.finish()
}

fn main() -> Result<()> {
    let runtime = Runtime::from_env()?;
    let target = runtime.gpu()?.target().clone();
    println!("device: {} ({:?})", target.name, target.kind);

    let spirv = square_plus_c();
    println!("hand-assembled SPIR-V: {} words", spirv.len());

    // n is not a multiple of the workgroup size: the kernel's `i < n`
    // guard covers the last, partial workgroup.
    let n: u32 = 100_003;
    let c: u32 = 7;
    let bytes = n as usize * 4;
    let binding = |access| BindingContract {
        min_bytes: bytes,
        alignment: 4,
        access,
    };
    let kernel = GpuKernel::new(
        &runtime,
        &spirv,
        KernelContract {
            entry_point: "main".into(),
            bindings: vec![binding(Access::Read), binding(Access::ReadWrite)],
            push_constant_bytes: 8,
            workgroup_size: [WORKGROUP, 1, 1],
        },
    )?;

    let x = runtime.allocate(bytes, MemoryPlacement::HostVisible)?;
    let y = runtime.allocate(bytes, MemoryPlacement::GpuLocal)?;
    let y_host = runtime.allocate(bytes, MemoryPlacement::HostVisible)?;
    {
        let mut mapped = x.map_write()?;
        for (i, word) in mapped.chunks_exact_mut(4).enumerate() {
            word.copy_from_slice(&(i as u32).to_le_bytes());
        }
    }

    let mut constants = n.to_le_bytes().to_vec();
    constants.extend_from_slice(&c.to_le_bytes());
    let mut graph = runtime.graph();
    graph.dispatch(
        &kernel,
        &[x.view(), y.view()],
        &constants,
        [n.div_ceil(WORKGROUP), 1, 1],
    )?;
    graph.copy(y_host.view(), y.view())?;
    let graph = graph.prepare()?;
    graph.submit()?.wait()?;

    let result = y_host.map_read()?;
    let wrong = result
        .chunks_exact(4)
        .enumerate()
        .filter(|&(i, word)| {
            let expected = (i as u32).wrapping_mul(i as u32).wrapping_add(c);
            u32::from_le_bytes([word[0], word[1], word[2], word[3]]) != expected
        })
        .count();
    println!("y[i] = x[i]^2 + {c} over {n} elements: {wrong} wrong");
    if wrong > 0 {
        return Err(Error::msg(format!("{wrong} of {n} results are wrong")));
    }
    println!("ok");
    Ok(())
}

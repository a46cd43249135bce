//! A SPIR-V module's interface, read from its words, checked against a
//! [`KernelContract`] before the driver sees the module.
//!
//! A driver trusts the module it is given: an instruction that runs past
//! the end, a missing entry point, or a shader binding the pipeline layout
//! lacks is undefined behaviour in the driver, reachable from safe code
//! through [`GpuKernel::new`](crate::GpuKernel::new). So the module is
//! walked once: every instruction's word count must stay inside the module,
//! which must end with `OpFunctionEnd`; the contract's entry point must
//! exist as a GLCompute entry point naming a defined function, its
//! literal workgroup size (when it states one) must equal the contract's,
//! every descriptor the module declares must be a storage buffer of set 0
//! at a binding the contract has, and a push-constant block must fit the
//! contract's bytes. What is not checked: the semantics of the code (that
//! is a validator's job, `spirv-val`) and the declared access of each
//! binding (contracts are trusted to state it truthfully).

use hrx_core::{Error, KernelContract, Result};
use std::collections::HashMap;

/// The first word of every SPIR-V module.
pub(crate) const SPIRV_MAGIC: u32 = 0x0723_0203;

// Opcodes and operands of the SPIR-V specification (unified 1.x).
const OP_NAME_ENTRY_POINT: u32 = 15;
const OP_EXECUTION_MODE: u32 = 16;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_FUNCTION: u32 = 54;
const OP_FUNCTION_END: u32 = 56;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const EXECUTION_MODEL_GL_COMPUTE: u32 = 5;
const EXECUTION_MODE_LOCAL_SIZE: u32 = 17;
const STORAGE_UNIFORM: u32 = 2;
const STORAGE_PUSH_CONSTANT: u32 = 9;
const STORAGE_STORAGE_BUFFER: u32 = 12;
const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;
const DECORATION_OFFSET: u32 = 35;

/// What the walk collects.
#[derive(Default)]
struct Interface {
    /// GLCompute entry points: name -> id.
    entries: HashMap<String, u32>,
    /// Ids defined by `OpFunction`.
    functions: std::collections::HashSet<u32>,
    /// The opcode of the last instruction.
    last_opcode: u32,
    /// `LocalSize` execution modes: entry id -> size.
    local_sizes: HashMap<u32, [u32; 3]>,
    /// Variables: id -> (pointer type id, storage class).
    variables: Vec<(u32, u32, u32)>,
    /// Pointer types: id -> pointee type id.
    pointers: HashMap<u32, u32>,
    /// Sizes of scalar, vector and array types whose size is known.
    sizes: HashMap<u32, u64>,
    /// Struct types: id -> member type ids.
    structs: HashMap<u32, Vec<u32>>,
    /// Member offsets: (struct id, member) -> byte offset.
    offsets: HashMap<(u32, u32), u64>,
    /// 32-bit integer constants: id -> value.
    constants: HashMap<u32, u64>,
    /// Decorations: id -> descriptor set / binding.
    sets: HashMap<u32, u32>,
    bindings: HashMap<u32, u32>,
}

/// The literal string starting at `words[0]` (nul-terminated, packed
/// little-endian four bytes a word).
fn literal_string(words: &[u32]) -> String {
    let mut bytes = Vec::new();
    'words: for word in words {
        for byte in word.to_le_bytes() {
            if byte == 0 {
                break 'words;
            }
            bytes.push(byte);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Interface {
    /// Walk every instruction; an instruction that overruns the module is
    /// an error naming its word.
    fn read(spirv: &[u32]) -> std::result::Result<Interface, String> {
        if spirv.len() < 5 || spirv[0] != SPIRV_MAGIC {
            return Err("not a SPIR-V module (no five-word header with the magic number)".into());
        }
        let mut found = Interface::default();
        let mut at = 5;
        while at < spirv.len() {
            let count = (spirv[at] >> 16) as usize;
            let opcode = spirv[at] & 0xffff;
            if count == 0 || at + count > spirv.len() {
                return Err(format!(
                    "the instruction at word {at} (opcode {opcode}) claims {count} words; \
                     {} are left",
                    spirv.len() - at
                ));
            }
            found.note(opcode, &spirv[at + 1..at + count]);
            found.last_opcode = opcode;
            at += count;
        }
        // A module ends with the end of its last function: a module cut at
        // an instruction boundary does not.
        if found.last_opcode != OP_FUNCTION_END {
            return Err("the module does not end with OpFunctionEnd (is it cut short?)".into());
        }
        Ok(found)
    }

    fn note(&mut self, opcode: u32, operands: &[u32]) {
        let word = |i: usize| operands.get(i).copied();
        match (opcode, word(0), word(1), word(2)) {
            (OP_NAME_ENTRY_POINT, Some(EXECUTION_MODEL_GL_COMPUTE), Some(id), Some(_)) => {
                self.entries.insert(literal_string(&operands[2..]), id);
            }
            (OP_EXECUTION_MODE, Some(id), Some(EXECUTION_MODE_LOCAL_SIZE), Some(x)) => {
                if let (Some(y), Some(z)) = (word(3), word(4)) {
                    self.local_sizes.insert(id, [x, y, z]);
                }
            }
            (OP_FUNCTION, Some(_ty), Some(id), _) => {
                self.functions.insert(id);
            }
            (OP_TYPE_INT | OP_TYPE_FLOAT, Some(id), Some(width), _) => {
                self.sizes.insert(id, u64::from(width / 8));
            }
            (OP_TYPE_VECTOR, Some(id), Some(component), Some(count)) => {
                if let Some(size) = self.sizes.get(&component) {
                    self.sizes.insert(id, size * u64::from(count));
                }
            }
            (OP_TYPE_ARRAY, Some(id), Some(element), Some(length)) => {
                if let (Some(size), Some(n)) =
                    (self.sizes.get(&element), self.constants.get(&length))
                {
                    self.sizes.insert(id, size * n);
                }
            }
            (OP_TYPE_STRUCT, Some(id), _, _) => {
                self.structs.insert(id, operands[1..].to_vec());
            }
            (OP_TYPE_POINTER, Some(id), Some(_class), Some(pointee)) => {
                self.pointers.insert(id, pointee);
            }
            (OP_CONSTANT, Some(_ty), Some(id), Some(value)) => {
                self.constants.insert(id, u64::from(value));
            }
            (OP_VARIABLE, Some(ty), Some(id), Some(class)) => self.variables.push((id, ty, class)),
            (OP_DECORATE, Some(id), Some(DECORATION_DESCRIPTOR_SET), Some(set)) => {
                self.sets.insert(id, set);
            }
            (OP_DECORATE, Some(id), Some(DECORATION_BINDING), Some(binding)) => {
                self.bindings.insert(id, binding);
            }
            (OP_MEMBER_DECORATE, Some(id), Some(member), Some(DECORATION_OFFSET)) => {
                if let Some(offset) = word(3) {
                    self.offsets.insert((id, member), u64::from(offset));
                }
            }
            _ => {}
        }
    }

    /// The byte size of a push-constant block of type `ty`, where every
    /// member's size and offset is known.
    fn block_size(&self, ty: u32) -> Option<u64> {
        let members = self.structs.get(&ty)?;
        let mut end = 0;
        for (index, member) in members.iter().enumerate() {
            let offset = self.offsets.get(&(ty, index as u32))?;
            end = end.max(offset + self.sizes.get(member)?);
        }
        Some(end)
    }
}

/// Check `spirv` against `contract` (see the module documentation).
pub(crate) fn check(spirv: &[u32], contract: &KernelContract) -> Result<()> {
    let name = &contract.entry_point;
    let fail = |why: String| Error::Message(format!("kernel `{name}`: {why}"));
    let found = Interface::read(spirv).map_err(fail)?;
    let Some(entry) = found.entries.get(name) else {
        let mut names: Vec<_> = found.entries.keys().cloned().collect();
        names.sort();
        return Err(fail(format!(
            "the module has no GLCompute entry point of that name (it has: {})",
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        )));
    };
    if !found.functions.contains(entry) {
        return Err(fail(format!(
            "the entry point names %{entry}, which no OpFunction defines"
        )));
    }
    if let Some(size) = found.local_sizes.get(entry)
        && *size != contract.workgroup_size
    {
        return Err(fail(format!(
            "the module's workgroup size is {size:?}, the contract's {:?}",
            contract.workgroup_size
        )));
    }
    for (id, ty, class) in &found.variables {
        match *class {
            STORAGE_STORAGE_BUFFER | STORAGE_UNIFORM => {
                let set = found.sets.get(id).copied().unwrap_or(0);
                let Some(binding) = found.bindings.get(id).copied() else {
                    return Err(fail(format!("the module's buffer %{id} has no binding")));
                };
                if *class == STORAGE_UNIFORM {
                    return Err(fail(format!(
                        "the module declares a uniform buffer at binding {binding}; \
                         kernels bind storage buffers only"
                    )));
                }
                if set != 0 || binding as usize >= contract.bindings.len() {
                    return Err(fail(format!(
                        "the module uses (set {set}, binding {binding}), which the contract's {} \
                         bindings of set 0 do not have",
                        contract.bindings.len()
                    )));
                }
            }
            STORAGE_PUSH_CONSTANT => {
                let block = found.pointers.get(ty).and_then(|t| found.block_size(*t));
                match block {
                    Some(bytes) if bytes > u64::from(contract.push_constant_bytes) => {
                        return Err(fail(format!(
                            "the module's push constants take {bytes} bytes, the contract's {}",
                            contract.push_constant_bytes
                        )));
                    }
                    None if contract.push_constant_bytes == 0 => {
                        return Err(fail(
                            "the module declares push constants and the contract none".into(),
                        ));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    Ok(())
}

//! Edits of the SPIR-V words naga writes, where its output and what Vulkan
//! (or a driver) needs differ. Each walks the instruction stream; a
//! malformed stream (a zero word count) stops the walk unchanged.

use std::collections::{HashMap, HashSet};

/// `OpDecorate`, `OpTypePointer`, the `ArrayStride` decoration and the
/// `Workgroup` storage class.
const OP_DECORATE: u32 = 71;
const OP_TYPE_POINTER: u32 = 32;
const DECORATION_ARRAY_STRIDE: u32 = 6;
const STORAGE_WORKGROUP: u32 = 4;

/// Remove the `ArrayStride` naga puts on workgroup arrays. Vulkan forbids
/// explicit layout in the Workgroup storage class (without
/// `workgroupMemoryExplicitLayout`); current `spirv-val` rejects it
/// (VUID-StandaloneSpirv-None-10684) and the Vulkan memory model that
/// cooperative matrices switch on makes drivers stricter about it.
/// Arrays that some other storage class also points to keep theirs.
pub(super) fn drop_workgroup_array_strides(words: &mut Vec<u32>) {
    let mut workgroup = Vec::new();
    let mut other = Vec::new();
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let (count, opcode) = ((first >> 16) as usize, first & 0xffff);
        if count == 0 {
            return;
        }
        if opcode == OP_TYPE_POINTER
            && let (Some(&class), Some(&pointee)) = (words.get(at + 2), words.get(at + 3))
        {
            if class == STORAGE_WORKGROUP {
                workgroup.push(pointee);
            } else {
                other.push(pointee);
            }
        }
        at += count;
    }
    workgroup.retain(|id| !other.contains(id));
    if workgroup.is_empty() {
        return;
    }
    let mut out = Vec::with_capacity(words.len());
    out.extend_from_slice(&words[..HEADER_WORDS.min(words.len())]);
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let count = ((first >> 16) as usize).max(1);
        let end = (at + count).min(words.len());
        let inst = &words[at..end];
        let strip = first == (4 << 16 | OP_DECORATE)
            && inst.get(2) == Some(&DECORATION_ARRAY_STRIDE)
            && inst.get(1).is_some_and(|id| workgroup.contains(id));
        if !strip {
            out.extend_from_slice(inst);
        }
        at = end;
    }
    *words = out;
}

/// `UniformAndStorageBuffer16BitAccess`. naga declares it beside
/// `StorageBuffer16BitAccess` for every 16-bit type, but loom keeps 16-bit
/// values only in storage buffers and registers (push constants refuse
/// f16, and there are no uniform buffers), so it is never needed; a device
/// that has not enabled `uniformAndStorageBuffer16BitAccess` would reject
/// the module with it.
pub(super) const CAP_UNIFORM_AND_STORAGE_16: u32 = 4434;
/// `OpCapability`, one operand: two words.
const OP_CAPABILITY: u32 = 17;
/// Words of the SPIR-V header.
const HEADER_WORDS: usize = 5;

/// Remove every `OpCapability cap` from a SPIR-V module. Capabilities come
/// first after the header, so the walk stops at the first other opcode.
pub(super) fn drop_capability(words: &mut Vec<u32>, cap: u32) {
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let (count, opcode) = ((first >> 16) as usize, first & 0xffff);
        if opcode != OP_CAPABILITY || count == 0 {
            break;
        }
        if count == 2 && words.get(at + 1) == Some(&cap) {
            words.drain(at..at + 2);
        } else {
            at += count;
        }
    }
}

/// `VulkanMemoryModel` and `VulkanMemoryModelDeviceScope`.
const CAP_VULKAN_MEMORY_MODEL: u32 = 5345;
const CAP_DEVICE_SCOPE: u32 = 5346;
const OP_CONSTANT: u32 = 43;
const OP_CONTROL_BARRIER: u32 = 224;
const OP_MEMORY_BARRIER: u32 = 225;
const OP_ATOMIC_STORE: u32 = 228;
const SCOPE_DEVICE: u32 = 1;

/// Declare `VulkanMemoryModelDeviceScope` where the module uses the Vulkan
/// memory model (naga switches to it for cooperative matrices) and device
/// scope: naga's storage barriers and storage atomics use device scope but
/// it does not declare the capability, which SPIR-V requires there. The
/// runtime enables the matching device feature on every device.
pub(super) fn declare_device_scope(words: &mut Vec<u32>) {
    let mut constants = HashMap::new();
    let (mut vulkan_model, mut declared, mut device) = (false, false, Vec::new());
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let (count, opcode) = ((first >> 16) as usize, first & 0xffff);
        if count == 0 || at + count > words.len() {
            return;
        }
        let operands = &words[at + 1..at + count];
        // The operand holding the memory scope's id, where the op has one.
        let scope = match opcode {
            OP_CAPABILITY => {
                vulkan_model |= operands == [CAP_VULKAN_MEMORY_MODEL];
                declared |= operands == [CAP_DEVICE_SCOPE];
                None
            }
            OP_CONSTANT if count == 4 => {
                constants.insert(operands[1], operands[2]);
                None
            }
            OP_CONTROL_BARRIER => operands.get(1),
            OP_MEMORY_BARRIER | OP_ATOMIC_STORE => operands.first(),
            // OpAtomicLoad, OpAtomicExchange .. OpAtomicXor and
            // OpAtomicFAddEXT: result type, result, pointer, scope, ...
            227 | 229..=242 | 6035 => operands.get(3),
            _ => None,
        };
        device.extend(scope.copied());
        at += count;
    }
    let uses_device = device
        .iter()
        .any(|id| constants.get(id) == Some(&SCOPE_DEVICE));
    if vulkan_model && !declared && uses_device {
        let header = HEADER_WORDS.min(words.len());
        words.splice(
            header..header,
            [(2 << 16) | OP_CAPABILITY, CAP_DEVICE_SCOPE],
        );
    }
}

/// Instructions this file reads or writes.
const OP_VARIABLE: u32 = 59;
const OP_LOAD: u32 = 61;
const OP_STORE: u32 = 62;
const OP_ACCESS_CHAIN: u32 = 65;
const OP_IN_BOUNDS_ACCESS_CHAIN: u32 = 66;
const OP_COOP_LOAD: u32 = 4457;
const OP_COOP_STORE: u32 = 4458;
/// Storage class, decorations and memory-operand bits.
const STORAGE_BUFFER: u32 = 12;
const DECORATION_COHERENT: u32 = 23;
const DECORATION_NON_WRITABLE: u32 = 24;
const MAKE_POINTER_AVAILABLE: u32 = 0x8;
const MAKE_POINTER_VISIBLE: u32 = 0x10;
const NON_PRIVATE_POINTER: u32 = 0x20;

/// Make the accesses to writable storage buffers of a module with a
/// device-scope barrier (`kernel.barrier<storage>`) take part in that
/// barrier's ordering, so what one workgroup stores before it is what
/// another reads after it.
///
/// Under the Vulkan memory model (which naga switches to for cooperative
/// matrices) a plain load or store is "private", and no barrier orders it
/// against other invocations, so a driver may reorder or cache it across
/// the barrier. Loads get `NonPrivatePointer | MakePointerVisible` and
/// stores `NonPrivatePointer | MakePointerAvailable` at device scope.
/// Under the GLSL memory model the same is the `Coherent` decoration on
/// the buffers. Read-only buffers (`NonWritable`) are left alone, so
/// their loads keep the read-only cache. Workgroup memory is left alone
/// too: workgroup barriers order it on every driver we run, and marking
/// it measured no different on the H200.
pub(super) fn share_storage_writes(words: &mut Vec<u32>) {
    let mut constants = HashMap::new();
    let mut pointer_class = HashMap::new();
    // Pointer id -> the variable it points into.
    let mut root = HashMap::new();
    let mut storage_vars = HashSet::new();
    let mut read_only = HashSet::new();
    let (mut vulkan_model, mut device_scope) = (false, None);
    let mut last_decoration = None;
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let (count, opcode) = ((first >> 16) as usize, first & 0xffff);
        if count == 0 || at + count > words.len() {
            return;
        }
        let ops = &words[at + 1..at + count];
        match (opcode, ops) {
            (OP_CAPABILITY, [cap]) => vulkan_model |= *cap == CAP_VULKAN_MEMORY_MODEL,
            (OP_CONSTANT, [_, id, value]) => {
                constants.insert(*id, *value);
            }
            (OP_DECORATE, [id, decoration, ..]) => {
                last_decoration = Some(at + count);
                if *decoration == DECORATION_NON_WRITABLE {
                    read_only.insert(*id);
                }
            }
            (OP_TYPE_POINTER, [id, class, _]) => {
                pointer_class.insert(*id, *class);
            }
            (OP_VARIABLE, [ty, id, ..]) => {
                if pointer_class.get(ty) == Some(&STORAGE_BUFFER) {
                    storage_vars.insert(*id);
                }
                root.insert(*id, *id);
            }
            (OP_ACCESS_CHAIN | OP_IN_BOUNDS_ACCESS_CHAIN, [_, id, base, ..]) => {
                if let Some(&var) = root.get(base) {
                    root.insert(*id, var);
                }
            }
            (OP_CONTROL_BARRIER, [_, scope, _]) if constants.get(scope) == Some(&SCOPE_DEVICE) => {
                device_scope = Some(*scope);
            }
            _ => {}
        }
        at += count;
    }
    let Some(scope) = device_scope else {
        return;
    };
    let shared = |pointer: u32| {
        root.get(&pointer)
            .is_some_and(|var| storage_vars.contains(var) && !read_only.contains(var))
    };
    if !vulkan_model {
        let Some(decorations_end) = last_decoration else {
            return;
        };
        let mut vars: Vec<u32> = storage_vars.difference(&read_only).copied().collect();
        vars.sort_unstable();
        let coherent = vars
            .iter()
            .flat_map(|&var| [(3 << 16) | OP_DECORATE, var, DECORATION_COHERENT]);
        words.splice(decorations_end..decorations_end, coherent);
        return;
    }
    let mut out = Vec::with_capacity(words.len() + 64);
    out.extend_from_slice(&words[..HEADER_WORDS]);
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let (count, opcode) = ((first >> 16) as usize, first & 0xffff);
        let inst = &words[at..at + count];
        // The pointer operand, the memory operand's position and the
        // bits that make this access non-private.
        let access = match opcode {
            OP_LOAD => Some((3, 4, MAKE_POINTER_VISIBLE)),
            OP_STORE => Some((1, 3, MAKE_POINTER_AVAILABLE)),
            OP_COOP_LOAD => Some((3, 6, MAKE_POINTER_VISIBLE)),
            OP_COOP_STORE => Some((1, 5, MAKE_POINTER_AVAILABLE)),
            _ => None,
        };
        match access {
            Some((pointer, mask_at, make)) if count >= mask_at && shared(inst[pointer]) => {
                let mut inst = inst.to_vec();
                let bits = NON_PRIVATE_POINTER | make;
                if count == mask_at {
                    inst.push(bits);
                } else if inst[mask_at] & (bits | MAKE_POINTER_AVAILABLE | MAKE_POINTER_VISIBLE)
                    == 0
                {
                    inst[mask_at] |= bits;
                } else {
                    out.extend_from_slice(&inst);
                    at += count;
                    continue;
                }
                // The scope id follows the mask's other operands.
                inst.push(scope);
                inst[0] = ((inst.len() as u32) << 16) | opcode;
                out.extend_from_slice(&inst);
            }
            _ => out.extend_from_slice(inst),
        }
        at += count;
    }
    *words = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_capability_removes_only_that_capability() {
        let cap = |c: u32| [(2 << 16) | OP_CAPABILITY, c];
        let mut words = vec![0x0723_0203, 0x0001_0300, 0, 10, 0];
        words.extend(cap(1));
        words.extend(cap(CAP_UNIFORM_AND_STORAGE_16));
        words.extend(cap(4433));
        // OpExtension "..." (not a capability): the walk stops here, even
        // though a later word equals the capability's number.
        words.extend([(3 << 16) | 10, 0x6162_6364, CAP_UNIFORM_AND_STORAGE_16]);
        let mut want = words.clone();
        want.drain(7..9);
        drop_capability(&mut words, CAP_UNIFORM_AND_STORAGE_16);
        assert_eq!(words, want);
        // Truncated or empty modules do not panic.
        let mut short = vec![0x0723_0203, 1];
        drop_capability(&mut short, CAP_UNIFORM_AND_STORAGE_16);
        let mut zero = vec![0; 6];
        drop_capability(&mut zero, 1);
    }
}

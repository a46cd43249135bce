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
/// Instructions the memory-model edits read or write.
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const OP_LOAD: u32 = 61;
const OP_STORE: u32 = 62;
const OP_ACCESS_CHAIN: u32 = 65;
const OP_IN_BOUNDS_ACCESS_CHAIN: u32 = 66;
const OP_CONTROL_BARRIER: u32 = 224;
const OP_MEMORY_BARRIER: u32 = 225;
const OP_ATOMIC_STORE: u32 = 228;
const OP_COOP_LOAD: u32 = 4457;
const OP_COOP_STORE: u32 = 4458;
/// Scope, storage class, decorations and memory-operand bits.
const SCOPE_DEVICE: u32 = 1;
const SCOPE_WORKGROUP: u32 = 2;
const SCOPE_SUBGROUP: u32 = 3;
const STORAGE_BUFFER: u32 = 12;
const DECORATION_COHERENT: u32 = 23;
const DECORATION_NON_WRITABLE: u32 = 24;
const MAKE_POINTER_AVAILABLE: u32 = 0x8;
const MAKE_POINTER_VISIBLE: u32 = 0x10;
const NON_PRIVATE_POINTER: u32 = 0x20;

/// The instructions after the header as (first word's index, opcode,
/// operands), ending early at a malformed word count.
fn instructions(words: &[u32]) -> impl Iterator<Item = (usize, u32, &[u32])> {
    let mut at = HEADER_WORDS;
    std::iter::from_fn(move || {
        let first = *words.get(at)?;
        let (count, opcode) = ((first >> 16) as usize, first & 0xffff);
        if count == 0 || at + count > words.len() {
            return None;
        }
        let item = (at, opcode, &words[at + 1..at + count]);
        at += count;
        Some(item)
    })
}

/// What the memory-model edits need to know of a module, from one walk.
pub(super) struct MemoryFacts {
    vulkan_model: bool,
    device_scope_declared: bool,
    /// Whether any barrier or atomic uses device scope.
    uses_device_scope: bool,
    /// The device-scope id of a `kernel.barrier<storage>`, if any.
    storage_barrier_scope: Option<u32>,
    /// The workgroup-scope id of a barrier, if any.
    workgroup_scope: Option<u32>,
    /// The subgroup-scope id of a `kernel.barrier<subgroup>`, if any: the
    /// scope of workgroup memory's accesses where no barrier is wider.
    subgroup_scope: Option<u32>,
    /// Pointer id -> the variable it points into.
    root: HashMap<u32, u32>,
    /// Storage-buffer variables no `NonWritable` marks read-only.
    writable_storage: HashSet<u32>,
    /// Workgroup variables.
    workgroup: HashSet<u32>,
    /// Where the annotation section's `OpDecorate`s end.
    decorations_end: Option<usize>,
}

impl MemoryFacts {
    /// `None` for a malformed stream, which the edits leave alone.
    pub(super) fn scan(words: &[u32]) -> Option<MemoryFacts> {
        let mut constants = HashMap::new();
        let mut pointer_class = HashMap::new();
        let mut storage = HashSet::new();
        let mut read_only = HashSet::new();
        let mut scopes = Vec::new();
        let mut facts = MemoryFacts {
            vulkan_model: false,
            device_scope_declared: false,
            uses_device_scope: false,
            storage_barrier_scope: None,
            workgroup_scope: None,
            subgroup_scope: None,
            root: HashMap::new(),
            writable_storage: HashSet::new(),
            workgroup: HashSet::new(),
            decorations_end: None,
        };
        let mut end = HEADER_WORDS;
        for (at, opcode, ops) in instructions(words) {
            end = at + ops.len() + 1;
            match (opcode, ops) {
                (OP_CAPABILITY, [cap]) => {
                    facts.vulkan_model |= *cap == CAP_VULKAN_MEMORY_MODEL;
                    facts.device_scope_declared |= *cap == CAP_DEVICE_SCOPE;
                }
                (OP_CONSTANT, [_, id, value]) => {
                    constants.insert(*id, *value);
                }
                (OP_DECORATE, [id, decoration, ..]) => {
                    facts.decorations_end = Some(end);
                    if *decoration == DECORATION_NON_WRITABLE {
                        read_only.insert(*id);
                    }
                }
                (OP_TYPE_POINTER, [id, class, _]) => {
                    pointer_class.insert(*id, *class);
                }
                (OP_VARIABLE, [ty, id, ..]) => {
                    match pointer_class.get(ty) {
                        Some(&STORAGE_BUFFER) => {
                            storage.insert(*id);
                        }
                        Some(&STORAGE_WORKGROUP) => {
                            facts.workgroup.insert(*id);
                        }
                        _ => {}
                    }
                    facts.root.insert(*id, *id);
                }
                (OP_ACCESS_CHAIN | OP_IN_BOUNDS_ACCESS_CHAIN, [_, id, base, ..]) => {
                    if let Some(&var) = facts.root.get(base) {
                        facts.root.insert(*id, var);
                    }
                }
                (OP_CONTROL_BARRIER, [execution, scope, _]) => {
                    scopes.push(*scope);
                    if constants.get(scope) == Some(&SCOPE_DEVICE) {
                        facts.storage_barrier_scope = Some(*scope);
                    }
                    match constants.get(execution) {
                        Some(&SCOPE_WORKGROUP) => facts.workgroup_scope = Some(*execution),
                        Some(&SCOPE_SUBGROUP) => facts.subgroup_scope = Some(*execution),
                        _ => {}
                    }
                }
                (OP_MEMORY_BARRIER | OP_ATOMIC_STORE, [scope, ..]) => scopes.push(*scope),
                // OpAtomicLoad, OpAtomicExchange .. OpAtomicXor and
                // OpAtomicFAddEXT: result type, result, pointer, scope, ...
                (227 | 229..=242 | 6035, [_, _, _, scope, ..]) => scopes.push(*scope),
                _ => {}
            }
        }
        if end != words.len() {
            return None;
        }
        facts.uses_device_scope = scopes
            .iter()
            .any(|id| constants.get(id) == Some(&SCOPE_DEVICE));
        facts.writable_storage = storage.difference(&read_only).copied().collect();
        Some(facts)
    }

    /// The scope id an access through `pointer` must be made non-private
    /// at under the Vulkan memory model, if any: device scope for the
    /// writable storage buffers of a module with a storage barrier,
    /// workgroup scope for workgroup memory where a barrier shares it.
    fn shared_scope(&self, pointer: u32) -> Option<u32> {
        let var = self.root.get(&pointer)?;
        if self.writable_storage.contains(var) {
            self.storage_barrier_scope
        } else if self.workgroup.contains(var) {
            self.workgroup_scope.or(self.subgroup_scope)
        } else {
            None
        }
    }
}

/// Declare `VulkanMemoryModelDeviceScope` where the module uses the Vulkan
/// memory model (naga switches to it for cooperative matrices) and device
/// scope: naga's storage barriers and storage atomics use device scope but
/// it does not declare the capability, which SPIR-V requires there. The
/// runtime enables the matching device feature on every device.
pub(super) fn declare_device_scope(words: &mut Vec<u32>, facts: &MemoryFacts) {
    if facts.vulkan_model && facts.uses_device_scope && !facts.device_scope_declared {
        let header = HEADER_WORDS.min(words.len());
        words.splice(
            header..header,
            [(2 << 16) | OP_CAPABILITY, CAP_DEVICE_SCOPE],
        );
    }
}

/// Make the memory accesses that barriers must order take part in their
/// ordering, so that what one invocation stores before a barrier is what
/// another loads after it.
///
/// Under the Vulkan memory model (which naga switches to for cooperative
/// matrices) a plain load or store is "private": no barrier orders it
/// against other invocations, so a driver may reorder or cache it across
/// the barrier, and the program races. Loads get `NonPrivatePointer |
/// MakePointerVisible` and stores `NonPrivatePointer |
/// MakePointerAvailable`: at device scope for the writable storage buffers
/// of a module with a device-scope barrier (`kernel.barrier<storage>`), at
/// workgroup scope for workgroup memory (the tiles every cooperative
/// matrix kernel stages, written by some invocations and read by others
/// across `kernel.barrier<workgroup>`). Under the GLSL memory model
/// workgroup barriers already order workgroup memory, and the storage
/// buffers are decorated `Coherent`. Read-only buffers (`NonWritable`) are
/// left alone, so their loads keep the read-only cache.
pub(super) fn share_memory(words: &mut Vec<u32>, facts: &MemoryFacts) {
    if !facts.vulkan_model {
        let (Some(_), Some(end)) = (facts.storage_barrier_scope, facts.decorations_end) else {
            return;
        };
        let mut vars: Vec<u32> = facts.writable_storage.iter().copied().collect();
        vars.sort_unstable();
        let coherent = vars
            .iter()
            .flat_map(|&var| [(3 << 16) | OP_DECORATE, var, DECORATION_COHERENT]);
        words.splice(end..end, coherent);
        return;
    }
    if facts.storage_barrier_scope.is_none()
        && facts.workgroup_scope.is_none()
        && facts.subgroup_scope.is_none()
    {
        return;
    }
    let mut out = Vec::with_capacity(words.len() + 64);
    out.extend_from_slice(&words[..HEADER_WORDS]);
    for (at, opcode, ops) in instructions(words) {
        let inst = &words[at..at + ops.len() + 1];
        // The pointer operand, the memory operand's position and the bit
        // that, with `NonPrivatePointer`, makes this access non-private.
        let access = match opcode {
            OP_LOAD => Some((3, 4, MAKE_POINTER_VISIBLE)),
            OP_STORE => Some((1, 3, MAKE_POINTER_AVAILABLE)),
            OP_COOP_LOAD => Some((3, 6, MAKE_POINTER_VISIBLE)),
            OP_COOP_STORE => Some((1, 5, MAKE_POINTER_AVAILABLE)),
            _ => None,
        };
        let Some((mask_at, make, scope)) = access.and_then(|(pointer, mask_at, make)| {
            let scope = facts.shared_scope(*inst.get(pointer)?)?;
            (inst.len() >= mask_at).then_some((mask_at, make, scope))
        }) else {
            out.extend_from_slice(inst);
            continue;
        };
        let bits = NON_PRIVATE_POINTER | make;
        let mut edited = inst.to_vec();
        match edited.get_mut(mask_at) {
            None => edited.push(bits),
            Some(mask) if *mask & (bits | MAKE_POINTER_AVAILABLE | MAKE_POINTER_VISIBLE) == 0 => {
                *mask |= bits;
            }
            // Already non-private or made available/visible: as written.
            Some(_) => {
                out.extend_from_slice(inst);
                continue;
            }
        }
        // The scope id follows the mask's other operands.
        edited.push(scope);
        edited[0] = ((edited.len() as u32) << 16) | opcode;
        out.extend_from_slice(&edited);
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

    /// A header and `OpCapability` for each of `caps`, a `uint` type (id 2),
    /// the constant 1 (id 3), then an `OpAtomicIAdd` whose scope is that
    /// constant (Device): the pieces `declare_device_scope` reads.
    fn atomic_module(caps: &[u32]) -> Vec<u32> {
        let mut words = vec![0x0723_0203, 0x0001_0300, 0, 20, 0];
        for &c in caps {
            words.extend([(2 << 16) | OP_CAPABILITY, c]);
        }
        words.extend([(4 << 16) | 21, 2, 32, 0]); // OpTypeInt %2 32 0
        words.extend([(4 << 16) | OP_CONSTANT, 2, 3, SCOPE_DEVICE]);
        words.extend([(7 << 16) | 234, 2, 4, 9, 3, 3, 3]); // OpAtomicIAdd
        words
    }

    #[test]
    fn device_scope_atomics_get_the_capability_only_under_the_vulkan_model() {
        let facts = |w: &[u32]| MemoryFacts::scan(w).unwrap();
        let mut vulkan = atomic_module(&[1, CAP_VULKAN_MEMORY_MODEL]);
        let before = vulkan.clone();
        declare_device_scope(&mut vulkan, &facts(&before));
        assert_eq!(&vulkan[5..7], [(2 << 16) | OP_CAPABILITY, CAP_DEVICE_SCOPE]);
        assert_eq!(vulkan[7..], before[5..]);
        // Declared once only.
        let again = vulkan.clone();
        declare_device_scope(&mut vulkan, &facts(&again));
        assert_eq!(vulkan, again);
        // The GLSL memory model needs nothing.
        let glsl = atomic_module(&[1]);
        let mut edited = glsl.clone();
        declare_device_scope(&mut edited, &facts(&glsl));
        assert_eq!(edited, glsl);
    }

    /// A Vulkan-memory-model module with a workgroup `uint` variable (id
    /// 5), an `Aligned 4` load of it (id 7) and a plain store back; with
    /// `barrier`, a workgroup-scope `OpControlBarrier` between them (scope
    /// constant id 3).
    fn workgroup_module(barrier: bool) -> Vec<u32> {
        scoped_module(barrier, SCOPE_WORKGROUP)
    }

    /// `workgroup_module` with its barrier's (and scope constant's) scope
    /// `scope`.
    fn scoped_module(barrier: bool, scope: u32) -> Vec<u32> {
        let mut words = vec![0x0723_0203, 0x0001_0300, 0, 20, 0];
        words.extend([(2 << 16) | OP_CAPABILITY, CAP_VULKAN_MEMORY_MODEL]);
        words.extend([(4 << 16) | 21, 2, 32, 0]); // OpTypeInt %2 32 0
        words.extend([(4 << 16) | OP_CONSTANT, 2, 3, scope]);
        words.extend([(4 << 16) | OP_CONSTANT, 2, 6, 0x108]); // semantics
        words.extend([(4 << 16) | OP_TYPE_POINTER, 4, STORAGE_WORKGROUP, 2]);
        words.extend([(4 << 16) | OP_VARIABLE, 4, 5, STORAGE_WORKGROUP]);
        if barrier {
            words.extend([(4 << 16) | OP_CONTROL_BARRIER, 3, 3, 6]);
        }
        words.extend([(6 << 16) | OP_LOAD, 2, 7, 5, 0x2, 4]); // Aligned 4
        words.extend([(3 << 16) | OP_STORE, 5, 7]);
        words
    }

    #[test]
    fn workgroup_accesses_become_non_private_where_a_barrier_shares_them() {
        // A workgroup barrier, or a subgroup one (the scope constant, id 3,
        // is the barrier's scope).
        for scope in [SCOPE_WORKGROUP, SCOPE_SUBGROUP] {
            let base = scoped_module(true, scope);
            let mut words = base.clone();
            share_memory(&mut words, &MemoryFacts::scan(&base).unwrap());
            let tail = &words[words.len() - 12..];
            // The load keeps its alignment literal; the scope id follows it.
            let load_mask = 0x2 | NON_PRIVATE_POINTER | MAKE_POINTER_VISIBLE;
            assert_eq!(&tail[..7], [(7 << 16) | OP_LOAD, 2, 7, 5, load_mask, 4, 3]);
            let store_mask = NON_PRIVATE_POINTER | MAKE_POINTER_AVAILABLE;
            assert_eq!(&tail[7..], [(5 << 16) | OP_STORE, 5, 7, store_mask, 3]);
            assert!(MemoryFacts::scan(&words).is_some(), "still well formed");
        }
        // Without a barrier nothing orders the accesses, so nothing changes.
        let lone = workgroup_module(false);
        let mut words = lone.clone();
        share_memory(&mut words, &MemoryFacts::scan(&lone).unwrap());
        assert_eq!(words, lone);
    }

    #[test]
    fn malformed_streams_get_no_memory_model_edits() {
        let mut words = atomic_module(&[CAP_VULKAN_MEMORY_MODEL]);
        words.push(0); // a zero word count
        assert!(MemoryFacts::scan(&words).is_none());
        // An instruction running past the end.
        let mut cut = atomic_module(&[CAP_VULKAN_MEMORY_MODEL]);
        cut.pop();
        assert!(MemoryFacts::scan(&cut).is_none());
    }
}

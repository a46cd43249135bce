//! The last stage: validate a lowered `naga::Module` and write SPIR-V.
//!
//! Both steps are separately callable ([`validate`], [`write_spirv`]) so a
//! benchmark can time them apart from the front end and the lowering.

use hrx_core::{Diagnostic, Error, Result, Target};
use naga::back::spv;
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};

/// Diagnostic code for a module naga's validator rejected (a lowering bug
/// or an unsupported combination the earlier stages did not catch).
pub const E_VALIDATE: &str = "E0601";
/// Diagnostic code for a failure of naga's SPIR-V writer.
pub const E_WRITE: &str = "E0602";

/// The capabilities a loom kernel may need, narrowed to what `target` has.
///
/// f16 arithmetic needs both `shader_f16` and 16-bit storage because loom
/// keeps f16 values in storage buffers; subgroup operations need the
/// target's arithmetic and shuffle classes.
pub fn capabilities(target: &Target) -> Capabilities {
    // Half-in-float32 packing (GLSL.std.450 UnpackHalf2x16) is core SPIR-V
    // for Vulkan and needs no device feature.
    let mut caps = Capabilities::IMMEDIATES | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if target.shader_f16 && target.storage_16bit {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    if target.supports_cooperative_matrix() {
        caps |= Capabilities::COOPERATIVE_MATRIX;
    }
    let ops = target.subgroup_ops;
    if ops.basic && ops.arithmetic && ops.shuffle && ops.shuffle_relative {
        caps |= Capabilities::SUBGROUP;
    }
    caps
}

/// Run naga's validator with every check on, returning the `ModuleInfo` the
/// SPIR-V writer needs.
pub fn validate(module: &naga::Module, target: &Target) -> Result<ModuleInfo> {
    let mut validator = Validator::new(ValidationFlags::all(), capabilities(target));
    validator.validate(module).map_err(|e| {
        // The top-level message names only the entry point; the cause is
        // in the source chain.
        let mut message = format!("naga rejected the lowered module: {e}");
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            message += &format!(": {c}");
            cause = c.source();
        }
        internal(E_VALIDATE, message)
    })
}

/// The writer options every artifact uses: SPIR-V 1.3, no debug info, no
/// coordinate flips, no inserted bounds or division checks, no loop
/// bounding and no workgroup zero-fill (loom kernels initialise what they
/// read; the polyfill would add a barrier and stores to every kernel).
pub fn spirv_options() -> spv::Options<'static> {
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy::Unchecked};
    spv::Options {
        lang_version: (1, 3),
        flags: spv::WriterFlags::empty(),
        // "fake" = take (group, binding) from the module as written.
        fake_missing_bindings: true,
        bounds_check_policies: BoundsCheckPolicies {
            index: Unchecked,
            buffer: Unchecked,
            image_load: Unchecked,
            binding_array: Unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        use_storage_input_output_16: false,
        emit_int_div_checks: false,
        ..spv::Options::default()
    }
}

/// Write the validated `module`'s compute entry point `entry` as SPIR-V words.
pub fn write_spirv(module: &naga::Module, info: &ModuleInfo, entry: &str) -> Result<Vec<u32>> {
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_string(),
    };
    let mut words = spv::write_vec(module, info, &spirv_options(), Some(&pipeline))
        .map_err(|e| internal(E_WRITE, format!("SPIR-V writer failed: {e}")))?;
    drop_capability(&mut words, CAP_UNIFORM_AND_STORAGE_16);
    drop_workgroup_array_strides(&mut words);
    Ok(words)
}

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
fn drop_workgroup_array_strides(words: &mut Vec<u32>) {
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
const CAP_UNIFORM_AND_STORAGE_16: u32 = 4434;
/// `OpCapability`, one operand: two words.
const OP_CAPABILITY: u32 = 17;
/// Words of the SPIR-V header.
const HEADER_WORDS: usize = 5;

/// Remove every `OpCapability cap` from a SPIR-V module. Capabilities come
/// first after the header, so the walk stops at the first other opcode.
fn drop_capability(words: &mut Vec<u32>, cap: u32) {
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

/// Validate then write: the whole emit stage.
pub fn emit(module: &naga::Module, target: &Target, entry: &str) -> Result<Vec<u32>> {
    let info = validate(module, target)?;
    write_spirv(module, &info, entry)
}

/// A compile error with no source position (the failure is in generated
/// code, after every source-level check passed).
fn internal(code: &'static str, message: String) -> Error {
    Error::compile(vec![Diagnostic {
        code,
        message,
        line: 1,
        column: 1,
        excerpt: String::new(),
    }])
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

//! `cargo xtask gen-copy-kernel`: compile the runtime's built-in copy kernel
//! from its checked-in WGSL to the checked-in SPIR-V.
//!
//! The options below are the documented recipe; `hrx-runtime`'s test
//! `copy_kernel_spirv_is_regenerated_from_wgsl` includes this file and checks
//! that compiling the WGSL again gives exactly the checked-in words. This
//! file depends on `naga` and `std` only, so that test can include it.

use std::path::Path;

/// The WGSL source, relative to the workspace root.
pub const WGSL: &str = "crates/hrx-runtime/src/builtin/copy.wgsl";
/// The generated SPIR-V (little-endian words), relative to the workspace root.
pub const SPIRV: &str = "crates/hrx-runtime/src/builtin/copy.spv";
/// The kernel's entry point.
pub const ENTRY_POINT: &str = "copy_words";

/// Compile WGSL to SPIR-V words with the recipe every built-in kernel uses:
/// full naga validation, SPIR-V 1.3, no debug information, no coordinate or
/// varying adjustments, no inserted bounds, loop or division checks, and no
/// workgroup-memory zeroing.
pub fn compile(wgsl: &str) -> Result<Vec<u32>, String> {
    use naga::back::spv;
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| e.emit_to_string(wgsl))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string(wgsl))?;
    let unchecked = naga::proc::BoundsCheckPolicy::Unchecked;
    let options = spv::Options {
        lang_version: (1, 3),
        flags: spv::WriterFlags::empty(),
        // Descriptor set and binding numbers come from the WGSL attributes.
        fake_missing_bindings: true,
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: unchecked,
            buffer: unchecked,
            image_load: unchecked,
            binding_array: unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        ray_query_initialization_tracking: false,
        trace_ray_argument_validation: false,
        use_storage_input_output_16: false,
        mesh_shader_primitive_indices_clamp: false,
        emit_int_div_checks: false,
        ..spv::Options::default()
    };
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: ENTRY_POINT.into(),
    };
    spv::write_vec(&module, &info, &options, Some(&pipeline)).map_err(|e| e.to_string())
}

/// Words as the little-endian bytes the runtime embeds.
pub fn to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Regenerate `SPIRV` from `WGSL` under the workspace `root`.
pub fn run(root: &Path) -> Result<(), String> {
    let source = std::fs::read_to_string(root.join(WGSL)).map_err(|e| format!("{WGSL}: {e}"))?;
    let words = compile(&source)?;
    std::fs::write(root.join(SPIRV), to_bytes(&words)).map_err(|e| format!("{SPIRV}: {e}"))?;
    println!("wrote {SPIRV} ({} words) from {WGSL}", words.len());
    Ok(())
}

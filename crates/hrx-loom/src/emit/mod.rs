//! The last stage: validate a lowered `naga::Module` and write SPIR-V.
//!
//! Both steps are separately callable ([`validate`], [`write_spirv`]) so a
//! benchmark can time them apart from the front end and the lowering. The
//! written words get a few fixes where naga's output and Vulkan disagree
//! (`patch`).

mod patch;

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
        // Subgroup-scope control barriers are core Vulkan 1.1 wherever
        // compute shaders have subgroups.
        caps |= Capabilities::SUBGROUP | Capabilities::SUBGROUP_BARRIER;
    }
    caps
}

/// Run naga's validator with every check on but control-flow uniformity,
/// returning the `ModuleInfo` the SPIR-V writer needs.
///
/// Uniformity is left to loom's verifier (`verify::uniformity`), which
/// knows subgroup uniformity: naga's analysis has only "uniform" and
/// "non-uniform", so it would refuse a cooperative-matrix op under a
/// branch on the subgroup id, which is legal (each subgroup takes one
/// side) and what kernels that give subgroups different roles need.
pub fn validate(module: &naga::Module, target: &Target) -> Result<ModuleInfo> {
    run_validator(module, target, None)
}

/// [`validate`] for a module lowered from `source`: a rejection is reported
/// at the loom op whose lowering naga rejected (lowering tags each naga
/// expression and statement with its op's span), with naga's innermost
/// reason and no naga handle numbers.
pub fn validate_source(module: &naga::Module, target: &Target, source: &str) -> Result<ModuleInfo> {
    run_validator(module, target, Some(source))
}

fn run_validator(
    module: &naga::Module,
    target: &Target,
    source: Option<&str>,
) -> Result<ModuleInfo> {
    let flags = ValidationFlags::all() - ValidationFlags::CONTROL_FLOW_UNIFORMITY;
    let mut validator = Validator::new(flags, capabilities(target));
    validator.validate(module).map_err(|e| {
        // The top-level message names only the entry point; the cause is
        // in the source chain.
        let mut message = format!("naga rejected the lowered module: {e}");
        let mut innermost = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            message += &format!(": {c}");
            innermost = c.to_string();
            cause = c.source();
        }
        let at = e
            .spans()
            .filter_map(|(span, _)| span.to_range())
            .find(|range| range.start < range.end);
        match (source, at) {
            (Some(source), Some(range)) => {
                let span = crate::front::Span::new(range.start, range.end);
                let message = format!(
                    "internal compiler error: naga rejected what this op lowers to: {innermost}"
                );
                Error::compile(vec![crate::diag::diagnostic(
                    source, span, E_VALIDATE, message,
                )])
            }
            _ => internal(E_VALIDATE, message),
        }
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
    patch::drop_capability(&mut words, patch::CAP_UNIFORM_AND_STORAGE_16);
    patch::drop_workgroup_array_strides(&mut words);
    if let Some(facts) = patch::MemoryFacts::scan(&words) {
        patch::share_memory(&mut words, &facts);
        patch::declare_device_scope(&mut words, &facts);
    }
    Ok(words)
}

/// Validate then write: the whole emit stage.
pub fn emit(module: &naga::Module, target: &Target, entry: &str) -> Result<Vec<u32>> {
    let info = validate(module, target)?;
    write_spirv(module, &info, entry)
}

/// [`emit`] for a module lowered from `source`, with rejections located
/// as [`validate_source`] does.
pub fn emit_source(
    module: &naga::Module,
    target: &Target,
    entry: &str,
    source: &str,
) -> Result<Vec<u32>> {
    let info = validate_source(module, target, source)?;
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

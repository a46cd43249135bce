//! The benchmark's kernel, written in WGSL and compiled to SPIR-V by naga at
//! start, so both sides run the very same words.

use naga::back::spv;

/// `dst[i] = src[i] + 1` over 32-bit words; 64 invocations per workgroup.
/// One dispatch of it is the one-dispatch graph; 64 of them, ping-ponging
/// between two buffers, are the dependent chain.
pub const ADD_ONE: &str = r"
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&dst) {
        dst[i] = src[i] + 1u;
    }
}
";

/// The kernel's entry point.
pub const ENTRY: &std::ffi::CStr = c"main";

/// Invocations per workgroup of [`ADD_ONE`].
pub const WORKGROUP: u32 = 64;

/// Workgroups covering `words` words.
pub fn groups(words: usize) -> u32 {
    words.div_ceil(WORKGROUP as usize) as u32
}

/// WGSL to SPIR-V 1.3 with no inserted bounds or division checks.
pub fn spirv(wgsl: &str) -> Result<Vec<u32>, String> {
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
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: unchecked,
            buffer: unchecked,
            image_load: unchecked,
            binding_array: unchecked,
        },
        force_loop_bounding: false,
        emit_int_div_checks: false,
        ..spv::Options::default()
    };
    spv::write_vec(&module, &info, &options, None).map_err(|e| format!("SPIR-V: {e}"))
}

//! WGSL test kernels compiled with naga at test time.

/// WGSL to SPIR-V 1.3 words, with push constants (`var<immediate>`) allowed
/// and no inserted checks. Panics with naga's rendered diagnostic when the
/// source does not parse or validate.
pub fn spirv(wgsl: &str) -> Vec<u32> {
    use naga::back::spv;
    let module =
        naga::front::wgsl::parse_str(wgsl).unwrap_or_else(|e| panic!("{}", e.emit_to_string(wgsl)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::IMMEDIATES,
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{}", e.emit_to_string(wgsl)));
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
    spv::write_vec(&module, &info, &options, None).expect("spir-v")
}

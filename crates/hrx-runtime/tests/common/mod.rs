//! Shared helpers for the runtime's integration tests: a lavapipe runtime,
//! WGSL test kernels compiled with naga at test time, host upload/readback,
//! and device work that stays pending for a while (`gate`).

#![allow(dead_code)]

pub mod gate;

use hrx_runtime::{
    Access, BindingContract, Buffer, BufferView, GpuKernel, KernelContract, MemoryPlacement,
    Runtime,
};

/// A fresh runtime domain on the default device (lavapipe in CI), with the
/// compute copy kernel forced on so that lavapipe exercises it too.
pub fn runtime() -> Runtime {
    Runtime::with_options(
        hrx_runtime::RuntimeOptions::from_env()
            .unwrap()
            .with_compute_copy(true),
    )
    .expect("runtime")
}

/// WGSL to SPIR-V 1.3 words, with push constants (`var<immediate>`) allowed
/// and no inserted checks.
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

/// A kernel from WGSL whose entry point is `main`, with one binding per
/// access (4-byte aligned, `min_bytes` each).
pub fn kernel(
    runtime: &Runtime,
    wgsl: &str,
    access: &[Access],
    min_bytes: usize,
    push_constant_bytes: u32,
    workgroup_size: [u32; 3],
) -> GpuKernel {
    GpuKernel::new(
        runtime,
        &spirv(wgsl),
        contract(access, min_bytes, push_constant_bytes, workgroup_size),
    )
    .expect("kernel")
}

/// The contract `kernel` uses.
pub fn contract(
    access: &[Access],
    min_bytes: usize,
    push_constant_bytes: u32,
    workgroup_size: [u32; 3],
) -> KernelContract {
    KernelContract {
        entry_point: "main".into(),
        bindings: access
            .iter()
            .map(|&access| BindingContract {
                min_bytes,
                alignment: 4,
                access,
            })
            .collect(),
        push_constant_bytes,
        workgroup_size,
    }
}

/// Host-visible storage holding `words`.
pub fn upload(runtime: &Runtime, words: &[u32]) -> Buffer {
    let buffer = runtime
        .allocate(words.len() * 4, MemoryPlacement::HostVisible)
        .expect("allocate");
    write(&buffer.view(), words);
    buffer
}

/// Overwrite a host-visible view with `words`.
pub fn write(view: &BufferView, words: &[u32]) {
    let mut mapped = view.map_write().expect("map_write");
    for (chunk, word) in mapped.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
}

/// The words of a host-visible view (waits for device writes).
pub fn read(view: &BufferView) -> Vec<u32> {
    let mapped = view.map_read().expect("map_read");
    mapped
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

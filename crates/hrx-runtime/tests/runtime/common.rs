//! Shared helpers for the runtime's integration tests: a lavapipe runtime,
//! WGSL test kernels compiled with naga at test time, host upload/readback.

#![allow(dead_code)]

pub use hrx_test_support::wgsl::spirv;

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

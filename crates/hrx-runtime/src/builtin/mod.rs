//! Built-in kernels. For now one: the compute copy that `Graph::copy` uses
//! for large device-local copies (on an H200 the copy engine streams
//! 0.85 TB/s where a compute kernel reaches 4.1-4.3 TB/s).
//!
//! `copy.wgsl` is the source; `copy.spv` is generated from it by
//! `cargo xtask gen-copy-kernel` (recipe in `xtask/src/gen_copy_kernel.rs`),
//! and a test checks that regenerating gives the same words.

use crate::{
    BufferView, GpuKernel,
    device::Gpu,
    kernel::{Access, BindingContract, KernelContract, WeakKernel},
};
use hrx_core::{Error, Result, Target};
use std::sync::{Arc, Mutex};

/// The generated SPIR-V of `copy.wgsl`, as little-endian bytes.
pub(crate) const COPY_SPIRV: &[u8] = include_bytes!("copy.spv");
/// The copy kernel's entry point.
pub(crate) const COPY_ENTRY_POINT: &str = "copy_words";
/// Copies of at least this many bytes use the compute kernel.
pub(crate) const COMPUTE_COPY_MIN_BYTES: usize = 1 << 20;
/// The kernel moves 16-byte words (`vec4<u32>`).
const WORD: usize = 16;
/// The kernel's workgroup size (`@workgroup_size(256)`).
const WORKGROUP: usize = 256;
/// Grid cap: a grid-stride loop covers the rest, and 65535 is every
/// device's minimum `maxComputeWorkGroupCount`.
const MAX_GROUPS: u32 = 65_535;

/// SPIR-V words from little-endian bytes; fails on a ragged length or a
/// missing magic number.
pub(crate) fn words(bytes: &[u8]) -> Result<Vec<u32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(Error::Message(format!(
            "SPIR-V of {} bytes is not whole words",
            bytes.len()
        )));
    }
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    if words.first() != Some(&0x0723_0203) {
        return Err(Error::Message("built-in kernel is not SPIR-V".into()));
    }
    Ok(words)
}

/// The offset alignment a compute copy needs on `target`.
fn alignment(target: &Target) -> usize {
    (target.storage_buffer_offset_alignment as usize)
        .max(WORD)
        .next_power_of_two()
}

/// Whether `view` lives in device-local memory, which the GPU streams at
/// full speed (on lavapipe and integrated GPUs that memory is also mappable).
fn device_local(view: &BufferView) -> bool {
    view.allocation().is_device_local()
}

/// How many leading bytes of a copy of `src` into `dst` the compute kernel
/// moves; the rest (fewer than 16 bytes) goes through `vkCmdCopyBuffer`.
/// Zero when the copy is small, touches host memory of a discrete GPU, or an offset is
/// not aligned for storage-buffer binding.
pub(crate) fn compute_copy_bytes(target: &Target, dst: &BufferView, src: &BufferView) -> usize {
    let align = alignment(target);
    let len = dst.len().min(src.len());
    if len < COMPUTE_COPY_MIN_BYTES
        || !device_local(dst)
        || !device_local(src)
        || !dst.offset().is_multiple_of(align)
        || !src.offset().is_multiple_of(align)
    {
        return 0;
    }
    len - len % WORD
}

/// One dispatch of the copy kernel: bytes `offset..offset + bytes` of the
/// copied range, over `groups` workgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub offset: usize,
    pub bytes: usize,
    pub groups: u32,
}

/// Split a compute copy of `bytes` (a multiple of 16) into dispatches that
/// respect the device's storage range and workgroup-count limits. Every
/// chunk but the last is a multiple of the offset alignment, so each chunk
/// starts aligned.
pub(crate) fn chunks(target: &Target, bytes: usize) -> impl Iterator<Item = Chunk> {
    let align = alignment(target);
    let range = usize::try_from(target.max_storage_buffer_range.min(u64::from(u32::MAX)))
        .unwrap_or(usize::MAX);
    let step = (range / align * align).max(align);
    let max_groups = target.max_workgroup_count[0].clamp(1, MAX_GROUPS) as usize;
    (0..bytes).step_by(step).map(move |offset| {
        let len = step.min(bytes - offset);
        let groups = (len / WORD).div_ceil(WORKGROUP).clamp(1, max_groups);
        Chunk {
            offset,
            bytes: len,
            groups: groups as u32,
        }
    })
}

/// Copy kernels of live devices, by domain. Weak, so a kernel goes away
/// with the last prepared graph that uses it (and never keeps a device
/// open); it is rebuilt (through the pipeline cache) when next needed.
static COPY_KERNELS: Mutex<Vec<(u64, WeakKernel)>> = Mutex::new(Vec::new());

/// The copy kernel of `gpu`'s domain, built on first need.
pub(crate) fn copy_kernel(gpu: &Arc<Gpu>) -> Result<GpuKernel> {
    let mut cache = COPY_KERNELS.lock().unwrap_or_else(|e| e.into_inner());
    cache.retain(|(_, kernel)| kernel.is_alive());
    if let Some(kernel) = cache
        .iter()
        .filter(|(domain, _)| *domain == gpu.domain)
        .find_map(|(_, kernel)| kernel.upgrade())
    {
        return Ok(kernel);
    }
    let contract = KernelContract {
        entry_point: COPY_ENTRY_POINT.into(),
        bindings: vec![
            BindingContract {
                min_bytes: WORD,
                alignment: WORD,
                access: Access::Read,
            },
            BindingContract {
                min_bytes: WORD,
                alignment: WORD,
                access: Access::Write,
            },
        ],
        push_constant_bytes: 0,
        workgroup_size: [WORKGROUP as u32, 1, 1],
    };
    let kernel = GpuKernel::from_gpu(gpu.clone(), &words(COPY_SPIRV)?, contract)?;
    cache.push((gpu.domain, kernel.downgrade()));
    Ok(kernel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_range_and_grid_limits() {
        let target = Target::lavapipe();
        let bytes = (300 << 20) + 48;
        let all: Vec<Chunk> = chunks(&target, bytes).collect();
        assert_eq!(all.len(), 3);
        assert_eq!(all.iter().map(|c| c.bytes).sum::<usize>(), bytes);
        for (k, c) in all.iter().enumerate() {
            assert!(c.bytes as u64 <= target.max_storage_buffer_range);
            assert_eq!(c.offset % 16, 0);
            assert!(c.groups >= 1 && c.groups <= target.max_workgroup_count[0]);
            if k > 0 {
                assert_eq!(c.offset, all[k - 1].offset + all[k - 1].bytes);
            }
        }
        assert_eq!(all[0].groups, 32_768);
        assert_eq!(chunks(&target, 0).count(), 0);
    }

    #[test]
    fn checked_in_spirv_is_whole_words() {
        assert!(words(COPY_SPIRV).is_ok());
        assert!(words(&COPY_SPIRV[1..]).is_err());
        assert!(words(&[0; 8]).is_err());
    }
}

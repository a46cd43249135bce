//! Device facts a compiler and a scheduler need, live or offline.

/// The kind of physical device, in Vulkan's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// A discrete GPU.
    Discrete,
    /// A GPU sharing memory with the host.
    Integrated,
    /// A virtual GPU.
    Virtual,
    /// A software rasteriser on the CPU (lavapipe).
    Cpu,
    /// Anything else.
    Other,
}

/// Which subgroup operation classes the device supports in compute shaders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SubgroupOps {
    /// Elect, subgroup barriers.
    pub basic: bool,
    /// Any / all / equal votes.
    pub vote: bool,
    /// Reductions and scans.
    pub arithmetic: bool,
    /// Ballot and broadcast.
    pub ballot: bool,
    /// Shuffle by index and xor.
    pub shuffle: bool,
    /// Shuffle up and down.
    pub shuffle_relative: bool,
}

/// Scalar element kinds, for cooperative matrix descriptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    F32,
    /// Signed 8-bit integer.
    I8,
    /// Signed 32-bit integer.
    I32,
}

/// One cooperative matrix configuration: `C[m x n] += A[m x k] * B[k x n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CooperativeMatrixShape {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Element type of A and B.
    pub input: ScalarKind,
    /// Element type of the accumulator C and the result.
    pub accumulator: ScalarKind,
}

/// What a kernel compiler may assume about a device.
///
/// Built from the live device by the runtime, or from an offline profile.
/// All sizes are in bytes unless named otherwise.
///
/// ```
/// use hrx_core::Target;
/// let t = Target::lavapipe();
/// assert_eq!(t.subgroup_size_min, 8);
/// assert!(t.fits_workgroup([256, 1, 1]));
/// assert!(!Target::lavapipe().supports_cooperative_matrix());
/// assert!(Target::hopper().supports_cooperative_matrix());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// Device name as the driver reports it.
    pub name: String,
    /// Discrete, integrated, CPU...
    pub kind: DeviceKind,
    /// PCI vendor id (0x10de NVIDIA, 0x10005 Mesa).
    pub vendor_id: u32,
    /// Vulkan API version the device supports, as (major, minor, patch).
    pub api_version: (u32, u32, u32),
    /// Smallest subgroup size the device may run a kernel with.
    pub subgroup_size_min: u32,
    /// Largest subgroup size the device may run a kernel with.
    pub subgroup_size_max: u32,
    /// Subgroup operations available to compute shaders.
    pub subgroup_ops: SubgroupOps,
    /// Largest workgroup size per dimension.
    pub max_workgroup_size: [u32; 3],
    /// Largest number of invocations in one workgroup.
    pub max_workgroup_invocations: u32,
    /// Largest number of workgroups per dispatch dimension.
    pub max_workgroup_count: [u32; 3],
    /// Shared (workgroup) memory per workgroup.
    pub workgroup_memory_bytes: u32,
    /// Push-constant block size.
    pub push_constant_bytes: u32,
    /// Largest range one storage-buffer binding may cover.
    pub max_storage_buffer_range: u64,
    /// Required alignment of a storage-buffer binding's offset.
    pub storage_buffer_offset_alignment: u64,
    /// `shaderFloat16`: f16 arithmetic in shaders.
    pub shader_f16: bool,
    /// `storageBuffer16BitAccess`: f16/i16 loads and stores in storage buffers.
    pub storage_16bit: bool,
    /// `shaderInt64`.
    pub shader_int64: bool,
    /// `timelineSemaphore` (required by the runtime).
    pub timeline_semaphores: bool,
    /// Cooperative matrix configurations (`VK_KHR_cooperative_matrix`), empty
    /// when the extension is absent.
    pub cooperative_matrix: Vec<CooperativeMatrixShape>,
}

impl Target {
    /// Mesa's lavapipe (llvmpipe, 256-bit), as read with vulkaninfo from Mesa
    /// 22.3 on Debian 12. The device CI runs on.
    pub fn lavapipe() -> Self {
        Target {
            name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
            kind: DeviceKind::Cpu,
            vendor_id: 0x10005,
            api_version: (1, 3, 230),
            subgroup_size_min: 8,
            subgroup_size_max: 8,
            subgroup_ops: SubgroupOps {
                basic: true,
                vote: true,
                arithmetic: true,
                ballot: true,
                shuffle: true,
                shuffle_relative: true,
            },
            max_workgroup_size: [1024, 1024, 1024],
            max_workgroup_invocations: 1024,
            max_workgroup_count: [65535, 65535, 65535],
            workgroup_memory_bytes: 32 * 1024,
            push_constant_bytes: 128,
            max_storage_buffer_range: 128 << 20,
            storage_buffer_offset_alignment: 16,
            shader_f16: true,
            storage_16bit: true,
            shader_int64: true,
            timeline_semaphores: true,
            cooperative_matrix: Vec::new(),
        }
    }

    /// A Hopper-class NVIDIA GPU (read off an H200, driver 580, Vulkan 1.4).
    pub fn hopper() -> Self {
        use ScalarKind::{F16, F32};
        let shape = |m, n, k, input, accumulator| CooperativeMatrixShape {
            m,
            n,
            k,
            input,
            accumulator,
        };
        Target {
            name: "NVIDIA H200".into(),
            kind: DeviceKind::Discrete,
            vendor_id: 0x10de,
            api_version: (1, 4, 312),
            subgroup_size_min: 32,
            subgroup_size_max: 32,
            subgroup_ops: SubgroupOps {
                basic: true,
                vote: true,
                arithmetic: true,
                ballot: true,
                shuffle: true,
                shuffle_relative: true,
            },
            max_workgroup_size: [1024, 1024, 64],
            max_workgroup_invocations: 1024,
            max_workgroup_count: [2_147_483_647, 65535, 65535],
            workgroup_memory_bytes: 48 * 1024,
            push_constant_bytes: 256,
            max_storage_buffer_range: u32::MAX as u64,
            storage_buffer_offset_alignment: 16,
            shader_f16: true,
            storage_16bit: true,
            shader_int64: true,
            timeline_semaphores: true,
            cooperative_matrix: vec![
                shape(16, 16, 16, F16, F16),
                shape(16, 16, 16, F16, F32),
                shape(16, 8, 16, F16, F16),
                shape(16, 8, 16, F16, F32),
            ],
        }
    }

    /// Whether a workgroup of this size fits the device's limits.
    pub fn fits_workgroup(&self, size: [u32; 3]) -> bool {
        let within = size
            .iter()
            .zip(self.max_workgroup_size)
            .all(|(&s, max)| s >= 1 && s <= max);
        let invocations = size.iter().try_fold(1u32, |acc, &s| acc.checked_mul(s));
        within && invocations.is_some_and(|n| n <= self.max_workgroup_invocations)
    }

    /// Whether `VK_KHR_cooperative_matrix` is available with any shape.
    pub fn supports_cooperative_matrix(&self) -> bool {
        !self.cooperative_matrix.is_empty()
    }

    /// A short stable string identifying everything that changes generated
    /// code, for cache keys.
    pub fn fingerprint(&self) -> String {
        format!("{self:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workgroup_limits_are_checked() {
        let t = Target::lavapipe();
        assert!(t.fits_workgroup([1024, 1, 1]));
        assert!(!t.fits_workgroup([1025, 1, 1]));
        assert!(!t.fits_workgroup([64, 64, 1]));
        assert!(!t.fits_workgroup([0, 1, 1]));
        assert!(!t.fits_workgroup([u32::MAX, u32::MAX, 1]));
        assert!(!Target::hopper().fits_workgroup([1, 1, 65]));
    }

    #[test]
    fn profiles_differ_in_fingerprint() {
        assert_ne!(
            Target::lavapipe().fingerprint(),
            Target::hopper().fingerprint()
        );
    }
}

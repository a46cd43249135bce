//! The compiled form of one kernel: SPIR-V plus everything the runtime needs
//! to bind, launch and feed it.
//!
//! An artifact speaks the runtime's language through hrx-core's kernel
//! vocabulary, not through the runtime itself: [`Artifact::contract`] is
//! the one place an artifact becomes a [`hrx_core::KernelContract`], and
//! [`Artifact::dispatch_args`] gives the [`hrx_core::DispatchArgs`] of one
//! launch. The runtime turns SPIR-V plus a contract into a pipeline
//! (`hrx_runtime::GpuKernel::new(&runtime, artifact.spirv(),
//! artifact.contract())`), so this crate never links Vulkan.

mod codec;
mod contract;

use crate::launch::LaunchProgram;
use hrx_core::{Error, Result};

/// How a kernel uses a storage binding (hrx-core's one access vocabulary).
/// The compiler infers [`Access::Read`] for a buffer declared read-only
/// and [`Access::ReadWrite`] for one it writes; it never claims
/// [`Access::Write`] alone, since a store may follow a load anywhere.
pub use hrx_core::Access;

/// One storage-buffer binding (descriptor set 0), in buffer-argument order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Binding {
    /// Binding number; equals the position among the buffer arguments.
    pub index: u32,
    /// Loom name of the buffer argument (without `%`).
    pub name: String,
    /// Read-only or read-write (see [`Access`]).
    pub access: Access,
    /// Bytes the kernel may touch, when every view of the buffer has a
    /// static extent and offset; `None` when any extent is dynamic.
    pub min_bytes: Option<u64>,
    /// Size of the array element the binding is declared with (4 for f32,
    /// 16 for a buffer declared as `array<vec4<f32>>`, 2 for f16, 8 for
    /// `array<vec4<f16>>`).
    pub element_bytes: u32,
    /// Alignment the bound range's offset must have, in bytes.
    pub alignment: u32,
}

/// Type of a scalar launch argument, as it sits in the push-constant block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// `index`: an element count or position, 32 bits on the device.
    Index,
    /// `offset`: a byte quantity, 32 bits on the device.
    Offset,
    /// `i1`: stored as a 32-bit 0 or 1.
    Bool,
    /// `i32`
    I32,
    /// `u32`
    U32,
    /// `f32`
    F32,
}

impl ScalarType {
    /// Bytes the value occupies in the push-constant block (all are 4).
    pub fn bytes(self) -> u32 {
        4
    }
}

/// A scalar launch argument's place in the push-constant block.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PushConstant {
    /// Loom name of the argument (without `%`).
    pub name: String,
    /// Its type.
    pub ty: ScalarType,
    /// Byte offset in the block (std430-like: aligned to its size).
    pub offset: u32,
}

/// A typed host value for a scalar launch argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarValue {
    /// An `index` value; must fit in 32 bits.
    Index(u64),
    /// An `offset` value (bytes); must fit in 32 bits.
    Offset(u64),
    /// An `i1` value.
    Bool(bool),
    /// An `i32` value.
    I32(i32),
    /// A `u32` value.
    U32(u32),
    /// An `f32` value.
    F32(f32),
}

impl ScalarValue {
    /// The type this value has.
    pub fn ty(self) -> ScalarType {
        match self {
            ScalarValue::Index(_) => ScalarType::Index,
            ScalarValue::Offset(_) => ScalarType::Offset,
            ScalarValue::Bool(_) => ScalarType::Bool,
            ScalarValue::I32(_) => ScalarType::I32,
            ScalarValue::U32(_) => ScalarType::U32,
            ScalarValue::F32(_) => ScalarType::F32,
        }
    }

    /// The 4 little-endian bytes the device reads, or an error when an
    /// index or offset does not fit 32 bits.
    fn to_le_bytes(self, name: &str) -> Result<[u8; 4]> {
        let narrow = |v: u64| {
            u32::try_from(v).map_err(|_| {
                Error::msg(format!(
                    "push constant `{name}`: {v} does not fit the 32-bit device index"
                ))
            })
        };
        Ok(match self {
            ScalarValue::Index(v) | ScalarValue::Offset(v) => narrow(v)?.to_le_bytes(),
            ScalarValue::Bool(b) => u32::from(b).to_le_bytes(),
            ScalarValue::I32(v) => v.to_le_bytes(),
            ScalarValue::U32(v) => v.to_le_bytes(),
            ScalarValue::F32(v) => v.to_le_bytes(),
        })
    }
}

/// A compiled kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Artifact {
    pub(crate) kernel: String,
    pub(crate) spirv: Vec<u32>,
    pub(crate) entry_point: String,
    pub(crate) bindings: Vec<Binding>,
    pub(crate) push_constants: Vec<PushConstant>,
    pub(crate) push_constant_bytes: u32,
    pub(crate) workgroup_size: [u32; 3],
    pub(crate) launch: LaunchProgram,
}

impl Artifact {
    /// The kernel symbol this was compiled from (without `@`).
    pub fn kernel(&self) -> &str {
        &self.kernel
    }

    /// The SPIR-V module, as words.
    pub fn spirv(&self) -> &[u32] {
        &self.spirv
    }

    /// The SPIR-V module as little-endian bytes (the `.spv` file format).
    pub fn spirv_bytes(&self) -> Vec<u8> {
        self.spirv.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Name of the compute entry point in the module.
    pub fn entry_point(&self) -> &str {
        &self.entry_point
    }

    /// Storage bindings, one per buffer argument, in argument order.
    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    /// Layout of the push-constant block, one entry per scalar argument.
    pub fn push_constants(&self) -> &[PushConstant] {
        &self.push_constants
    }

    /// Size of the push-constant block in bytes (0 when there is none).
    pub fn push_constant_bytes(&self) -> u32 {
        self.push_constant_bytes
    }

    /// Workgroup size (x, y, z), fixed at compile time.
    pub fn workgroup_size(&self) -> [u32; 3] {
        self.workgroup_size
    }

    /// The host launch program.
    pub fn launch_program(&self) -> &LaunchProgram {
        &self.launch
    }

    /// Number of workload values [`Artifact::launch`] expects.
    pub fn workload_arg_count(&self) -> usize {
        self.launch.arg_count as usize
    }

    /// Evaluate the launch region: workload values to a workgroup grid.
    pub fn launch(&self, workload: &[u64]) -> Result<[u32; 3]> {
        self.launch.evaluate(workload)
    }

    /// Pack scalar launch arguments, in declaration order, into the
    /// push-constant bytes. The count and each type must match exactly.
    pub fn push_constants_from(&self, values: &[ScalarValue]) -> Result<Vec<u8>> {
        if values.len() != self.push_constants.len() {
            return Err(Error::msg(format!(
                "kernel `{}` takes {} scalar arguments, got {}",
                self.kernel,
                self.push_constants.len(),
                values.len()
            )));
        }
        let mut bytes = vec![0u8; self.push_constant_bytes as usize];
        for (slot, value) in self.push_constants.iter().zip(values) {
            if value.ty() != slot.ty {
                return Err(Error::msg(format!(
                    "push constant `{}` has type {:?}, got a {:?} value",
                    slot.name,
                    slot.ty,
                    value.ty()
                )));
            }
            let start = slot.offset as usize;
            let dst = bytes
                .get_mut(start..start + 4)
                .ok_or_else(|| Error::msg("push-constant layout out of range"))?;
            dst.copy_from_slice(&value.to_le_bytes(&slot.name)?);
        }
        Ok(bytes)
    }

    /// Serialise for the disk cache.
    pub(crate) fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Deserialise a cache entry; `None` for anything malformed.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Artifact> {
        codec::decode(bytes)
    }
}

/// A human-readable summary of an artifact: bindings, push constants,
/// workgroup size (what `hrx compile --report` prints).
pub fn report(a: &Artifact) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "kernel @{} (entry point `{}`)", a.kernel, a.entry_point);
    let _ = writeln!(s, "spirv: {} words", a.spirv.len());
    let ws = a.workgroup_size;
    let _ = writeln!(s, "workgroup size: {} x {} x {}", ws[0], ws[1], ws[2]);
    let _ = writeln!(s, "bindings: {}", a.bindings.len());
    for b in &a.bindings {
        let min = b
            .min_bytes
            .map_or("dynamic".to_string(), |n| format!("{n} bytes"));
        let _ = writeln!(
            s,
            "  binding {} %{}: {:?}, min {min}, element {} bytes, align {}",
            b.index, b.name, b.access, b.element_bytes, b.alignment
        );
    }
    let _ = writeln!(s, "push constants: {} bytes", a.push_constant_bytes);
    for p in &a.push_constants {
        let _ = writeln!(s, "  +{} %{}: {:?}", p.offset, p.name, p.ty);
    }
    let _ = writeln!(s, "workload arguments: {}", a.launch.arg_count);
    s
}

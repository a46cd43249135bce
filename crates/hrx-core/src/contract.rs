//! The kernel vocabulary shared by the compiler and the runtime: what a
//! dispatch must bind ([`KernelContract`], [`BindingContract`], [`Access`])
//! and the arguments of one dispatch ([`DispatchArgs`]).
//!
//! Design choices and contracts:
//!
//! - **Plain data, no device.** A contract is what a kernel promises and
//!   requires; it lives here, below both the loom compiler (which derives
//!   one from each artifact) and the runtime (which builds a pipeline from
//!   SPIR-V plus a contract and checks every dispatch against it), so the
//!   two stand side by side and neither depends on the other.
//! - **Checked against a [`Target`].** [`KernelContract::check`] refuses a
//!   contract the device cannot honour (too many bindings, misaligned or
//!   oversized ranges, push constants or workgroup sizes beyond its
//!   limits) with a precise error, before any pipeline is built.

use crate::{Error, Result, Target};

/// Push descriptors every device with `VK_KHR_push_descriptor` supports.
const MAX_BINDINGS: usize = 32;

/// What a kernel does to the storage buffer bound at one binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The kernel only reads the binding.
    Read,
    /// The kernel only writes the binding.
    Write,
    /// The kernel reads and writes the binding.
    ReadWrite,
}

impl Access {
    /// Whether the kernel may read the binding.
    pub fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }

    /// Whether the kernel may write the binding.
    pub fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// What a dispatch must bind at one storage-buffer binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BindingContract {
    /// The smallest view, in bytes, the kernel may be given.
    pub min_bytes: usize,
    /// Required alignment of the view's offset, in bytes (a power of two).
    pub alignment: usize,
    /// Whether the kernel reads, writes or both; hazards derive from it.
    pub access: Access,
}

/// Everything the runtime needs to know about a SPIR-V compute kernel.
///
/// Binding `i` of the contract is descriptor set 0, binding `i`, a storage
/// buffer; the push constants are one block of `push_constant_bytes` at
/// offset 0.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelContract {
    /// Name of the compute entry point in the module.
    pub entry_point: String,
    /// One entry per storage-buffer binding, in binding order.
    pub bindings: Vec<BindingContract>,
    /// Size of the push-constant block (a multiple of 4; 0 for none).
    pub push_constant_bytes: u32,
    /// The workgroup size the module declares.
    pub workgroup_size: [u32; 3],
}

impl KernelContract {
    /// Check the contract against a device's limits.
    pub fn check(&self, target: &Target) -> Result<()> {
        let fail = |why: String| {
            Err(Error::Message(format!(
                "kernel `{}`: {why}",
                self.entry_point
            )))
        };
        if self.entry_point.is_empty() || self.entry_point.contains('\0') {
            return fail("the entry point name must be non-empty and free of NUL".into());
        }
        if self.bindings.len() > MAX_BINDINGS {
            return fail(format!(
                "{} bindings exceed the {MAX_BINDINGS} push descriptors a kernel may use",
                self.bindings.len()
            ));
        }
        for (i, b) in self.bindings.iter().enumerate() {
            if !b.alignment.is_power_of_two() {
                return fail(format!(
                    "binding {i}: alignment {} is not a power of two",
                    b.alignment
                ));
            }
            if b.min_bytes as u64 > target.max_storage_buffer_range {
                return fail(format!(
                    "binding {i}: min_bytes {} exceeds the device's storage range {}",
                    b.min_bytes, target.max_storage_buffer_range
                ));
            }
        }
        if !self.push_constant_bytes.is_multiple_of(4) {
            return fail(format!(
                "push-constant bytes {} are not a multiple of 4",
                self.push_constant_bytes
            ));
        }
        if self.push_constant_bytes > target.push_constant_bytes {
            return fail(format!(
                "push-constant bytes {} exceed the device limit {}",
                self.push_constant_bytes, target.push_constant_bytes
            ));
        }
        let size = self.workgroup_size;
        let invocations = size
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)));
        if size.contains(&0)
            || size
                .iter()
                .zip(target.max_workgroup_size)
                .any(|(&s, max)| s > max)
            || invocations.is_none_or(|n| n > u64::from(target.max_workgroup_invocations))
        {
            return fail(format!(
                "workgroup size {size:?} is outside the device limits {:?} / {} invocations",
                target.max_workgroup_size, target.max_workgroup_invocations
            ));
        }
        Ok(())
    }
}

/// The arguments of one dispatch: the push-constant block and the
/// workgroup grid, as a compiled kernel's launch program computes them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DispatchArgs {
    /// The push-constant bytes, exactly the contract's
    /// `push_constant_bytes` long.
    pub push_constants: Vec<u8>,
    /// Workgroups along x, y and z (none is zero).
    pub workgroups: [u32; 3],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract() -> KernelContract {
        KernelContract {
            entry_point: "main".into(),
            bindings: vec![BindingContract {
                min_bytes: 16,
                alignment: 4,
                access: Access::Read,
            }],
            push_constant_bytes: 8,
            workgroup_size: [64, 1, 1],
        }
    }

    #[test]
    fn contracts_are_checked_against_limits() {
        let t = Target::lavapipe();
        assert!(contract().check(&t).is_ok());
        let bad = [
            KernelContract {
                push_constant_bytes: 6,
                ..contract()
            },
            KernelContract {
                push_constant_bytes: t.push_constant_bytes + 4,
                ..contract()
            },
            KernelContract {
                workgroup_size: [0, 1, 1],
                ..contract()
            },
            KernelContract {
                workgroup_size: [1024, 2, 1],
                ..contract()
            },
            KernelContract {
                workgroup_size: [1, 1, 2048],
                ..contract()
            },
            KernelContract {
                entry_point: String::new(),
                ..contract()
            },
            KernelContract {
                bindings: vec![BindingContract {
                    min_bytes: 0,
                    alignment: 3,
                    access: Access::Write,
                }],
                ..contract()
            },
            KernelContract {
                bindings: vec![contract().bindings[0]; 33],
                ..contract()
            },
        ];
        for c in bad {
            assert!(c.check(&t).is_err(), "{c:?} should be rejected");
        }
    }

    #[test]
    fn access_flags() {
        assert!(Access::Read.reads() && !Access::Read.writes());
        assert!(!Access::Write.reads() && Access::Write.writes());
        assert!(Access::ReadWrite.reads() && Access::ReadWrite.writes());
    }
}

//! From an artifact to hrx-core's kernel vocabulary: the contract the
//! runtime checks every dispatch against, and the arguments of one
//! dispatch. The only place this translation is written.

use super::{Artifact, ScalarValue};
use hrx_core::{BindingContract, DispatchArgs, Error, KernelContract, Result};

impl Artifact {
    /// The kernel contract of this artifact: one storage binding per buffer
    /// argument, in argument order, with the access the compiler inferred;
    /// the push-constant block size and the workgroup size.
    ///
    /// A binding needs at least its static extent (every view of the buffer
    /// static) and never less than one declared array element: the
    /// binding's SPIR-V type is an array of such elements, so a shorter
    /// range holds none, and a dynamic extent is only known to need one.
    /// Its offset must be a multiple of the declared element, since views
    /// index the array at `byte_offset / element_bytes`. Both facts are the
    /// compiler's, passed on unchanged: a size that is not a power of two
    /// would be a compiler error, which [`KernelContract::check`] reports.
    pub fn contract(&self) -> KernelContract {
        KernelContract {
            entry_point: self.entry_point.clone(),
            bindings: self
                .bindings
                .iter()
                .map(|b| {
                    let element = u64::from(b.element_bytes.max(1));
                    let min_bytes = b.min_bytes.unwrap_or(0).max(element);
                    BindingContract {
                        min_bytes: usize::try_from(min_bytes).unwrap_or(usize::MAX),
                        alignment: b.alignment as usize,
                        access: b.access,
                    }
                })
                .collect(),
            push_constant_bytes: self.push_constant_bytes,
            workgroup_size: self.workgroup_size,
        }
    }

    /// The push-constant bytes and workgroup grid of one dispatch: the
    /// scalar launch arguments (in declaration order) packed as
    /// [`Artifact::push_constants_from`] does, and the launch region
    /// evaluated on `workload`. An empty grid (some axis 0, for an empty
    /// workload) is an error, since there is nothing to dispatch.
    pub fn dispatch_args(&self, scalars: &[ScalarValue], workload: &[u64]) -> Result<DispatchArgs> {
        let push_constants = self.push_constants_from(scalars)?;
        let workgroups = self.launch(workload)?;
        if workgroups.contains(&0) {
            return Err(Error::msg(format!(
                "kernel `{}`: workload {workload:?} gives the empty grid {workgroups:?}",
                self.kernel
            )));
        }
        Ok(DispatchArgs {
            push_constants,
            workgroups,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::{Access, Binding};
    use crate::launch::{LaunchInst, LaunchProgram};
    use hrx_core::Target;

    fn binding(index: u32, access: Access, min_bytes: Option<u64>, element_bytes: u32) -> Binding {
        Binding {
            index,
            name: format!("b{index}"),
            access,
            min_bytes,
            element_bytes,
            alignment: element_bytes,
        }
    }

    fn artifact(bindings: Vec<Binding>) -> Artifact {
        Artifact {
            kernel: "k".into(),
            spirv: vec![0x0723_0203],
            entry_point: "k".into(),
            bindings,
            push_constants: Vec::new(),
            push_constant_bytes: 0,
            workgroup_size: [64, 1, 1],
            // Register 0 holds 1 and register 1 holds 0: a 1 x 1 x 1 grid.
            launch: LaunchProgram {
                arg_count: 0,
                insts: vec![LaunchInst::Const(1), LaunchInst::Const(0)],
                workgroups: [0, 0, 0],
            },
        }
    }

    /// The contract passes on the compiler's facts and never asks for less
    /// than one declared element. (hrx-tensor once derived contracts on its
    /// own and disagreed here: a static extent of 0 bytes became 1 there
    /// and 0 in loom, although neither range holds an element.)
    #[test]
    fn bindings_need_their_extent_and_at_least_one_element() {
        let a = artifact(vec![
            binding(0, Access::Read, Some(256), 4),
            binding(1, Access::ReadWrite, None, 16),
            binding(2, Access::ReadWrite, Some(0), 8),
            binding(3, Access::Read, Some(2), 8),
        ]);
        let c = a.contract();
        let got: Vec<_> = c
            .bindings
            .iter()
            .map(|b| (b.min_bytes, b.alignment, b.access))
            .collect();
        assert_eq!(
            got,
            [
                (256, 4, Access::Read),
                (16, 16, Access::ReadWrite),
                (8, 8, Access::ReadWrite),
                (8, 8, Access::Read),
            ]
        );
        assert!(c.check(&Target::lavapipe()).is_ok());
    }

    /// A declared element that is not a power of two is passed on, and the
    /// contract check refuses it rather than a rounding hiding it.
    #[test]
    fn a_bad_alignment_reaches_the_check() {
        let c = artifact(vec![binding(0, Access::Read, None, 12)]).contract();
        assert_eq!(c.bindings[0].alignment, 12);
        assert!(c.check(&Target::lavapipe()).is_err());
    }

    #[test]
    fn an_empty_grid_is_refused() {
        let mut a = artifact(Vec::new());
        assert_eq!(a.dispatch_args(&[], &[]).unwrap().workgroups, [1, 1, 1]);
        a.launch.workgroups = [1, 0, 0];
        let err = a.dispatch_args(&[], &[]).unwrap_err();
        assert!(err.to_string().contains("empty grid"), "{err}");
    }
}

//! Every corpus kernel compiles for both offline targets and passes
//! spirv-val; the corpus covers every op of the loom spelling block.

use crate::common;
use hrx_core::Target;
use hrx_loom::{Access, Compiler};

#[test]
fn corpus_has_at_least_15_kernels() {
    assert!(common::corpus().len() >= 15);
}

#[test]
fn every_corpus_kernel_compiles_and_validates() {
    for target in [Target::lavapipe(), Target::hopper()] {
        for (name, source) in common::corpus() {
            let compiler = Compiler::for_target(None, &target).unwrap();
            let module = compiler
                .module(&source)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            for kernel in module.kernels() {
                let a = common::compile_checked(&source, kernel, &target);
                assert_eq!(a.entry_point(), kernel);
                assert!(a.spirv().len() > 5, "{name}");
                assert_eq!(a.spirv()[0], 0x0723_0203, "SPIR-V magic");
                // The contract the runtime will check: the compiler's own
                // binding facts, never less than one declared element, and
                // within the target's limits.
                let contract = a.contract();
                contract
                    .check(&target)
                    .unwrap_or_else(|e| panic!("{name} {kernel}: {e}"));
                for (b, c) in a.bindings().iter().zip(&contract.bindings) {
                    assert_eq!(c.access, b.access, "{name} {kernel}");
                    assert_eq!(c.alignment, b.alignment as usize, "{name} {kernel}");
                    assert!(c.min_bytes >= b.element_bytes as usize, "{name} {kernel}");
                    if let Some(extent) = b.min_bytes {
                        assert!(c.min_bytes as u64 >= extent, "{name} {kernel}");
                    }
                }
            }
        }
    }
}

fn source(name: &str) -> String {
    std::fs::read_to_string(common::corpus_dir().join(format!("{name}.loom"))).unwrap()
}

#[test]
fn scale_contract() {
    let a = common::compile_checked(&source("scale"), "@scale", &Target::lavapipe());
    assert_eq!(a.workgroup_size(), [256, 1, 1]);
    assert_eq!(a.bindings().len(), 1);
    assert_eq!(a.bindings()[0].access, Access::ReadWrite);
    assert_eq!(a.bindings()[0].min_bytes, None, "dynamic extent");
    assert_eq!(a.push_constant_bytes(), 8);
    let pcs: Vec<_> = a
        .push_constants()
        .iter()
        .map(|p| (p.name.as_str(), p.offset))
        .collect();
    assert_eq!(pcs, [("n", 0), ("factor", 4)]);
    assert_eq!(a.launch(&[1000]).unwrap(), [4, 1, 1]);
    assert_eq!(a.launch(&[0]).unwrap(), [0, 1, 1]);
    assert_eq!(a.workload_arg_count(), 1);
}

#[test]
fn read_only_inference_and_binding_order() {
    let a = common::compile_checked(&source("saxpy4"), "@saxpy4", &Target::lavapipe());
    let access: Vec<_> = a.bindings().iter().map(|b| (b.index, b.access)).collect();
    assert_eq!(access, [(0, Access::Read), (1, Access::ReadWrite)]);
    // All accesses are aligned 4-lane vectors: declared as vec4 arrays.
    assert!(a.bindings().iter().all(|b| b.element_bytes == 16));
    assert_eq!(a.launch(&[4096]).unwrap(), [4, 1, 1]);
}

#[test]
fn static_extents_give_min_bytes() {
    let a = common::compile_checked(&source("histogram"), "@histogram", &Target::lavapipe());
    assert_eq!(a.bindings()[0].min_bytes, None);
    assert_eq!(a.bindings()[1].min_bytes, Some(256));
    assert_eq!(a.bindings()[1].access, Access::ReadWrite);
}

#[test]
fn two_dimensional_launch() {
    let a = common::compile_checked(&source("transpose"), "@transpose", &Target::lavapipe());
    assert_eq!(a.workgroup_size(), [16, 16, 1]);
    assert_eq!(a.launch(&[33, 17]).unwrap(), [2, 3, 1]);
}

#[test]
fn f16_needs_target_support() {
    let mut t = Target::lavapipe();
    t.shader_f16 = false;
    let compiler = Compiler::for_target(None, &t).unwrap();
    let module = compiler.module(&source("f16_to_f32")).unwrap();
    let err = module
        .compile(&hrx_loom::Specialization::new("@f16_to_f32"))
        .unwrap_err();
    let hrx_core::Error::Compile { diagnostics, .. } = err else {
        panic!("expected a compile error");
    };
    assert_eq!(diagnostics[0].code, "E0604");
    assert!(diagnostics[0].message.contains("f16"));
}

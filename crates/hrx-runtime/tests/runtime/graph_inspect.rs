//! `Graph::operations` and `GpuKernel::spirv`: a read-only view of what a
//! graph will record, enough to replay the same work by other means.

use crate::common::{contract, runtime, spirv};
use hrx_runtime::{Access, GpuKernel, MemoryPlacement, Operation};

/// dst[i] = src[i] + k.
const ADD: &str = r#"
struct K { k: u32 }
var<immediate> c: K;
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&dst) { dst[id.x] = src[id.x] + c.k; }
}
"#;

#[test]
fn operations_show_what_was_recorded_in_order() {
    let rt = runtime();
    let words = spirv(ADD);
    let add = GpuKernel::new(
        &rt,
        &words,
        contract(&[Access::Read, Access::Write], 64, 4, [64, 1, 1]),
    )
    .unwrap();
    assert_eq!(add.spirv(), &words[..]);
    let a = rt.allocate(256, MemoryPlacement::GpuLocal).unwrap();
    let b = rt.allocate(256, MemoryPlacement::GpuLocal).unwrap();
    let half = b.view().slice(128..256).unwrap();
    let mut graph = rt.graph();
    assert_eq!(graph.operations().len(), 0);
    graph.fill(a.view(), 7).unwrap();
    graph
        .dispatch(&add, &[a.view(), b.view()], &3u32.to_le_bytes(), [1, 2, 1])
        .unwrap();
    graph
        .copy(a.view().slice(0..128).unwrap(), half.clone())
        .unwrap();
    // A rejected operation leaves nothing behind.
    assert!(graph.copy(a.view(), half.clone()).is_err());
    let ops: Vec<Operation<'_>> = graph.operations().collect();
    assert_eq!(ops.len(), 3);
    match ops[0] {
        Operation::Fill { view, value } => {
            assert!(view.same_region(&a.view()));
            assert_eq!(value, 7);
        }
        other => panic!("expected the fill, got {other:?}"),
    }
    match ops[1] {
        Operation::Dispatch {
            kernel,
            views,
            constants,
            workgroups,
        } => {
            assert_eq!(kernel.spirv(), &words[..]);
            assert_eq!(kernel.contract().push_constant_bytes, 4);
            assert_eq!(views.len(), 2);
            assert!(views[0].same_region(&a.view()) && views[1].same_region(&b.view()));
            assert_eq!(constants, &3u32.to_le_bytes());
            assert_eq!(workgroups, [1, 2, 1]);
        }
        other => panic!("expected the dispatch, got {other:?}"),
    }
    match ops[2] {
        Operation::Copy { dst, src } => {
            assert_eq!((dst.offset(), dst.len()), (0, 128));
            assert!(src.same_region(&half));
        }
        other => panic!("expected the copy, got {other:?}"),
    }
    // Inspection changes nothing: the graph still prepares and runs.
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
}

//! Hazards across dispatches: read-after-write, write-after-read and
//! write-after-write chains give right results and list the right barrier
//! edges; independent dispatches get no barrier.

use crate::common::{kernel, read, runtime, upload};
use hrx_runtime::{Access, Edge, GpuKernel, Hazard, Runtime};

const N: usize = 4096;

/// out[i] = in[i] * 3 + 1, in a deliberately slow loop so that a missing
/// barrier lets the next dispatch observe stale data on a parallel device.
const MAP: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&dst) {
        var x = src[i];
        for (var k = 0u; k < 64u; k++) { x = x * 1664525u + 1013904223u; }
        for (var k = 0u; k < 64u; k++) { x = (x - 1013904223u) * 4276115653u; }
        dst[i] = x * 3u + 1u;
    }
}
"#;

/// data[i] = value.
const SET: &str = r#"
struct Value { v: u32 }
var<immediate> value: Value;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&data) { data[id.x] = value.v; }
}
"#;

fn map_kernel(rt: &Runtime) -> GpuKernel {
    kernel(rt, MAP, &[Access::Read, Access::Write], 4, 0, [64, 1, 1])
}

fn set_kernel(rt: &Runtime) -> GpuKernel {
    kernel(rt, SET, &[Access::Write], 4, 4, [64, 1, 1])
}

fn groups() -> [u32; 3] {
    [(N / 64) as u32, 1, 1]
}

fn edge(from: usize, to: usize, hazard: Hazard) -> Edge {
    Edge { from, to, hazard }
}

fn f(x: u32) -> u32 {
    x.wrapping_mul(3).wrapping_add(1)
}

fn input() -> Vec<u32> {
    (0..N as u32).map(|i| i.wrapping_mul(2654435761)).collect()
}

#[test]
fn read_after_write_chain() {
    let rt = runtime();
    let map = map_kernel(&rt);
    let a = upload(&rt, &input());
    let b = upload(&rt, &[0; N]);
    let c = upload(&rt, &[0; N]);
    let mut graph = rt.graph();
    graph
        .dispatch(&map, &[a.view(), b.view()], &[], groups())
        .unwrap();
    graph
        .dispatch(&map, &[b.view(), c.view()], &[], groups())
        .unwrap();
    let graph = graph.prepare().unwrap();
    assert_eq!(graph.barriers().len(), 1);
    assert_eq!(graph.barriers()[0].before(), 1);
    assert_eq!(
        graph.barriers()[0].edges(),
        &[edge(0, 1, Hazard::ReadAfterWrite)]
    );
    graph.submit().unwrap().wait().unwrap();
    let expected: Vec<u32> = input().iter().map(|&x| f(f(x))).collect();
    assert_eq!(read(&c.view()), expected);
}

#[test]
fn write_after_read() {
    let rt = runtime();
    let (map, set) = (map_kernel(&rt), set_kernel(&rt));
    let a = upload(&rt, &input());
    let b = upload(&rt, &[0; N]);
    let mut graph = rt.graph();
    graph
        .dispatch(&map, &[a.view(), b.view()], &[], groups())
        .unwrap();
    graph
        .dispatch(&set, &[a.view()], &7u32.to_le_bytes(), groups())
        .unwrap();
    let graph = graph.prepare().unwrap();
    assert_eq!(graph.barriers().len(), 1);
    assert_eq!(
        graph.barriers()[0].edges(),
        &[edge(0, 1, Hazard::WriteAfterRead)]
    );
    graph.submit().unwrap().wait().unwrap();
    let expected: Vec<u32> = input().iter().map(|&x| f(x)).collect();
    assert_eq!(read(&b.view()), expected, "the overwrite raced the read");
    assert_eq!(read(&a.view()), vec![7; N]);
}

#[test]
fn write_after_write() {
    let rt = runtime();
    let (map, set) = (map_kernel(&rt), set_kernel(&rt));
    let a = upload(&rt, &input());
    let b = upload(&rt, &[0; N]);
    let mut graph = rt.graph();
    graph
        .dispatch(&map, &[a.view(), b.view()], &[], groups())
        .unwrap();
    graph
        .dispatch(&set, &[b.view()], &9u32.to_le_bytes(), groups())
        .unwrap();
    let graph = graph.prepare().unwrap();
    assert_eq!(graph.barriers().len(), 1);
    assert_eq!(
        graph.barriers()[0].edges(),
        &[edge(0, 1, Hazard::WriteAfterWrite)]
    );
    graph.submit().unwrap().wait().unwrap();
    assert_eq!(read(&b.view()), vec![9; N], "the first write landed last");
}

#[test]
fn independent_dispatches_get_no_barrier() {
    let rt = runtime();
    let map = map_kernel(&rt);
    let a = upload(&rt, &input());
    let out = upload(&rt, &[0; 2 * N]);
    let (lo, hi) = (
        out.view().slice(0..4 * N).unwrap(),
        out.view().slice(4 * N..8 * N).unwrap(),
    );
    let mut graph = rt.graph();
    // Both read `a`; they write disjoint halves of one allocation.
    graph
        .dispatch(&map, &[a.view(), lo.clone()], &[], groups())
        .unwrap();
    graph
        .dispatch(&map, &[a.view(), hi.clone()], &[], groups())
        .unwrap();
    let graph = graph.prepare().unwrap();
    assert!(graph.barriers().is_empty(), "{:?}", graph.barriers());
    graph.submit().unwrap().wait().unwrap();
    let expected: Vec<u32> = input().iter().map(|&x| f(x)).collect();
    assert_eq!(read(&lo), expected);
    assert_eq!(read(&hi), expected);
}

#[test]
fn transfers_and_dispatches_share_one_hazard_model() {
    let rt = runtime();
    let map = map_kernel(&rt);
    let a = upload(&rt, &input());
    let b = upload(&rt, &[0; N]);
    let c = upload(&rt, &[0; N]);
    let mut graph = rt.graph();
    graph.fill(a.view().slice(0..64).unwrap(), 5).unwrap(); // 0: writes a[0..16]
    graph
        .dispatch(&map, &[a.view(), b.view()], &[], groups())
        .unwrap(); // 1: RAW on a
    graph.copy(c.view(), b.view()).unwrap(); // 2: RAW on b
    graph.fill(b.view(), 0).unwrap(); // 3: WAR on b (after 2), WAW (after 1)
    let graph = graph.prepare().unwrap();
    let positions: Vec<usize> = graph.barriers().iter().map(|b| b.before()).collect();
    assert_eq!(positions, [1, 2, 3]);
    assert_eq!(
        graph.barriers()[2].edges(),
        &[edge(2, 3, Hazard::WriteAfterRead)]
    );
    graph.submit().unwrap().wait().unwrap();
    let mut expected: Vec<u32> = input().iter().map(|&x| f(x)).collect();
    expected[..16].fill(16);
    assert_eq!(read(&c.view()), expected);
    assert_eq!(read(&b.view()), vec![0; N]);
}

#[test]
fn a_prologue_runs_first_with_barriers_only_where_it_meets_the_graph() {
    let rt = runtime();
    let map = map_kernel(&rt);
    let staging = upload(&rt, &input());
    let (x, y, unrelated) = (
        upload(&rt, &[0; N]),
        upload(&rt, &[0; N]),
        upload(&rt, &[0; N]),
    );
    let mut model = rt.graph();
    model
        .dispatch(&map, &[x.view(), y.view()], &[], groups())
        .unwrap();
    let model = model.prepare().unwrap();
    let mut prologue = rt.graph();
    prologue.copy(unrelated.view(), staging.view()).unwrap();
    prologue.copy(x.view(), staging.view()).unwrap();
    let combined = model.with_prologue(prologue).unwrap();
    // One barrier, before the dispatch, serving only the copy into x.
    assert_eq!(combined.barriers().len(), 1);
    assert_eq!(combined.barriers()[0].before(), 2);
    assert_eq!(
        combined.barriers()[0].edges(),
        &[edge(1, 2, Hazard::ReadAfterWrite)]
    );
    combined.submit().unwrap().wait().unwrap();
    let expected: Vec<u32> = input().into_iter().map(f).collect();
    assert_eq!(read(&y.view()), expected);
    assert_eq!(read(&unrelated.view()), input());
    // The original graph is unchanged and still runs on its own.
    assert!(model.barriers().is_empty());
    // A prologue of another domain is refused.
    let other = runtime();
    assert!(model.with_prologue(other.graph()).is_err());
}

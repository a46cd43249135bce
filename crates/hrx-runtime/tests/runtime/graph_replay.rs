//! Prepared graphs replayed: ordering of a graph's own submissions,
//! `submit_after` across graphs, empty graphs, `usable`, domains.

use crate::common::{kernel, read, runtime, upload};
use hrx_runtime::{Access, Completion, Error, Fault, GpuKernel, Runtime, RuntimeOptions};
use hrx_test_support::counting::thread_allocations;
use std::sync::Arc;

/// counter[i] += 1 (read-modify-write: a lost ordering loses increments).
const INCREMENT: &str = r#"
@group(0) @binding(0) var<storage, read_write> counter: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&counter) { counter[id.x] = counter[id.x] + 1u; }
}
"#;

fn increment(rt: &Runtime) -> GpuKernel {
    kernel(rt, INCREMENT, &[Access::ReadWrite], 4, 0, [64, 1, 1])
}

#[test]
fn one_graph_submitted_a_thousand_times() {
    let rt = runtime();
    let counter = upload(&rt, &[0; 256]);
    let mut graph = rt.graph();
    graph
        .dispatch(&increment(&rt), &[counter.view()], &[], [4, 1, 1])
        .unwrap();
    let graph = graph.prepare().unwrap();
    let mut last = Completion::ready();
    for _ in 0..1000 {
        last = graph.submit().unwrap();
    }
    last.wait().unwrap();
    assert_eq!(read(&counter.view()), vec![1000; 256]);
    graph.usable().unwrap();
}

#[test]
fn submit_after_orders_graphs_on_the_device() {
    let rt = runtime();
    let a = upload(&rt, &[0; 64]);
    let b = upload(&rt, &[0; 64]);
    let mut first = rt.graph();
    first
        .dispatch(&increment(&rt), &[a.view()], &[], [1, 1, 1])
        .unwrap();
    first
        .dispatch(&increment(&rt), &[a.view()], &[], [1, 1, 1])
        .unwrap();
    let first = first.prepare().unwrap();
    let mut second = rt.graph();
    second.copy(b.view(), a.view()).unwrap();
    let second = second.prepare().unwrap();
    let done = first.submit().unwrap();
    let copied = second.submit_after(&[done]).unwrap();
    copied.wait().unwrap();
    assert_eq!(read(&b.view()), vec![2; 64]);
}

#[test]
fn empty_graphs_need_no_device_and_still_order() {
    let idle = Runtime::from_env().unwrap();
    let empty = idle.graph().prepare().unwrap();
    assert!(empty.barriers().is_empty());
    empty.submit().unwrap().wait().unwrap();
    assert!(!idle.is_open(), "an empty graph opened the device");

    let rt = runtime();
    let a = upload(&rt, &[0; 64]);
    let mut work = rt.graph();
    work.dispatch(&increment(&rt), &[a.view()], &[], [1, 1, 1])
        .unwrap();
    let work = work.prepare().unwrap();
    let empty = rt.graph().prepare().unwrap();
    let after = empty.submit_after(&[work.submit().unwrap()]).unwrap();
    after.wait().unwrap();
    assert_eq!(read(&a.view()), vec![1; 64]);
    let failed = Completion::failed(Error::msg("upstream"));
    assert!(empty.submit_after(&[failed]).unwrap().wait().is_err());
}

#[test]
fn foreign_completions_and_runtimes_are_rejected() {
    let (rt, other) = (runtime(), runtime());
    let a = upload(&other, &[0; 64]);
    let mut foreign = other.graph();
    foreign.fill(a.view(), 1).unwrap();
    let foreign_done = foreign.prepare().unwrap().submit().unwrap();
    let graph = rt.graph();
    assert!(graph.validate_runtime(&rt).is_ok());
    assert!(graph.validate_runtime(&other).is_err());
    let graph = graph.prepare().unwrap();
    assert!(graph.validate_runtime(&rt.clone()).is_ok());
    assert!(graph.validate_runtime(&other).is_err());
    let error = graph
        .submit_after(std::slice::from_ref(&foreign_done))
        .unwrap_err();
    assert!(
        error.to_string().contains("another runtime domain"),
        "{error}"
    );
    foreign_done.wait().unwrap();
}

#[test]
fn a_native_failure_disables_the_graph() {
    let rt =
        Runtime::with_options(RuntimeOptions::from_env().unwrap().with_fault_injection()).unwrap();
    let a = upload(&rt, &[0; 64]);
    let mut graph = rt.graph();
    graph.fill(a.view(), 3).unwrap();
    let graph = Arc::new(graph.prepare().unwrap());
    graph.submit().unwrap().wait().unwrap();
    graph.usable().unwrap();
    rt.inject_fault(Fault::FailNextSubmission).unwrap();
    assert!(graph.submit().unwrap().wait().is_err());
    assert!(graph.usable().is_err());
    assert!(graph.submit().is_err(), "a disabled graph must refuse work");
}

#[test]
fn executable_graphs_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<hrx_runtime::ExecutableGraph>();
    check::<hrx_runtime::Graph>();
    check::<GpuKernel>();
    // Everything else a server shares between threads and tasks.
    check::<hrx_runtime::Runtime>();
    check::<hrx_runtime::Completion>();
    check::<hrx_runtime::Buffer>();
    check::<hrx_runtime::BufferView>();
}

#[test]
fn replay_allocates_nothing_on_the_submitting_thread() {
    let rt = runtime();
    let counter = upload(&rt, &[0; 64]);
    let mut graph = rt.graph();
    graph
        .dispatch(&increment(&rt), &[counter.view()], &[], [1, 1, 1])
        .unwrap();
    let graph = graph.prepare().unwrap();
    // Warm up with bursts as deep as the measured one: the runtime's
    // reusable queues and completion states grow to the in-flight depth.
    for _ in 0..3 {
        let mut last = Completion::ready();
        for _ in 0..100 {
            last = graph.submit().unwrap();
        }
        last.wait().unwrap();
    }
    let before = thread_allocations();
    let mut last = Completion::ready();
    for _ in 0..100 {
        last = graph.submit().unwrap();
    }
    let during = thread_allocations() - before;
    last.wait().unwrap();
    assert_eq!(during, 0, "{during} allocations in 100 replays");
    assert_eq!(read(&counter.view()), vec![400; 64]);
}

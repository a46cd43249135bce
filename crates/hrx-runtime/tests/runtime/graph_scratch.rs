//! `Graph::scratch`: one storage shared by a graph's scratch requests,
//! ordered by hazards like any buffer, sized by the largest request.

use crate::common::{read, runtime, upload};

#[test]
fn requests_share_the_smallest_storage_that_holds_them() {
    let rt = runtime();
    let mut graph = rt.graph();
    let before = rt.memory_stats().live_allocations;
    let small = graph.scratch(256).unwrap();
    let large = graph.scratch(4096).unwrap();
    // Each of these fits the 256-byte storage or the 4096-byte one.
    let again_small = graph.scratch(200).unwrap();
    let again_large = graph.scratch(1000).unwrap();
    assert_eq!(rt.memory_stats().live_allocations, before + 2);
    assert!(!small.overlaps(&large), "a larger request gets new storage");
    assert!(again_small.overlaps(&small));
    assert!(again_large.overlaps(&large));
    assert_eq!(
        (again_small.len(), again_large.len(), large.len()),
        (200, 1000, 4096)
    );
    for view in [&small, &large, &again_small, &again_large] {
        assert_eq!(view.offset(), 0, "a scratch view starts at its storage");
    }
}

#[test]
fn a_graph_of_many_requests_holds_one_storage() {
    let rt = runtime();
    let out = upload(&rt, &[0; 64]);
    let before = rt.memory_stats().live_allocations;
    let mut graph = rt.graph();
    for i in 0..100u32 {
        let scratch = graph.scratch(256).unwrap();
        graph.fill(scratch.clone(), i).unwrap();
        graph.copy(out.view(), scratch).unwrap();
    }
    let graph = graph.prepare().unwrap();
    assert_eq!(rt.memory_stats().live_allocations, before + 1);
    graph.submit().unwrap().wait().unwrap();
    // Every fill waited for the copy before it: the last value survives.
    assert_eq!(read(&out.view()), vec![99; 64]);
}

#[test]
fn users_of_one_scratch_are_ordered_by_hazards() {
    let rt = runtime();
    let first = upload(&rt, &[0; 64]);
    let second = upload(&rt, &[0; 64]);
    let mut graph = rt.graph();
    let a = graph.scratch(256).unwrap();
    graph.fill(a.clone(), 7).unwrap();
    graph.copy(first.view(), a).unwrap();
    // Same storage: this fill must wait for the copy that reads it.
    let b = graph.scratch(256).unwrap();
    graph.fill(b.clone(), 9).unwrap();
    graph.copy(second.view(), b).unwrap();
    let graph = graph.prepare().unwrap();
    assert_eq!(graph.barriers().len(), 3, "{:?}", graph.barriers());
    graph.submit().unwrap().wait().unwrap();
    assert_eq!(read(&first.view()), vec![7; 64]);
    assert_eq!(read(&second.view()), vec![9; 64]);
}

#[test]
fn an_empty_request_is_an_error() {
    let rt = runtime();
    let mut graph = rt.graph();
    let error = graph.scratch(0).unwrap_err().to_string();
    assert!(error.contains("scratch"), "{error}");
    assert!(graph.is_empty());
}

#[test]
fn zeroed_scratch_is_a_separate_pool_that_starts_at_zero() {
    let rt = runtime();
    let out = upload(&rt, &[7; 64]);
    let before = rt.memory_stats().live_allocations;
    let mut graph = rt.graph();
    let plain = graph.scratch(256).unwrap();
    let zeroed = graph.zeroed_scratch(256).unwrap();
    let again = graph.zeroed_scratch(100).unwrap();
    assert_eq!(rt.memory_stats().live_allocations, before + 2);
    assert!(!zeroed.overlaps(&plain), "its own storage, not the scratch");
    assert!(again.overlaps(&zeroed));
    assert_eq!((zeroed.offset(), again.len()), (0, 100));
    // Nothing wrote it yet: it reads as zero in the first submission.
    graph.copy(out.view(), zeroed).unwrap();
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
    assert_eq!(read(&out.view()), vec![0; 64]);
    let error = rt.graph().zeroed_scratch(0).unwrap_err().to_string();
    assert!(error.contains("zeroed scratch"), "{error}");
}

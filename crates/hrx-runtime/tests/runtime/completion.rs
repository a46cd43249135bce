//! Completion semantics: ordering, futures, timeouts, cancellation, failure
//! propagation, fault injection and device loss, on a real device.

use hrx_runtime::{
    Buffer, Completion, Error, ExecutableGraph, Fault, MemoryPlacement, Runtime, RuntimeOptions,
};
use hrx_test_support::gate::Gate;
use std::time::{Duration, Instant};

fn faulty_runtime() -> Runtime {
    Runtime::with_options(RuntimeOptions::from_env().unwrap().with_fault_injection()).unwrap()
}

/// A graph that fills `buffer` with `value`.
fn fill_graph(runtime: &Runtime, buffer: &Buffer, value: u32) -> ExecutableGraph {
    let mut graph = runtime.graph();
    graph.fill(buffer.view(), value).unwrap();
    graph.prepare().unwrap()
}

fn words(buffer: &Buffer) -> Vec<u32> {
    buffer
        .map_read()
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn the_gate_holds_the_device_until_opened() {
    let runtime = Runtime::from_env().unwrap();
    let gate = Gate::new(&runtime);
    let held = gate.submit().unwrap();
    assert!(!held.is_complete(), "the gate finished at once");
    // Far below the fail-safe, even calibrated under heavy load.
    assert!(
        !held.wait_timeout(Duration::from_millis(20)).unwrap(),
        "the gate ended while closed"
    );
    let opened = Instant::now();
    gate.open();
    held.wait().unwrap();
    // Printed for GPU runs: how promptly the kernel sees the flag.
    eprintln!(
        "gate: fail-safe of {} rounds; ended {:?} after opening",
        hrx_test_support::gate::calibrated_rounds(),
        opened.elapsed()
    );
    // An open gate stays open.
    gate.submit().unwrap().wait().unwrap();
    // Dropping a gate opens it.
    let gate = Gate::new(&runtime);
    let held = gate.submit().unwrap();
    assert!(!held.is_complete(), "the gate finished at once");
    drop(gate);
    held.wait().unwrap();
}

#[test]
fn submit_after_orders_work_across_graphs_on_the_device() {
    let runtime = Runtime::from_env().unwrap();
    let source = runtime
        .allocate(1 << 20, MemoryPlacement::GpuLocal)
        .unwrap();
    let target = runtime
        .allocate(1 << 20, MemoryPlacement::HostVisible)
        .unwrap();
    let gate = Gate::new(&runtime);
    let fill = fill_graph(&runtime, &source, 0x5EED);
    let mut copy = runtime.graph();
    copy.copy(target.view(), source.view()).unwrap();
    let copy = copy.prepare().unwrap();
    // The fill waits behind gated work; the copy must still see its result.
    let busy = gate.submit().unwrap();
    let filled = fill.submit_after(&[busy]).unwrap();
    let copied = copy.submit_after(&[filled]).unwrap();
    gate.open();
    copied.wait().unwrap();
    assert!(words(&target).iter().all(|&w| w == 0x5EED));
}

#[test]
fn completion_is_a_future_under_tokio() {
    let runtime = Runtime::from_env().unwrap();
    let buffer = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    let graph = fill_graph(&runtime, &buffer, 9);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let gate = Gate::new(&runtime);
    tokio.block_on(async {
        let busy = gate.submit().unwrap();
        let done = graph.submit_after(&[busy]).unwrap();
        // Opened while the futures are pending: they must be woken.
        gate.open_soon();
        let results = futures_join(vec![done.clone(), done.clone(), done]).await;
        assert!(results.into_iter().all(|r| r.is_ok()));
    });
    assert!(words(&buffer).iter().all(|&w| w == 9));
}

async fn futures_join(completions: Vec<Completion>) -> Vec<hrx_runtime::Result<()>> {
    let handles: Vec<_> = completions.into_iter().map(tokio::spawn).collect();
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.unwrap());
    }
    results
}

#[test]
fn wait_timeout_reports_pending_work_then_success() {
    let runtime = Runtime::from_env().unwrap();
    let gate = Gate::new(&runtime);
    let first = gate.submit().unwrap();
    let second = gate.submit().unwrap();
    assert!(
        !second.wait_timeout(Duration::ZERO).unwrap(),
        "work just queued is pending"
    );
    assert!(!second.is_complete());
    gate.open();
    assert!(second.wait_timeout(Duration::from_secs(60)).unwrap());
    assert!(first.is_complete() && second.is_complete());
    assert_eq!(second.result().unwrap().ok(), Some(()));
}

#[test]
fn a_spinning_wait_ends_when_the_work_does_not_when_the_spin_does() {
    let runtime = Runtime::from_env().unwrap();
    let buffer = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    let graph = fill_graph(&runtime, &buffer, 7);
    // Polled for far longer than the work takes: it returns at the end
    // of the work, not of the spin.
    let gate = Gate::new(&runtime);
    let done = graph.submit_after(&[gate.submit().unwrap()]).unwrap();
    let opened = Instant::now();
    gate.open_soon();
    done.wait_spinning(Duration::from_secs(600)).unwrap();
    assert!(opened.elapsed() < Duration::from_secs(60));
    assert!(words(&buffer).iter().all(|&w| w == 7));
    // Polled for less than the work takes: it sleeps for the rest.
    let gate = Gate::new(&runtime);
    let held = gate.submit().unwrap();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        gate.open();
    });
    held.wait_spinning(Duration::from_millis(1)).unwrap();
    assert!(held.is_complete());
    opener.join().unwrap();
}

#[test]
fn cancelling_queued_work_fails_it_and_its_dependents_after_draining() {
    let runtime = Runtime::from_env().unwrap();
    let buffer = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    let gate = Gate::new(&runtime);
    let busy = gate.submit().unwrap();
    let waiting = fill_graph(&runtime, &buffer, 1)
        .submit_after(std::slice::from_ref(&busy))
        .unwrap();
    waiting.cancel();
    assert!(
        !waiting.is_complete(),
        "a cancelled submission stays pending until drained"
    );
    let dependent = fill_graph(&runtime, &buffer, 2)
        .submit_after(std::slice::from_ref(&waiting))
        .unwrap();
    gate.open();
    assert!(matches!(waiting.wait(), Err(Error::Cancelled)));
    assert!(matches!(dependent.wait(), Err(Error::Cancelled)));
    assert!(
        busy.wait().is_ok(),
        "cancellation does not travel backwards"
    );
    // Once drained, a new dependent is refused at once and never runs.
    let late = fill_graph(&runtime, &buffer, 3)
        .submit_after(&[waiting])
        .unwrap();
    assert!(matches!(late.result(), Some(Err(Error::Cancelled))));
}

#[test]
fn cancelling_finished_work_changes_nothing_and_dropping_never_cancels() {
    let runtime = Runtime::from_env().unwrap();
    let buffer = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    let done = fill_graph(&runtime, &buffer, 4).submit().unwrap();
    done.wait().unwrap();
    done.cancel();
    assert!(done.wait().is_ok());
    // Drop every observer of pending work: it still runs.
    let gate = Gate::new(&runtime);
    let busy = gate.submit().unwrap();
    drop(
        fill_graph(&runtime, &buffer, 5)
            .submit_after(&[busy])
            .unwrap(),
    );
    let mut probe = runtime.graph();
    let copy = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    probe.copy(copy.view(), buffer.view()).unwrap();
    // Submission order plus a wait on everything before: use the timeline.
    let after = probe.prepare().unwrap().submit().unwrap();
    gate.open();
    after.wait().unwrap();
    buffer.map_read().unwrap();
    assert!(words(&buffer).iter().all(|&w| w == 5));
}

#[test]
fn an_injected_execution_failure_propagates_through_a_chain_and_disables_its_graph() {
    let runtime = faulty_runtime();
    let buffer = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    let failing = fill_graph(&runtime, &buffer, 1);
    let middle = fill_graph(&runtime, &buffer, 2);
    let last = fill_graph(&runtime, &buffer, 3);
    runtime.inject_fault(Fault::FailNextExecution).unwrap();
    let a = failing.submit().unwrap();
    let b = middle.submit_after(std::slice::from_ref(&a)).unwrap();
    let c = last.submit_after(std::slice::from_ref(&b)).unwrap();
    let cause = |r: hrx_runtime::Result<()>| match r {
        Err(Error::Execution { source }) => source,
        other => panic!("expected an execution failure, got {other:?}"),
    };
    let (ea, eb, ec) = (cause(a.wait()), cause(b.wait()), cause(c.wait()));
    assert!(
        std::sync::Arc::ptr_eq(&ea, &eb) && std::sync::Arc::ptr_eq(&eb, &ec),
        "one shared cause"
    );
    assert!(failing.usable().is_err(), "the failing graph is disabled");
    assert!(failing.submit().is_err());
    assert!(
        middle.usable().is_ok() && last.usable().is_ok(),
        "dependents stay usable"
    );
    assert!(middle.submit().unwrap().wait().is_ok());
}

/// A dependency that fails while its dependent is being submitted still
/// fails the dependent. Submitting reads each dependency's state more than
/// once; the failure must not fall between the reads. Timing-dependent, so
/// many rounds: each submits the dependent right behind a short failing
/// fill, which resolves at a random point of that submission.
#[test]
fn a_dependency_failing_during_submission_still_fails_the_dependent() {
    let runtime = faulty_runtime();
    let buffer = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    let dependent = fill_graph(&runtime, &buffer, 2);
    for round in 0..1500 {
        // A failing graph is disabled: a fresh one per round.
        let failing = fill_graph(&runtime, &buffer, 1);
        runtime.inject_fault(Fault::FailNextExecution).unwrap();
        let a = failing.submit().unwrap();
        let b = dependent.submit_after(std::slice::from_ref(&a)).unwrap();
        assert!(
            matches!(b.wait(), Err(Error::Execution { .. })),
            "round {round}: the dependent lost its dependency's failure"
        );
    }
}

#[test]
fn an_injected_submission_failure_is_reported_without_queueing() {
    let runtime = faulty_runtime();
    let buffer = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    let graph = fill_graph(&runtime, &buffer, 7);
    runtime.inject_fault(Fault::FailNextSubmission).unwrap();
    let failed = graph.submit().unwrap();
    assert!(matches!(
        failed.result(),
        Some(Err(Error::Execution { .. }))
    ));
    assert!(graph.usable().is_err());
    assert!(words(&buffer).iter().all(|&w| w == 0), "nothing ran");
    let dependent = fill_graph(&runtime, &buffer, 8)
        .submit_after(&[failed])
        .unwrap();
    assert!(matches!(
        dependent.result(),
        Some(Err(Error::Execution { .. }))
    ));
    assert!(
        words(&buffer).iter().all(|&w| w == 0),
        "work after a failure never runs"
    );
}

#[test]
fn failure_takes_precedence_over_cancellation() {
    let runtime = faulty_runtime();
    let buffer = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    let gate = Gate::new(&runtime);
    let busy = gate.submit().unwrap();
    runtime.inject_fault(Fault::FailNextExecution).unwrap();
    let failing = fill_graph(&runtime, &buffer, 1)
        .submit_after(&[busy])
        .unwrap();
    failing.cancel();
    gate.open();
    assert!(matches!(failing.wait(), Err(Error::Execution { .. })));
}

#[test]
fn fault_injection_is_refused_unless_enabled() {
    let runtime = Runtime::from_env().unwrap();
    assert!(runtime.inject_fault(Fault::LoseDevice).is_err());
}

#[test]
fn device_loss_fails_every_pending_completion_without_hanging() {
    let runtime = faulty_runtime();
    // Never opened: the loss must end every wait by itself (the gate's
    // drop opens it, so the device drains quickly at the end).
    let gate = Gate::new(&runtime);
    let pending: Vec<Completion> = (0..4).map(|_| gate.submit().unwrap()).collect();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let future = pending[3].clone();
    runtime.inject_fault(Fault::LoseDevice).unwrap();
    for completion in &pending {
        assert!(
            matches!(completion.wait(), Err(Error::DeviceLost(_))),
            "{completion:?}"
        );
    }
    assert!(matches!(tokio.block_on(future), Err(Error::DeviceLost(_))));
    assert!(matches!(gate.submit(), Err(Error::DeviceLost(_))));
}

#[test]
fn completions_of_another_domain_are_rejected_before_queueing() {
    let a = Runtime::from_env().unwrap();
    let b = Runtime::from_env().unwrap();
    let buffer = a.allocate(64, MemoryPlacement::HostVisible).unwrap();
    let foreign = {
        let other = b.allocate(64, MemoryPlacement::HostVisible).unwrap();
        fill_graph(&b, &other, 1).submit().unwrap()
    };
    assert!(foreign.validate_runtime(&a).is_err());
    assert!(foreign.validate_runtime(&b).is_ok());
    assert!(Completion::ready().validate_runtime(&a).is_ok());
    let graph = fill_graph(&a, &buffer, 2);
    assert!(graph.submit_after(&[foreign]).is_err());
    assert!(words(&buffer).iter().all(|&w| w == 0));
}

#[test]
fn mapping_waits_for_device_writes_or_reports_busy() {
    let runtime = Runtime::from_env().unwrap();
    let buffer = runtime
        .allocate(1 << 20, MemoryPlacement::HostVisible)
        .unwrap();
    let gate = Gate::new(&runtime);
    let busy = gate.submit().unwrap();
    let fill = fill_graph(&runtime, &buffer, 0xABCD)
        .submit_after(&[busy])
        .unwrap();
    assert!(matches!(buffer.try_map_read(), Err(Error::Busy(_))));
    assert!(matches!(buffer.try_map_write(), Err(Error::Busy(_))));
    gate.open_soon();
    // The blocking form waits for the fill, then sees its result.
    assert!(words(&buffer).iter().all(|&w| w == 0xABCD));
    assert!(fill.is_complete());
}

#[test]
fn timed_mappings_give_up_with_busy_instead_of_hanging() {
    let runtime = Runtime::new().unwrap();
    let buffer = runtime
        .allocate(1 << 16, MemoryPlacement::HostVisible)
        .unwrap();
    let gate = Gate::new(&runtime);
    let busy = gate.submit().unwrap();
    let fill = fill_graph(&runtime, &buffer, 0x5A5A)
        .submit_after(&[busy])
        .unwrap();
    // The device holds the memory (as a hung device would): each timed
    // form returns Busy after about its timeout.
    let view = buffer.view();
    let started = Instant::now();
    assert!(matches!(
        view.map_read_timeout(Duration::from_millis(30)),
        Err(Error::Busy(_))
    ));
    assert!(matches!(
        view.map_write_timeout(Duration::from_millis(30)),
        Err(Error::Busy(_))
    ));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(60), "{waited:?}");
    assert!(!fill.is_complete());
    // Once the device lets go, a timed mapping succeeds.
    gate.open();
    let mapped = view.map_read_timeout(Duration::from_secs(30)).unwrap();
    assert!(mapped.chunks(4).all(|w| w == 0x5A5Au32.to_le_bytes()));
}

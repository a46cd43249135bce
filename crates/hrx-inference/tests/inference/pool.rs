//! PreparedModel and its slots: preparation checks, backpressure, retained
//! outputs, dependent submissions, staging reuse and readback checks.

use crate::common::*;
use hrx_core::Error;
use hrx_inference::{InferenceGraph, PreparedModel};
use hrx_runtime::MemoryPlacement::{self, GpuLocal, HostVisible};
use hrx_test_support::gate::Gate;
use std::time::Duration;

const N: usize = 100;

fn input(seed: u32) -> Vec<u32> {
    (0..N as u32)
        .map(|i| i.wrapping_mul(seed).wrapping_add(seed))
        .collect()
}

/// Submit host bytes and read the words back.
fn run(model: &PreparedModel, x: &[u32]) -> Vec<u32> {
    let readback = model.submit_host(&[&bytes(x)]).unwrap().download().unwrap();
    let mut out = vec![0u8; x.len() * 4];
    readback.read_into(&mut [&mut out]).unwrap();
    words(&out)
}

#[test]
fn host_round_trips_match_the_reference_for_both_placements() {
    for placement in [GpuLocal, HostVisible] {
        let context = context();
        let model = affine_model(&context, 2, N, placement);
        assert_eq!(model.capacity(), 2);
        for seed in 1..6 {
            assert_eq!(run(&model, &input(seed)), affine_reference(&input(seed)));
        }
        let readback = model
            .submit_host(&[&bytes(&input(9))])
            .unwrap()
            .download()
            .unwrap();
        assert_eq!(
            words(&readback.wait().unwrap()[0]),
            affine_reference(&input(9))
        );
        assert!(model.is_idle());
    }
}

#[test]
fn capacity_zero_is_rejected() {
    let context = context();
    let build = affine_builder(&context, N, GpuLocal);
    assert!(PreparedModel::prepare(&context, 0, build).is_err());
}

#[test]
fn slots_never_share_writable_io() {
    let context = context();
    let mut build = affine_builder(&context, N, GpuLocal);
    let shared = build(&context).unwrap();
    let (x, y) = (shared.inputs[0].clone(), shared.outputs[0].clone());
    let result = PreparedModel::prepare(&context, 2, |context| {
        let own = build(context)?;
        // Every slot reuses one input: the second slot overlaps the first.
        Ok(InferenceGraph {
            inputs: vec![x.clone()],
            outputs: own.outputs,
            graph: own.graph,
        })
    });
    assert!(result.is_err());
    // Overlap through slices of one scratch allocation is caught too.
    let scratch = context.allocate(words_desc(2 * N)).unwrap();
    let mut slot = 0;
    let result = PreparedModel::prepare(&context, 2, |context| {
        let own = build(context)?;
        let view = binding(&scratch)?.slice(slot * 4..slot * 4 + N * 4)?;
        slot += 1;
        Ok(InferenceGraph {
            inputs: own.inputs,
            outputs: vec![context.tensor(words_desc(N), view, y.completion().clone())?],
            graph: own.graph,
        })
    });
    assert!(result.is_err());
    // A builder that allocates per slot is fine.
    assert!(PreparedModel::prepare(&context, 3, build).is_ok());
}

#[test]
fn slot_descriptors_must_be_equal() {
    let context = context();
    let mut small = affine_builder(&context, N, GpuLocal);
    let mut large = affine_builder(&context, 2 * N, GpuLocal);
    let mut first = true;
    let result = PreparedModel::prepare(&context, 2, |context| {
        let slot = if first {
            small(context)
        } else {
            large(context)
        };
        first = false;
        slot
    });
    assert!(matches!(result, Err(Error::Message(m)) if m.contains("descriptors")));
}

#[test]
fn builder_failures_and_foreign_resources_are_reported() {
    let context = context();
    let result = PreparedModel::prepare(&context, 2, |_| Err(Error::msg("no weights")));
    assert!(matches!(result, Err(Error::Message(m)) if m == "no weights"));
    let other = crate::common::context();
    let mut foreign = affine_builder(&other, N, GpuLocal);
    assert!(PreparedModel::prepare(&context, 1, |_| foreign(&other)).is_err());
}

#[test]
fn busy_when_every_slot_is_retained_or_running() {
    let context = context();
    let model = affine_model(&context, 2, N, GpuLocal);
    let held = model.try_acquire().unwrap();
    // The second slot runs behind gated work; its handle is dropped.
    let gate = Gate::new(context.runtime());
    let busy = gate.submit().unwrap();
    let x = produced_after(&context, &input(3), &busy);
    drop(model.submit(&[x]).unwrap());
    assert!(!busy.is_complete());
    assert!(matches!(model.try_acquire(), Err(Error::Busy(_))));
    assert!(matches!(
        model.submit_host(&[&bytes(&input(1))]),
        Err(Error::Busy(_))
    ));
    assert!(!model.is_idle());
    // Once drained, the running slot serves again; the held one stays held.
    gate.open();
    busy.wait().unwrap();
    let next = model.acquire_blocking().unwrap();
    assert!(matches!(model.try_acquire(), Err(Error::Busy(_))));
    drop((held, next));
    let _wait_for_drain = model.acquire_blocking().unwrap();
}

#[test]
fn a_timed_acquire_gives_up_and_leaves_the_queue() {
    let context = context();
    let model = affine_model(&context, 2, N, GpuLocal);
    // One slot held (a leaked lease), one draining behind a hung device.
    let held = model.try_acquire().unwrap();
    let gate = Gate::new(context.runtime());
    let busy = gate.submit().unwrap();
    let x = produced_after(&context, &input(3), &busy);
    drop(model.submit(&[x]).unwrap());
    let started = std::time::Instant::now();
    let result = model.acquire_blocking_timeout(Duration::from_millis(50));
    assert!(matches!(result, Err(Error::Busy(_))), "{result:?}");
    assert!(started.elapsed() >= Duration::from_millis(50));
    // It left the queue: the next request is served once a slot frees.
    drop(held);
    let next = model
        .acquire_blocking_timeout(Duration::from_secs(30))
        .unwrap();
    gate.open();
    busy.wait().unwrap();
    drop(next);
}

#[test]
fn retained_outputs_keep_their_slot() {
    let context = context();
    let model = affine_model(&context, 1, N, GpuLocal);
    let outputs = model
        .submit_host(&[&bytes(&input(2))])
        .unwrap()
        .wait()
        .unwrap();
    assert!(matches!(model.try_acquire(), Err(Error::Busy(_))));
    let copy = outputs[0].clone();
    drop(outputs);
    assert!(
        matches!(model.try_acquire(), Err(Error::Busy(_))),
        "a clone still holds it"
    );
    assert_eq!(read(&context, &copy).unwrap(), affine_reference(&input(2)));
    drop(copy);
    assert!(model.is_idle());
    assert!(model.try_acquire().is_ok());
}

#[test]
fn outputs_feed_dependent_submissions_before_completion() {
    let context = context();
    let model = affine_model(&context, 2, N, GpuLocal);
    let gate = Gate::new(context.runtime());
    let first = model
        .submit(&[produced_after(&context, &input(5), &gate.submit().unwrap())])
        .unwrap();
    assert!(!first.completion().is_complete());
    let second = model.submit(first.outputs()).unwrap();
    assert!(!second.completion().is_complete());
    drop(first);
    gate.open();
    let result = words(&second.download().unwrap().wait().unwrap()[0]);
    assert_eq!(result, affine_reference(&affine_reference(&input(5))));
}

#[test]
fn storage_read_by_later_work_keeps_its_slot_until_that_work_drains() {
    let context = context();
    let model = affine_model(&context, 1, N, GpuLocal);
    let outputs = model
        .submit_host(&[&bytes(&input(4))])
        .unwrap()
        .wait()
        .unwrap();
    // A copy out of the retained output, queued behind gated work.
    let gate = Gate::new(context.runtime());
    let mut destination = produced_after(&context, &vec![0; N], &gate.submit().unwrap());
    context.copy_into(&mut destination, 0, &outputs[0]).unwrap();
    drop(outputs);
    assert!(
        matches!(model.try_acquire(), Err(Error::Busy(_))),
        "the slot is reused only after the copy read its output"
    );
    gate.open();
    assert_eq!(
        read(&context, &destination).unwrap(),
        affine_reference(&input(4))
    );
    assert!(model.acquire_blocking().is_ok());
}

#[test]
fn device_submission_checks_inputs_and_orders_after_producers() {
    let context = context();
    let model = affine_model(&context, 1, N, GpuLocal);
    let wrong = context
        .upload(words_desc(N - 1), &bytes(&input(1)[1..]))
        .unwrap();
    assert!(model.submit(&[wrong]).is_err());
    assert!(model.submit(&[]).is_err());
    let foreign_context = crate::common::context();
    let foreign = foreign_context
        .upload(words_desc(N), &bytes(&input(1)))
        .unwrap();
    assert!(model.submit(&[foreign]).is_err());
    assert!(model.is_idle(), "rejected submissions release their slot");
    let gate = Gate::new(context.runtime());
    let x = produced_after(&context, &input(6), &gate.submit().unwrap());
    let inference = model.submit(&[x]).unwrap();
    gate.open();
    let outputs = inference.wait().unwrap();
    assert_eq!(
        read(&context, &outputs[0]).unwrap(),
        affine_reference(&input(6))
    );
}

#[test]
fn a_failed_input_fails_the_inference_but_not_the_slot() {
    let context = faulty_context();
    let model = affine_model(&context, 1, N, GpuLocal);
    let x = failed_tensor(&context, &input(1));
    let inference = model.submit(&[x]).unwrap();
    assert!(matches!(inference.wait(), Err(Error::Execution { .. })));
    assert_eq!(run(&model, &input(8)), affine_reference(&input(8)));
}

#[test]
fn cancellation_does_not_poison_a_slot() {
    let context = context();
    let model = affine_model(&context, 1, N, GpuLocal);
    let gate = Gate::new(context.runtime());
    let x = produced_after(&context, &input(3), &gate.submit().unwrap());
    let inference = model.submit(&[x]).unwrap();
    inference.completion().cancel();
    gate.open();
    assert!(matches!(inference.wait(), Err(Error::Cancelled)));
    assert_eq!(run(&model, &input(4)), affine_reference(&input(4)));
    // A cancelled readback, too.
    let readback = model
        .submit_host(&[&bytes(&input(5))])
        .unwrap()
        .download()
        .unwrap();
    readback.completion().cancel();
    let _ = readback.wait();
    assert_eq!(run(&model, &input(6)), affine_reference(&input(6)));
    assert!(model.is_idle());
}

#[test]
fn host_staging_is_created_once_per_slot_and_reused() {
    for placement in [GpuLocal, HostVisible] {
        let context = context();
        let model = affine_model(&context, 2, N, placement);
        let prepared = context.runtime().memory_stats().total_allocations;
        // Warm both slots: hold one while the other runs.
        let first = model.submit_host(&[&bytes(&input(1))]).unwrap();
        let second = model.submit_host(&[&bytes(&input(2))]).unwrap();
        let (a, b) = (first.download().unwrap(), second.download().unwrap());
        drop((a.wait().unwrap(), b.wait().unwrap()));
        let warm = context.runtime().memory_stats().total_allocations;
        assert!(
            warm - prepared <= 4,
            "at most one staging per slot IO tensor"
        );
        for seed in 0..40 {
            assert_eq!(run(&model, &input(seed)), affine_reference(&input(seed)));
        }
        assert_eq!(
            context.runtime().memory_stats().total_allocations,
            warm,
            "staging is reused ({placement:?})"
        );
    }
}

#[test]
fn submit_host_checks_input_sizes_and_releases_the_slot() {
    let context = context();
    let model = affine_model(&context, 1, N, GpuLocal);
    assert!(model.submit_host(&[]).is_err());
    assert!(model.submit_host(&[&[0; 3]]).is_err());
    assert!(
        model
            .submit_host(&[&bytes(&input(1)), &bytes(&input(1))])
            .is_err()
    );
    assert!(model.is_idle());
    assert_eq!(run(&model, &input(1)), affine_reference(&input(1)));
}

#[test]
fn submit_host_with_a_failing_callback_releases_the_slot_without_executing() {
    let context = context();
    let model = accumulate_model(&context, 1, N);
    let ones = vec![1u32; N];
    let first = model
        .submit_host(&[&bytes(&ones)])
        .unwrap()
        .download()
        .unwrap();
    assert_eq!(words(&first.wait().unwrap()[0]), ones);
    let mut calls = 0;
    let failed = model
        .try_acquire()
        .unwrap()
        .submit_host_with(|index, staging| {
            calls += 1;
            assert_eq!((index, staging.len()), (0, N * 4));
            staging.copy_from_slice(&bytes(&vec![100; N]));
            Err(Error::msg("request aborted"))
        });
    assert!(matches!(failed, Err(Error::Message(m)) if m == "request aborted"));
    assert_eq!(calls, 1);
    assert!(model.is_idle(), "the slot was released");
    // Had the graph run, the accumulator would hold 101.
    let next = model
        .try_acquire()
        .unwrap()
        .submit_host_with(|_, staging| {
            staging.copy_from_slice(&bytes(&vec![2; N]));
            Ok(())
        })
        .unwrap();
    assert_eq!(
        words(&next.download().unwrap().wait().unwrap()[0]),
        vec![3; N]
    );
}

#[test]
fn read_into_checks_sizes() {
    let context = context();
    let model = affine_model(&context, 1, N, GpuLocal);
    let submit = || {
        let slot = model.acquire_blocking().unwrap();
        slot.submit_host(&[&bytes(&input(1))])
            .unwrap()
            .download()
            .unwrap()
    };
    let mut short = vec![0u8; N * 4 - 4];
    assert!(submit().read_into(&mut [&mut short]).is_err());
    assert!(submit().read_into(&mut []).is_err());
    let (mut a, mut b) = (vec![0u8; N * 4], vec![0u8; N * 4]);
    assert!(submit().read_into(&mut [&mut a, &mut b]).is_err());
    submit().read_into(&mut [&mut a]).unwrap();
    assert_eq!(words(&a), affine_reference(&input(1)));
}

#[test]
fn acquire_blocking_waits_for_a_release_from_another_thread() {
    let context = context();
    let model = affine_model(&context, 1, N, GpuLocal);
    let held = model.try_acquire().unwrap();
    let waiter = {
        let model = model.clone();
        std::thread::spawn(move || model.acquire_blocking().map(drop))
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiter.is_finished());
    drop(held);
    waiter.join().unwrap().unwrap();
}

#[test]
fn async_acquire_inference_and_readback() {
    let context = context();
    let model = affine_model(&context, 1, N, GpuLocal);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    tokio.block_on(async {
        // Woken by a release.
        let held = model.acquire().await.unwrap();
        let waiter = {
            let model = model.clone();
            tokio::spawn(async move { model.acquire().await.map(drop) })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished());
        drop(held);
        waiter.await.unwrap().unwrap();
        // Woken by a finished inference.
        let gate = Gate::new(context.runtime());
        let x = produced_after(&context, &input(2), &gate.submit().unwrap());
        let inference = model.submit(&[x]).unwrap();
        gate.open_soon();
        let outputs = inference.await.unwrap();
        assert_eq!(
            read(&context, &outputs[0]).unwrap(),
            affine_reference(&input(2))
        );
        drop(outputs);
        // Woken by a draining slot.
        let gate = Gate::new(context.runtime());
        let x = produced_after(&context, &input(3), &gate.submit().unwrap());
        drop(model.submit(&[x]).unwrap());
        gate.open_soon();
        let slot = model.acquire().await.unwrap();
        let readback = slot
            .submit_host(&[&bytes(&input(4))])
            .unwrap()
            .download()
            .unwrap();
        assert_eq!(
            words(&readback.await.unwrap()[0]),
            affine_reference(&input(4))
        );
    });
    assert!(model.is_idle());
}

#[allow(dead_code)]
fn placements() -> [MemoryPlacement; 2] {
    [GpuLocal, HostVisible]
}

#[test]
fn serving_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<hrx_inference::ModelContext>();
    check::<hrx_inference::PreparedModel>();
    check::<hrx_inference::ModelSlot>();
    check::<hrx_inference::Inference>();
    check::<hrx_inference::InferenceReadback>();
    check::<hrx_inference::TensorReadback>();
}

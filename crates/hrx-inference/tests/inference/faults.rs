//! Native failures (injected): only the failing slot is disabled, healthy
//! slots keep serving, and the error surfaces once no slot is usable.

use crate::common::*;
use hrx_core::Error;
use hrx_runtime::{Fault, MemoryPlacement::HostVisible};

const N: usize = 64;

fn serve(model: &hrx_inference::PreparedModel, seed: u32) -> hrx_core::Result<Vec<u32>> {
    let x: Vec<u32> = (0..N as u32).map(|i| i ^ seed).collect();
    let out = words(&model.submit_host(&[&bytes(&x)])?.download()?.wait()?[0]);
    assert_eq!(out, affine_reference(&x));
    Ok(out)
}

#[test]
fn a_native_failure_disables_only_its_slot() {
    // Host-visible IO: the slot's graph is the only submission per request.
    let context = faulty_context();
    let model = affine_model(&context, 2, N, HostVisible);
    serve(&model, 1).unwrap();
    context
        .runtime()
        .inject_fault(Fault::FailNextExecution)
        .unwrap();
    let failed = model.submit_host(&[&bytes(&[0; N])]).unwrap();
    assert!(matches!(failed.wait(), Err(Error::Execution { .. })));
    // The healthy slot keeps serving, alone: with it reserved the pool is
    // busy, not failed.
    for seed in 2..10 {
        serve(&model, seed).unwrap();
    }
    let only = model.try_acquire().unwrap();
    assert!(matches!(model.try_acquire(), Err(Error::Busy(_))));
    drop(only);
    // Fail the last healthy slot: now the failure itself surfaces.
    context
        .runtime()
        .inject_fault(Fault::FailNextSubmission)
        .unwrap();
    let failed = model.submit_host(&[&bytes(&[0; N])]).unwrap();
    assert!(matches!(failed.wait(), Err(Error::Execution { .. })));
    assert!(matches!(model.try_acquire(), Err(Error::Execution { .. })));
    assert!(matches!(
        model.acquire_blocking(),
        Err(Error::Execution { .. })
    ));
    let tokio = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert!(matches!(
        tokio.block_on(model.acquire()),
        Err(Error::Execution { .. })
    ));
    assert!(matches!(
        model.submit_host(&[&bytes(&[0; N])]),
        Err(Error::Execution { .. })
    ));
    assert!(model.is_idle());
}

#[test]
fn the_error_waits_until_every_slot_is_released() {
    let context = faulty_context();
    let model = affine_model(&context, 2, N, HostVisible);
    let held = model.try_acquire().unwrap();
    context
        .runtime()
        .inject_fault(Fault::FailNextExecution)
        .unwrap();
    let failed = model.submit_host(&[&bytes(&[0; N])]).unwrap();
    assert!(failed.wait().is_err());
    // One slot is failed, the other is held: that is backpressure.
    assert!(matches!(model.try_acquire(), Err(Error::Busy(_))));
    let waiter = {
        let model = model.clone();
        std::thread::spawn(move || model.acquire_blocking().map(drop))
    };
    std::thread::sleep(std::time::Duration::from_millis(30));
    drop(held);
    waiter.join().unwrap().unwrap();
    serve(&model, 3).unwrap();
}

#[test]
fn a_failed_transfer_disables_its_slot_too() {
    let context = faulty_context();
    let model = affine_model(&context, 2, N, hrx_runtime::MemoryPlacement::GpuLocal);
    serve(&model, 1).unwrap();
    // The first submission of a request is its upload when staging exists,
    // else the graph; either way, the slot that failed is disabled.
    context
        .runtime()
        .inject_fault(Fault::FailNextSubmission)
        .unwrap();
    let failed = model.submit_host(&[&bytes(&[0; N])]).unwrap();
    assert!(failed.wait().is_err());
    for seed in 2..6 {
        serve(&model, seed).unwrap();
    }
    let healthy = model.try_acquire().unwrap();
    assert!(matches!(model.try_acquire(), Err(Error::Busy(_))));
    drop(healthy);
}

//! ModelContext: lazy hardware, identity checks, uploads, device-ordered
//! copies and concatenation, and downloads without host waits.

use crate::common::*;
use hrx_core::Error;
use hrx_inference::ModelContext;
use hrx_runtime::{Completion, Fault, MemoryPlacement, RuntimeOptions};
use hrx_tensor::{DType, TensorDesc};
use hrx_test_support::gate::Gate;

fn desc(dtype: DType, shape: &[usize]) -> TensorDesc {
    TensorDesc::new(dtype, shape.to_vec()).unwrap()
}

#[test]
fn empty_tensors_need_no_device_and_keep_context_identity() {
    let a = ModelContext::new(RuntimeOptions::from_env().unwrap()).unwrap();
    let b = ModelContext::new(RuntimeOptions::from_env().unwrap()).unwrap();
    let tensor = a.upload(desc(DType::F32, &[0]), &[]).unwrap();
    assert!(tensor.binding().is_none());
    assert!(a.download(&tensor).unwrap().wait().unwrap().is_empty());
    assert!(b.download(&tensor).is_err());
    assert!(tensor.view(0, desc(DType::F32, &[])).is_err());
    let other = a.allocate(desc(DType::U32, &[4, 0])).unwrap();
    assert!(other.binding().is_none());
    let joined = a.concatenate(&[tensor.clone(), tensor]).unwrap();
    assert!(joined.binding().is_none());
    assert!(
        !a.runtime().is_open() && !b.runtime().is_open(),
        "no device was opened"
    );
}

#[test]
fn tensors_of_another_context_are_rejected_before_any_work() {
    let a = context();
    let b = context();
    let mine = a.upload(words_desc(4), &bytes(&[1, 2, 3, 4])).unwrap();
    let mut theirs = b.upload(words_desc(4), &bytes(&[5, 6, 7, 8])).unwrap();
    assert!(a.validate(&mine).is_ok());
    assert!(a.validate(&theirs).is_err());
    assert!(a.download(&theirs).is_err());
    assert!(a.copy_into(&mut theirs, 0, &mine).is_err());
    let mut target = a.allocate(words_desc(4)).unwrap();
    assert!(a.copy_into(&mut target, 0, &theirs).is_err());
    assert!(a.concatenate(&[mine.clone(), theirs.clone()]).is_err());
    // Foreign storage and foreign producers cannot be wrapped either.
    let foreign_view = binding(&theirs).unwrap();
    assert!(
        a.tensor(words_desc(4), foreign_view, Completion::ready())
            .is_err()
    );
    let own_view = binding(&mine).unwrap();
    assert!(
        a.tensor(words_desc(4), own_view, theirs.completion().clone())
            .is_err()
    );
    // Nothing was queued on the rejected paths: the tensors are intact.
    assert_eq!(read(&b, &theirs).unwrap(), [5, 6, 7, 8]);
    assert_eq!(read(&a, &target).unwrap(), [0, 0, 0, 0]);
}

#[test]
fn wrapping_storage_checks_extent_and_alignment() {
    let context = context();
    let buffer = context
        .runtime()
        .allocate(64, MemoryPlacement::HostVisible)
        .unwrap();
    let view = buffer.view();
    assert!(
        context
            .tensor(words_desc(17), view.clone(), Completion::ready())
            .is_err()
    );
    let odd = view.slice(2..34).unwrap();
    assert!(
        context
            .tensor(words_desc(4), odd, Completion::ready())
            .is_err()
    );
    let tensor = context
        .tensor(words_desc(4), view.clone(), Completion::ready())
        .unwrap();
    assert_eq!(
        binding(&tensor).unwrap().len(),
        16,
        "trimmed to the descriptor"
    );
    view.map_write().unwrap()[..16].copy_from_slice(&bytes(&[9, 8, 7, 6]));
    assert_eq!(read(&context, &tensor).unwrap(), [9, 8, 7, 6]);
}

#[test]
fn upload_copies_the_source_before_returning() {
    let context = context();
    let mut source = bytes(&[10, 20, 30, 40]);
    let tensor = context.upload(words_desc(4), &source).unwrap();
    // The caller may change or free its source at once.
    source.fill(0xFF);
    drop(source);
    assert_eq!(read(&context, &tensor).unwrap(), [10, 20, 30, 40]);
    assert!(context.upload(words_desc(4), &[0; 15]).is_err());
}

#[test]
fn copy_into_runs_after_both_producers() {
    let context = context();
    let gate = Gate::new(context.runtime());
    // The destination's producer fills it after gated work; the copy must
    // land after that fill, not be overwritten by it.
    let mut destination = produced_after(&context, &[7; 8], &gate.submit().unwrap());
    // The source, too, is produced only after gated work.
    let source = produced_after(&context, &[1, 2, 3], &gate.submit().unwrap());
    assert!(!source.completion().is_complete());
    context.copy_into(&mut destination, 8, &source).unwrap();
    gate.open();
    assert_eq!(
        read(&context, &destination).unwrap(),
        [7, 7, 1, 2, 3, 7, 7, 7]
    );
}

#[test]
fn copy_into_carries_earlier_failures_forward() {
    let context = faulty_context();
    let source = context.upload(words_desc(2), &bytes(&[1, 2])).unwrap();
    source.completion().wait().unwrap();
    // A failed write to the destination.
    let mut destination = failed_tensor(&context, &[5; 4]);
    context.copy_into(&mut destination, 0, &source).unwrap();
    assert!(matches!(
        destination.completion().wait(),
        Err(Error::Execution { .. })
    ));
    assert!(context.download(&destination).unwrap().wait().is_err());
    // A failed write to the source.
    let mut healthy = context.allocate(words_desc(4)).unwrap();
    let failed_source = failed_tensor(&context, &[3, 4]);
    context.copy_into(&mut healthy, 4, &failed_source).unwrap();
    assert!(matches!(
        healthy.completion().wait(),
        Err(Error::Execution { .. })
    ));
}

#[test]
fn copy_into_rejects_bad_ranges_types_and_alignment() {
    let context = context();
    let mut destination = context.allocate(words_desc(4)).unwrap();
    let source = context.upload(words_desc(2), &bytes(&[1, 2])).unwrap();
    assert!(context.copy_into(&mut destination, 12, &source).is_err());
    assert!(
        context
            .copy_into(&mut destination, usize::MAX, &source)
            .is_err()
    );
    assert!(context.copy_into(&mut destination, 2, &source).is_err());
    let floats = context.upload(desc(DType::F32, &[1]), &[0; 4]).unwrap();
    assert!(context.copy_into(&mut destination, 0, &floats).is_err());
    // An empty source moves nothing but still reports its producer.
    let empty = context.allocate(words_desc(0)).unwrap();
    context.copy_into(&mut destination, 16, &empty).unwrap();
}

#[test]
fn concatenate_joins_along_the_first_axis() {
    let context = context();
    let a = context
        .upload(desc(DType::U32, &[2, 3]), &bytes(&[1, 2, 3, 4, 5, 6]))
        .unwrap();
    let empty = context.allocate(desc(DType::U32, &[0, 3])).unwrap();
    let b = context
        .upload(desc(DType::U32, &[1, 3]), &bytes(&[7, 8, 9]))
        .unwrap();
    let joined = context.concatenate(&[a, empty, b]).unwrap();
    assert_eq!(joined.desc().shape(), [3, 3]);
    assert_eq!(
        read(&context, &joined).unwrap(),
        (1..=9).collect::<Vec<u32>>()
    );
}

#[test]
fn concatenate_rejects_bad_inputs() {
    let context = context();
    assert!(context.concatenate(&[]).is_err());
    let scalar = context.upload(desc(DType::U32, &[]), &[0; 4]).unwrap();
    assert!(context.concatenate(&[scalar]).is_err());
    let a = context.allocate(desc(DType::U32, &[1, 3])).unwrap();
    let b = context.allocate(desc(DType::U32, &[1, 2])).unwrap();
    let c = context.allocate(desc(DType::F32, &[1, 3])).unwrap();
    let d = context.allocate(desc(DType::U32, &[3])).unwrap();
    assert!(context.concatenate(&[a.clone(), b]).is_err());
    assert!(context.concatenate(&[a.clone(), c]).is_err());
    assert!(context.concatenate(&[a, d]).is_err());
}

#[test]
fn concatenate_keeps_the_producers_of_empty_inputs() {
    let context = faulty_context();
    let real = context.upload(words_desc(2), &bytes(&[1, 2])).unwrap();
    // An empty input whose producer fails: the result must fail too.
    context
        .runtime()
        .inject_fault(Fault::FailNextExecution)
        .unwrap();
    let gate = Gate::new(context.runtime());
    let failing = gate.submit().unwrap();
    let view = binding(&real).unwrap();
    let empty = context
        .tensor(words_desc(0), view.clone(), failing)
        .unwrap();
    assert!(empty.binding().is_none());
    let joined = context.concatenate(&[real.clone(), empty.clone()]).unwrap();
    gate.open();
    assert!(matches!(
        joined.completion().wait(),
        Err(Error::Execution { .. })
    ));
    // Only empty inputs: no device work, but the call reports the failure.
    assert!(context.concatenate(&[empty]).is_err());
    // Only empty inputs with pending producers: success is observable only
    // once they have completed.
    let gate = Gate::new(context.runtime());
    let pending = gate.submit().unwrap();
    let empty = context
        .tensor(words_desc(0), view, pending.clone())
        .unwrap();
    assert!(!pending.is_complete());
    // Opened while the call below waits for the producer.
    gate.open_soon();
    let joined = context.concatenate(&[empty]).unwrap();
    assert!(
        pending.is_complete(),
        "the producer finished before the result"
    );
    assert!(joined.completion().is_complete());
}

#[test]
fn download_queues_without_waiting_on_the_host() {
    let context = context();
    let gate = Gate::new(context.runtime());
    let tensor = produced_after(&context, &[4, 5, 6], &gate.submit().unwrap());
    let readback = context.download(&tensor).unwrap();
    assert!(
        !readback.completion().is_complete(),
        "download returned before its producer finished"
    );
    gate.open();
    assert_eq!(words(&readback.wait().unwrap()), [4, 5, 6]);
    // And as a future, woken once the gate opens.
    let gate = Gate::new(context.runtime());
    let tensor = produced_after(&context, &[8, 9], &gate.submit().unwrap());
    let readback = context.download(&tensor).unwrap();
    gate.open_soon();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(words(&runtime.block_on(readback).unwrap()), [8, 9]);
}

#[test]
fn clones_share_one_operator_library() {
    let context = context();
    assert!(!context.runtime().is_open());
    assert_eq!(context.ops().compiled_kernels(), 0);
    let clone = context.clone();
    let desc = TensorDesc::new(DType::F32, vec![4]).unwrap();
    let x = context.upload(desc.clone(), &[0u8; 16]).unwrap();
    let add = |ops: &hrx_tensor::Ops| {
        ops.binary(hrx_tensor::ops::BinaryOp::Add, &x, &x)
            .unwrap()
            .completion()
            .wait()
            .unwrap();
    };
    add(context.ops());
    let compiled = context.ops().compiled_kernels();
    assert!(compiled > 0);
    // The clone's library is the same one: nothing compiles again.
    add(clone.ops());
    assert_eq!(clone.ops().compiled_kernels(), compiled);
    // Another context is another domain, with a library of its own.
    let other = ModelContext::new(RuntimeOptions::from_env().unwrap()).unwrap();
    assert_eq!(other.ops().compiled_kernels(), 0);
}

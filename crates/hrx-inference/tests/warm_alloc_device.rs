// Its own test binary: it counts every heap allocation in the process.
//! The warm path with device inputs makes no heap allocation either:
//! `submit` of device tensors (copied into the slot by its copy batch) ->
//! `download` -> `read_into`, under a counting global allocator.

#[path = "inference/common.rs"]
mod common;

use common::*;
use hrx_runtime::MemoryPlacement;
use hrx_test_support::counting::{self, Counting};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const N: usize = 256;

/// One test only: the counter is process-wide.
#[test]
fn submit_of_device_tensors_allocates_nothing_once_warm() {
    let context = context();
    let model = affine_model(&context, 2, N, MemoryPlacement::GpuLocal);
    let hosts: Vec<Vec<u32>> = (0..4u32)
        .map(|seed| (0..N as u32).map(|i| i * seed + 7).collect())
        .collect();
    let inputs: Vec<_> = hosts
        .iter()
        .map(|x| context.upload(words_desc(N), &bytes(x)).unwrap())
        .collect();
    let expected: Vec<Vec<u8>> = hosts.iter().map(|x| bytes(&affine_reference(x))).collect();
    let mut out = vec![0u8; N * 4];
    let serve = |i: usize, out: &mut Vec<u8>| {
        let readback = model
            .submit(std::slice::from_ref(&inputs[i % 4]))
            .unwrap()
            .download()
            .unwrap();
        readback.read_into(&mut [out.as_mut_slice()]).unwrap();
    };
    for i in 0..64 {
        serve(i, &mut out);
        assert_eq!(out, expected[i % 4], "warm-up request {i}");
    }
    let mut wrong = 0;
    let allocations = counting::allocations_during(|| {
        for i in 0..500 {
            serve(i, &mut out);
            wrong += usize::from(out != expected[i % 4]);
        }
    });
    assert_eq!(wrong, 0, "results are right");
    assert_eq!(
        allocations, 0,
        "heap allocations on the warm device-input path"
    );
}

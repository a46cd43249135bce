// Its own test binary: it counts every heap allocation in the process.
//! The warm serving path makes no heap allocation: a counting global
//! allocator watches every Rust allocation in the process (the runtime's
//! watcher thread included) while warm requests go through
//! `submit_host` -> `download` -> `read_into`.

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
fn submit_host_then_read_into_allocates_nothing_once_warm() {
    for placement in [MemoryPlacement::GpuLocal, MemoryPlacement::HostVisible] {
        let context = context();
        let model = affine_model(&context, 2, N, placement);
        let inputs: Vec<Vec<u8>> = (0..4u32)
            .map(|seed| bytes(&(0..N as u32).map(|i| i * seed + 1).collect::<Vec<_>>()))
            .collect();
        let expected: Vec<Vec<u8>> = inputs
            .iter()
            .map(|x| bytes(&affine_reference(&words(x))))
            .collect();
        let mut out = vec![0u8; N * 4];
        let serve = |i: usize, out: &mut Vec<u8>| {
            let readback = model
                .submit_host(&[&inputs[i % 4]])
                .unwrap()
                .download()
                .unwrap();
            readback.read_into(&mut [out.as_mut_slice()]).unwrap();
        };
        for i in 0..64 {
            serve(i, &mut out);
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
            "heap allocations on the warm path ({placement:?})"
        );
    }
}

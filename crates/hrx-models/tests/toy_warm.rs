// Its own test binary: it counts every heap allocation in the process.
//! A model built from tensor operators keeps the warm path free of heap
//! allocations: the MLP's whole forward pass is one prepared graph per
//! slot, so `submit_host` -> `download` -> `read_into` allocates nothing.

use hrx_inference::ModelContext;
use hrx_models::{
    compare,
    toy::{Mlp, MlpConfig},
};
use hrx_runtime::RuntimeOptions;
use hrx_test_support::counting::{self, Counting};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One test only: the counter is process-wide.
#[test]
fn mlp_submit_host_then_read_into_allocates_nothing_once_warm() {
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).expect("context");
    let config = MlpConfig::small();
    let weights = config.seeded_weights(3);
    let mlp = Mlp::new(&context, config, &weights).unwrap();
    let model = mlp.prepare(2).unwrap();
    let xs: Vec<Vec<f32>> = (0..4u32)
        .map(|s| {
            (0..config.batch * config.input)
                .map(|i| ((i as u32 * 7 + s) % 13) as f32 / 6.0 - 1.0)
                .collect()
        })
        .collect();
    let inputs: Vec<Vec<u8>> = xs
        .iter()
        .map(|x| x.iter().flat_map(|v| v.to_le_bytes()).collect())
        .collect();
    let expected: Vec<Vec<f32>> = xs
        .iter()
        .map(|x| config.reference(&weights, x).unwrap())
        .collect();
    let mut out = vec![0u8; config.batch * config.output * 4];
    let mut y = vec![0f32; config.batch * config.output];
    let mut serve = |i: usize| {
        let readback = model
            .submit_host(&[&inputs[i % 4]])
            .unwrap()
            .download()
            .unwrap();
        readback.read_into(&mut [out.as_mut_slice()]).unwrap();
        for (v, c) in y.iter_mut().zip(out.chunks_exact(4)) {
            *v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        // f32 matmuls of length <= 128 against an f64 reference.
        compare(&y, &expected[i % 4], 1e-4, 1e-4).is_ok()
    };
    for i in 0..32 {
        assert!(serve(i), "warm-up request {i}");
    }
    let mut wrong = 0;
    let allocations = counting::allocations_during(|| {
        for i in 0..300 {
            wrong += usize::from(!serve(i));
        }
    });
    assert_eq!(wrong, 0, "results are right");
    assert_eq!(allocations, 0, "heap allocations on the mlp warm path");
}

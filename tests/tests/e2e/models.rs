//! `hrx::models::toy::Mlp` served through a pool of 4 slots by 64
//! concurrent tokio tasks, every answer checked against the f64 CPU
//! reference.

use hrx::{
    execution::RuntimeOptions,
    inference::ModelContext,
    models::{
        compare,
        toy::{Mlp, MlpConfig},
    },
};
use hrx_tests::{f32_bytes, f32_values, values};
use std::sync::Arc;

#[test]
fn sixty_four_tasks_share_four_mlp_slots() {
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).unwrap();
    let config = MlpConfig::small();
    let weights = Arc::new(config.seeded_weights(9));
    let model = Mlp::new(&context, config, &weights)
        .unwrap()
        .prepare(4)
        .unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    tokio.block_on(async {
        let tasks: Vec<_> = (0..64u32)
            .map(|task| {
                let (model, weights) = (model.clone(), weights.clone());
                tokio::spawn(async move {
                    for request in 0..4u32 {
                        let x = values(task * 100 + request, config.batch * config.input);
                        let slot = model.acquire().await.unwrap();
                        let readback = slot
                            .submit_host(&[&f32_bytes(&x)])
                            .unwrap()
                            .download()
                            .unwrap();
                        let y = f32_values(&readback.await.unwrap()[0]);
                        let expected = config.reference(&weights, &x).unwrap();
                        // f32 matmuls of length <= 128 against f64.
                        assert_eq!(
                            compare(&y, &expected, 1e-4, 1e-4),
                            Ok(()),
                            "task {task} request {request}"
                        );
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    assert!(model.is_idle());
}

//! The model served through a pool of 4 slots by 64 concurrent tokio
//! tasks, every result checked against the CPU reference.

use hrx::{execution::RuntimeOptions, inference::ModelContext};
use hrx_tests::*;

#[test]
fn sixty_four_tasks_share_four_slots() {
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).unwrap();
    let model = model(&context, 4).unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    tokio.block_on(async {
        let tasks: Vec<_> = (0..64u32)
            .map(|task| {
                let model = model.clone();
                tokio::spawn(async move {
                    for request in 0..8u32 {
                        let x = values(task * 100 + request, WIDTH);
                        let slot = model.acquire().await.unwrap();
                        let readback = slot
                            .submit_host(&[&f32_bytes(&x)])
                            .unwrap()
                            .download()
                            .unwrap();
                        let out = readback.await.unwrap();
                        assert!(
                            close(&f32_values(&out[0]), &reference(&x)),
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

#[test]
fn blocking_clients_and_device_inputs_agree_with_the_reference() {
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).unwrap();
    let model = model(&context, 2).unwrap();
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let (model, context) = (model.clone(), context.clone());
            std::thread::spawn(move || {
                for request in 0..10u32 {
                    let x = values(1000 + t * 10 + request, WIDTH);
                    let input = context.upload(desc().unwrap(), &f32_bytes(&x)).unwrap();
                    let slot = model.acquire_blocking().unwrap();
                    let outputs = slot.submit(&[input]).unwrap().wait().unwrap();
                    let bytes = context.download(&outputs[0]).unwrap().wait().unwrap();
                    assert!(close(&f32_values(&bytes), &reference(&x)));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

//! A proptest state machine over acquire / submit / drop / cancel /
//! download / retain, checked against a model of how many slots are
//! reserved: a full pool answers `Busy`, a pool with an unreserved slot
//! always yields one once its work drains, results are right (or
//! cancelled), and the pool ends idle.

use crate::common::*;
use hrx_core::Error;
use hrx_inference::{Inference, InferenceReadback, ModelContext, ModelSlot};
use hrx_runtime::MemoryPlacement;
use hrx_tensor::DeviceTensor;
use proptest::prelude::*;
use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

const N: usize = 16;

#[derive(Clone, Debug)]
enum Op {
    Acquire,
    TryAcquire,
    Submit(usize, u32),
    DropSlot(usize),
    DropInference(usize),
    Cancel(usize),
    Download(usize),
    Read(usize),
    Retain(usize),
    DropRetained(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Acquire),
        1 => Just(Op::TryAcquire),
        3 => (any::<usize>(), any::<u32>()).prop_map(|(i, s)| Op::Submit(i, s)),
        1 => any::<usize>().prop_map(Op::DropSlot),
        1 => any::<usize>().prop_map(Op::DropInference),
        1 => any::<usize>().prop_map(Op::Cancel),
        2 => any::<usize>().prop_map(Op::Download),
        2 => any::<usize>().prop_map(Op::Read),
        1 => any::<usize>().prop_map(Op::Retain),
        1 => any::<usize>().prop_map(Op::DropRetained),
    ]
}

fn shared_context() -> &'static ModelContext {
    static CONTEXT: OnceLock<ModelContext> = OnceLock::new();
    CONTEXT.get_or_init(context)
}

/// Everything the test holds; each entry reserves one slot.
#[derive(Default)]
struct Held {
    slots: Vec<ModelSlot>,
    inferences: Vec<(Inference, Vec<u32>, bool)>,
    readbacks: Vec<(InferenceReadback, Vec<u32>, bool)>,
    retained: Vec<(Vec<DeviceTensor>, Vec<u32>)>,
}

impl Held {
    fn reserved(&self) -> usize {
        self.slots.len() + self.inferences.len() + self.readbacks.len() + self.retained.len()
    }
}

fn take<T>(items: &mut Vec<T>, i: usize) -> Option<T> {
    (!items.is_empty()).then(|| items.remove(i % items.len()))
}

fn check_outcome(result: hrx_core::Result<Vec<u32>>, expected: &[u32], cancelled: bool) {
    match result {
        Ok(out) => assert_eq!(out, expected),
        Err(Error::Cancelled) => assert!(cancelled, "only cancelled work reports Cancelled"),
        Err(other) => panic!("unexpected failure {other}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("POOL_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(32), ..ProptestConfig::default() })]

    #[test]
    fn the_pool_matches_its_model(capacity in 1usize..=3, ops in prop::collection::vec(op(), 1..32)) {
        let context = shared_context();
        let model = affine_model(context, capacity, N, MemoryPlacement::GpuLocal);
        let mut held = Held::default();
        for op in ops {
            match op {
                Op::Acquire if held.reserved() < capacity => {
                    // The model says a slot is unreserved, so one must come
                    // free once its work drains. Bounded, so that a bug
                    // fails the test instead of hanging it.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    let slot = loop {
                        match model.try_acquire() {
                            Ok(slot) => break slot,
                            Err(Error::Busy(_)) => {
                                prop_assert!(
                                    Instant::now() < deadline,
                                    "an unreserved slot never came free (capacity {}, held {})",
                                    capacity,
                                    held.reserved()
                                );
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            Err(other) => panic!("unexpected {other}"),
                        }
                    };
                    held.slots.push(slot);
                }
                Op::Acquire | Op::TryAcquire => match model.try_acquire() {
                    Ok(slot) => {
                        prop_assert!(held.reserved() < capacity, "a full pool handed out a slot");
                        held.slots.push(slot);
                    }
                    Err(Error::Busy(_)) => {}
                    Err(other) => panic!("unexpected {other}"),
                },
                Op::Submit(i, seed) => {
                    if let Some(slot) = take(&mut held.slots, i) {
                        let x: Vec<u32> = (0..N as u32).map(|k| k.wrapping_mul(seed) ^ seed).collect();
                        let inference = slot.submit_host(&[&bytes(&x)]).unwrap();
                        held.inferences.push((inference, affine_reference(&x), false));
                    }
                }
                Op::DropSlot(i) => drop(take(&mut held.slots, i)),
                Op::DropInference(i) => drop(take(&mut held.inferences, i)),
                Op::Cancel(i) => {
                    if !held.inferences.is_empty() {
                        let len = held.inferences.len();
                        let entry = &mut held.inferences[i % len];
                        entry.0.completion().cancel();
                        entry.2 = true;
                    }
                }
                Op::Download(i) => {
                    if let Some((inference, expected, cancelled)) = take(&mut held.inferences, i) {
                        held.readbacks.push((inference.download().unwrap(), expected, cancelled));
                    }
                }
                Op::Read(i) => {
                    if let Some((readback, expected, cancelled)) = take(&mut held.readbacks, i) {
                        let mut out = vec![0u8; N * 4];
                        let result = readback.read_into(&mut [&mut out]).map(|()| words(&out));
                        check_outcome(result, &expected, cancelled);
                    }
                }
                Op::Retain(i) => {
                    if let Some((inference, expected, cancelled)) = take(&mut held.inferences, i) {
                        match inference.wait() {
                            Ok(outputs) => held.retained.push((outputs, expected)),
                            Err(error) => check_outcome(Err(error), &expected, cancelled),
                        }
                    }
                }
                Op::DropRetained(i) => {
                    if let Some((outputs, expected)) = take(&mut held.retained, i) {
                        prop_assert_eq!(read(context, &outputs[0]).unwrap(), expected);
                    }
                }
            }
            if held.reserved() == capacity {
                prop_assert!(matches!(model.try_acquire(), Err(Error::Busy(_))));
                prop_assert!(!model.is_idle());
            }
        }
        drop(held);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !model.is_idle() {
            prop_assert!(Instant::now() < deadline, "the pool never became idle");
            std::thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..capacity {
            drop(model.try_acquire().unwrap());
        }
    }
}

//! Stress: 16 threads and 64 tokio tasks push requests through a pool of 4
//! slots with random drops, cancels and retained outputs. Every result is
//! checked, no slot is ever reserved twice, the pool ends idle and memory
//! stays flat.
//!
//! `HRX_STRESS_REQUESTS` sets the total (default 20,000).

use crate::common::*;
use hrx_core::Error;
use hrx_inference::{ModelContext, ModelSlot, PreparedModel};
use hrx_runtime::MemoryPlacement;
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

const N: usize = 64;
const CAPACITY: usize = 4;

struct Shared {
    context: ModelContext,
    model: PreparedModel,
    reserved: [AtomicBool; CAPACITY],
    checked: AtomicUsize,
    cancelled: AtomicUsize,
}

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn slot_index(slot: &ModelSlot) -> usize {
    let text = format!("{slot:?}");
    text.trim_start_matches("ModelSlot { index: ")
        .trim_end_matches(" }")
        .parse()
        .expect("slot index")
}

impl Shared {
    fn claim(&self, slot: &ModelSlot) -> usize {
        let index = slot_index(slot);
        assert!(
            !self.reserved[index].swap(true, Ordering::SeqCst),
            "slot {index} reserved twice"
        );
        index
    }

    /// Unmark a slot just before the call that releases it.
    fn unclaim(&self, index: usize) {
        self.reserved[index].store(false, Ordering::SeqCst);
    }

    /// One request on a reserved slot, with a random twist.
    fn serve(&self, slot: ModelSlot, rng: &mut Rng) {
        let index = self.claim(&slot);
        let x: Vec<u32> = (0..N).map(|_| rng.next() as u32).collect();
        let expected = affine_reference(&x);
        match rng.next() % 10 {
            0 => {
                self.unclaim(index);
                drop(slot);
            }
            1 => {
                let inference = slot.submit_host(&[&bytes(&x)]).unwrap();
                self.unclaim(index);
                drop(inference);
            }
            2 => {
                let inference = slot.submit_host(&[&bytes(&x)]).unwrap();
                inference.completion().cancel();
                let readback = inference.download().unwrap();
                self.unclaim(index);
                match readback.wait() {
                    Ok(out) => {
                        assert_eq!(words(&out[0]), expected);
                        self.checked.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Error::Cancelled) => {
                        self.cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(other) => panic!("unexpected {other}"),
                }
            }
            3 => {
                let outputs = slot.submit_host(&[&bytes(&x)]).unwrap().wait().unwrap();
                let out = self.context.download(&outputs[0]).unwrap();
                self.unclaim(index);
                drop(outputs);
                assert_eq!(words(&out.wait().unwrap()), expected);
                self.checked.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                let readback = slot.submit_host(&[&bytes(&x)]).unwrap().download().unwrap();
                let mut out = vec![0u8; N * 4];
                self.unclaim(index);
                readback.read_into(&mut [&mut out]).unwrap();
                assert_eq!(words(&out), expected);
                self.checked.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[test]
fn many_threads_and_tasks_share_a_bounded_pool() {
    let total: usize = std::env::var("HRX_STRESS_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let context = crate::common::context();
    let model = affine_model(&context, CAPACITY, N, MemoryPlacement::GpuLocal);
    let shared = Arc::new(Shared {
        context: context.clone(),
        model,
        reserved: Default::default(),
        checked: AtomicUsize::new(0),
        cancelled: AtomicUsize::new(0),
    });
    // Warm every slot's staging, then take the memory baseline.
    let warm: Vec<_> = (0..CAPACITY)
        .map(|_| shared.model.submit_host(&[&[0; N * 4]]).unwrap())
        .collect();
    for inference in warm {
        inference.download().unwrap().wait().unwrap();
    }
    let baseline = context.runtime().memory_stats();
    let started = Instant::now();

    let (threads, tasks) = (16, 64);
    let per_thread = total / 2 / threads;
    let per_task = (total - per_thread * threads) / tasks;
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                for _ in 0..per_thread {
                    let slot = shared.model.acquire_blocking().unwrap();
                    shared.serve(slot, &mut rng);
                }
            })
        })
        .collect();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    tokio.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (t as u64 + 100));
                    for _ in 0..per_task {
                        let slot = shared.model.acquire().await.unwrap();
                        if rng.next().is_multiple_of(4) {
                            let index = shared.claim(&slot);
                            let x: Vec<u32> = (0..N).map(|_| rng.next() as u32).collect();
                            let readback =
                                slot.submit_host(&[&bytes(&x)]).unwrap().download().unwrap();
                            shared.unclaim(index);
                            let out = readback.await.unwrap();
                            assert_eq!(words(&out[0]), affine_reference(&x));
                            shared.checked.fetch_add(1, Ordering::Relaxed);
                        } else {
                            shared.serve(slot, &mut rng);
                        }
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.await.unwrap();
        }
    });
    for worker in workers {
        worker.join().unwrap();
    }
    let elapsed = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !shared.model.is_idle() {
        assert!(Instant::now() < deadline, "the pool never became idle");
        std::thread::sleep(Duration::from_millis(1));
    }
    let end = context.runtime().memory_stats();
    assert_eq!(end.live_bytes, baseline.live_bytes, "memory is flat");
    assert_eq!(end.live_allocations, baseline.live_allocations);
    let checked = shared.checked.load(Ordering::Relaxed);
    assert!(
        checked > total / 2,
        "most requests were checked ({checked})"
    );
    eprintln!(
        "stress: {total} requests in {elapsed:?}, {checked} checked, {} cancelled",
        shared.cancelled.load(Ordering::Relaxed)
    );
}

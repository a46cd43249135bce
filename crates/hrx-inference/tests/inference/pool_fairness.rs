//! Waiting requests get slots in the order they started waiting, whatever
//! order they are polled in after a release; a dropped waiter gives up its
//! place; a request that does not wait never jumps the queue.

use crate::common::*;
use hrx_core::Error;
use hrx_runtime::MemoryPlacement;
use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll, Waker},
};

fn poll<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn waiters_are_served_first_come_first_served() {
    let context = context();
    let model = affine_model(&context, 1, 64, MemoryPlacement::HostVisible);
    let held = model.try_acquire().unwrap();
    let (mut first, mut second, mut third) = (model.acquire(), model.acquire(), model.acquire());
    for waiter in [&mut first, &mut second, &mut third] {
        assert!(poll(waiter).is_pending(), "no slot while one is held");
    }
    assert!(matches!(model.try_acquire(), Err(Error::Busy(_))));
    drop(held);
    // The slot is free, but it is promised to the oldest waiter.
    assert!(poll(&mut third).is_pending());
    assert!(poll(&mut second).is_pending());
    assert!(matches!(model.try_acquire(), Err(Error::Busy(_))));
    let Poll::Ready(slot) = poll(&mut first) else {
        panic!("the oldest waiter gets the freed slot");
    };
    drop(slot.unwrap());
    assert!(poll(&mut third).is_pending(), "the second waiter is next");
    assert!(poll(&mut second).is_ready());
}

#[test]
fn a_dropped_waiter_passes_its_turn_on() {
    let context = context();
    let model = affine_model(&context, 1, 64, MemoryPlacement::HostVisible);
    let held = model.try_acquire().unwrap();
    let (mut first, mut second) = (model.acquire(), model.acquire());
    assert!(poll(&mut first).is_pending());
    assert!(poll(&mut second).is_pending());
    drop(first);
    drop(held);
    assert!(poll(&mut second).is_ready(), "the next waiter moves up");
    drop(second);
    assert!(model.try_acquire().is_ok(), "nobody waits any more");
}

#[test]
fn a_blocking_waiter_keeps_its_place_among_async_ones() {
    let context = context();
    let model = affine_model(&context, 1, 64, MemoryPlacement::HostVisible);
    let held = model.try_acquire().unwrap();
    let mut early = model.acquire();
    assert!(poll(&mut early).is_pending());
    let blocking = {
        let model = model.clone();
        std::thread::spawn(move || model.acquire_blocking().map(drop))
    };
    // Let the blocking request queue behind the async one.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut late = model.acquire();
    assert!(poll(&mut late).is_pending());
    drop(held);
    let Poll::Ready(slot) = poll(&mut early) else {
        panic!("the first waiter is served first");
    };
    assert!(poll(&mut late).is_pending(), "the blocking waiter is ahead");
    drop(slot.unwrap());
    blocking.join().unwrap().unwrap();
    assert!(poll(&mut late).is_ready());
}

//! Closing a runtime waits for its device's work at most
//! `RuntimeOptions::close_timeout`: a device that does not finish (hung,
//! or here just busy for seconds) is abandoned, its pending work fails with
//! `DeviceLost`, and dropping the runtime returns. Its own binary: the
//! abandoned device is leaked by design, so it stays counted as open, and
//! busy for seconds (other tests' gates would calibrate against it).

use hrx_runtime::{Error, MemoryPlacement, Runtime, RuntimeOptions};
use hrx_test_support::gate::{calibrated_rounds, chain};
use std::time::{Duration, Instant};

#[test]
fn closing_gives_up_on_a_device_that_does_not_finish() {
    // About five seconds of device work: a spin chain whose early-exit
    // flag nobody writes.
    let rounds = calibrated_rounds();
    let options = RuntimeOptions::from_env()
        .unwrap()
        .with_close_timeout(Some(Duration::from_millis(100)));
    let runtime = Runtime::with_options(options).unwrap();
    let flag = runtime.allocate(4, MemoryPlacement::HostVisible).unwrap();
    let graph = chain(&runtime, rounds, &flag.view());
    let running = graph.submit().unwrap();
    assert!(!running.is_complete());
    let started = Instant::now();
    drop((graph, flag, runtime));
    let closed_in = started.elapsed();
    assert!(
        closed_in < Duration::from_secs(3),
        "closing waited {closed_in:?} for work it should have abandoned"
    );
    let result = running.wait();
    assert!(matches!(result, Err(Error::DeviceLost(_))), "{result:?}");
}

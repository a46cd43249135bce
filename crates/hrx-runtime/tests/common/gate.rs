//! Device work that stays pending for about 150 ms on lavapipe and on a
//! fast GPU alike, so that tests can observe "still pending" states.
//!
//! One fixed amount of work cannot do both: fills of tens of MiB that keep
//! lavapipe busy take microseconds on an H200, and a loop long enough for
//! an H200 would take minutes on lavapipe. So the length of a chain of spin
//! dispatches is calibrated once per process against the live device, on
//! a private runtime (no test's injected fault or queue is touched).

use hrx_runtime::{
    Access, BindingContract, ExecutableGraph, GpuKernel, KernelContract, MemoryPlacement, Runtime,
};
use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

/// How long a gate should hold the device.
const TARGET: Duration = Duration::from_millis(150);
/// Calibration stops growing the chain once one run takes this long.
const MEASURABLE: Duration = Duration::from_millis(15);
/// Rounds per dispatch: llvmpipe stops any loop after 65,535 iterations.
const ROUNDS_PER_DISPATCH: u64 = 60_000;
/// A chain longer than this means the spin is not holding the device.
const MAX_ROUNDS: u64 = ROUNDS_PER_DISPATCH * 2048;

/// Each round: a dependent integer chain, then a workgroup atomic whose
/// result feeds the chain, so no compiler can shorten the work and each
/// round costs at least one on-chip memory round trip.
const SPIN: &str = r"
struct Spin { rounds: u32 }
var<immediate> spin: Spin;
var<workgroup> cells: array<atomic<u32>, 64>;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lane: u32) {
    var x = out[lane] + lane;
    for (var i = 0u; i < spin.rounds; i++) {
        for (var j = 0u; j < 256u; j++) {
            x = x * 1664525u + 1013904223u + (x >> 7u);
        }
        x = x ^ atomicAdd(&cells[x & 63u], x | 1u);
    }
    out[lane] = x;
}
";

/// A graph that holds the device for about [`TARGET`] per submission.
/// Its storage is host-visible, so building it never queues a zero-fill
/// (which would wait behind work already pending on the device).
pub fn slow_graph(runtime: &Runtime) -> ExecutableGraph {
    chain(runtime, calibrated_rounds())
}

fn chain(runtime: &Runtime, total: u64) -> ExecutableGraph {
    let out = runtime
        .allocate(256, MemoryPlacement::HostVisible)
        .expect("allocate");
    let kernel = spin_kernel(runtime);
    let dispatches = total.div_ceil(ROUNDS_PER_DISPATCH).max(1);
    let rounds = u32::try_from(total.div_ceil(dispatches)).expect("rounds");
    let mut graph = runtime.graph();
    // Each dispatch reads and writes `out`, so they run one after another.
    for _ in 0..dispatches {
        graph
            .dispatch(&kernel, &[out.view()], &rounds.to_le_bytes(), [1, 1, 1])
            .expect("dispatch");
    }
    graph.prepare().expect("prepare")
}

/// The spin kernel, from the including test crate's WGSL helper
/// (`super::spirv`: this file is shared by hrx-runtime's and
/// hrx-inference's tests).
fn spin_kernel(runtime: &Runtime) -> GpuKernel {
    let contract = KernelContract {
        entry_point: "main".into(),
        bindings: vec![BindingContract {
            min_bytes: 256,
            alignment: 4,
            access: Access::ReadWrite,
        }],
        push_constant_bytes: 4,
        workgroup_size: [64, 1, 1],
    };
    GpuKernel::new(runtime, &super::spirv(SPIN), contract).expect("spin kernel")
}

/// Total spin rounds that take about [`TARGET`] on this process's device.
pub fn calibrated_rounds() -> u64 {
    static ROUNDS: OnceLock<u64> = OnceLock::new();
    *ROUNDS.get_or_init(|| {
        let runtime = Runtime::new().expect("runtime");
        let mut rounds = 16;
        loop {
            let graph = chain(&runtime, rounds);
            let run = || {
                let start = Instant::now();
                graph.submit().expect("submit").wait().expect("spin");
                start.elapsed()
            };
            let took = run();
            if took >= MEASURABLE {
                // Other tests share the device (and lavapipe's CPU): the
                // fastest of a few runs is the least disturbed.
                let took = (0..2).map(|_| run()).fold(took, Duration::min);
                let scaled = rounds as f64 * TARGET.as_secs_f64() / took.as_secs_f64();
                let chosen = (scaled as u64).clamp(rounds, MAX_ROUNDS);
                eprintln!("gate: {rounds} rounds took {took:?}; using {chosen} rounds");
                return chosen;
            }
            assert!(
                rounds < MAX_ROUNDS,
                "the spin cannot hold the device: {rounds} rounds took {took:?}"
            );
            rounds = (rounds * 4).min(MAX_ROUNDS);
        }
    })
}

//! Device work that stays pending until the test opens it, so that tests
//! can observe "still pending" states (ordering, cancellation, mapping
//! waits, queued downloads) without depending on how fast the device is.
//!
//! A [`Gate`] is a chain of spin dispatches that polls a flag word in
//! host-visible memory and stops once the test writes it ([`Gate::open`]).
//! It replaced work calibrated to last about 150 ms: on an H200 with 16
//! test threads, each test's own device time-slices the GPU, calibration
//! under that load came out short, and the work ended before the tests
//! looked.
//!
//! The chain still ends by itself after a fail-safe length, calibrated
//! once per process against the live device to hold it for about
//! [`FAIL_SAFE`] (no fixed length can: dispatches that hold lavapipe for
//! seconds end within milliseconds on an H200). Long, so that even a badly
//! mis-calibrated gate outlasts anything a test checks while it is closed;
//! finite, so that nothing hangs, neither a test that waits before opening
//! its gate nor a kernel that never sees the flag. Vulkan makes a host
//! write visible to the device only through a later submission or an event
//! the commands wait on, so a kernel already running has no formal
//! guarantee of seeing the flag. It lives in host-coherent memory and the
//! kernel reads it with an atomic load, which is seen in practice
//! (lavapipe: the same memory; NVIDIA: it works); were it not, every gate
//! would run to its fail-safe length and the tests would pass, slower.
//!
//! Calibration runs on a private runtime (no test's injected fault or queue
//! is touched), against a flag nobody opens.

use hrx_runtime::{
    Access, BindingContract, BufferView, Completion, ExecutableGraph, GpuKernel, KernelContract,
    MemoryPlacement, Result, Runtime,
};
use std::{
    sync::{Mutex, OnceLock, mpsc},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

/// How long an unopened gate holds the device (see the module doc).
const FAIL_SAFE: Duration = Duration::from_secs(5);
/// Calibration stops growing the chain once one run takes this long.
const MEASURABLE: Duration = Duration::from_millis(15);
/// Rounds per dispatch: llvmpipe stops an invocation's loops once they
/// have iterated 65,535 times in all (one budget for every loop), so the
/// round loop is the kernel's only loop.
const ROUNDS_PER_DISPATCH: u64 = 60_000;
/// A chain longer than this means the spin is not holding the device.
const MAX_ROUNDS: u64 = ROUNDS_PER_DISPATCH * 2048;
/// How long [`Gate::open_soon`] waits before opening.
const SOON: Duration = Duration::from_millis(20);

/// Each round: a dependent integer chain, then a workgroup atomic whose
/// result feeds the chain, so no compiler can shorten the work and each
/// round costs at least one on-chip memory round trip. The chain's 256
/// steps are nested calls, not a loop, for llvmpipe's loop budget (see
/// [`ROUNDS_PER_DISPATCH`]). Every 8th round reads the flag: often enough
/// that an opened gate ends within microseconds, rarely enough that reading
/// host memory across PCIe does not dominate a round on a discrete GPU.
const SPIN: &str = r"
struct Spin { rounds: u32 }
var<immediate> spin: Spin;
var<workgroup> cells: array<atomic<u32>, 64>;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read_write> opened: atomic<u32>;

fn step(x: u32) -> u32 {
    return x * 1664525u + 1013904223u + (x >> 7u);
}

fn step16(x: u32) -> u32 {
    return step(step(step(step(step(step(step(step(
        step(step(step(step(step(step(step(step(x))))))))))))))));
}

fn step256(x: u32) -> u32 {
    return step16(step16(step16(step16(step16(step16(step16(step16(
        step16(step16(step16(step16(step16(step16(step16(step16(x))))))))))))))));
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lane: u32) {
    var x = out[lane] + lane;
    for (var i = 0u; i < spin.rounds; i++) {
        if ((i & 7u) == 0u && atomicLoad(&opened) != 0u) {
            break;
        }
        x = step256(x);
        x = x ^ atomicAdd(&cells[x & 63u], x | 1u);
    }
    out[lane] = x;
}
";

/// Device work that stays pending until [`open`](Self::open)ed (or, as a
/// fail-safe, for about [`FAIL_SAFE`]). Every submission polls the same
/// flag, and an open gate stays open. Dropping the gate opens it, so a
/// failing test never leaves the device spinning.
///
/// Creating a gate queues nothing (all its storage is host-visible, so no
/// zero-fill): an injected fault armed before [`submit`](Self::submit)
/// lands on that submission.
pub struct Gate {
    graph: ExecutableGraph,
    opener: Mutex<Option<Opener>>,
}

/// A thread that writes the flag with `BufferView::signal` (an atomic
/// store without a mapping: a mapping for host writes would wait until the
/// gated work no longer uses the memory, and work that reads memory the
/// host holds mapped for writing is refused). The kernel only loads the
/// flag atomically, and its contract declares the binding read-only (the
/// WGSL declares it read-write because atomics need that). A thread, so
/// that `open_soon` can write it later; it holds the view, and so the
/// device, until joined.
struct Opener {
    /// Sends the delay before opening; dropping it opens at once.
    open: mpsc::Sender<Duration>,
    thread: JoinHandle<()>,
}

impl Gate {
    /// A gate on `runtime`'s device, closed.
    pub fn new(runtime: &Runtime) -> Gate {
        let flag = runtime
            .allocate(4, MemoryPlacement::HostVisible)
            .expect("allocate the gate's flag");
        let opener = Opener::spawn(flag.view());
        Gate {
            graph: chain(runtime, calibrated_rounds(), &flag.view()),
            opener: Mutex::new(Some(opener)),
        }
    }

    /// Queue one run of the chain: pending until the gate opens.
    pub fn submit(&self) -> Result<Completion> {
        self.graph.submit()
    }

    /// Let the gated work finish: write the flag, and return once it is
    /// written. Submissions queued behind the gate then run in order.
    pub fn open(&self) {
        let opener = self.opener.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(Opener { open, thread }) = opener {
            drop(open);
            if thread.join().is_err() && !thread::panicking() {
                panic!("the gate's opener failed");
            }
        }
    }

    /// Open the gate from its opener thread about [`SOON`] from now, and
    /// return at once: for a test whose next call blocks until the gated
    /// work has finished, so that the call is seen to wait. (Not for a test
    /// that counts open devices: the opener holds the device until it has
    /// written the flag, and only [`open`](Self::open) waits for that.)
    pub fn open_soon(&self) {
        if let Some(opener) = &*self.opener.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = opener.open.send(SOON);
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

impl Opener {
    /// A thread that signals `flag` when told; return once it runs.
    fn spawn(flag: BufferView) -> Opener {
        let (open, opened) = mpsc::channel::<Duration>();
        let (mapped_tx, mapped_rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("hrx-gate".into())
            .spawn(move || {
                let _ = mapped_tx.send(());
                // A delay, or the gate's `open` (or drop) hung up.
                if let Ok(delay) = opened.recv() {
                    thread::sleep(delay);
                }
                flag.signal(1).expect("signal the gate's flag");
            })
            .expect("spawn the gate's opener");
        mapped_rx.recv().expect("the gate's opener failed");
        Opener { open, thread }
    }
}

/// A chain of `total` spin rounds that stops early once `flag` is non-zero.
/// Its storage is host-visible, so building it never queues a zero-fill
/// (which would wait behind work already pending on the device).
pub fn chain(runtime: &Runtime, total: u64, flag: &BufferView) -> ExecutableGraph {
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
            .dispatch(
                &kernel,
                &[out.view(), flag.clone()],
                &rounds.to_le_bytes(),
                [1, 1, 1],
            )
            .expect("dispatch");
    }
    graph.prepare().expect("prepare")
}

/// The spin kernel.
fn spin_kernel(runtime: &Runtime) -> GpuKernel {
    let binding = |min_bytes, access| BindingContract {
        min_bytes,
        alignment: 4,
        access,
    };
    // The flag is declared read_write (WGSL atomics need it) but only
    // loaded: the contract says so, and the runtime lets work that only
    // reads memory run while the host holds it mapped.
    let contract = KernelContract {
        entry_point: "main".into(),
        bindings: vec![binding(256, Access::ReadWrite), binding(4, Access::Read)],
        push_constant_bytes: 4,
        workgroup_size: [64, 1, 1],
    };
    GpuKernel::new(runtime, &crate::wgsl::spirv(SPIN), contract).expect("spin kernel")
}

/// Total spin rounds that take about [`FAIL_SAFE`] on this process's device.
pub fn calibrated_rounds() -> u64 {
    static ROUNDS: OnceLock<u64> = OnceLock::new();
    *ROUNDS.get_or_init(|| {
        let runtime = Runtime::from_env().expect("runtime");
        // Never written: calibration measures the whole chain.
        let closed = runtime
            .allocate(4, MemoryPlacement::HostVisible)
            .expect("allocate");
        let mut rounds = 16;
        loop {
            let graph = chain(&runtime, rounds, &closed.view());
            let run = || {
                let start = Instant::now();
                graph.submit().expect("submit").wait().expect("spin");
                start.elapsed()
            };
            let mut took = run();
            if took >= MEASURABLE {
                // Other tests share the device (and lavapipe's CPU): the
                // fastest of a few runs is the least disturbed. It must be
                // measurable too, or one disturbed run of a short chain
                // would scale its fixed costs up to the fail-safe.
                took = (0..2).map(|_| run()).fold(took, Duration::min);
            }
            if took >= MEASURABLE {
                let scaled = rounds as f64 * FAIL_SAFE.as_secs_f64() / took.as_secs_f64();
                let chosen = (scaled as u64).clamp(rounds, MAX_ROUNDS);
                eprintln!("gate: {rounds} rounds took {took:?}; fail-safe of {chosen} rounds");
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

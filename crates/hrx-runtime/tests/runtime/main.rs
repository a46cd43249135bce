//! hrx-runtime's integration tests on a real device (lavapipe in CI, with
//! validation layers under `HRX_VALIDATION=1`), in one test binary.
//!
//! Beside it, binaries of their own for what another test in the process
//! would disturb: `lifetime` (counts the process's open devices),
//! `close_timeout` (leaks a busy device by design), `replay_alloc` (counts
//! every allocation in the process) and `exit_race` (process exit).

use hrx_test_support::counting::Counting;

// Counting per thread (`graph_replay`), which other tests cannot disturb.
#[global_allocator]
static ALLOCATOR: Counting = Counting;

mod common;
mod completion;
mod copy;
mod copy_batch;
mod graph_hazards;
mod graph_inspect;
mod graph_replay;
mod graph_scratch;
mod hazard_props;
mod kernels;
mod memory;
mod zero_fill;

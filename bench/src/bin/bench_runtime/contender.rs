//! What each side of the benchmark does, and how its samples are taken.

use std::time::Instant;

/// Dependent dispatches in the chain workload.
pub const CHAIN_LEN: usize = 64;
/// Words in each buffer of the one-dispatch workload (4 KiB).
pub const ONE_WORDS: usize = 1024;
/// Words in each buffer of the chain (64 KiB).
pub const CHAIN_WORDS: usize = 16 * 1024;

/// One side of the comparison: the runtime or the raw-ash baseline. Every
/// workload is prepared once (in the constructor or `prepare_copy`) and
/// only submitted and observed here.
pub trait Contender {
    /// Submit the one-dispatch graph and observe its completion.
    fn round_trip(&mut self) -> Result<(), String>;
    /// Submit the one-dispatch graph `n` times back to back (each ordered
    /// after the previous), then observe the last completion.
    fn burst(&mut self, n: usize) -> Result<(), String>;
    /// Replay the 64-dispatch chain `n` times back to back, then observe
    /// the last completion.
    fn chain(&mut self, n: usize) -> Result<(), String>;
    /// Allocate and fill the two `bytes`-byte buffers of the copy workload
    /// and prepare the copy.
    fn prepare_copy(&mut self, bytes: usize) -> Result<(), String>;
    /// Copy the source buffer into the destination and observe completion.
    fn copy(&mut self) -> Result<(), String>;
    /// Check the results of everything run so far, then free the copy's
    /// buffers.
    fn verify_and_release(&mut self) -> Result<(), String>;
}

/// How many samples to take, in how many alternating rounds.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// Timed calls per side, in total.
    pub samples: usize,
    /// Rounds; the sides alternate which goes first, so drift (thermal,
    /// other processes on a shared machine) lands on both.
    pub rounds: usize,
}

/// Seconds per call of `op` for each side (`[hrx, raw]`), taken in
/// interleaved rounds, each side warming up before its timed calls.
pub fn sample(
    sides: [&mut dyn Contender; 2],
    sampling: Sampling,
    mut op: impl FnMut(&mut dyn Contender) -> Result<(), String>,
) -> Result<[Vec<f64>; 2], String> {
    let rounds = sampling.rounds.max(1);
    let per_round = sampling.samples.div_ceil(rounds).max(1);
    let warmup = (per_round / 10).max(2);
    let mut out = [
        Vec::with_capacity(per_round * rounds),
        Vec::with_capacity(per_round * rounds),
    ];
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let side = &mut *sides[which];
            for _ in 0..warmup {
                op(side)?;
            }
            for _ in 0..per_round {
                let start = Instant::now();
                op(side)?;
                out[which].push(start.elapsed().as_secs_f64());
            }
        }
    }
    Ok(out)
}

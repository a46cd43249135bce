//! Bank-conflict-free stores of 16-byte copies into f16 workgroup tiles,
//! shared by the cooperative-matrix and split-k kernels.
//!
//! A wide copy gives each work item a group of 8 halves (four 32-bit
//! words) along a tile row; the tile is f16, so every word becomes
//! halfword stores. Without a rotation, store `j` of all lanes of a
//! subgroup hits word `j` of each lane's group, and groups whose start
//! words agree modulo the bank count collide (4-way for 64-half rows
//! padded by 8). Writing word `(j + s) % 4` in store `j`, with `s`
//! differing across the colliding lanes, spreads each store over
//! distinct banks.

/// Shared-memory banks of 4 bytes (NVIDIA, AMD and most others).
const BANKS: usize = 32;

/// How a work item picks its shift `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rotation {
    /// `s` = 0: word `j` in store `j`.
    None,
    /// `s` is the work item's index divided by 8, modulo 4 (each quarter
    /// of 8 consecutive work items covers all banks once where 8 groups
    /// fill a 128-byte span).
    Group,
    /// `s` is the work item's tile row modulo 4.
    Row,
}

/// The stores of one tile's wide copies: `per_row` groups of 8 halves per
/// tile row, rows `pitch` halves apart, `threads` work items in subgroups
/// of `sg`; work item `t` starts at row `t / per_row`, group
/// `t % per_row`.
pub(crate) struct QuadStores {
    pub(crate) per_row: usize,
    pub(crate) pitch: usize,
    pub(crate) threads: usize,
    pub(crate) sg: usize,
}

impl QuadStores {
    /// `s` of work item `tid` under `rot`.
    fn shift(&self, rot: Rotation, tid: usize) -> usize {
        match rot {
            Rotation::None => 0,
            Rotation::Group => (tid / 8) % 4,
            Rotation::Row => (tid / self.per_row) % 4,
        }
    }

    /// The worst bank conflict (distinct words one bank serves in one
    /// store) of a subgroup's stores under `rot`. Later copies of a work
    /// item only add the same row offset to every lane, so the first copy
    /// stands for all.
    pub(crate) fn conflict(&self, rot: Rotation) -> usize {
        let words_per_row = self.pitch / 2;
        let sg = self.sg.clamp(1, self.threads);
        let mut worst = 1;
        for first in (0..self.threads).step_by(sg) {
            for j in 0..4 {
                let mut banks = vec![Vec::new(); BANKS];
                for tid in first..(first + sg).min(self.threads) {
                    let row = tid / self.per_row;
                    let group = tid % self.per_row;
                    let e = (j + self.shift(rot, tid)) % 4;
                    let word = row * words_per_row + group * 4 + e;
                    let bank = &mut banks[word % BANKS];
                    if !bank.contains(&word) {
                        bank.push(word);
                    }
                }
                worst = worst.max(banks.iter().map(Vec::len).max().unwrap_or(1));
            }
        }
        worst
    }

    /// The first of `candidates` with the fewest conflicts (`None` first
    /// where none is needed).
    pub(crate) fn best(&self, candidates: [Rotation; 3]) -> Rotation {
        candidates
            .into_iter()
            .min_by_key(|r| self.conflict(*r))
            .unwrap_or(Rotation::None)
    }
}

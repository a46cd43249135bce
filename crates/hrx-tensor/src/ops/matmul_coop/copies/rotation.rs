//! The order in which a work item stores the four words of a wide copy,
//! chosen per tile so that a subgroup's halfword stores meet no bank
//! conflicts.

use super::wide::Wide;

/// Which rotation a work item applies to the four words of a 16-byte copy
/// when it stores them. The tile is f16, so every word becomes separate
/// halfword stores; without a rotation, store `j` of all lanes of a
/// subgroup hits word `j` of each lane's group, and groups whose start
/// words agree modulo the bank count collide (4-way for the 128 x 64 tile
/// of A). Rotating word `j` to `(j + s) % 4` with `s` differing across the
/// colliding lanes spreads each store over distinct banks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rotation {
    /// Store word `j` in store `j`.
    None,
    /// `s` is the lane's quarter of 8 consecutive work items (each quarter
    /// covers all banks once where 8 groups fill a 128-byte span).
    Quarter,
    /// `s` is the lane's tile row modulo 4.
    Row,
}

/// Shared-memory banks of 4 bytes (NVIDIA, AMD and most others).
const BANKS: usize = 32;

impl Wide {
    /// `s` of work item `tid` under `rot`.
    fn shift(&self, rot: Rotation, tid: usize) -> usize {
        match rot {
            Rotation::None => 0,
            Rotation::Quarter => (tid / 8) % 4,
            Rotation::Row => (tid / self.per_row()) % 4,
        }
    }

    /// The worst bank conflict (distinct words one bank serves in one
    /// store) of a subgroup's stores under `rot`. Later copies of a work
    /// item only add the same row offset to every lane, so the first copy
    /// stands for all.
    pub(super) fn conflict(&self, rot: Rotation) -> usize {
        let words_per_row = self.pitch / 2;
        let sg = self.sg.clamp(1, self.threads);
        let mut worst = 1;
        for first in (0..self.threads).step_by(sg) {
            for j in 0..4 {
                let mut banks = vec![Vec::new(); BANKS];
                for tid in first..(first + sg).min(self.threads) {
                    let row = tid / self.per_row();
                    let group = tid % self.per_row();
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

    /// The rotation with the fewest conflicts (none where none is needed).
    pub(super) fn rotation(&self) -> Rotation {
        [Rotation::None, Rotation::Quarter, Rotation::Row]
            .into_iter()
            .min_by_key(|r| self.conflict(*r))
            .unwrap_or(Rotation::None)
    }
}

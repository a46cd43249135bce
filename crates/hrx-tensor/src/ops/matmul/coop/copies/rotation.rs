//! The order in which a work item stores the four words of a wide copy
//! (see `ops::rotation`), chosen per tile.

use super::wide::Wide;
use crate::ops::rotation::QuadStores;
pub(super) use crate::ops::rotation::Rotation;

impl Wide {
    fn stores(&self) -> QuadStores {
        QuadStores {
            per_row: self.per_row(),
            pitch: self.pitch,
            threads: self.threads,
            sg: self.sg,
        }
    }

    /// The worst bank conflict of a subgroup's stores under `rot`.
    #[cfg(test)]
    pub(super) fn conflict(&self, rot: Rotation) -> usize {
        self.stores().conflict(rot)
    }

    /// The rotation with the fewest conflicts (none where none is needed).
    pub(super) fn rotation(&self) -> Rotation {
        self.stores()
            .best([Rotation::None, Rotation::Group, Rotation::Row])
    }
}

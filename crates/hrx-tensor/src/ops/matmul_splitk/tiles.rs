//! How the split-k kernel copies its tiles of A and B from storage into
//! f16 workgroup tiles: the loader lines of one operand, split into the
//! per-work-item setup (before the k loop), the global loads of one step
//! and their stores into the tile, so the kernel can issue the loads of the
//! next step before multiplying the current one.
//!
//! A 16-byte ("quad") copy gives every work item a fixed group of 8 halves
//! along the tile's inner axis and fixed tile rows, so per step it only
//! adds a k offset. Its four words are stored in an order rotated per work
//! item (see [`Rotation`]): the f16 tile takes halfword stores, and
//! without rotation the lanes of a subgroup whose groups start at the same
//! word modulo the bank count collide (4-way for 64-half rows padded by 8).
//! The tiles stay f16-typed: fragments are loaded from them only through
//! f16 views (NVIDIA's compiler rejects f16 fragments loaded through u32
//! views).

use super::TileLoad;
use crate::ops::rotation::QuadStores;
pub(super) use crate::ops::rotation::Rotation;

/// One operand's tile copy: `a` (rows of A by k) or `b` (k by columns of
/// B), `rows x cols` halves with rows padded to `cols + 8`.
pub(super) struct Tile {
    pub(super) name: &'static str,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) load: TileLoad,
    pub(super) threads: usize,
    /// Invocations per subgroup (the work items that store together).
    pub(super) sg: usize,
}

impl Tile {
    /// The tile's view type.
    pub(super) fn ty(&self) -> String {
        format!("view<{}x{}xf16>", self.rows, self.cols + 8)
    }
    fn per_load(&self) -> usize {
        if self.load == TileLoad::Quad { 8 } else { 1 }
    }
    /// Copies per work item.
    pub(super) fn slots(&self) -> usize {
        self.rows * self.cols / self.per_load() / self.threads
    }
    /// Quad groups per tile row.
    fn per_row(&self) -> usize {
        self.cols / 8
    }
    /// Whether the copies divide evenly and, for quads, every work item
    /// keeps one column group.
    pub(super) fn fits(&self) -> bool {
        let n = self.rows * self.cols;
        n.is_multiple_of(self.per_load() * self.threads)
            && (self.load != TileLoad::Quad
                || (self.cols.is_multiple_of(8) && self.threads.is_multiple_of(self.per_row())))
    }

    fn stores(&self) -> QuadStores {
        QuadStores {
            per_row: self.per_row(),
            pitch: self.cols + 8,
            threads: self.threads,
            sg: self.sg,
        }
    }

    /// The worst bank conflict of a subgroup's stores under `rot` (see
    /// `ops::rotation`).
    #[cfg(test)]
    pub(super) fn conflict(&self, rot: Rotation) -> usize {
        self.stores().conflict(rot)
    }

    /// The rotation with the fewest conflicts (none where none is needed).
    /// Both rotations give every copy of a work item the same `s` (the
    /// threads span a multiple of 4 rows and of 32 work items).
    pub(super) fn rotation(&self) -> Rotation {
        self.stores()
            .best([Rotation::None, Rotation::Row, Rotation::Group])
    }

    /// Per-work-item lines before the k loop: tile row `%{x}_r{u}` of copy
    /// `u`, and for quads the column group `%{x}_g`, its first column
    /// `%{x}_col` and the column `%{x}_cw{j}` written by store `j`; for
    /// elements the row and column `%{x}r_{u}`, `%{x}c_{u}` per copy.
    pub(super) fn setup(&self) -> String {
        let x = self.name;
        let mut l = String::new();
        if self.load != TileLoad::Quad {
            for u in 0..self.slots() {
                let inner_fast = matches!(self.load, TileLoad::Scalar { inner_fast: true });
                l += &format!(
                    "  %{x}e_{u}k = index.constant {} : index\n  %{x}e_{u} = index.add %tid, %{x}e_{u}k : index\n",
                    u * self.threads
                );
                l += &pos(inner_fast, x, u, self.rows, self.cols);
            }
            return l;
        }
        l += &format!(
            "  %{x}_pr = index.constant {} : index
  %{x}_rb = index.div %tid, %{x}_pr : index
  %{x}_g = index.rem %tid, %{x}_pr : index
  %{x}_col = index.mul %{x}_g, %cq : index
",
            self.per_row()
        );
        let rot = self.rotation();
        if rot == Rotation::None {
            for j in 0..4 {
                l += &format!("  %{x}_cw{j} = index.add %{x}_col, %ce{j} : index\n");
            }
        } else {
            let s0 = match rot {
                Rotation::Group => "index.div %tid, %cq".to_string(),
                _ => format!("index.add %{x}_rb, %l0"),
            };
            l += &format!(
                "  %{x}_s0 = {s0} : index
  %{x}_s = index.rem %{x}_s0, %c4 : index
  %{x}_s1 = index.rem %{x}_s, %ce1 : index
  %{x}_rot1 = index.cmp uge, %{x}_s1, %l1 : index
  %{x}_rot2 = index.cmp uge, %{x}_s, %ce1 : index
"
            );
            for j in 0..4 {
                l += &format!(
                    "  %{x}_ej{j} = index.add %{x}_s, %l{j} : index
  %{x}_e{j} = index.rem %{x}_ej{j}, %c4 : index
  %{x}_dc{j} = index.mul %{x}_e{j}, %ce1 : index
  %{x}_cw{j} = index.add %{x}_col, %{x}_dc{j} : index
"
                );
            }
        }
        for u in 0..self.slots() {
            l += &format!(
                "  %{x}_dr{u} = index.constant {} : index
  %{x}_r{u} = index.add %{x}_rb, %{x}_dr{u} : index
",
                u * self.threads / self.per_row()
            );
        }
        l
    }

    /// Stores of the values `%{x}x{s}_{u}` loaded by a step into the tile.
    pub(super) fn store(&self, s: &str) -> String {
        let x = self.name;
        let ty = self.ty();
        let mut l = String::new();
        if self.load != TileLoad::Quad {
            for u in 0..self.slots() {
                l += &format!(
                    "    view.store %{x}x{s}_{u}, %t{x}[%{x}r_{u}, %{x}c_{u}] : f16, {ty}\n"
                );
            }
            return l;
        }
        let rotated = self.rotation() != Rotation::None;
        for u in 0..self.slots() {
            let v = format!("%{x}x{s}_{u}");
            for j in 0..4 {
                l += &format!(
                    "    %{x}{s}u_{u}_{j} = vector.extract {v}, %l{j} : vector<4xu32> -> u32\n"
                );
            }
            let word = if rotated {
                // Word (j + s) % 4 by two conditional rotations (by 1, by 2).
                for j in 0..4 {
                    l += &format!(
                        "    %{x}{s}v_{u}_{j} = scalar.select %{x}_rot1, %{x}{s}u_{u}_{}, %{x}{s}u_{u}_{j} : u32\n",
                        (j + 1) % 4
                    );
                }
                for j in 0..4 {
                    l += &format!(
                        "    %{x}{s}y_{u}_{j} = scalar.select %{x}_rot2, %{x}{s}v_{u}_{}, %{x}{s}v_{u}_{j} : u32\n",
                        (j + 2) % 4
                    );
                }
                "y"
            } else {
                "u"
            };
            for j in 0..4 {
                l += &format!(
                    "    %{x}{s}f_{u}_{j} = vector.unpackf16 %{x}{s}{word}_{u}_{j} : u32 -> vector<2xf32>
    %{x}{s}h_{u}_{j} = scalar.truncf %{x}{s}f_{u}_{j} : vector<2xf32> -> vector<2xf16>
    vector.store %{x}{s}h_{u}_{j}, %t{x}[%{x}_r{u}, %{x}_cw{j}] : vector<2xf16>, {ty}
"
                );
            }
        }
        l
    }
}

/// Lines mapping element copy `%{p}e_{u}` to tile row `%{p}r_{u}` and
/// column `%{p}c_{u}` of a `rows x cols` tile: consecutive copies along
/// the columns when `inner_fast`.
fn pos(inner_fast: bool, p: &str, u: usize, rows: usize, cols: usize) -> String {
    if inner_fast {
        format!(
            "  %{p}d_{u} = index.constant {cols} : index
  %{p}r_{u} = index.div %{p}e_{u}, %{p}d_{u} : index
  %{p}c_{u} = index.rem %{p}e_{u}, %{p}d_{u} : index
"
        )
    } else {
        format!(
            "  %{p}d_{u} = index.constant {rows} : index
  %{p}r_{u} = index.rem %{p}e_{u}, %{p}d_{u} : index
  %{p}c_{u} = index.div %{p}e_{u}, %{p}d_{u} : index
"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quad(name: &'static str, rows: usize, cols: usize, threads: usize) -> Tile {
        Tile {
            name,
            rows,
            cols,
            load: TileLoad::Quad,
            threads,
            sg: 32,
        }
    }

    /// Every tile the kernel uses on a 32-wide subgroup stores without
    /// bank conflicts once rotated; the 64-wide rows need the rotation.
    #[test]
    fn rotated_stores_meet_no_bank_conflicts() {
        for threads in [128, 256] {
            for (rows, cols) in [(16, 64), (32, 64), (48, 64), (64, 64), (64, 32), (64, 128)] {
                let t = quad("a", rows, cols, threads);
                if t.fits() {
                    assert_eq!(t.conflict(t.rotation()), 1, "{rows}x{cols} {threads}");
                }
            }
        }
        let t = quad("b", 64, 64, 128);
        assert_eq!(t.conflict(Rotation::None), 4);
        assert_ne!(t.rotation(), Rotation::None);
    }
}

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
use super::source::Env;
use crate::ops::matmul::tiled::pos;
use crate::ops::rotation::QuadStores;
pub(super) use crate::ops::rotation::Rotation;
use hrx_loom::build::{Bool, Builder, Extent, Index, Num, Value, View};
use hrx_loom::ir::{IntPredicate, Scalar};

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

/// A work item's fixed place in a tile copy, computed before the k loop.
pub(super) enum Place {
    /// 16-byte copies: the column group `g` and its first column, the
    /// column of each store `j`, the conditional rotations when rotated,
    /// and the tile row of each copy.
    Quad {
        g: Value<Index>,
        col: Value<Index>,
        cw: [Value<Index>; 4],
        rot: Option<(Value<Bool>, Value<Bool>)>,
        r: Vec<Value<Index>>,
    },
    /// Element copies: the tile row and column of each copy.
    Elements {
        r: Vec<Value<Index>>,
        c: Vec<Value<Index>>,
    },
}

impl Place {
    /// The tile row of each copy.
    pub(super) fn rows(&self) -> &[Value<Index>] {
        match self {
            Place::Quad { r, .. } | Place::Elements { r, .. } => r,
        }
    }

    /// The tile column of each element copy (none for quads).
    pub(super) fn cols(&self) -> &[Value<Index>] {
        match self {
            Place::Quad { .. } => &[],
            Place::Elements { c, .. } => c,
        }
    }

    /// The column group and its first column (quads).
    pub(super) fn group(&self) -> Option<(Value<Index>, Value<Index>)> {
        match self {
            Place::Quad { g, col, .. } => Some((*g, *col)),
            Place::Elements { .. } => None,
        }
    }
}

impl Tile {
    /// The tile's view dimensions (rows padded by 8 halves).
    pub(super) fn dims(&self) -> [Extent; 2] {
        [Extent::from(self.rows), Extent::from(self.cols + 8)]
    }
    /// Bytes of the tile.
    pub(super) fn bytes(&self) -> usize {
        self.rows * (self.cols + 8) * 2
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

    /// The work item's place in the copy, before the k loop.
    pub(super) fn setup(&self, b: &mut Builder, env: &Env) -> Place {
        if self.load != TileLoad::Quad {
            let inner_fast = matches!(self.load, TileLoad::Scalar { inner_fast: true });
            let (mut r, mut c) = (Vec::new(), Vec::new());
            for u in 0..self.slots() {
                let ek = b.index((u * self.threads) as u64);
                let e = b.add(env.tid, ek);
                let (ru, cu) = pos(b, e, inner_fast, (self.rows, self.cols));
                r.push(ru);
                c.push(cu);
            }
            return Place::Elements { r, c };
        }
        let pr = b.index(self.per_row() as u64);
        let rb = b.div(env.tid, pr);
        let g = b.rem(env.tid, pr);
        let col = b.hint(&format!("{}_col", self.name)).mul(g, env.cq);
        let rot = self.rotation();
        let (cw, rot) = if rot == Rotation::None {
            (env.ce.map(|ce| b.add(col, ce)), None)
        } else {
            // Store j writes word (j + s) % 4 of the copy.
            let s0 = match rot {
                Rotation::Group => b.div(env.tid, env.cq),
                _ => b.add(rb, env.l[0]),
            };
            let s = b.rem(s0, env.c4);
            let s1 = b.rem(s, env.ce[1]);
            let rot1 = b.cmp(IntPredicate::Uge, s1, env.l[1]);
            let rot2 = b.cmp(IntPredicate::Uge, s, env.ce[1]);
            let cw = env.l.map(|l| {
                let ej = b.add(s, l);
                let e = b.rem(ej, env.c4);
                let dc = b.mul(e, env.ce[1]);
                b.add(col, dc)
            });
            (cw, Some((rot1, rot2)))
        };
        let r = (0..self.slots())
            .map(|u| {
                let dr = b.index((u * self.threads / self.per_row()) as u64);
                b.add(rb, dr)
            })
            .collect();
        Place::Quad { g, col, cw, rot, r }
    }

    /// Stores of the values `x` one step loaded into the tile `tile`.
    pub(super) fn store(
        &self,
        b: &mut Builder,
        env: &Env,
        place: &Place,
        tile: Value<View>,
        x: &[Value<Num>],
    ) {
        match place {
            Place::Elements { r, c } => {
                for ((&xu, &ru), &cu) in x.iter().zip(r).zip(c) {
                    b.store(xu, tile, &[ru, cu]);
                }
            }
            Place::Quad { cw, rot, r, .. } => {
                for (&xu, &ru) in x.iter().zip(r) {
                    let u = env.l.map(|l| b.extract(xu, l));
                    // Word (j + s) % 4 by two conditional rotations (by 1,
                    // by 2).
                    let words = match rot {
                        Some((rot1, rot2)) => {
                            let v: Vec<_> = (0..4)
                                .map(|j| b.select(*rot1, u[(j + 1) % 4], u[j]))
                                .collect();
                            (0..4)
                                .map(|j| b.select(*rot2, v[(j + 2) % 4], v[j]))
                                .collect::<Vec<_>>()
                        }
                        None => u.to_vec(),
                    };
                    for (j, &w) in words.iter().enumerate() {
                        let f = b.unpackf16(w);
                        let h = b.truncf(f, Scalar::F16);
                        b.vector_store(h, tile, &[ru, cw[j]]);
                    }
                }
            }
        }
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

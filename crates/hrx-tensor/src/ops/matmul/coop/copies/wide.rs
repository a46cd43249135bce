//! One operand's wide copy: the per-work-item setup, the 16-byte global
//! loads of a step and their stores into the f16 tile, two halves per
//! word, in the order its rotation (see `Rotation`) picks.

use super::Env;
use super::rotation::Rotation;
use hrx_loom::build::{Bool, Builder, Index, Num, Value, View};
use hrx_loom::ir::{IntPredicate, Scalar};

/// One operand's wide copy: a tile of `rows` x `cols` halves with the
/// contiguous axis along `cols`, 8 halves per copy.
pub(super) struct Wide {
    /// `a` or `b`: the operand's name (in value names and messages).
    pub(super) name: &'static str,
    pub(super) rows: usize,
    pub(super) cols: usize,
    /// Halves per tile row (the padded row length).
    pub(super) pitch: usize,
    pub(super) threads: usize,
    /// Invocations per subgroup (the work items that store together).
    pub(super) sg: usize,
}

/// A work item's fixed place in a wide copy, computed before the k loop.
pub(super) struct Place {
    /// Its column group's first column.
    pub(super) col: Value<Index>,
    /// The tile column of each store `j` (word `(j + s) % 4`).
    cw: [Value<Index>; 4],
    /// The conditional rotations by 1 and by 2 words, when rotated.
    rot: Option<(Value<Bool>, Value<Bool>)>,
    /// The tile row of copy `i`, and whether it lies in the tile.
    pub(super) r: Vec<Value<Index>>,
    pub(super) inside: Vec<Value<Bool>>,
}

impl Wide {
    pub(super) fn per_row(&self) -> usize {
        self.cols / 8
    }
    /// Whether every work item keeps one column group across its copies.
    pub(super) fn fits(&self) -> bool {
        self.cols.is_multiple_of(8) && self.threads.is_multiple_of(self.per_row())
    }
    /// Copies per work item (the last may lie past the tile).
    pub(super) fn count(&self) -> usize {
        (self.rows * self.per_row()).div_ceil(self.threads)
    }
    /// Whether some work items have fewer than `count` copies.
    fn ragged(&self) -> bool {
        !(self.rows * self.per_row()).is_multiple_of(self.threads)
    }

    /// The work item's place: first tile row and column group, the column
    /// of each store, the tile row of each copy and whether it lies in
    /// the tile.
    pub(super) fn setup(&self, b: &mut Builder, env: &Env) -> Place {
        let c = &env.c;
        let pr = b.index(self.per_row() as u64);
        let rb = b.div(env.tid, pr);
        let g = b.rem(env.tid, pr);
        let col = b.hint(&format!("w{}_col", self.name)).mul(g, c.c8);
        let rows = b.index(self.rows as u64);
        let rot = self.rotation();
        let (cw, rot) = if rot == Rotation::None {
            let cw = [0, 1, 2, 3].map(|j| {
                let dc = b.index(2 * j);
                b.add(col, dc)
            });
            (cw, None)
        } else {
            // Store j writes word (j + s) % 4 of the copy: its column here,
            // its value picked by `store` from the two bits of s.
            let s0 = if rot == Rotation::Group {
                b.div(env.tid, c.c8)
            } else {
                b.add(rb, c.c0)
            };
            let s = b.rem(s0, c.c4);
            let s1 = b.rem(s, c.c2);
            let rot1 = b.cmp(IntPredicate::Uge, s1, c.c1);
            let rot2 = b.cmp(IntPredicate::Uge, s, c.c2);
            let cw = [0, 1, 2, 3].map(|j| {
                let dj = b.index(j);
                let ej = b.add(s, dj);
                let e = b.rem(ej, c.c4);
                let dc = b.mul(e, c.c2);
                b.add(col, dc)
            });
            (cw, Some((rot1, rot2)))
        };
        let mut r = Vec::new();
        let mut inside = Vec::new();
        for i in 0..self.count() {
            let dr = b.index((i * self.threads / self.per_row()) as u64);
            let ri = b.add(rb, dr);
            inside.push(b.cmp(IntPredicate::Ult, ri, rows));
            r.push(ri);
        }
        Place {
            col,
            cw,
            rot,
            r,
            inside,
        }
    }

    /// `ok` narrowed to copy `i` lying in the tile, where some copies may
    /// lie past it.
    pub(super) fn narrow(
        &self,
        b: &mut Builder,
        place: &Place,
        i: usize,
        ok: Value<Bool>,
    ) -> Value<Bool> {
        if self.ragged() {
            b.and(ok, place.inside[i])
        } else {
            ok
        }
    }

    /// The 16-byte loads of one tile (zeros where `ok[i]` is false) at
    /// word indices `word[i]`.
    pub(super) fn fetch(
        &self,
        b: &mut Builder,
        env: &Env,
        view: Value<View>,
        ok: &[Value<Bool>],
        word: &[Value<Index>],
    ) -> Vec<Value<Num>> {
        ok.iter()
            .zip(word)
            .map(|(&ok, &w)| {
                b.if_else(ok, |b| vec![b.vector_load(view, &[w], 4)], |_| vec![env.zq])[0]
            })
            .collect()
    }

    /// Stores of the loaded quads `x` into the f16 tile `tile`, two halves
    /// per word.
    pub(super) fn store(
        &self,
        b: &mut Builder,
        env: &Env,
        place: &Place,
        tile: Value<View>,
        x: &[Value<Num>],
    ) {
        for (i, &xi) in x.iter().enumerate() {
            let body = |b: &mut Builder| {
                let u = env.c.cq.map(|q| b.extract(xi, q));
                // Word (j + s) % 4 by two conditional rotations (by 1, by 2).
                let words = match place.rot {
                    Some((rot1, rot2)) => {
                        let v: Vec<_> = (0..4)
                            .map(|j| b.select(rot1, u[(j + 1) % 4], u[j]))
                            .collect();
                        (0..4)
                            .map(|j| b.select(rot2, v[(j + 2) % 4], v[j]))
                            .collect::<Vec<_>>()
                    }
                    None => u.to_vec(),
                };
                for (j, &w) in words.iter().enumerate() {
                    let f = b.unpackf16(w);
                    let h = b.truncf(f, Scalar::F16);
                    b.vector_store(h, tile, &[place.r[i], place.cw[j]]);
                }
            };
            if self.ragged() {
                b.if_(place.inside[i], body);
            } else {
                body(b);
            }
        }
    }
}

//! One operand's wide copy: the per-work-item setup, the 16-byte global
//! loads of a step and their stores into the f16 tile, two halves per
//! word, in the order its rotation (see `Rotation`) picks.

use super::rotation::Rotation;

/// One operand's wide copy: a tile of `rows` x `cols` halves with the
/// contiguous axis along `cols`, 8 halves per copy.
pub(super) struct Wide {
    /// `a` or `b`: the operand's name in the template (`%av`, `%ta`, ...).
    pub(super) name: &'static str,
    pub(super) rows: usize,
    pub(super) cols: usize,
    /// The tile's view type.
    pub(super) tile: String,
    /// Halves per tile row (the padded row length).
    pub(super) pitch: usize,
    pub(super) threads: usize,
    /// Invocations per subgroup (the work items that store together).
    pub(super) sg: usize,
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

    /// Per work item: its first tile row, its column group `%w{x}_col`
    /// (and `%w{x}_cw{j}`, the column of word `j`), the tile row of copy
    /// `i`, `%w{x}_r{i}`, and `%w{x}_in{i}` when it may lie past the tile.
    pub(super) fn setup(&self) -> String {
        let x = self.name;
        let mut l = format!(
            "  %w{x}_pr = index.constant {} : index
  %w{x}_rb = index.div %tid, %w{x}_pr : index
  %w{x}_g = index.rem %tid, %w{x}_pr : index
  %w{x}_col = index.mul %w{x}_g, %c8 : index
  %w{x}_rows = index.constant {} : index
",
            self.per_row(),
            self.rows
        );
        let rot = self.rotation();
        if rot == Rotation::None {
            for j in 0..4 {
                l += &format!(
                    "  %w{x}_dc{j} = index.constant {} : index
  %w{x}_cw{j} = index.add %w{x}_col, %w{x}_dc{j} : index
",
                    2 * j
                );
            }
        } else {
            // Store j writes word (j + s) % 4 of the copy: its column here,
            // its value picked by `store` from the two bits of s.
            let s0 = if rot == Rotation::Group {
                format!("  %w{x}_s0 = index.div %tid, %c8 : index\n")
            } else {
                format!("  %w{x}_s0 = index.add %w{x}_rb, %c0 : index\n")
            };
            l += &s0;
            l += &format!(
                "  %w{x}_s = index.rem %w{x}_s0, %c4 : index
  %w{x}_s1 = index.rem %w{x}_s, %c2 : index
  %w{x}_rot1 = index.cmp uge, %w{x}_s1, %c1 : index
  %w{x}_rot2 = index.cmp uge, %w{x}_s, %c2 : index
"
            );
            for j in 0..4 {
                l += &format!(
                    "  %w{x}_dj{j} = index.constant {j} : index
  %w{x}_ej{j} = index.add %w{x}_s, %w{x}_dj{j} : index
  %w{x}_e{j} = index.rem %w{x}_ej{j}, %c4 : index
  %w{x}_dc{j} = index.mul %w{x}_e{j}, %c2 : index
  %w{x}_cw{j} = index.add %w{x}_col, %w{x}_dc{j} : index
"
                );
            }
        }
        for i in 0..self.count() {
            l += &format!(
                "  %w{x}_dr{i} = index.constant {} : index
  %w{x}_r{i} = index.add %w{x}_rb, %w{x}_dr{i} : index
  %w{x}_in{i} = index.cmp ult, %w{x}_r{i}, %w{x}_rows : index
",
                i * self.threads / self.per_row()
            );
        }
        l
    }

    /// `ok` narrowed to copy `i` lying in the tile: lines defining `def`
    /// when some copies may lie past it, and the name to use.
    pub(super) fn inside(&self, i: usize, def: &str, ok: &str) -> (String, String) {
        if self.ragged() {
            let line = format!("  {def} = scalar.andi {ok}, %w{}_in{i} : i1\n", self.name);
            (line, def.to_string())
        } else {
            (String::new(), ok.to_string())
        }
    }

    /// Loads of one tile into `%x{x}{s}_{i}` (zeros outside the matrix):
    /// `%x{x}{s}_ok{i}` must say copy `i` is inside and `word(i)` name its
    /// word index, a multiple of 4.
    pub(super) fn fetch(&self, s: &str, word: impl Fn(usize) -> String) -> String {
        let x = self.name;
        let mut l = String::new();
        for i in 0..self.count() {
            l += &format!(
                "    %x{x}{s}_{i} = scf.if %x{x}{s}_ok{i} -> (vector<4xu32>) {{
      %x{x}{s}_v{i} = vector.load %{x}v[{w}] : view<[%l{x}w]xu32> -> vector<4xu32>
      scf.yield %x{x}{s}_v{i} : vector<4xu32>
    }} else {{
      scf.yield %zq : vector<4xu32>
    }}
",
                w = word(i)
            );
        }
        l
    }

    /// Stores of `%x{x}{s}_{i}` into the f16 tile, two halves per word.
    pub(super) fn store(&self, s: &str) -> String {
        let x = self.name;
        let tile = &self.tile;
        let mut l = String::new();
        let rotated = self.rotation() != Rotation::None;
        for i in 0..self.count() {
            let mut body = String::new();
            for j in 0..4 {
                body += &format!(
                    "      %u{x}{s}_{i}_{j} = vector.extract %x{x}{s}_{i}, %cq{j} : vector<4xu32> -> u32\n"
                );
            }
            // Word (j + s) % 4 by two conditional rotations (by 1, by 2).
            for j in 0..4 {
                body += &if rotated {
                    format!(
                        "      %v{x}{s}_{i}_{j} = scalar.select %w{x}_rot1, %u{x}{s}_{i}_{}, %u{x}{s}_{i}_{j} : u32\n",
                        (j + 1) % 4
                    )
                } else {
                    String::new()
                };
            }
            for j in 0..4 {
                body += &if rotated {
                    format!(
                        "      %y{x}{s}_{i}_{j} = scalar.select %w{x}_rot2, %v{x}{s}_{i}_{}, %v{x}{s}_{i}_{j} : u32\n",
                        (j + 2) % 4
                    )
                } else {
                    String::new()
                };
            }
            let word = if rotated { "y" } else { "u" };
            for j in 0..4 {
                body += &format!(
                    "      %f{x}{s}_{i}_{j} = vector.unpackf16 %{word}{x}{s}_{i}_{j} : u32 -> vector<2xf32>
      %h{x}{s}_{i}_{j} = scalar.truncf %f{x}{s}_{i}_{j} : vector<2xf32> -> vector<2xf16>
      vector.store %h{x}{s}_{i}_{j}, %t{x}[%w{x}_r{i}, %w{x}_cw{j}] : vector<2xf16>, {tile}
"
                );
            }
            l += &if self.ragged() {
                format!("    scf.if %w{x}_in{i} {{\n{body}    }}\n")
            } else {
                body
            };
        }
        l
    }
}

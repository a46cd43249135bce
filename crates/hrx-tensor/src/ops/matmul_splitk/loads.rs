//! The global loads of the split-k kernel: each work item's addressing
//! of A and B (set up before the k loop) and the loads of one step's
//! tiles, zero outside the matrices and past the split.

use super::{SplitK, TileLoad};

impl SplitK {
    /// Per-work-item lines of A's global addressing (after its tile
    /// setup): `%aokr_{u}` says copy `u`'s row is inside A; quads get the
    /// quad index of the row's start `%ap_{u}`, elements the element index
    /// `%apr_{u}`.
    pub(super) fn setup_a(&self) -> String {
        if self.a == TileLoad::Quad {
            return rows_along_k("a", self.tile_a().slots(), "%c0", "%m", "%sam", "%basea");
        }
        let mut l = String::new();
        for u in 0..self.tile_a().slots() {
            l += &format!(
                "  %aokr_{u} = index.cmp ult, %ar_{u}, %m : index
  %apr_{u} = index.madd %ar_{u}, %sam, %basea : index
"
            );
        }
        l
    }

    /// B's: `%bokc`/`%bokc_{u}` says the column is inside B; quads get the
    /// quad index of copy `u` at k = 0 of the whole matrix, `%bw0_{u}`;
    /// elements the column's element index `%bpc_{u}`.
    pub(super) fn setup_b(&self) -> String {
        let mut l = String::new();
        if self.b == TileLoad::QuadAlongK {
            // Tile rows are columns of B (`%col0 + r`), quads run along k.
            l += &rows_along_k("b", self.tile_b().slots(), "%col0", "%n", "%sbn", "%baseb");
        } else if self.b == TileLoad::Quad {
            l += "  %sbkq = index.div %sbk, %cq : index
  %b_gc = index.add %col0, %b_col : index
  %bokc = index.cmp ult, %b_gc, %n : index
  %b_gh = index.add %baseb, %b_gc : index
  %b_gq = index.div %b_gh, %cq : index
";
            for u in 0..self.tile_b().slots() {
                l += &format!("  %bw0_{u} = index.madd %b_r{u}, %sbkq, %b_gq : index\n");
            }
        } else {
            for u in 0..self.tile_b().slots() {
                l += &format!(
                    "  %bgc_{u} = index.add %col0, %bc_{u} : index
  %bokc_{u} = index.cmp ult, %bgc_{u}, %n : index
  %bpc_{u} = index.madd %bgc_{u}, %sbn, %baseb : index
"
                );
            }
        }
        l
    }

    /// The global loads of the tiles at k offset `k0` into `%ax{s}_{u}`
    /// and `%bx{s}_{u}` (zero outside the matrices and past the split).
    pub(super) fn fetch(&self, s: &str, k0: &str) -> String {
        let mut l = String::new();
        if self.a == TileLoad::Quad {
            l += &fetch_along_k("a", self.tile_a().slots(), s, k0);
        }
        for u in 0..self.tile_a().slots() {
            l += &match self.a {
                // A is never staged transposed (k is its tile's inner axis).
                TileLoad::Quad | TileLoad::QuadAlongK => String::new(),
                TileLoad::Scalar { .. } => format!(
                    "    %agk{s}_{u} = index.add {k0}, %ac_{u} : index
    %aokk{s}_{u} = index.cmp ult, %agk{s}_{u}, %kend : index
    %aok{s}_{u} = scalar.andi %aokr_{u}, %aokk{s}_{u} : i1
    %ax{s}_{u} = scf.if %aok{s}_{u} -> (f16) {{
      %ap{s}_{u} = index.madd %agk{s}_{u}, %sak, %apr_{u} : index
      %av{s}_{u} = view.load %av[%ap{s}_{u}] : view<[%la]xf16> -> f16
      scf.yield %av{s}_{u} : f16
    }} else {{
      scf.yield %hzero : f16
    }}
"
                ),
            };
        }
        match self.b {
            TileLoad::Quad => l += &format!("    %bkw{s} = index.mul {k0}, %sbkq : index\n"),
            TileLoad::QuadAlongK => l += &fetch_along_k("b", self.tile_b().slots(), s, k0),
            TileLoad::Scalar { .. } => {}
        }
        for u in 0..self.tile_b().slots() {
            l += &match self.b {
                TileLoad::QuadAlongK => String::new(),
                TileLoad::Quad => format!(
                    "    %bgk{s}_{u} = index.add {k0}, %b_r{u} : index
    %bokk{s}_{u} = index.cmp ult, %bgk{s}_{u}, %kend : index
    %bok{s}_{u} = scalar.andi %bokk{s}_{u}, %bokc : i1
    %bx{s}_{u} = scf.if %bok{s}_{u} -> (vector<4xu32>) {{
      %bq{s}_{u} = index.add %bw0_{u}, %bkw{s} : index
      %bw{s}_{u} = index.mul %bq{s}_{u}, %c4 : index
      %bv{s}_{u} = vector.load %bv[%bw{s}_{u}] : view<[%lbw]xu32> -> vector<4xu32>
      scf.yield %bv{s}_{u} : vector<4xu32>
    }} else {{
      scf.yield %uz4 : vector<4xu32>
    }}
"
                ),
                TileLoad::Scalar { .. } => format!(
                    "    %bgk{s}_{u} = index.add {k0}, %br_{u} : index
    %bokk{s}_{u} = index.cmp ult, %bgk{s}_{u}, %kend : index
    %bok{s}_{u} = scalar.andi %bokk{s}_{u}, %bokc_{u} : i1
    %bx{s}_{u} = scf.if %bok{s}_{u} -> (f16) {{
      %bp{s}_{u} = index.madd %bgk{s}_{u}, %sbk, %bpc_{u} : index
      %bv{s}_{u} = view.load %bv[%bp{s}_{u}] : view<[%lb]xf16> -> f16
      scf.yield %bv{s}_{u} : f16
    }} else {{
      scf.yield %hzero : f16
    }}
"
                ),
            };
        }
        l
    }
}

/// Addressing of an operand staged as rows along k with 16-byte loads (A,
/// or a transposed B): copy `u`'s row is `first + %{x}_r{u}`, inside when
/// below `bound`; `%{x}p_{u}` is the quad index of that row's start plus
/// the work item's column group.
fn rows_along_k(
    x: &str,
    slots: usize,
    first: &str,
    bound: &str,
    stride: &str,
    base: &str,
) -> String {
    let mut l = format!(
        "  %{x}rsq = index.div {stride}, %cq : index\n  %{x}baseq = index.div {base}, %cq : index\n"
    );
    for u in 0..slots {
        l += &format!(
            "  %{x}gr_{u} = index.add {first}, %{x}_r{u} : index
  %{x}okr_{u} = index.cmp ult, %{x}gr_{u}, {bound} : index
  %{x}p0_{u} = index.madd %{x}gr_{u}, %{x}rsq, %{x}baseq : index
  %{x}p_{u} = index.add %{x}p0_{u}, %{x}_g : index
"
        );
    }
    l
}

/// The 16-byte loads along k at `k0` of an operand set up by
/// `rows_along_k`, into `%{x}x{s}_{u}` (zero outside the matrix and past
/// the split).
fn fetch_along_k(x: &str, slots: usize, s: &str, k0: &str) -> String {
    let mut l = format!(
        "    %{x}gk{s} = index.add {k0}, %{x}_col : index
    %{x}okk{s} = index.cmp ult, %{x}gk{s}, %kend : index
    %{x}kq{s} = index.div {k0}, %cq : index
"
    );
    for u in 0..slots {
        l += &format!(
            "    %{x}ok{s}_{u} = scalar.andi %{x}okr_{u}, %{x}okk{s} : i1
    %{x}x{s}_{u} = scf.if %{x}ok{s}_{u} -> (vector<4xu32>) {{
      %{x}q{s}_{u} = index.add %{x}p_{u}, %{x}kq{s} : index
      %{x}w{s}_{u} = index.mul %{x}q{s}_{u}, %c4 : index
      %{x}v{s}_{u} = vector.load %{x}v[%{x}w{s}_{u}] : view<[%l{x}w]xu32> -> vector<4xu32>
      scf.yield %{x}v{s}_{u} : vector<4xu32>
    }} else {{
      scf.yield %uz4 : vector<4xu32>
    }}
"
        );
    }
    l
}

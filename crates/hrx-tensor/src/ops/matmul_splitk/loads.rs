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
        let quad = self.a == TileLoad::Quad;
        let mut l = String::new();
        if quad {
            l += "  %samq = index.div %sam, %cq : index\n  %baseaq = index.div %basea, %cq : index\n";
        }
        for u in 0..self.tile_a().slots() {
            l += &if quad {
                format!(
                    "  %aokr_{u} = index.cmp ult, %a_r{u}, %m : index
  %ap0_{u} = index.madd %a_r{u}, %samq, %baseaq : index
  %ap_{u} = index.add %ap0_{u}, %a_g : index
"
                )
            } else {
                format!(
                    "  %aokr_{u} = index.cmp ult, %ar_{u}, %m : index
  %apr_{u} = index.madd %ar_{u}, %sam, %basea : index
"
                )
            };
        }
        l
    }

    /// B's: `%bokc`/`%bokc_{u}` says the column is inside B; quads get the
    /// quad index of copy `u` at k = 0 of the whole matrix, `%bw0_{u}`;
    /// elements the column's element index `%bpc_{u}`.
    pub(super) fn setup_b(&self) -> String {
        let mut l = String::new();
        if self.b == TileLoad::Quad {
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
            l += &format!(
                "    %agk{s} = index.add {k0}, %a_col : index
    %aokk{s} = index.cmp ult, %agk{s}, %kend : index
    %akq{s} = index.div {k0}, %cq : index
"
            );
        }
        for u in 0..self.tile_a().slots() {
            l += &match self.a {
                TileLoad::Quad => format!(
                    "    %aok{s}_{u} = scalar.andi %aokr_{u}, %aokk{s} : i1
    %ax{s}_{u} = scf.if %aok{s}_{u} -> (vector<4xu32>) {{
      %aq{s}_{u} = index.add %ap_{u}, %akq{s} : index
      %aw{s}_{u} = index.mul %aq{s}_{u}, %c4 : index
      %av{s}_{u} = vector.load %av[%aw{s}_{u}] : view<[%law]xu32> -> vector<4xu32>
      scf.yield %av{s}_{u} : vector<4xu32>
    }} else {{
      scf.yield %uz4 : vector<4xu32>
    }}
"
                ),
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
        if self.b == TileLoad::Quad {
            l += &format!("    %bkw{s} = index.mul {k0}, %sbkq : index\n");
        }
        for u in 0..self.tile_b().slots() {
            l += &match self.b {
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

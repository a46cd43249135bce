//! The element-by-element copies of A and B, for layouts a wide copy
//! cannot take.

use crate::ops::matmul_coop::CoopTiles;

impl CoopTiles {
    /// Element-by-element copy of the tile of A at `k0`; `k_fast` orders
    /// the elements so consecutive work items read consecutive addresses.
    pub(super) fn scalar_a(&self, k_fast: bool, k0: &str) -> String {
        format!(
            "    scf.for %e = [%tid to %ca step %cth] {{
{pos}
      %gr = index.add %row0, %ar : index
      %gk = index.add {k0}, %ac : index
      %okr = index.cmp ult, %gr, %m : index
      %okk = index.cmp ult, %gk, %k : index
      %ok = scalar.andi %okr, %okk : i1
      %x = scf.if %ok -> (f16) {{
        %pr = index.madd %gr, %sam, %basea : index
        %p = index.madd %gk, %sak, %pr : index
        %v = view.load %av[%p] : view<[%la]xf16> -> f16
        scf.yield %v : f16
      }} else {{
        scf.yield %hzero : f16
      }}
      view.store %x, %ta[%ar, %ac] : f16, {ta}
    }}
",
            pos = pos(k_fast, self.bm, self.bk, "ar", "ac"),
            ta = self.tile_a()
        )
    }

    /// Element-by-element copy of the tile of B at `k0`.
    pub(super) fn scalar_b(&self, n_fast: bool, k0: &str) -> String {
        format!(
            "    scf.for %e = [%tid to %cb step %cth] {{
{pos}
      %gk = index.add {k0}, %br : index
      %gc = index.add %col0, %bc : index
      %okk = index.cmp ult, %gk, %k : index
      %okc = index.cmp ult, %gc, %n : index
      %ok = scalar.andi %okk, %okc : i1
      %x = scf.if %ok -> (f16) {{
        %pc = index.madd %gc, %sbn, %baseb : index
        %p = index.madd %gk, %sbk, %pc : index
        %v = view.load %bv[%p] : view<[%lb]xf16> -> f16
        scf.yield %v : f16
      }} else {{
        scf.yield %hzero : f16
      }}
      view.store %x, %tb[%br, %bc] : f16, {tb}
    }}
",
            pos = pos(n_fast, self.bk, self.bn, "br", "bc"),
            tb = self.tile_b()
        )
    }
}

/// Lines mapping `%e` to tile row `%{r}` and column `%{c}`, with the
/// column (`fast_inner`) or the row varying fastest.
fn pos(fast_inner: bool, rows: usize, cols: usize, r: &str, c: &str) -> String {
    if fast_inner {
        format!(
            "      %{r}_d = index.constant {cols} : index\n      %{r} = index.div %e, %{r}_d : index\n      %{c} = index.rem %e, %{r}_d : index"
        )
    } else {
        format!(
            "      %{r}_d = index.constant {rows} : index\n      %{r} = index.rem %e, %{r}_d : index\n      %{c} = index.div %e, %{r}_d : index"
        )
    }
}

//! How the cooperative-matrix kernel copies tiles of A and B from storage
//! into workgroup memory: 16 bytes at a time as u32 words where the layout
//! allows ("wide"), element by element otherwise. Generates the template's
//! VIEWS, SETUP, PROLOGUE, PREFETCH and STAGE lines.

use super::CoopTiles;

/// Which axis of A and B is contiguous, and whether each is copied wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopLayout {
    /// A's k axis has element stride 1 (consecutive invocations then load
    /// consecutive elements of a row).
    pub(crate) a_k_fast: bool,
    /// B's n axis has element stride 1.
    pub(crate) b_n_fast: bool,
    /// A is copied as 16-byte groups of 8 halves along k.
    pub(crate) wide_a: bool,
    /// B is copied as 16-byte groups of 8 halves along n.
    pub(crate) wide_b: bool,
}

/// What the wide copy needs of one operand: its contiguous axis has
/// stride 1, and every group of 8 halves along it starts 16-byte aligned
/// and lies wholly inside or wholly outside the matrix.
pub(crate) struct WideCheck {
    /// Stride along the contiguous axis.
    pub(crate) fast_stride: usize,
    /// Stride between rows along the other axis, and between batch entries.
    pub(crate) row_stride: usize,
    pub(crate) batch_stride: usize,
    /// Extent of the contiguous axis.
    pub(crate) extent: usize,
    /// Element offset in the binding, and the binding's byte offset.
    pub(crate) offset: u64,
    pub(crate) binding_offset: u64,
}

impl WideCheck {
    /// Whether 16-byte copies are exact for this operand.
    pub(crate) fn holds(&self) -> bool {
        self.fast_stride == 1
            && self.row_stride.is_multiple_of(8)
            && self.batch_stride.is_multiple_of(8)
            && self.extent.is_multiple_of(8)
            && self.offset.is_multiple_of(8)
            && self.binding_offset.is_multiple_of(16)
    }
}

/// The generated copy lines.
pub(super) struct Copies {
    pub(super) views: String,
    pub(super) setup: String,
    pub(super) prologue: String,
    pub(super) prefetch: String,
    pub(super) stage: String,
}

/// One operand's wide copy: a tile of `rows` x `cols` halves (the
/// contiguous axis along `cols`), 8 halves per copy.
struct Wide<'a> {
    /// `a` or `b`: the operand's name in the template (`%av`, `%ta`, ...).
    name: &'a str,
    rows: usize,
    cols: usize,
    /// Words per row of the workgroup tile.
    row_words: usize,
    threads: usize,
}

impl Wide<'_> {
    fn per_row(&self) -> usize {
        self.cols / 8
    }
    /// Copies per work item (the last may be past the tile).
    fn count(&self) -> usize {
        (self.rows * self.per_row()).div_ceil(self.threads)
    }
    /// Whether some work items have fewer copies than `count`.
    fn ragged(&self) -> bool {
        !(self.rows * self.per_row()).is_multiple_of(self.threads)
    }
    fn tile(&self) -> String {
        format!("view<{}x{}xu32>", self.rows, self.row_words)
    }

    /// Per work item: its first tile row `%w{x}_rb`, its group `%w{x}_g`
    /// (halves `%w{x}_col`, words `%w{x}_colw`) and the tile row of copy
    /// `i`, `%w{x}_r{i}`, with `%w{x}_in{i}` when it may be past the tile.
    fn setup(&self) -> String {
        let x = self.name;
        let mut l = format!(
            "  %w{x}_pr = index.constant {} : index
  %w{x}_rb = index.div %tid, %w{x}_pr : index
  %w{x}_g = index.rem %tid, %w{x}_pr : index
  %w{x}_col = index.mul %w{x}_g, %c8 : index
  %w{x}_colw = index.mul %w{x}_g, %c4 : index
  %w{x}_rows = index.constant {} : index
",
            self.per_row(),
            self.rows
        );
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

    /// Loads of the tile at `k0` into `%x{x}{s}_{i}` (zeros outside the
    /// matrix); `ok(i)` names the i1 that says copy `i` is inside, `addr(i)`
    /// gives lines computing its half index `%x{x}{s}_h{i}`.
    fn fetch(
        &self,
        s: &str,
        ok: impl Fn(usize) -> String,
        addr: impl Fn(usize) -> String,
    ) -> String {
        let x = self.name;
        let mut l = String::new();
        for i in 0..self.count() {
            l += &format!(
                "{ok}
    %x{x}{s}_{i} = scf.if %x{x}{s}_ok{i} -> (vector<4xu32>) {{
{addr}
      %x{x}{s}_q{i} = index.div %x{x}{s}_h{i}, %c8 : index
      %x{x}{s}_w{i} = index.mul %x{x}{s}_q{i}, %c4 : index
      %x{x}{s}_v{i} = vector.load %{x}v[%x{x}{s}_w{i}] : view<[%l{x}w]xu32> -> vector<4xu32>
      scf.yield %x{x}{s}_v{i} : vector<4xu32>
    }} else {{
      scf.yield %zq : vector<4xu32>
    }}
",
                ok = ok(i),
                addr = addr(i)
            );
        }
        l
    }

    /// Stores of `%x{x}{s}_{i}` into the workgroup tile.
    fn store(&self, s: &str) -> String {
        let x = self.name;
        let tile = self.tile();
        let mut l = String::new();
        for i in 0..self.count() {
            let st = format!(
                "vector.store %x{x}{s}_{i}, %t{x}[%w{x}_r{i}, %w{x}_colw] : vector<4xu32>, {tile}"
            );
            l += &if self.ragged() {
                format!("    scf.if %w{x}_in{i} {{\n      {st}\n    }}\n")
            } else {
                format!("    {st}\n")
            };
        }
        l
    }
}

impl CoopTiles {
    /// Row length of the workgroup tile of A, in halves (padded so the
    /// 16-byte rows of a fragment fall in distinct banks).
    pub(super) fn pa(&self) -> usize {
        self.bk + 8
    }
    /// Row length of the workgroup tile of B, in halves.
    pub(super) fn pb(&self) -> usize {
        self.bn + 8
    }

    /// The view type of the tile of A.
    pub(super) fn tile_a(&self, wide: bool) -> String {
        if wide {
            format!("view<{}x{}xu32>", self.bm, self.pa() / 2)
        } else {
            format!("view<{}x{}xf16>", self.bm, self.pa())
        }
    }
    /// The view type of the tile of B.
    pub(super) fn tile_b(&self, wide: bool) -> String {
        if wide {
            format!("view<{}x{}xu32>", self.bk, self.pb() / 2)
        } else {
            format!("view<{}x{}xf16>", self.bk, self.pb())
        }
    }

    fn wide_a(&self) -> Wide<'static> {
        Wide {
            name: "a",
            rows: self.bm,
            cols: self.bk,
            row_words: self.pa() / 2,
            threads: self.threads(),
        }
    }
    fn wide_b(&self) -> Wide<'static> {
        Wide {
            name: "b",
            rows: self.bk,
            cols: self.bn,
            row_words: self.pb() / 2,
            threads: self.threads(),
        }
    }

    /// The copy lines for `layout`.
    pub(super) fn copies(&self, layout: CoopLayout) -> Copies {
        let mut c = Copies {
            views: "  %c2 = index.constant 2 : index
  %c4 = index.constant 4 : index
  %c8 = index.constant 8 : index
  %zu = scalar.constant 0 : u32
  %zq = vector.splat %zu : u32 -> vector<4xu32>
"
            .into(),
            setup: String::new(),
            prologue: String::new(),
            prefetch: String::new(),
            stage: String::new(),
        };
        let (wa, wb) = (self.wide_a(), self.wide_b());
        // A: rows of the tile are rows of A (%row0 + r), groups run along k.
        if layout.wide_a {
            c.views += "  %law = index.div %la, %c2 : index
  %av = buffer.view %a[%zero] : buffer -> view<[%law]xu32>
";
            c.setup += &wa.setup();
            for i in 0..wa.count() {
                c.setup += &format!(
                    "  %wa_gr{i} = index.add %row0, %wa_r{i} : index
  %wa_okr{i} = index.cmp ult, %wa_gr{i}, %m : index
  %wa_okt{i} = scalar.andi %wa_okr{i}, %wa_in{i} : i1
  %wa_p{i} = index.madd %wa_gr{i}, %sam, %basea : index
"
                );
            }
            let fetch = |s: &str, k0: &str| {
                let head = format!(
                    "    %xa{s}_gk = index.add {k0}, %wa_col : index
    %xa{s}_okk = index.cmp ult, %xa{s}_gk, %k : index
"
                );
                head + &wa.fetch(
                    s,
                    |i| format!("    %xa{s}_ok{i} = scalar.andi %wa_okt{i}, %xa{s}_okk : i1"),
                    |i| format!("      %xa{s}_h{i} = index.add %wa_p{i}, %xa{s}_gk : index"),
                )
            };
            c.prologue += &(fetch("p", "%k0") + &wa.store("p"));
            c.prefetch += &fetch("l", "%kn");
            c.stage += &wa.store("l");
        } else {
            c.views += "  %av = buffer.view %a[%zero] : buffer -> view<[%la]xf16>\n";
            c.prologue += &self.scalar_a(layout.a_k_fast, "%k0");
            c.stage += &self.scalar_a(layout.a_k_fast, "%kn");
        }
        // B: rows of the tile are k (%k0 + r), groups run along n.
        if layout.wide_b {
            c.views += "  %lbw = index.div %lb, %c2 : index
  %bv = buffer.view %b[%zero] : buffer -> view<[%lbw]xu32>
";
            c.setup += &wb.setup();
            c.setup += "  %wb_gc = index.add %col0, %wb_col : index
  %wb_okc = index.cmp ult, %wb_gc, %n : index
  %wb_pc = index.add %baseb, %wb_gc : index
";
            for i in 0..wb.count() {
                c.setup += &format!("  %wb_okt{i} = scalar.andi %wb_okc, %wb_in{i} : i1\n");
            }
            let fetch = |s: &str, k0: &str| {
                wb.fetch(
                    s,
                    |i| {
                        format!(
                            "    %xb{s}_gk{i} = index.add {k0}, %wb_r{i} : index
    %xb{s}_okk{i} = index.cmp ult, %xb{s}_gk{i}, %k : index
    %xb{s}_ok{i} = scalar.andi %wb_okt{i}, %xb{s}_okk{i} : i1"
                        )
                    },
                    |i| {
                        format!("      %xb{s}_h{i} = index.madd %xb{s}_gk{i}, %sbk, %wb_pc : index")
                    },
                )
            };
            c.prologue += &(fetch("p", "%k0") + &wb.store("p"));
            c.prefetch += &fetch("l", "%kn");
            c.stage += &wb.store("l");
        } else {
            c.views += "  %bv = buffer.view %b[%zero] : buffer -> view<[%lb]xf16>\n";
            c.prologue += &self.scalar_b(layout.b_n_fast, "%k0");
            c.stage += &self.scalar_b(layout.b_n_fast, "%kn");
        }
        c
    }

    /// Element-by-element copy of the tile of A at `k0`; `k_fast` orders
    /// the elements so consecutive work items read consecutive addresses.
    fn scalar_a(&self, k_fast: bool, k0: &str) -> String {
        let ta = self.tile_a(false);
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
            pos = pos(k_fast, self.bm, self.bk, "ar", "ac")
        )
    }

    /// Element-by-element copy of the tile of B at `k0`.
    fn scalar_b(&self, n_fast: bool, k0: &str) -> String {
        let tb = self.tile_b(false);
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
            pos = pos(n_fast, self.bk, self.bn, "br", "bc")
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

#[cfg(test)]
mod tests {
    use super::super::{coop_tiles, layout_source};
    use super::CoopLayout;
    use hrx_core::Target;
    use hrx_loom::{Compiler, Specialization};

    /// Every mix of wide and element copies, both axis orders, and each
    /// tiling compiles for the H200 target (naga validates the module).
    #[test]
    fn every_copy_layout_compiles_for_hopper() {
        let target = Target::hopper();
        let compiler = Compiler::for_target(None, &target).unwrap();
        for m in [16, 32, 64, 4096] {
            let tiles = coop_tiles(&target, m).unwrap();
            for bits in 0..16u8 {
                let layout = CoopLayout {
                    a_k_fast: bits & 1 != 0,
                    b_n_fast: bits & 2 != 0,
                    wide_a: bits & 4 != 0,
                    wide_b: bits & 8 != 0,
                };
                let src = layout_source(&tiles, layout);
                compiler
                    .module(&src)
                    .and_then(|module| {
                        module.compile_uncached(&Specialization::new("@matmul_coop"))
                    })
                    .unwrap_or_else(|e| panic!("m={m} {layout:?}: {e}"));
            }
        }
    }
}

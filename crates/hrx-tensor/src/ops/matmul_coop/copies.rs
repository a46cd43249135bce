//! How the cooperative-matrix kernel copies tiles of A and B from storage
//! into its f16 workgroup tiles: 16 bytes per load as u32 words where the
//! layout allows ("wide"), each word unpacked into two halves; element by
//! element otherwise. Generates the template's VIEWS, SETUP, PROLOGUE,
//! PREFETCH and STAGE lines.
//!
//! A wide copy gives every work item a fixed column group (8 halves) and a
//! fixed set of tile rows, so all address arithmetic that involves a
//! division happens once before the k loop; per k step a work item adds one
//! word offset per operand. Each work item stores its four words in an
//! order rotated by its position (see `Rotation`) so that a subgroup's
//! halfword stores into the tile meet no bank conflicts. Only the
//! fragments' loads read the tiles, and they always do through f16 views
//! (NVIDIA's compiler rejects f16 fragments loaded through u32 views).

use super::CoopTiles;

/// Which axis of A and B is contiguous, and whether each is copied wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopLayout {
    /// A's k axis has element stride 1 (consecutive work items then load
    /// consecutive elements of a row on the element path).
    pub(crate) a_k_fast: bool,
    /// B's n axis has element stride 1.
    pub(crate) b_n_fast: bool,
    /// A is copied as 16-byte groups of 8 halves along k.
    pub(crate) wide_a: bool,
    /// B is copied as 16-byte groups of 8 halves along n.
    pub(crate) wide_b: bool,
}

/// What a wide copy needs of one operand: its contiguous axis has stride
/// 1, and every group of 8 halves along it starts 16-byte aligned and lies
/// wholly inside or wholly outside the matrix.
pub(crate) struct WideCheck {
    /// Element stride along the contiguous axis.
    pub(crate) fast_stride: usize,
    /// Element stride between rows (the other axis).
    pub(crate) row_stride: usize,
    /// Element stride between batch entries.
    pub(crate) batch_stride: usize,
    /// Extent of the contiguous axis.
    pub(crate) extent: usize,
    /// Element offset of the operand in its binding.
    pub(crate) offset: u64,
    /// Byte offset of the binding in its buffer.
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

/// One operand's wide copy: a tile of `rows` x `cols` halves with the
/// contiguous axis along `cols`, 8 halves per copy.
struct Wide {
    /// `a` or `b`: the operand's name in the template (`%av`, `%ta`, ...).
    name: &'static str,
    rows: usize,
    cols: usize,
    /// The tile's view type.
    tile: String,
    /// Halves per tile row (the padded row length).
    pitch: usize,
    threads: usize,
    /// Invocations per subgroup (the work items that store together).
    sg: usize,
}

/// Which rotation a work item applies to the four words of a 16-byte copy
/// when it stores them. The tile is f16, so every word becomes separate
/// halfword stores; without a rotation, store `j` of all lanes of a
/// subgroup hits word `j` of each lane's group, and groups whose start
/// words agree modulo the bank count collide (4-way for the 128 x 64 tile
/// of A). Rotating word `j` to `(j + s) % 4` with `s` differing across the
/// colliding lanes spreads each store over distinct banks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rotation {
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
    fn per_row(&self) -> usize {
        self.cols / 8
    }
    /// Whether every work item keeps one column group across its copies.
    fn fits(&self) -> bool {
        self.cols.is_multiple_of(8) && self.threads.is_multiple_of(self.per_row())
    }
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
    fn conflict(&self, rot: Rotation) -> usize {
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
    fn rotation(&self) -> Rotation {
        [Rotation::None, Rotation::Quarter, Rotation::Row]
            .into_iter()
            .min_by_key(|r| self.conflict(*r))
            .unwrap_or(Rotation::None)
    }

    /// Copies per work item (the last may lie past the tile).
    fn count(&self) -> usize {
        (self.rows * self.per_row()).div_ceil(self.threads)
    }
    /// Whether some work items have fewer than `count` copies.
    fn ragged(&self) -> bool {
        !(self.rows * self.per_row()).is_multiple_of(self.threads)
    }

    /// Per work item: its first tile row, its column group `%w{x}_col`
    /// (and `%w{x}_cw{j}`, the column of word `j`), the tile row of copy
    /// `i`, `%w{x}_r{i}`, and `%w{x}_in{i}` when it may lie past the tile.
    fn setup(&self) -> String {
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
            let s0 = if rot == Rotation::Quarter {
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
    fn inside(&self, i: usize, def: &str, ok: &str) -> (String, String) {
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
    fn fetch(&self, s: &str, word: impl Fn(usize) -> String) -> String {
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
    fn store(&self, s: &str) -> String {
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

impl CoopTiles {
    fn wide_a(&self) -> Wide {
        Wide {
            name: "a",
            rows: self.bm,
            cols: self.bk,
            tile: self.tile_a(),
            pitch: self.pa(),
            threads: self.threads(),
            sg: self.sg,
        }
    }
    fn wide_b(&self) -> Wide {
        Wide {
            name: "b",
            rows: self.bk,
            cols: self.bn,
            tile: self.tile_b(),
            pitch: self.pb(),
            threads: self.threads(),
            sg: self.sg,
        }
    }

    /// `layout` with the wide copies this tiling cannot map to fixed
    /// column groups turned off.
    pub(super) fn usable(&self, layout: CoopLayout) -> CoopLayout {
        CoopLayout {
            wide_a: layout.wide_a && self.wide_a().fits(),
            wide_b: layout.wide_b && self.wide_b().fits(),
            ..layout
        }
    }

    /// The copy lines for `layout` (already passed through `usable`).
    pub(super) fn copies(&self, layout: CoopLayout) -> Copies {
        let mut c = Copies {
            views: "  %c8 = index.constant 8 : index
  %c4 = index.constant 4 : index
  %c2 = index.constant 2 : index
  %cq0 = index.constant 0 : index
  %cq1 = index.constant 1 : index
  %cq2 = index.constant 2 : index
  %cq3 = index.constant 3 : index
  %zu = scalar.constant 0 : u32
  %zq = vector.splat %zu : u32 -> vector<4xu32>
"
            .into(),
            setup: String::new(),
            prologue: String::new(),
            prefetch: String::new(),
            stage: String::new(),
        };
        if layout.wide_a {
            self.wide_a_copies(&mut c);
        } else {
            c.views += "  %av = buffer.view %a[%zero] : buffer -> view<[%la]xf16>\n";
            c.prologue += &self.scalar_a(layout.a_k_fast, "%k0");
            c.stage += &self.scalar_a(layout.a_k_fast, "%kn");
        }
        if layout.wide_b {
            self.wide_b_copies(&mut c);
        } else {
            c.views += "  %bv = buffer.view %b[%zero] : buffer -> view<[%lb]xf16>\n";
            c.prologue += &self.scalar_b(layout.b_n_fast, "%k0");
            c.stage += &self.scalar_b(layout.b_n_fast, "%kn");
        }
        c
    }

    /// A: tile rows are rows of A (`%row0 + r`), groups run along k. The
    /// word index of copy `i` at k step `t` is its word at k = 0 plus
    /// `t * BK / 2`.
    fn wide_a_copies(&self, c: &mut Copies) {
        let wa = self.wide_a();
        c.views += &format!(
            "  %law = index.div %la, %c2 : index
  %av = buffer.view %a[%zero] : buffer -> view<[%law]xu32>
  %wa_kw = index.constant {} : index
",
            self.bk / 2
        );
        c.setup += &wa.setup();
        let mut okt = Vec::new();
        for i in 0..wa.count() {
            let (lines, ok) = wa.inside(i, &format!("%wa_okt{i}"), &format!("%wa_okr{i}"));
            okt.push(ok);
            c.setup += &format!(
                "  %wa_gr{i} = index.add %row0, %wa_r{i} : index
  %wa_okr{i} = index.cmp ult, %wa_gr{i}, %m : index
{lines}  %wa_p{i} = index.madd %wa_gr{i}, %sam, %basea : index
  %wa_h{i} = index.add %wa_p{i}, %wa_col : index
  %wa_q{i} = index.div %wa_h{i}, %c8 : index
  %wa_w{i} = index.mul %wa_q{i}, %c4 : index
"
            );
        }
        let fetch = |s: &str, k0: &str, step: &str| {
            let mut l = format!(
                "    %xa{s}_gk = index.add {k0}, %wa_col : index
    %xa{s}_okk = index.cmp ult, %xa{s}_gk, %k : index
    %xa{s}_kw = index.mul {step}, %wa_kw : index
"
            );
            for (i, ok) in okt.iter().enumerate() {
                l += &format!(
                    "    %xa{s}_ok{i} = scalar.andi {ok}, %xa{s}_okk : i1
    %xa{s}_w{i} = index.add %wa_w{i}, %xa{s}_kw : index
"
                );
            }
            l + &wa.fetch(s, |i| format!("%xa{s}_w{i}"))
        };
        c.prologue += &(fetch("p", "%k0", "%c0") + &wa.store("p"));
        c.prefetch += &fetch("l", "%kn", "%t1");
        c.stage += &wa.store("l");
    }

    /// B: tile rows are k (`%k0 + r`), groups run along n. One k step
    /// moves every copy by `BK * sbk / 2` words.
    fn wide_b_copies(&self, c: &mut Copies) {
        let wb = self.wide_b();
        c.views += "  %lbw = index.div %lb, %c2 : index
  %bv = buffer.view %b[%zero] : buffer -> view<[%lbw]xu32>
";
        c.setup += &wb.setup();
        c.setup += &format!(
            "  %wb_gc = index.add %col0, %wb_col : index
  %wb_okc = index.cmp ult, %wb_gc, %n : index
  %wb_pc = index.add %baseb, %wb_gc : index
  %wb_s8 = index.div %sbk, %c8 : index
  %wb_kc = index.constant {} : index
  %wb_kw = index.mul %wb_s8, %wb_kc : index
",
            self.bk * 4
        );
        let mut okt = Vec::new();
        for i in 0..wb.count() {
            let (lines, ok) = wb.inside(i, &format!("%wb_okt{i}"), "%wb_okc");
            okt.push(ok);
            c.setup += &format!(
                "{lines}  %wb_h{i} = index.madd %wb_r{i}, %sbk, %wb_pc : index
  %wb_q{i} = index.div %wb_h{i}, %c8 : index
  %wb_w{i} = index.mul %wb_q{i}, %c4 : index
"
            );
        }
        let fetch = |s: &str, k0: &str, step: &str| {
            let mut l = format!("    %xb{s}_kw = index.mul {step}, %wb_kw : index\n");
            for (i, ok) in okt.iter().enumerate() {
                l += &format!(
                    "    %xb{s}_gk{i} = index.add {k0}, %wb_r{i} : index
    %xb{s}_okk{i} = index.cmp ult, %xb{s}_gk{i}, %k : index
    %xb{s}_ok{i} = scalar.andi {ok}, %xb{s}_okk{i} : i1
    %xb{s}_w{i} = index.add %wb_w{i}, %xb{s}_kw : index
"
                );
            }
            l + &wb.fetch(s, |i| format!("%xb{s}_w{i}"))
        };
        c.prologue += &(fetch("p", "%k0", "%c0") + &wb.store("p"));
        c.prefetch += &fetch("l", "%kn", "%t1");
        c.stage += &wb.store("l");
    }

    /// Element-by-element copy of the tile of A at `k0`; `k_fast` orders
    /// the elements so consecutive work items read consecutive addresses.
    fn scalar_a(&self, k_fast: bool, k0: &str) -> String {
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
    fn scalar_b(&self, n_fast: bool, k0: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::super::{CoopTiles, coop_tiles, coop_tiles_for};
    use super::{CoopLayout, Rotation, WideCheck};
    use hrx_core::Target;
    use hrx_loom::{Compiler, Specialization};

    /// Every tiling the H200 gets: decode, large m, and the wide tiling of
    /// large m and n.
    fn hopper_tilings() -> Vec<(String, CoopTiles)> {
        let target = Target::hopper();
        let mut all: Vec<(String, CoopTiles)> = [16, 32, 64, 4096]
            .into_iter()
            .map(|m| (format!("m={m}"), coop_tiles(&target, m).unwrap()))
            .collect();
        let wide = coop_tiles_for(&target, 8192, 8192, 1).unwrap();
        assert_eq!((wide.bm, wide.bn, wide.bk), (128, 256, 32));
        assert!(all.iter().all(|(_, t)| *t != wide));
        all.push(("m=n=8192".into(), wide));
        all
    }

    /// Every mix of wide and element copies, both axis orders, and each
    /// tiling compiles for the H200 target (naga validates the module).
    #[test]
    fn every_copy_layout_compiles_for_hopper() {
        let target = Target::hopper();
        let compiler = Compiler::for_target(None, &target).unwrap();
        for (m, tiles) in hopper_tilings() {
            for bits in 0..16u8 {
                let layout = CoopLayout {
                    a_k_fast: bits & 1 != 0,
                    b_n_fast: bits & 2 != 0,
                    wide_a: bits & 4 != 0,
                    wide_b: bits & 8 != 0,
                };
                let src = tiles.source(layout, String::new(), "%x");
                compiler
                    .module(&src)
                    .and_then(|module| {
                        module.compile_uncached(&Specialization::new("@matmul_coop"))
                    })
                    .unwrap_or_else(|e| panic!("{m} {layout:?}: {e}"));
            }
        }
    }

    /// The wide copies' halfword stores of every Hopper tiling reach
    /// distinct banks within a subgroup (the rotation is needed for the
    /// 128 x 64 tile of A, 4-way conflicted without it).
    #[test]
    fn wide_stores_are_free_of_bank_conflicts_on_hopper() {
        let target = Target::hopper();
        for (m, tiles) in hopper_tilings() {
            for wide in [tiles.wide_a(), tiles.wide_b()] {
                if wide.fits() {
                    let rot = wide.rotation();
                    assert_eq!(wide.conflict(rot), 1, "{m} {} {rot:?}", wide.name);
                }
            }
        }
        let big = coop_tiles(&target, 4096).unwrap().wide_a();
        assert_eq!(big.conflict(Rotation::None), 4);
        assert_eq!(big.rotation(), Rotation::Quarter);
    }

    #[test]
    fn wide_copies_need_aligned_contiguous_rows() {
        let ok = || WideCheck {
            fast_stride: 1,
            row_stride: 4096,
            batch_stride: 0,
            extent: 4096,
            offset: 8,
            binding_offset: 256,
        };
        assert!(ok().holds());
        for bad in [
            WideCheck {
                fast_stride: 4096,
                ..ok()
            },
            WideCheck {
                row_stride: 4100,
                ..ok()
            },
            WideCheck {
                batch_stride: 12,
                ..ok()
            },
            WideCheck {
                extent: 4092,
                ..ok()
            },
            WideCheck { offset: 4, ..ok() },
            WideCheck {
                binding_offset: 8,
                ..ok()
            },
        ] {
            assert!(!bad.holds());
        }
    }
}

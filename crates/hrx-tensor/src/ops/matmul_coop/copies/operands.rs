//! The wide copies of A and B: where each work item's 16-byte groups lie
//! in its matrix, and how a k step moves them.

use super::{Copies, wide::Wide};
use crate::ops::matmul_coop::CoopTiles;

impl CoopTiles {
    pub(super) fn wide_a(&self) -> Wide {
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
    /// B staged n-major (`BN x BK`, rows padded like A's) for a B that is
    /// contiguous along k.
    pub(super) fn wide_bt(&self) -> Wide {
        Wide {
            name: "b",
            rows: self.bn,
            cols: self.bk,
            tile: self.tile_bt(),
            pitch: self.pbt(),
            threads: self.threads(),
            sg: self.sg,
        }
    }
    pub(super) fn wide_b(&self) -> Wide {
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

    /// A: tile rows are rows of A (`%row0 + r`), groups run along k.
    pub(super) fn wide_a_copies(&self, c: &mut Copies) {
        self.rows_along_k(c, &self.wide_a(), ["%row0", "%m", "%sam", "%basea"]);
    }

    /// A transposed B (contiguous along k): tile rows are columns of B
    /// (`%col0 + r`), groups run along k, as for A.
    pub(super) fn wide_bt_copies(&self, c: &mut Copies) {
        self.rows_along_k(c, &self.wide_bt(), ["%col0", "%n", "%sbn", "%baseb"]);
    }

    /// Wide copies of an operand staged as rows along k: tile row `r` is
    /// row `first + r` of the operand (inside when below `bound`, `stride`
    /// elements apart from `base`). The word index of copy `i` at k step
    /// `t` is its word at k = 0 plus `t * BK / 2`.
    fn rows_along_k(&self, c: &mut Copies, w: &Wide, [first, bound, stride, base]: [&str; 4]) {
        let x = w.name;
        c.views += &format!(
            "  %l{x}w = index.div %l{x}, %c2 : index
  %{x}v = buffer.view %{x}[%zero] : buffer -> view<[%l{x}w]xu32>
  %w{x}_kw = index.constant {} : index
",
            self.bk / 2
        );
        c.setup += &w.setup();
        let mut okt = Vec::new();
        for i in 0..w.count() {
            let (lines, ok) = w.inside(i, &format!("%w{x}_okt{i}"), &format!("%w{x}_okr{i}"));
            okt.push(ok);
            c.setup += &format!(
                "  %w{x}_gr{i} = index.add {first}, %w{x}_r{i} : index
  %w{x}_okr{i} = index.cmp ult, %w{x}_gr{i}, {bound} : index
{lines}  %w{x}_p{i} = index.madd %w{x}_gr{i}, {stride}, {base} : index
  %w{x}_h{i} = index.add %w{x}_p{i}, %w{x}_col : index
  %w{x}_q{i} = index.div %w{x}_h{i}, %c8 : index
  %w{x}_w{i} = index.mul %w{x}_q{i}, %c4 : index
"
            );
        }
        let fetch = |s: &str, k0: &str, step: &str| {
            let mut l = format!(
                "    %x{x}{s}_gk = index.add {k0}, %w{x}_col : index
    %x{x}{s}_okk = index.cmp ult, %x{x}{s}_gk, %k : index
    %x{x}{s}_kw = index.mul {step}, %w{x}_kw : index
"
            );
            for (i, ok) in okt.iter().enumerate() {
                l += &format!(
                    "    %x{x}{s}_ok{i} = scalar.andi {ok}, %x{x}{s}_okk : i1
    %x{x}{s}_w{i} = index.add %w{x}_w{i}, %x{x}{s}_kw : index
"
                );
            }
            l + &w.fetch(s, |i| format!("%x{x}{s}_w{i}"))
        };
        c.prologue += &(fetch("p", "%k0", "%c0") + &w.store("p"));
        c.prefetch += &fetch("l", "%kn", "%t1");
        c.stage += &w.store("l");
    }

    /// B: tile rows are k (`%k0 + r`), groups run along n. One k step
    /// moves every copy by `BK * sbk / 2` words.
    pub(super) fn wide_b_copies(&self, c: &mut Copies) {
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
}

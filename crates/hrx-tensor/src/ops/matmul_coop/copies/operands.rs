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

    /// A: tile rows are rows of A (`%row0 + r`), groups run along k. The
    /// word index of copy `i` at k step `t` is its word at k = 0 plus
    /// `t * BK / 2`.
    pub(super) fn wide_a_copies(&self, c: &mut Copies) {
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

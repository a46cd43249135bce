//! The split-k kernel's source: the template's substitutions for one plan
//! (tile copies, fragment multiplies, pipelining, the scratch stores and
//! the last workgroup's sum).

use super::{BN, SplitK, TileLoad, finish::finish_lines};
use crate::ops::registry::{KernelKey, KernelSource};

const SPLITK: &str = include_str!("../../../kernels/matmul_coop_splitk.loom");

impl SplitK {
    /// The kernel's template substitutions, with the activation's lines
    /// and result value (see `activation::epilogue`).
    fn substitutions(&self, act: String, result: &str) -> Vec<(&'static str, String)> {
        let (mp, bk, threads) = (self.mp, self.bk, self.threads());
        let (ta, tb) = (self.tile_a(), self.tile_b());
        let (ty_a, ty_b) = (ta.ty(), tb.ty());
        // Row fragments per subgroup.
        let mf = mp / 16 / self.groups;
        let view = |name: &str, len: &str, load: TileLoad| match load {
            TileLoad::Quad | TileLoad::QuadAlongK => format!(
                "  %{name}_two = index.constant 2 : index
  %{len}w = index.div %{len}, %{name}_two : index
  %{name}v = buffer.view %{name}[%zero] : buffer -> view<[%{len}w]xu32>"
            ),
            TileLoad::Scalar { .. } => {
                format!("  %{name}v = buffer.view %{name}[%zero] : buffer -> view<[%{len}]xf16>")
            }
        };
        // Subgroup g takes column fragment g % 4 and row group g / 4.
        let mut prep = format!(
            "  %cq = index.constant 8 : index
  %c4 = index.constant 4 : index
  %uzs = scalar.constant 0 : u32
  %uz4 = vector.splat %uzs : u32 -> vector<4xu32>
  %sgc = index.rem %sg, %c4 : index
  %fcol = index.mul %sgc, %cfn : index
  %sgr = index.div %sg, %c4 : index
  %crg = index.constant {} : index
  %frow = index.mul %sgr, %crg : index
",
            16 * mf
        );
        for p in 0..4 {
            prep += &format!(
                "  %l{p} = index.constant {p} : index\n  %ce{p} = index.constant {} : index\n",
                2 * p
            );
        }
        prep += &ta.setup();
        prep += &tb.setup();
        prep += &self.setup_a();
        prep += &self.setup_b();

        let ty_c = "coopmat<16x16xf32, c>";
        let frags: Vec<usize> = (0..mf).collect();
        let mut zeros = vec!["  %fco_0 = index.add %fcol, %c0 : index".to_string()];
        for i in &frags {
            zeros.push(format!(
                "  %froc_{i} = index.constant {} : index
  %fro_{i} = index.add %frow, %froc_{i} : index
  %z_{i} = coop.zero : {ty_c}",
                16 * i
            ));
        }
        let name = |i: usize, s: usize| {
            if s == 0 {
                format!("%cc_{i}")
            } else {
                format!("%acc_{i}_{s}")
            }
        };
        let ksteps = bk / 16;
        let mut body = vec![];
        for s in 0..ksteps {
            // An n-major tile holds B's fragments column by column.
            let fb = if self.b == TileLoad::QuadAlongK {
                format!("coop.load<col_major> %tb[%fco_0, %ko_{s}]")
            } else {
                format!("coop.load<row_major> %tb[%ko_{s}, %fco_0]")
            };
            body.push(format!(
                "    %ko_{s} = index.constant {} : index
    %fb_{s} = {fb} : {ty_b} -> coopmat<16x16xf16, b>",
                16 * s
            ));
            for &i in &frags {
                body.push(format!(
                    "    %fa_{s}_{i} = coop.load<row_major> %ta[%fro_{i}, %ko_{s}] : {ty_a} -> coopmat<16x16xf16, a>
    {} = coop.mma %fa_{s}_{i}, %fb_{s}, {} : coopmat<16x16xf16, a>, coopmat<16x16xf16, b>, {ty_c}",
                    name(i, s + 1),
                    name(i, s)
                ));
            }
        }
        let body = body.join("\n");
        let barrier = "    kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)\n";
        let stores = |s: &str| ta.store(s) + &tb.store(s);
        // Pipelined: the split's first step before the loop, each
        // iteration loading the next; else load, store and multiply in turn.
        let (prologue, looped) = if self.prefetch {
            (
                format!("{}{}{barrier}", self.fetch("p", "%kbeg"), stores("p")),
                format!(
                    "    %kn = index.madd %t1, %cbk, %kbeg : index
{}{body}\n{barrier}{}{barrier}",
                    self.fetch("l", "%kn"),
                    stores("l")
                ),
            )
        } else {
            (
                String::new(),
                format!(
                    "    %kn = index.madd %t, %cbk, %kbeg : index
{}{}{barrier}{body}\n{barrier}",
                    self.fetch("l", "%kn"),
                    stores("l")
                ),
            )
        };
        // The scratch is padded to whole fragments (MP rows per split,
        // NPAD a multiple of BN columns), so the sums go straight to it.
        let mut epilogue = vec![
            "  %wrows = index.div %lw, %npad : index
  %wv = buffer.view %w[%zero] : buffer -> view<[%wrows]x[%npad]xf32>"
                .to_string(),
        ];
        for &i in &frags {
            epilogue.push(format!(
                "  %wr_{i} = index.add %wrow0, %fro_{i} : index
  coop.store<row_major> %res_{i}, %wv[%wr_{i}, %wcol] : {ty_c}, view<[%wrows]x[%npad]xf32>"
            ));
        }
        let list = |f: &dyn Fn(usize) -> String| {
            frags.iter().map(|&i| f(i)).collect::<Vec<_>>().join(", ")
        };
        vec![
            ("BN", BN.to_string()),
            ("BN1", (BN - 1).to_string()),
            ("BK", bk.to_string()),
            ("BK1", (bk - 1).to_string()),
            ("MP", mp.to_string()),
            ("THREADS", threads.to_string()),
            ("FNC", "16".into()),
            ("A_BYTES", (mp * (bk + 8) * 2).to_string()),
            ("B_BYTES", (tb.rows * (tb.cols + 8) * 2).to_string()),
            ("TA", ty_a),
            ("TB", ty_b),
            ("AVIEW", view("a", "la", self.a)),
            ("BVIEW", view("b", "lb", self.b)),
            ("PREP", prep),
            ("ZEROS", zeros.join("\n")),
            ("CARRIED", list(&|i| format!("%cc_{i} = %z_{i} : {ty_c}"))),
            ("TYPES", list(&|_| ty_c.to_string())),
            ("RESULTS", list(&|i| format!("%res_{i}"))),
            ("YIELDS", list(&|i| name(i, ksteps))),
            ("PROLOGUE", prologue),
            ("LOOP", looped),
            ("EPILOGUE", epilogue.join("\n")),
            (
                "FINISH",
                finish_lines(
                    mp.div_ceil(threads / BN),
                    threads / BN,
                    self.splits,
                    &act,
                    result,
                ),
            ),
        ]
    }

    pub(super) fn key(&self, act: String, result: &str) -> KernelKey {
        KernelKey {
            source: KernelSource::Template {
                template: SPLITK,
                substitutions: self.substitutions(act, result),
            },
            symbol: "matmul_splitk",
            config: Vec::new(),
        }
    }
}

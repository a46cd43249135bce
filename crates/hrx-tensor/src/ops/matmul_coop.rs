//! The cooperative-matrix matmul kernel (f16 inputs, f32 accumulation on
//! 16x16x16 tensor-core fragments): its tilings and template text.

mod copies;

pub(crate) use copies::CoopLayout;

#[cfg(feature = "kernel-sources")]
use super::UnaryOp;
use super::registry::KernelKey;
use hrx_core::{CooperativeMatrixShape, ScalarKind, Target};

const MATMUL_COOP: &str = include_str!("../../kernels/matmul_coop.loom");

/// Tile shape of the cooperative-matrix kernel: a `bm x bn` tile of C per
/// workgroup, k steps of `bk`, `sgm x sgn` subgroups of `sg` invocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopTiles {
    bm: usize,
    bn: usize,
    bk: usize,
    sgm: usize,
    sgn: usize,
    sg: usize,
}

/// The cooperative-matrix tiling for `target` and `m` rows, or `None` when
/// the target lacks a 16x16x16 f16 -> f32 shape, has a variable subgroup
/// size (the kernel maps subgroups to fragments), or the tiles do not fit.
/// Never the wide tiling: this is the one for a matmul of unknown `n`.
pub(crate) fn coop_tiles(target: &Target, m: usize) -> Option<CoopTiles> {
    let sg = coop_subgroup(target)?;
    // Small m (decode): narrow tiles so more workgroups share the stream
    // of B; large m: 128 x 128 tiles, 8 subgroups of 4 x 2 fragments, 64
    // deep where workgroup memory allows (half the barriers of 32).
    let candidates = [
        (m <= 16, [16, 64, 32, 1, 4]),
        (m <= 32, [32, 64, 32, 2, 2]),
        (m <= 64, [64, 64, 32, 2, 2]),
        (true, [128, 128, 64, 2, 4]),
        (true, [128, 128, 32, 2, 4]),
        (true, [64, 64, 32, 2, 2]),
    ];
    candidates
        .into_iter()
        .filter(|(fits_m, _)| *fits_m)
        .map(|(_, dims)| CoopTiles::new(dims, sg))
        .find(|t| t.fits(target))
}

/// The 128 x 256 x 32 tiling: 16 subgroups of 4 x 2 fragments. The wide
/// tile halves the loads of A per product against 128 x 128, and 16
/// subgroups of 8 accumulators give the scheduler twice the warps of 8
/// subgroups of 16 to overlap copies, barriers and products (on the H200,
/// 8192^3: 243-246 TFLOP/s against 228).
const WIDE_TILES: [usize; 5] = [128, 256, 32, 2, 8];

/// Workgroups of the wide tiling below which it leaves too many compute
/// units idle (about two waves of a 132-SM H200 at one workgroup each).
const WIDE_MIN_WORKGROUPS: usize = 256;

/// The cooperative-matrix tiling for a `batch` of `m x n` outputs: the
/// wide one where its workgroups are many, else `coop_tiles`'s. The
/// environment variable `HRX_COOP_TILES=bm,bn,bk,sgm,sgn` forces a tiling
/// for large m (for tuning on a device; ignored unless it is valid and
/// fits the target).
pub(crate) fn coop_tiles_for(
    target: &Target,
    m: usize,
    n: usize,
    batch: usize,
) -> Option<CoopTiles> {
    let narrow = coop_tiles(target, m)?;
    if m <= 64 {
        return Some(narrow);
    }
    if let Some(forced) = forced_tiles().map(|dims| CoopTiles::new(dims, narrow.sg))
        && forced.valid()
        && forced.fits(target)
    {
        return Some(forced);
    }
    let wide = CoopTiles::new(WIDE_TILES, narrow.sg);
    let workgroups = m.div_ceil(wide.bm) * n.div_ceil(wide.bn) * batch;
    Some(if workgroups >= WIDE_MIN_WORKGROUPS && wide.fits(target) {
        wide
    } else {
        narrow
    })
}

/// `HRX_COOP_TILES`, read once.
fn forced_tiles() -> Option<[usize; 5]> {
    static FORCED: std::sync::OnceLock<Option<[usize; 5]>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| {
        let text = std::env::var("HRX_COOP_TILES").ok()?;
        let dims: Vec<usize> = text
            .split(',')
            .map(|d| d.trim().parse().ok())
            .collect::<Option<_>>()?;
        dims.try_into().ok()
    })
}

/// The subgroup size the kernel runs with on `target`, or `None` when the
/// target cannot run it.
fn coop_subgroup(target: &Target) -> Option<usize> {
    let shape = CooperativeMatrixShape {
        m: 16,
        n: 16,
        k: 16,
        input: ScalarKind::F16,
        accumulator: ScalarKind::F32,
    };
    let sg = target.subgroup_size_max as usize;
    (target.cooperative_matrix.contains(&shape)
        && target.subgroup_size_min == target.subgroup_size_max
        && target.shader_f16
        && target.storage_16bit
        && sg != 0)
        .then_some(sg)
}

impl CoopTiles {
    fn new([bm, bn, bk, sgm, sgn]: [usize; 5], sg: usize) -> Self {
        CoopTiles {
            bm,
            bn,
            bk,
            sgm,
            sgn,
            sg,
        }
    }
    /// Whether every subgroup gets whole fragments and the k step whole
    /// 16-deep products, in sizes whose arithmetic cannot overflow (true
    /// of every built-in tiling; checked for `HRX_COOP_TILES`).
    fn valid(&self) -> bool {
        (1..=32).contains(&self.sgm)
            && (1..=32).contains(&self.sgn)
            && (1..=256).contains(&self.bk)
            && (1..=1024).contains(&self.bm)
            && (1..=1024).contains(&self.bn)
            && self.bm.is_multiple_of(16 * self.sgm)
            && self.bn.is_multiple_of(16 * self.sgn)
            && self.bk.is_multiple_of(16)
    }
    /// Whether the workgroup and its workgroup memory fit `target`.
    fn fits(&self, target: &Target) -> bool {
        (self.threads() as u32) <= target.max_workgroup_invocations
            && (self.threads() as u32) <= target.max_workgroup_size[0]
            && (self.a_bytes() + self.b_bytes() + self.c_bytes()) as u64
                <= u64::from(target.workgroup_memory_bytes)
    }
    fn threads(&self) -> usize {
        self.sgm * self.sgn * self.sg
    }
    /// Row length of the tile of A in halves, padded by 16 bytes so the
    /// rows of a fragment start in distinct banks.
    fn pa(&self) -> usize {
        self.bk + 8
    }
    /// Row length of the tile of B in halves.
    fn pb(&self) -> usize {
        self.bn + 8
    }
    /// Row length of the n-major tile of a B contiguous along k.
    fn pbt(&self) -> usize {
        self.bk + 8
    }
    fn tile_a(&self) -> String {
        format!("view<{}x{}xf16>", self.bm, self.pa())
    }
    fn tile_b(&self) -> String {
        format!("view<{}x{}xf16>", self.bk, self.pb())
    }
    fn tile_bt(&self) -> String {
        format!("view<{}x{}xf16>", self.bn, self.pbt())
    }
    fn a_bytes(&self) -> usize {
        self.bm * self.pa() * 2
    }
    /// Bytes of B's tile: room for either layout (k-major or n-major).
    fn b_bytes(&self) -> usize {
        (self.bk * self.pb()).max(self.bn * self.pbt()) * 2
    }
    fn c_bytes(&self) -> usize {
        self.sgm * self.sgn * 256 * 4
    }

    /// The kernel key for operands laid out as `layout`, with the
    /// activation lines `act` producing `result`.
    pub(crate) fn key(&self, layout: CoopLayout, act: String, result: &str) -> KernelKey {
        KernelKey {
            template: MATMUL_COOP,
            substitutions: self.substitutions(self.usable(layout), act, result),
            symbol: "matmul_coop",
            config: Vec::new(),
        }
    }

    /// The kernel's loom source for `layout`.
    #[cfg(feature = "kernel-sources")]
    fn source(&self, layout: CoopLayout, act: String, result: &str) -> String {
        self.key(layout, act, result).source()
    }

    /// The template substitutions.
    fn substitutions(
        &self,
        layout: CoopLayout,
        act: String,
        result: &str,
    ) -> Vec<(&'static str, String)> {
        let (wm, wn) = (self.bm / 16 / self.sgm, self.bn / 16 / self.sgn);
        let ty_c = "coopmat<16x16xf32, c>";
        let copies = self.copies(layout);
        let frags: Vec<(usize, usize)> =
            (0..wm).flat_map(|i| (0..wn).map(move |j| (i, j))).collect();
        let mut zeros = String::new();
        for i in 0..wm {
            zeros += &format!(
                "  %fo_c{i} = index.constant {} : index\n  %fro_{i} = index.add %frow, %fo_c{i} : index\n",
                16 * i
            );
        }
        for j in 0..wn {
            zeros += &format!(
                "  %go_c{j} = index.constant {} : index\n  %fco_{j} = index.add %fcol, %go_c{j} : index\n",
                16 * j
            );
        }
        for (i, j) in &frags {
            zeros += &format!("  %z_{i}_{j} = coop.zero : {ty_c}\n");
        }
        let carried = frags
            .iter()
            .map(|(i, j)| format!("%cc_{i}_{j} = %z_{i}_{j} : {ty_c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let types = vec![ty_c; frags.len()].join(", ");
        let results = frags
            .iter()
            .map(|(i, j)| format!("%res_{i}_{j}"))
            .collect::<Vec<_>>()
            .join(", ");
        let steps = self.bk / 16;
        let mut body = String::new();
        let name = |i: &usize, j: &usize, s: usize| {
            if s == 0 {
                format!("%cc_{i}_{j}")
            } else {
                format!("%acc_{i}_{j}_{s}")
            }
        };
        for s in 0..steps {
            body += &format!("    %ko_{s} = index.constant {} : index\n", 16 * s);
            for i in 0..wm {
                body += &format!(
                    "    %fa_{s}_{i} = coop.load<row_major> %ta[%fro_{i}, %ko_{s}] : {} -> coopmat<16x16xf16, a>\n",
                    self.tile_a()
                );
            }
            for j in 0..wn {
                body += &if layout.wide_bt {
                    format!(
                        "    %fb_{s}_{j} = coop.load<col_major> %tb[%fco_{j}, %ko_{s}] : {} -> coopmat<16x16xf16, b>\n",
                        self.tile_bt()
                    )
                } else {
                    format!(
                        "    %fb_{s}_{j} = coop.load<row_major> %tb[%ko_{s}, %fco_{j}] : {} -> coopmat<16x16xf16, b>\n",
                        self.tile_b()
                    )
                };
            }
            for (i, j) in &frags {
                body += &format!(
                    "    {} = coop.mma %fa_{s}_{i}, %fb_{s}_{j}, {} : coopmat<16x16xf16, a>, coopmat<16x16xf16, b>, {ty_c}\n",
                    name(i, j, s + 1),
                    name(i, j, s)
                );
            }
        }
        let yields = frags
            .iter()
            .map(|(i, j)| name(i, j, steps))
            .collect::<Vec<_>>()
            .join(", ");
        let crows = self.sgm * self.sgn * 16;
        let mut epilogue = String::new();
        for (i, j) in &frags {
            epilogue += &format!(
                "  coop.store<row_major> %res_{i}_{j}, %tc[%srow, %c0] : {ty_c}, view<{crows}x16xf32>
  kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
  scf.for %mm_e = [%lane to %c256 step %sgsize] {{
    %mm_r = index.div %mm_e, %c16 : index
    %mm_c = index.rem %mm_e, %c16 : index
    %mm_r1 = index.add %fro_{i}, %mm_r : index
    %mm_c1 = index.add %fco_{j}, %mm_c : index
    %mm_gr = index.add %row0, %mm_r1 : index
    %mm_gc = index.add %col0, %mm_c1 : index
    %mm_okr = index.cmp ult, %mm_gr, %m : index
    %mm_okc = index.cmp ult, %mm_gc, %n : index
    %mm_ok = scalar.andi %mm_okr, %mm_okc : i1
    scf.if %mm_ok {{
      %mm_sr = index.add %srow, %mm_r : index
      %mm_acc = view.load %tc[%mm_sr, %mm_c] : view<{crows}x16xf32> -> f32
      %mm_pb = index.madd %mm_gc, %sbias, %obias : index
      %mm_bj = view.load %biasv[%mm_pb] : view<[%lbias]xf32> -> f32
      %x = scalar.addf %mm_acc, %mm_bj : f32
{act}
      %mm_crow = index.madd %mm_gr, %n, %oc : index
      %mm_cb = index.madd %bi, %scb, %mm_crow : index
      %mm_cidx = index.add %mm_cb, %mm_gc : index
      view.store {result}, %cv[%mm_cidx] : f32, view<[%lc]xf32>
    }}
  }}
  kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
"
            );
        }
        vec![
            ("BM1", (self.bm - 1).to_string()),
            ("BN1", (self.bn - 1).to_string()),
            ("BK1", (self.bk - 1).to_string()),
            ("BM", self.bm.to_string()),
            ("BN", self.bn.to_string()),
            ("BK", self.bk.to_string()),
            ("THREADS", self.threads().to_string()),
            ("SGN", self.sgn.to_string()),
            ("FM", (self.bm / self.sgm).to_string()),
            ("FN", (self.bn / self.sgn).to_string()),
            ("PA", self.pa().to_string()),
            (
                "TB",
                if layout.wide_bt {
                    self.tile_bt()
                } else {
                    self.tile_b()
                },
            ),
            ("A_ELEMS", (self.bm * self.bk).to_string()),
            ("B_ELEMS", (self.bk * self.bn).to_string()),
            ("A_BYTES", self.a_bytes().to_string()),
            ("B_BYTES", self.b_bytes().to_string()),
            ("C_BYTES", self.c_bytes().to_string()),
            ("CROWS", crows.to_string()),
            ("VIEWS", copies.views),
            ("SETUP", copies.setup),
            ("PROLOGUE", copies.prologue),
            ("PREFETCH", copies.prefetch),
            ("STAGE", copies.stage),
            ("ZEROS", zeros),
            ("CARRIED", carried),
            ("TYPES", types),
            ("BODY", body),
            ("YIELDS", yields),
            ("RESULTS", results),
            ("EPILOGUE", epilogue),
        ]
    }
}

/// The cooperative-matrix matmul kernel's loom source for `target` (for
/// offline compilation and SPIR-V checks), with A row-major and B
/// row-major or, with `transposed_b`, contiguous along k, every row
/// aligned for 16-byte copies; `None` when the target has no suitable
/// shape.
#[cfg(feature = "kernel-sources")]
pub fn coop_matmul_source(
    target: &Target,
    m: usize,
    transposed_b: bool,
    activation: Option<UnaryOp>,
) -> Option<String> {
    let tiles = coop_tiles_for(target, m, 4096, 1)?;
    let (act, result) = match activation {
        None => (String::new(), "%x"),
        Some(op) => (op.body("f32"), "%r"),
    };
    let layout = CoopLayout {
        a_k_fast: true,
        b_n_fast: !transposed_b,
        wide_a: true,
        wide_b: !transposed_b,
        wide_bt: transposed_b,
    };
    Some(tiles.source(layout, act, result))
}

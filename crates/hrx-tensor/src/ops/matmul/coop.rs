//! The cooperative-matrix matmul kernel (f16 inputs, f32 accumulation on
//! 16x16x16 tensor-core fragments): its tilings and key; the kernel is
//! built in `coop/kernel.rs`.

mod copies;
mod epilogue;
mod kernel;

pub(crate) use copies::CoopLayout;

use crate::ops::{
    CoopTiling, UnaryOp,
    registry::{Generator, KernelKey, KernelSource},
};
use hrx_core::{CooperativeMatrixShape, ScalarKind, Target};
use hrx_loom::ir::{CoopMatType, CoopRole, Scalar};

/// The 16 x 16 fragment of `elem` in `role`: the shape every tensor-core
/// kernel here uses (16x16x16 f16 -> f32).
pub(crate) fn fragment(elem: Scalar, role: CoopRole) -> CoopMatType {
    CoopMatType {
        rows: 16,
        cols: 16,
        elem,
        role,
    }
}

/// Tile shape of the cooperative-matrix kernel: a `bm x bn` tile of C per
/// workgroup, k steps of `bk`, `sgm x sgn` subgroups of `sg` invocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

/// The 256 x 128 x 32 tiling: 16 subgroups of 4 x 2 fragments, for
/// products whose columns do not fill the wide tile's 256 over a short k
/// (up to [`TALL_MAX_K`]), where a workgroup's prologue and epilogue weigh
/// most. On the H200 (2026-12-04) MiniLM's f16 batch of 1024 x 128: the
/// query-key-value projection (n = 1152, k = 384) 0.92 → 0.83 ms, the
/// output projection (n = 384) 0.32 → 0.30 ms against 128 x 128 x 64; the
/// down projection (k = 1536) 0.80 → 0.81 ms, so longer products keep it.
const TALL_TILES: [usize; 5] = [256, 128, 32, 4, 4];

/// The longest k the tall tiling takes.
const TALL_MAX_K: usize = 512;

/// Tiles for products narrower than the wide tiling: at most 64 columns,
/// and at most 128 (attention's `p v` and `q k^T` over a few hundred
/// keys, batched by heads). A tile wider than `n` computes zeros: on the
/// H200 the encoder's batched attention products, `n` = 32 and 128 in the
/// 128 x 256 tile, ran at 10-13 TFLOP/s.
const NARROW_N_TILES: [usize; 5] = [64, 64, 32, 2, 2];
const SHALLOW_K_TILES: [usize; 5] = [128, 128, 32, 2, 4];

/// The cooperative-matrix tiling for a `batch` of `m x n` outputs over
/// `k`: the wide one where its workgroups are many and `n` fills its
/// columns (to within 1/16), the tall one where its workgroups are many
/// and `k` is short, a
/// tile no wider than 64 or 128 columns for narrower products (32 deep
/// for `k` <= 32), else `coop_tiles`'s. A `forced` tiling (a tuning
/// run's) replaces them for large m where it fits the target.
pub(crate) fn coop_tiles_for(
    target: &Target,
    forced: Option<CoopTiling>,
    (m, n, k): (usize, usize, usize),
    batch: usize,
) -> Option<CoopTiles> {
    let narrow = coop_tiles(target, m)?;
    if m <= 64 {
        return Some(narrow);
    }
    if let Some(forced) = forced.map(|t| CoopTiles::new(t.dims(), narrow.sg))
        && forced.fits(target)
    {
        return Some(forced);
    }
    let sized = |dims| Some(CoopTiles::new(dims, narrow.sg)).filter(|t| t.fits(target));
    if n <= 64 {
        return sized(NARROW_N_TILES).or(Some(narrow));
    }
    if n <= 128 {
        let shallow = if k <= 32 {
            sized(SHALLOW_K_TILES)
        } else {
            None
        };
        return shallow.or(Some(narrow));
    }
    let wide = CoopTiles::new(WIDE_TILES, narrow.sg);
    let workgroups = m.div_ceil(wide.bm) * n.div_ceil(wide.bn) * batch;
    // Past n's last multiple of 256 the wide tile computes zeros: 384
    // columns would cost the products of 512.
    let filled = n.next_multiple_of(wide.bn) * 16 <= n * 17;
    if workgroups >= WIDE_MIN_WORKGROUPS && filled && wide.fits(target) {
        return Some(wide);
    }
    let tall = CoopTiles::new(TALL_TILES, narrow.sg);
    let tall_workgroups = m.div_ceil(tall.bm) * n.div_ceil(tall.bn) * batch;
    Some(
        if k <= TALL_MAX_K && tall_workgroups >= WIDE_MIN_WORKGROUPS && tall.fits(target) {
            tall
        } else {
            narrow
        },
    )
}

/// The subgroup size the kernel runs with on `target`, or `None` when the
/// target cannot run it.
pub(crate) fn coop_subgroup(target: &Target) -> Option<usize> {
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

    /// The kernel key for operands laid out as `layout`, with `act`
    /// after the bias, writing f16 where `out_f16` (else f32).
    pub(crate) fn key(&self, layout: CoopLayout, act: Option<UnaryOp>, out_f16: bool) -> KernelKey {
        let (tiles, layout) = (*self, self.usable(layout));
        KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("matmul_coop {tiles:?} {layout:?} {act:?} f16 out {out_f16}"),
                move || tiles.kernel(layout, act, out_f16),
            )),
            symbol: "matmul_coop",
            config: Vec::new(),
        }
    }

    /// The kernel's loom source for `layout`.
    #[cfg(feature = "kernel-sources")]
    fn source(&self, layout: CoopLayout, act: Option<UnaryOp>) -> String {
        self.key(layout, act, false).source()
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
    let tiles = coop_tiles_for(target, None, (m, 4096, 4096), 1)?;
    let layout = CoopLayout {
        a_k_fast: true,
        b_n_fast: !transposed_b,
        wide_a: true,
        wide_b: !transposed_b,
        wide_bt: transposed_b,
        wide_c: true,
    };
    Some(tiles.source(layout, activation))
}

//! Planning a split-k matmul: whether the kernel applies, its shape
//! (built in or forced by [`Tuning::splitk`](crate::ops::Tuning::splitk))
//! and how many splits of k it takes.

use super::{BN, COL_FRAGS, SplitK, TileLoad, tiles::Tile};
use crate::DType;
use crate::ops::SplitKShape;
use crate::ops::matmul::gemv::{BLayout, BLoad, b_load};
use hrx_core::Target;

/// Most rows of A the kernel covers.
const SPLITK_MAX_ROWS: usize = 64;
/// Work items to aim for: 256 workgroups of 128, about two per SM of a
/// 132-SM GPU (Vulkan does not report the SM count). More splits than
/// that cost more in scratch traffic and in the reduction than they gain
/// in loads in flight: on the H200 at k = n = 4096, 4 splits of 128-deep
/// steps run m=8..64 at 20.8 / 40.4 / 67.6 / 101.6 TFLOP/s, against
/// 17.0 / 33.3 / 63.3 / 94.4 with the earlier 16 (m=16), 8 (m=32) and
/// 4 splits (m=64, 8 subgroups) of 64-deep steps, and 8 splits of 128
/// measured 16.6 / 33.0 / 54.2 / 81.0.
const WANT_THREADS: usize = 256 * 128;
/// The scratch (written and read back once) is at most B's bytes over
/// this.
const SCRATCH_SHARE: usize = 8;

/// The built-in shape: four subgroups, each multiplying all `mp / 16` row
/// fragments by its column fragment, 128-deep steps, the next step's
/// loads issued before the current step's products. (Eight subgroups of
/// two row fragments for 64 rows measured 74.5-75.0 TFLOP/s at 128-deep
/// steps against 101-103 for four of four.)
const BUILT_IN: SplitKShape = SplitKShape {
    groups: 1,
    bk: 128,
    splits: 0,
    prefetch: true,
};

fn tile_load(layout: &BLayout) -> TileLoad {
    match b_load(DType::F16, layout) {
        BLoad::Quad16 => TileLoad::Quad,
        _ => TileLoad::Scalar {
            inner_fast: layout.n_stride == 1,
        },
    }
}

/// B's load: as `tile_load`, or 16-byte loads along k where B is
/// contiguous along k (checked as the transposed matrix would be).
fn tile_load_b(layout: &BLayout, k: usize) -> TileLoad {
    match tile_load(layout) {
        TileLoad::Scalar { .. } if b_load(DType::F16, &layout.along_k(k)) == BLoad::Quad16 => {
            TileLoad::QuadAlongK
        }
        other => other,
    }
}

/// The split-k plan for `m x k` A (`a` describes it with k as its
/// columns, i.e. `n` = k and `n_stride` the k stride) and `k x n` B over
/// `batch`, or `None` when the kernel does not apply: no 16x16x16 f16 ->
/// f32 shape or a variable subgroup size (`coop` false), more than 64 rows,
/// no k, loads that do not divide evenly among the work items, or a
/// scratch beyond 32-bit indices. A `forced` shape that does not apply
/// leaves the built-in one.
pub(crate) fn splitk_plan(
    target: &Target,
    forced: Option<SplitKShape>,
    coop: bool,
    dims: (usize, usize, usize, usize),
    a: &BLayout,
    b: &BLayout,
) -> Option<SplitK> {
    forced
        .and_then(|shape| plan_with(target, coop, dims, (a, b), shape))
        .or_else(|| plan_with(target, coop, dims, (a, b), BUILT_IN))
}

fn plan_with(
    target: &Target,
    coop: bool,
    (m, n, k, batch): (usize, usize, usize, usize),
    (a, b): (&BLayout, &BLayout),
    shape: SplitKShape,
) -> Option<SplitK> {
    let sg = target.subgroup_size_max as usize;
    if !coop || m == 0 || m > SPLITK_MAX_ROWS || k == 0 || n == 0 || batch == 0 || sg == 0 {
        return None;
    }
    let SplitKShape {
        groups, bk, splits, ..
    } = shape;
    let mp = m.div_ceil(16) * 16;
    if groups == 0 || !(mp / 16).is_multiple_of(groups) || bk == 0 || !bk.is_multiple_of(16) {
        return None;
    }
    let mut plan = SplitK {
        mp,
        splits: 1,
        ks: bk,
        npad: n.div_ceil(BN) * BN,
        sg,
        groups,
        bk,
        prefetch: shape.prefetch,
        a: tile_load(a),
        b: tile_load_b(b, k),
    };
    let threads = plan.threads();
    // The finishing workgroup spreads each row of its slab over work items.
    let fits = threads.is_multiple_of(BN)
        && threads as u32 <= target.max_workgroup_invocations
        && threads as u32 <= target.max_workgroup_size[0]
        && plan.shared_bytes() as u64 <= u64::from(target.workgroup_memory_bytes);
    if !plan.tile_a().fits() || !plan.tile_b().fits() || !fits {
        return None;
    }
    let steps = k.div_ceil(bk);
    let slabs = (plan.npad / BN) * batch;
    let wanted = if splits > 0 {
        splits
    } else {
        // Enough splits for the wanted work items, the scratch at most a
        // share of B's bytes.
        let want = (WANT_THREADS / threads).div_ceil(slabs);
        let cap = (k * n * 2 / SCRATCH_SHARE / (mp * plan.npad * 4)).max(1);
        want.min(cap)
    };
    let per_split = steps.div_ceil(wanted.clamp(1, steps));
    plan.splits = steps.div_ceil(per_split);
    plan.ks = per_split * bk;
    let scratch = batch
        .checked_mul(plan.splits)?
        .checked_mul(mp)?
        .checked_mul(plan.npad)?;
    u32::try_from(scratch).ok()?;
    Some(plan)
}

impl SplitK {
    pub(super) fn threads(&self) -> usize {
        self.groups * COL_FRAGS * self.sg
    }

    pub(super) fn tile_a(&self) -> Tile {
        Tile {
            name: "a",
            rows: self.mp,
            cols: self.bk,
            load: self.a,
            threads: self.threads(),
            sg: self.sg,
        }
    }

    /// B's tile: `BK x BN`, or `BN x BK` when copied along k.
    pub(super) fn tile_b(&self) -> Tile {
        let (rows, cols, load) = match self.b {
            TileLoad::QuadAlongK => (BN, self.bk, TileLoad::Quad),
            other => (self.bk, BN, other),
        };
        Tile {
            name: "b",
            rows,
            cols,
            load,
            threads: self.threads(),
            sg: self.sg,
        }
    }

    /// Workgroup memory: the A and B tiles (rows padded by 8 halves) and
    /// the finishing flag (loom rounds each allocation to 16 bytes).
    pub(super) fn shared_bytes(&self) -> usize {
        let b = self.tile_b();
        (self.mp * (self.bk + 8) + b.rows * (b.cols + 8)) * 2 + 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(k_stride: usize, n_stride: usize, n: usize) -> BLayout {
        BLayout {
            k_stride,
            n_stride,
            batch_stride: 0,
            offset: 0,
            binding_offset: 0,
            n,
        }
    }

    fn plan(m: usize, n: usize, k: usize, batch: usize) -> Option<SplitK> {
        splitk_plan(
            &Target::hopper(),
            None,
            true,
            (m, n, k, batch),
            &layout(k, 1, k),
            &layout(n, 1, n),
        )
    }

    #[test]
    fn decode_shapes_get_enough_workgroups_and_a_small_scratch() {
        for m in [16, 32, 64] {
            let p = plan(m, 4096, 4096, 1).unwrap();
            assert_eq!((p.mp, p.splits, p.npad), (m, 4, 4096), "m={m}");
            assert_eq!((p.groups, p.threads(), p.bk), (1, 128, 128), "m={m}");
            assert_eq!(p.ks * p.splits, 4096);
            assert!(64 * p.splits * p.threads() >= WANT_THREADS);
            assert!(p.splits * p.mp * p.npad * 4 <= 4096 * 4096 * 2 / 8);
            assert_eq!((p.a, p.b), (TileLoad::Quad, TileLoad::Quad));
        }
    }

    #[test]
    fn partial_shapes_cover_k_and_n() {
        let p = plan(24, 520, 1000, 3).unwrap();
        assert_eq!((p.mp, p.npad), (32, 576));
        assert!(p.ks.is_multiple_of(p.bk) && p.ks * p.splits >= 1000);
        assert!(p.ks * (p.splits - 1) < 1000);
        // A single step of k still gets one split.
        let p = plan(9, 16, 1, 1).unwrap();
        assert_eq!((p.splits, p.ks), (1, p.bk));
    }

    #[test]
    fn layouts_pick_the_loads() {
        let t = Target::hopper();
        // Transposed B (k contiguous), odd n: element loads along k.
        let p = splitk_plan(
            &t,
            None,
            true,
            (20, 33, 50, 1),
            &layout(50, 1, 50),
            &layout(1, 50, 33),
        )
        .unwrap();
        assert_eq!(p.a, TileLoad::Scalar { inner_fast: true });
        assert_eq!(p.b, TileLoad::Scalar { inner_fast: false });
    }

    /// A forced shape replaces the built-in one where it applies, and
    /// leaves it where it does not (two row groups for 16 rows).
    #[test]
    fn forced_shapes_apply_where_they_fit() {
        let t = Target::hopper();
        let l = layout(4096, 1, 4096);
        let forced = SplitKShape::new(2, 64, 3, false).unwrap();
        let p = splitk_plan(&t, Some(forced), true, (32, 4096, 4096, 1), &l, &l).unwrap();
        assert_eq!((p.groups, p.bk, p.splits, p.prefetch), (2, 64, 3, false));
        let p = splitk_plan(&t, Some(forced), true, (16, 4096, 4096, 1), &l, &l).unwrap();
        assert_eq!((p.groups, p.bk), (1, 128));
    }

    /// Every shape the tuning override can pick (row groups, step depth,
    /// pipelining) with both load kinds compiles for the H200 target
    /// (naga validates each module; tests/tensor/matmul_splitk.rs runs
    /// spirv-val on the built-in shapes).
    #[test]
    fn every_shape_compiles_for_hopper() {
        let t = Target::hopper();
        let compiler = hrx_loom::Compiler::for_target(None, &t).unwrap();
        let (quad, odd, tr) = (
            layout(4096, 1, 4096),
            layout(4095, 1, 4095),
            layout(1, 4096, 4096),
        );
        let mut compiled = 0;
        for m in [16, 32, 48, 64] {
            for groups in [1, 2, 4] {
                for bk in [32, 64, 128] {
                    for prefetch in [false, true] {
                        let shape = SplitKShape::new(groups, bk, 0, prefetch).unwrap();
                        for (a, b) in [(&quad, &quad), (&odd, &tr)] {
                            let Some(p) = plan_with(&t, true, (m, 4096, 4096, 1), (a, b), shape)
                            else {
                                continue;
                            };
                            compiler
                                .module(&p.key(None).source())
                                .and_then(|module| {
                                    module.compile_uncached(&hrx_loom::Specialization::new(
                                        "@matmul_splitk",
                                    ))
                                })
                                .unwrap_or_else(|e| panic!("m={m} {shape:?} {:?}: {e}", p.a));
                            compiled += 1;
                        }
                    }
                }
            }
        }
        assert!(compiled >= 40, "{compiled}");
    }

    #[test]
    fn refused_where_it_does_not_apply() {
        let t = Target::hopper();
        let l = layout(64, 1, 64);
        assert!(splitk_plan(&t, None, false, (16, 64, 64, 1), &l, &l).is_none());
        assert!(splitk_plan(&t, None, true, (65, 64, 64, 1), &l, &l).is_none());
        assert!(splitk_plan(&t, None, true, (16, 64, 0, 1), &l, &l).is_none());
    }
}

use super::super::{CoopTiles, coop_tiles, coop_tiles_for};
use super::CoopLayout;
use super::rotation::Rotation;
use crate::DType;
use crate::ops::UnaryOp;
use crate::ops::matmul::gemv::{BLayout, BLoad, b_load};
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
    let wide = coop_tiles_for(&target, None, (8192, 8192, 8192), 1).unwrap();
    assert_eq!((wide.bm, wide.bn, wide.bk), (128, 256, 32));
    assert!(all.iter().all(|(_, t)| *t != wide));
    all.push(("m=n=8192".into(), wide));
    for (name, shape) in [
        ("p v", (128, 32, 128)),
        ("q k^T", (128, 128, 32)),
        ("qkv", (131_072, 1152, 384)),
    ] {
        let t = coop_tiles_for(&target, None, shape, 12 * 1024).unwrap();
        if !all.iter().any(|(_, seen)| *seen == t) {
            all.push((name.into(), t));
        }
    }
    all
}

/// Batched products narrower than the wide tile get tiles no wider than
/// they are: the encoder's attention (`p v`: n = 32; `q k^T`: n = 128
/// over k = 32); of its projections only n = 1536 fills the wide tile's
/// 256 columns, and those over k = 384 take the tall tile where its
/// workgroups are many.
#[test]
fn narrow_products_get_narrow_tiles() {
    let target = Target::hopper();
    let tiles = |m, n, k| {
        let t = coop_tiles_for(&target, None, (m, n, k), 12 * 1024).unwrap();
        (t.bm, t.bn, t.bk)
    };
    assert_eq!(tiles(128, 32, 128), (64, 64, 32));
    assert_eq!(tiles(128, 128, 32), (128, 128, 32));
    assert_eq!(tiles(128, 128, 64), (128, 128, 64));
    assert_eq!(tiles(131_072, 1536, 384), (128, 256, 32));
    assert_eq!(tiles(131_072, 384, 1536), (128, 128, 64));
    assert_eq!(tiles(131_072, 1152, 384), (256, 128, 32));
    assert_eq!(tiles(131_072, 384, 384), (256, 128, 32));
    // A small batch: too few tall workgroups.
    let few = coop_tiles_for(&target, None, (2048, 384, 384), 1).unwrap();
    assert_eq!((few.bm, few.bn, few.bk), (128, 128, 64));
}

/// The built-in tilings obey the rules a forced one is checked against.
#[test]
fn built_in_tilings_are_valid_tunings() {
    for (name, t) in hopper_tilings() {
        crate::ops::CoopTiling::new(t.bm, t.bn, t.bk, t.sgm, t.sgn)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// Every mix of wide and element copies (B wide along n or, transposed,
/// along k), both axis orders, quad and element epilogues, and each
/// tiling compiles for the H200 target (naga validates the module).
#[test]
fn every_copy_layout_compiles_for_hopper() {
    let target = Target::hopper();
    let compiler = Compiler::for_target(None, &target).unwrap();
    for (m, tiles) in hopper_tilings() {
        for bits in 0..64u8 {
            let layout = tiles.usable(CoopLayout {
                a_k_fast: bits & 1 != 0,
                b_n_fast: bits & 2 != 0,
                wide_a: bits & 4 != 0,
                wide_b: bits & 8 != 0,
                wide_bt: bits & 16 != 0,
                wide_c: bits & 32 != 0,
            });
            let src = tiles.source(layout, None);
            // Only an n-major tile of B is read column-major.
            assert_eq!(
                src.contains("coop.load<col_major>"),
                layout.wide_bt,
                "{m} {layout:?}"
            );
            compiler
                .module(&src)
                .and_then(|module| module.compile_uncached(&Specialization::new("@matmul_coop")))
                .unwrap_or_else(|e| panic!("{m} {layout:?}: {e}"));
        }
    }
}

/// The f16-output form of each tiling, with either epilogue, compiles for
/// the H200 target, and is a kernel of its own (its C view and stores are
/// 16-bit).
#[test]
fn f16_output_compiles_for_hopper() {
    let target = Target::hopper();
    let compiler = Compiler::for_target(None, &target).unwrap();
    for ((m, tiles), wide_c) in hopper_tilings()
        .into_iter()
        .flat_map(|t| [(t.clone(), false), (t, true)])
    {
        let layout = tiles.usable(CoopLayout {
            a_k_fast: true,
            b_n_fast: false,
            wide_a: true,
            wide_b: false,
            wide_bt: true,
            wide_c,
        });
        let act = Some(UnaryOp::Gelu);
        let src = tiles.key(layout, act, true).source();
        assert_ne!(src, tiles.key(layout, act, false).source(), "{m}");
        compiler
            .module(&src)
            .and_then(|module| module.compile_uncached(&Specialization::new("@matmul_coop")))
            .unwrap_or_else(|e| panic!("{m} {layout:?}: {e}"));
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
    assert_eq!(big.rotation(), Rotation::Group);
}

/// A wide copy needs the decode kernel's 16-byte f16 alignment along the
/// copied axis; a transposed B is checked along k.
#[test]
fn wide_copies_need_aligned_contiguous_rows() {
    let ok = || BLayout {
        k_stride: 4096,
        n_stride: 1,
        batch_stride: 0,
        offset: 8,
        binding_offset: 256,
        n: 4096,
    };
    let quads = |l: &BLayout| b_load(DType::F16, l) == BLoad::Quad16;
    assert!(quads(&ok()));
    for bad in [
        BLayout {
            n_stride: 4096,
            ..ok()
        },
        BLayout {
            k_stride: 4100,
            ..ok()
        },
        BLayout {
            batch_stride: 12,
            ..ok()
        },
        BLayout { n: 4092, ..ok() },
        BLayout { offset: 4, ..ok() },
        BLayout {
            binding_offset: 8,
            ..ok()
        },
    ] {
        assert!(!quads(&bad));
    }
    // [n, k] storage: contiguous along k, so wide along k only.
    let transposed = BLayout {
        k_stride: 1,
        n_stride: 4096,
        ..ok()
    };
    assert!(!quads(&transposed));
    assert!(quads(&transposed.along_k(4096)));
    assert!(!quads(&transposed.along_k(4092)));
}

/// A B wide along n wins over the transposed copy, which every tiling can
/// otherwise take.
#[test]
fn transposed_b_copies_only_without_wide_b() {
    for (m, tiles) in hopper_tilings() {
        let both = CoopLayout {
            a_k_fast: true,
            b_n_fast: true,
            wide_a: true,
            wide_b: true,
            wide_bt: true,
            wide_c: true,
        };
        assert!(!tiles.usable(both).wide_bt, "{m}");
        let transposed = CoopLayout {
            b_n_fast: false,
            wide_b: false,
            ..both
        };
        assert!(tiles.usable(transposed).wide_bt, "{m}");
        assert!(tiles.wide_bt().fits(), "{m}");
    }
}

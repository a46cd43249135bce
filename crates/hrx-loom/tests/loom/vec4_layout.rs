//! The vec4 buffer layout beyond 1-D f32: f16 buffers as `vec4<f16>`
//! arrays, 2-D views whose rows are provably a multiple of 4 long, and
//! cooperative-matrix loads and stores from such buffers (their stride
//! counted in 4-vectors). A fall-back to scalars is still correct, only
//! slower, so the tests look at the declarations: bindings'
//! `element_bytes` and, for workgroup tiles, the SPIR-V variable types.
//! Running these kernels on a device is the workspace `tests` crate's job
//! (`tests/tests/e2e/loom_kernels`): this crate never links the runtime.

use crate::common::workgroup_vec4_f16_arrays;
use hrx_core::Target;
use hrx_loom::{Artifact, Compiler, Specialization};
use hrx_test_support::spirv_val;

const COOP_TILES: &str = include_str!("../vec4/coop_tiles.loom");
const BLOCK_TRANSPOSE: &str = include_str!("../vec4/block_transpose.loom");
const ROWS_F32: &str = include_str!("../vec4/rows_f32.loom");
/// A kernel whose B operand is read from storage by cooperative loads only.
const COOP_TILE: &str = include_str!("../coop/tile.loom");

fn compile(src: &str, symbol: &str, target: &Target) -> Artifact {
    Compiler::for_target(None, target)
        .and_then(|c| c.module(src))
        .and_then(|m| m.compile_uncached(&Specialization::new(symbol)))
        .unwrap_or_else(|e| panic!("{symbol}: {e}"))
}

/// A cooperative-matrix kernel, compiled for Hopper and validated.
fn hopper(src: &str, symbol: &str) -> Artifact {
    let a = compile(src, symbol, &Target::hopper());
    spirv_val::validate_modern(symbol, a.spirv());
    a
}

/// A kernel without cooperative matrices, compiled for lavapipe and
/// validated.
fn lavapipe(src: &str, symbol: &str) -> Artifact {
    let a = compile(src, symbol, &Target::lavapipe());
    spirv_val::validate(symbol, a.spirv());
    a
}

fn element_bytes(a: &Artifact) -> Vec<u32> {
    a.bindings().iter().map(|b| b.element_bytes).collect()
}

/// `src` with `from` replaced by `to` everywhere (it must occur).
fn edit(src: &str, from: &str, to: &str) -> String {
    assert!(src.contains(from), "`{from}` not in the kernel");
    src.replace(from, to)
}

#[test]
fn f16_tiles_feed_cooperative_loads_as_vec4() {
    let a = hopper(COOP_TILES, "@coop_tiles");
    // A and B: 8-byte vec4<f16>; C is only coop-stored: scalar f32.
    assert_eq!(element_bytes(&a), [8, 8, 4]);
    assert_eq!(a.bindings()[0].alignment, 8);
    assert_eq!(workgroup_vec4_f16_arrays(a.spirv()), 2);
}

#[test]
fn tile_rows_not_a_multiple_of_4_fall_back_to_halves() {
    // Rows of 22 halves: a row start is not a multiple of 4 elements.
    let src = edit(COOP_TILES, "16x24xf16", "16x22xf16");
    let a = hopper(&src, "@coop_tiles");
    assert_eq!(workgroup_vec4_f16_arrays(a.spirv()), 0);
    // The storage operands are unaffected.
    assert_eq!(element_bytes(&a), [8, 8, 4]);
}

#[test]
fn store_column_not_provably_aligned_falls_back_to_halves() {
    // 16 * quad / 4 is 4 * quad, but a quotient has no known factor.
    let src = edit(
        COOP_TILES,
        "%col = index.madd %quad, %c4, %c4 : index",
        "%c16 = index.constant 16 : index\n    \
         %sixteen_quads = index.mul %quad, %c16 : index\n    \
         %col = index.div %sixteen_quads, %c4 : index",
    );
    let a = hopper(&src, "@coop_tiles");
    assert_eq!(workgroup_vec4_f16_arrays(a.spirv()), 0);
    assert_eq!(element_bytes(&a), [8, 8, 4]);
}

#[test]
fn cooperative_load_off_a_multiple_of_4_keeps_that_tile_scalar() {
    // Only A's fragment starts at column 2; B's tile keeps vec4.
    let src = edit(
        COOP_TILES,
        "%fa = coop.load<row_major> %ta[%c0, %c4]",
        "%c2 = index.constant 2 : index\n  %fa = coop.load<row_major> %ta[%c0, %c2]",
    );
    let a = hopper(&src, "@coop_tiles");
    assert_eq!(workgroup_vec4_f16_arrays(a.spirv()), 1);
}

#[test]
fn cooperative_accesses_alone_never_pick_vec4() {
    // coop/tile.loom: B (rows of 16, offset 0) is only read by coop.load,
    // its A tile only by view.store and coop.load.
    let a = hopper(COOP_TILE, "@coop_tile");
    assert_eq!(element_bytes(&a), [2, 2, 4]);
    assert_eq!(workgroup_vec4_f16_arrays(a.spirv()), 0);
}

#[test]
fn f16_vec4_needs_an_8_byte_aligned_offset() {
    let at = |offset: u32| {
        let src = edit(
            BLOCK_TRANSPOSE,
            "%s = buffer.view %src[%zero]",
            &format!("%off = index.constant {offset} : offset\n  %s = buffer.view %src[%off]"),
        );
        element_bytes(&lavapipe(&src, "@block_transpose"))
    };
    // 8 bytes is enough for 8-byte vectors (16 would be needed for f32).
    assert_eq!(at(8), [8, 8]);
    assert_eq!(at(4), [2, 8]);
}

#[test]
fn f32_rows_of_4_quads_are_vec4() {
    let a = lavapipe(ROWS_F32, "@rows_f32");
    assert_eq!(element_bytes(&a), [16, 16]);
}

#[test]
fn f32_rows_of_unknown_length_stay_scalar() {
    let src = edit(
        ROWS_F32,
        "%cols = index.mul %quads, %c4 : index",
        "%cols = index.add %quads, %c4 : index",
    );
    let a = lavapipe(&src, "@rows_f32");
    assert_eq!(element_bytes(&a), [4, 4]);
}

#[test]
fn f32_vec4_needs_a_16_byte_aligned_offset() {
    let src = edit(
        ROWS_F32,
        "%xv = buffer.view %x[%zero]",
        "%off = index.constant 8 : offset\n  %xv = buffer.view %x[%off]",
    );
    let a = lavapipe(&src, "@rows_f32");
    assert_eq!(element_bytes(&a), [4, 16]);
}

#[test]
fn f16_block_transpose_declares_vec4_bindings_and_tile() {
    let a = lavapipe(BLOCK_TRANSPOSE, "@block_transpose");
    assert_eq!(element_bytes(&a), [8, 8]);
    assert_eq!(workgroup_vec4_f16_arrays(a.spirv()), 1);
}

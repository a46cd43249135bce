//! Cooperative matrices: parsing and verification of `coopmat` and the
//! `coop.*` ops, target checks, and SPIR-V for `Target::hopper()` that a
//! validator knowing `SPV_KHR_cooperative_matrix` accepts.

use hrx_core::{Diagnostic, Error, Target};
use hrx_loom::{Compiler, Specialization};
use hrx_test_support::spirv_val;

const TILE: &str = include_str!("../coop/tile.loom");

fn compile(src: &str, target: &Target) -> hrx_core::Result<hrx_loom::Artifact> {
    Compiler::for_target(None, target)?
        .module(src)?
        .compile_uncached(&Specialization::new("@coop_tile"))
}

fn diagnostics(result: hrx_core::Result<impl std::fmt::Debug>) -> Vec<Diagnostic> {
    match result {
        Err(Error::Compile { diagnostics, .. }) => diagnostics,
        other => panic!("expected a compile error, got {other:?}"),
    }
}

/// The single diagnostic of verifying `src`.
fn verify_error(src: &str) -> Diagnostic {
    let r = hrx_loom::front::parse(src).and_then(|ast| hrx_loom::verify::verify(&ast, src));
    let mut d = diagnostics(r);
    assert_eq!(d.len(), 1, "expected one error, got {d:#?}");
    d.remove(0)
}

/// The tile kernel with `from` replaced by `to` (which must occur).
fn edit(from: &str, to: &str) -> String {
    assert!(TILE.contains(from), "`{from}` not in the tile kernel");
    TILE.replacen(from, to, 1)
}

fn assert_diag(d: &Diagnostic, code: &str, message: &str) {
    assert_eq!(d.code, code, "{d:#?}");
    assert!(
        d.message.contains(message),
        "{:?} lacks {message:?}",
        d.message
    );
}

/// `OpCapability CooperativeMatrixKHR` and the extension name are in the
/// module (checked without any external validator).
fn declares_coop(words: &[u32]) -> bool {
    let cap = words
        .windows(2)
        .any(|w| w[0] == (2 << 16 | 17) && w[1] == 6022);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let ext = bytes
        .windows(26)
        .any(|w| w == b"SPV_KHR_cooperative_matrix");
    cap && ext
}

#[test]
fn tile_kernel_lowers_for_hopper_and_validates() {
    let artifact = compile(TILE, &Target::hopper()).unwrap();
    assert!(declares_coop(artifact.spirv()));
    spirv_val::validate_modern("coop_tile", artifact.spirv());
    let bindings = artifact.bindings();
    assert_eq!(bindings.len(), 3);
    assert_eq!(bindings[0].element_bytes, 2);
    assert_eq!(bindings[2].element_bytes, 4);
}

#[test]
fn lavapipe_has_no_cooperative_matrix() {
    let d = diagnostics(compile(TILE, &Target::lavapipe()));
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_diag(&d[0], "E0604", "has no VK_KHR_cooperative_matrix shapes");
    assert!(d[0].message.contains("llvmpipe"), "{}", d[0].message);
}

#[test]
fn shape_the_target_lacks_is_named() {
    // Hopper offers f16 factors only; f32 factors are refused at lowering
    // with the list of what it has.
    let src = TILE
        .replace("16x16xf16, a", "16x16xf32, a")
        .replace("16x16xf16>", "16x16xf32>")
        .replace("f16, view<16x16xf32>", "f32, view<16x16xf32>")
        .replace("-> f16", "-> f32")
        .replace("512 : offset", "1024 : offset")
        .replace("16x[%k]xf16", "16x[%k]xf32")
        .replace("16xf16, b", "16xf32, b")
        .replace("[%k]x16xf16", "[%k]x16xf32");
    let d = diagnostics(compile(&src, &Target::hopper()));
    assert!(
        d.iter().all(|d| d.code == "E0604") && !d.is_empty(),
        "{d:#?}"
    );
    assert!(
        d[0].message.contains("16x16x16 f16->f32"),
        "{}",
        d[0].message
    );
}

#[test]
fn mma_roles_are_checked() {
    let src = edit(
        "coop.mma %fa, %fb, %sum : coopmat<16x16xf16, a>, coopmat<16x16xf16, b>",
        "coop.mma %fa, %fb, %sum : coopmat<16x16xf16, b>, coopmat<16x16xf16, b>",
    );
    assert_diag(&verify_error(&src), "E0301", "must have role a");
}

#[test]
fn mma_shapes_must_chain() {
    let src = edit(
        "coop.zero : coopmat<16x16xf32, c>",
        "coop.zero : coopmat<16x8xf32, c>",
    )
    .replace(
        "(%sum = %z : coopmat<16x16xf32, c>) -> (coopmat<16x16xf32, c>)",
        "(%sum = %z : coopmat<16x8xf32, c>) -> (coopmat<16x8xf32, c>)",
    )
    .replace(
        "coopmat<16x16xf16, b>, coopmat<16x16xf32, c>",
        "coopmat<16x16xf16, b>, coopmat<16x8xf32, c>",
    );
    let r = hrx_loom::front::parse(&src).and_then(|ast| hrx_loom::verify::verify(&ast, &src));
    assert_diag(&diagnostics(r)[0], "E0301", "shapes do not chain");
}

#[test]
fn sizes_are_8_or_16() {
    let src = edit(
        "coop.zero : coopmat<16x16xf32, c>",
        "coop.zero : coopmat<32x16xf32, c>",
    );
    let r = hrx_loom::front::parse(&src).and_then(|ast| hrx_loom::verify::verify(&ast, &src));
    let d = diagnostics(r);
    assert_diag(&d[0], "E0304", "rows must be 8 or 16, not 32");
}

#[test]
fn unknown_role_and_layout_words() {
    let src = edit(
        "coop.zero : coopmat<16x16xf32, c>",
        "coop.zero : coopmat<16x16xf32, acc>",
    );
    let r = hrx_loom::front::parse(&src).and_then(|ast| hrx_loom::verify::verify(&ast, &src));
    assert_diag(
        &diagnostics(r)[0],
        "E0307",
        "unknown cooperative matrix role `acc`",
    );
    let src = edit("coop.load<row_major> %ta", "coop.load<rows> %ta");
    assert_diag(&verify_error(&src), "E0307", "unknown matrix layout `rows`");
    let src = edit("coop.load<row_major> %ta", "coop.load %ta");
    assert_diag(&verify_error(&src), "E0307", "needs a `<...>` tag");
}

#[test]
fn load_needs_a_2d_view_of_its_element_type() {
    let src = edit(
        "%fa = coop.load<row_major> %ta[%c0, %c0] : view<16x16xf16> -> coopmat<16x16xf16, a>",
        "%cv1 = buffer.view %c[%zero] : buffer -> view<256xf32>\n    %fa = coop.load<row_major> %cv1[%c0] : view<256xf32> -> coopmat<16x16xf16, a>",
    );
    let r = hrx_loom::front::parse(&src).and_then(|ast| hrx_loom::verify::verify(&ast, &src));
    assert_diag(&diagnostics(r)[0], "E0304", "needs a 2-D view");
    let src = edit(
        "coop.store<col_major> %acc, %cv[%c0, %c0] : coopmat<16x16xf32, c>, view<16x16xf32>",
        "coop.store<col_major> %acc, %ta[%c0, %c0] : coopmat<16x16xf32, c>, view<16x16xf16>",
    );
    assert_diag(&verify_error(&src), "E0301", "through a view of f16");
}

#[test]
fn coop_ops_need_subgroup_uniform_control_and_positions() {
    let src = edit(
        "  coop.store<col_major> %acc, %cv[%c0, %c0]",
        "  %low = index.cmp ult, %tid, %c16 : index\n  scf.if %low {\n  coop.store<col_major> %acc, %cv[%c0, %c0]",
    )
    .replace("view<16x16xf32>\n  kernel.return", "view<16x16xf32>\n  }\n  kernel.return");
    assert_diag(
        &verify_error(&src),
        "E0402",
        "cooperative matrix op in divergent control flow",
    );
    let src = edit(
        "coop.store<col_major> %acc, %cv[%c0, %c0]",
        "coop.store<col_major> %acc, %cv[%tid, %c0]",
    );
    assert_diag(&verify_error(&src), "E0403", "must be subgroup-uniform");
}

#[test]
fn coop_ops_may_run_under_a_branch_on_the_subgroup_id() {
    // Each subgroup takes one side, so the ops are subgroup-uniform:
    // loom's verifier accepts them. naga's own uniformity analysis knows
    // only workgroup uniformity and refuses a fragment load under such a
    // branch; it is not asked (emit leaves uniformity to loom).
    let from = "    %fa = coop.load<row_major> %ta[%c0, %c0] : view<16x16xf16> -> coopmat<16x16xf16, a>
    %fb = coop.load<row_major> %bv[%k0, %c0] : view<[%k]x16xf16> -> coopmat<16x16xf16, b>
    %next = coop.mma %fa, %fb, %sum : coopmat<16x16xf16, a>, coopmat<16x16xf16, b>, coopmat<16x16xf32, c>
";
    let to = "    %sgid = kernel.subgroup.id : index
    %first = index.cmp eq, %sgid, %c0 : index
    %next = scf.if %first -> (coopmat<16x16xf32, c>) {
      %fa = coop.load<row_major> %ta[%c0, %c0] : view<16x16xf16> -> coopmat<16x16xf16, a>
      %fb = coop.load<row_major> %bv[%k0, %c0] : view<[%k]x16xf16> -> coopmat<16x16xf16, b>
      %prod = coop.mma %fa, %fb, %sum : coopmat<16x16xf16, a>, coopmat<16x16xf16, b>, coopmat<16x16xf32, c>
      scf.yield %prod : coopmat<16x16xf32, c>
    } else {
      scf.yield %sum : coopmat<16x16xf32, c>
    }
";
    let artifact = compile(&edit(from, to), &Target::hopper()).unwrap();
    spirv_val::validate_modern("coop_tile_subgroup_branch", artifact.spirv());
}

#[test]
fn stores_respect_readonly() {
    let src = edit("%c: buffer)", "%c: buffer {readonly})");
    assert_diag(&verify_error(&src), "E0404", "read-only buffer %c");
}

#[test]
fn printer_round_trips_coop_syntax() {
    let ast = hrx_loom::front::parse(TILE).unwrap();
    let printed = hrx_loom::front::print(&ast);
    assert!(printed.contains("coopmat<16x16xf16, a>"), "{printed}");
    let again = hrx_loom::front::parse(&printed).unwrap();
    assert_eq!(hrx_loom::front::print(&again), printed);
}

/// `OpCapability VulkanMemoryModelDeviceScope` is declared.
fn declares_device_scope(words: &[u32]) -> bool {
    words
        .windows(2)
        .any(|w| w[0] == (2 << 16 | 17) && w[1] == 5346)
}

#[test]
fn device_scope_is_declared_where_the_memory_model_needs_it() {
    // Cooperative matrices switch naga to the Vulkan memory model, where
    // a storage barrier's device scope needs its own capability (naga
    // leaves it out; emit adds it). Workgroup barriers do not need it.
    let hopper = Target::hopper();
    let plain = compile(TILE, &hopper).unwrap();
    assert!(!declares_device_scope(plain.spirv()));
    let src = edit(
        "  kernel.return",
        "  kernel.barrier<storage> scope(device) ordering(acq_rel)\n  kernel.return",
    );
    let storage = compile(&src, &hopper).unwrap();
    assert!(declares_device_scope(storage.spirv()));
    spirv_val::validate_modern("coop_tile_storage_barrier", storage.spirv());
    // Non-private accesses (ordered by barriers under the Vulkan memory
    // model): (fragment loads, fragment stores, plain stores).
    let non_private = |words: &[u32]| {
        let mut found = (0, 0, 0);
        let mut at = 5;
        while at < words.len() {
            let (count, opcode) = ((words[at] >> 16) as usize, words[at] & 0xffff);
            // OpCooperativeMatrixLoadKHR's memory operand follows the
            // stride; OpCooperativeMatrixStoreKHR's likewise; OpStore's
            // follows the object.
            let mask = match opcode {
                4457 if count > 6 => words.get(at + 6),
                4458 if count > 5 => words.get(at + 5),
                62 if count > 3 => words.get(at + 3),
                _ => None,
            };
            match (opcode, mask) {
                (4457, Some(&mask)) if mask & 0x30 == 0x30 => found.0 += 1,
                (4458, Some(&mask)) if mask & 0x28 == 0x28 => found.1 += 1,
                (62, Some(&mask)) if mask & 0x28 == 0x28 => found.2 += 1,
                _ => {}
            }
            at += count.max(1);
        }
        found
    };
    // The staged tile is written by some work items and read by others
    // across workgroup barriers: its store and fragment load are
    // non-private; B's fragment load from a read-only buffer is not.
    assert_eq!(non_private(plain.spirv()), (1, 0, 1));
    // With a storage barrier, the one store to the written buffer C is
    // non-private too.
    assert_eq!(non_private(storage.spirv()), (1, 1, 1));
    // Without cooperative matrices the GLSL memory model needs nothing.
    let lavapipe = Compiler::for_target(None, &Target::lavapipe())
        .and_then(|c| c.module(include_str!("../corpus/last_group_sum.loom")))
        .and_then(|m| m.compile_uncached(&Specialization::new("@last_group_sum")))
        .unwrap();
    assert!(!declares_device_scope(lavapipe.spirv()));
    // There the written buffers (partials, counter, total: variables of
    // bindings 1-3) are decorated Coherent instead, the input is not.
    let coherent = lavapipe
        .spirv()
        .windows(3)
        .filter(|w| w[0] == (3 << 16 | 71) && w[2] == 23)
        .count();
    assert_eq!(coherent, 3);
    // And its workgroup memory keeps plain accesses: workgroup barriers
    // order them under the GLSL model.
    assert_eq!(non_private(lavapipe.spirv()), (0, 0, 0));
}

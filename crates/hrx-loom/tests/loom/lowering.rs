//! Lowering details: push-constant packing, buffer layouts, byte offsets,
//! vector fallbacks and target limits. Every artifact passes spirv-val.

use hrx_core::{Error, Target};
use hrx_loom::{Compiler, ScalarType, ScalarValue, Specialization};
use hrx_test_support::spirv_val;

const LAUNCH: &str = "kernel.def @k(%n: index) {
  %one = index.constant 1 : index
  %wg = index.constant 64 : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%wg, %one, %one) : index
}";

fn kernel(args: &str, body: &str) -> String {
    format!("{LAUNCH} launch({args}) {{\n{body}\n  kernel.return\n}}\n")
}

fn compile(src: &str) -> Result<hrx_loom::Artifact, Error> {
    let c = Compiler::for_target(None, &Target::lavapipe())?;
    let a = c.module(src)?.compile(&Specialization::new("@k"))?;
    spirv_val::validate("k", a.spirv());
    Ok(a)
}

#[test]
fn push_constants_pack_in_order_with_types() {
    let src = kernel(
        "%n: index, %b: buffer, %s: i32, %u: u32, %f: f32, %o: offset",
        "",
    );
    let a = compile(&src).unwrap();
    let layout: Vec<_> = a
        .push_constants()
        .iter()
        .map(|p| (p.name.as_str(), p.ty, p.offset))
        .collect();
    assert_eq!(
        layout,
        [
            ("n", ScalarType::Index, 0),
            ("s", ScalarType::I32, 4),
            ("u", ScalarType::U32, 8),
            ("f", ScalarType::F32, 12),
            ("o", ScalarType::Offset, 16),
        ]
    );
    assert_eq!(a.push_constant_bytes(), 20);
    let bytes = a
        .push_constants_from(&[
            ScalarValue::Index(7),
            ScalarValue::I32(-2),
            ScalarValue::U32(9),
            ScalarValue::F32(1.5),
            ScalarValue::Offset(16),
        ])
        .unwrap();
    let words: Vec<u32> = bytes
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, [7, (-2i32) as u32, 9, 1.5f32.to_bits(), 16]);
    // Wrong count, wrong type, index past 32 bits.
    assert!(a.push_constants_from(&[ScalarValue::Index(7)]).is_err());
    let mut wrong = vec![ScalarValue::F32(0.0); 5];
    assert!(a.push_constants_from(&wrong).is_err());
    wrong = vec![
        ScalarValue::Index(1 << 32),
        ScalarValue::I32(0),
        ScalarValue::U32(0),
        ScalarValue::F32(0.0),
        ScalarValue::Offset(0),
    ];
    assert!(a.push_constants_from(&wrong).is_err());
    // An unused buffer still has its binding.
    assert_eq!(a.bindings().len(), 1);
    assert_eq!(a.bindings()[0].name, "b");
}

#[test]
fn f16_push_constant_is_rejected() {
    // Rejected (by the verifier, before lowering's own E0604 check).
    let e = compile(&kernel("%n: index, %h: f16", "")).unwrap_err();
    let Error::Compile { diagnostics, .. } = e else {
        panic!("expected a compile error");
    };
    assert!(diagnostics[0].message.contains("f16"));
    assert_eq!(diagnostics[0].line, 5);
}

#[test]
fn mixed_32_bit_element_types_share_u32_words() {
    let body = "  %z = index.constant 0 : offset
  %f = buffer.view %b[%z] : buffer -> view<[%n]xf32>
  %u = buffer.view %b[%z] : buffer -> view<[%n]xu32>
  %i = kernel.workitem.dispatch.id<x> : index
  %x = view.load %f[%i] : view<[%n]xf32> -> f32
  %bits = view.load %u[%i] : view<[%n]xu32> -> u32
  %y = scalar.bitcast %bits : u32 -> f32
  %s = scalar.addf %x, %y : f32
  view.store %s, %f[%i] : f32, view<[%n]xf32>";
    let a = compile(&kernel("%n: index, %b: buffer", body)).unwrap();
    assert_eq!(a.bindings()[0].element_bytes, 4);
}

#[test]
fn f16_mixed_with_f32_is_rejected() {
    let body = "  %z = index.constant 0 : offset
  %f = buffer.view %b[%z] : buffer -> view<[%n]xf32>
  %h = buffer.view %b[%z] : buffer -> view<[%n]xf16>
  %i = kernel.workitem.dispatch.id<x> : index
  %x = view.load %h[%i] : view<[%n]xf16> -> f16
  %y = scalar.extf %x : f16 -> f32
  view.store %y, %f[%i] : f32, view<[%n]xf32>";
    let e = compile(&kernel("%n: index, %b: buffer", body)).unwrap_err();
    assert!(e.to_string().contains("E0603"), "{e}");
}

#[test]
fn static_views_at_byte_offsets_give_min_bytes() {
    let body = "  %off = index.constant 64 : offset
  %v = buffer.view %b[%off] : buffer -> view<4x8xf32>
  %w = buffer.view %b[%off] : buffer -> view<2xf32>
  %i = kernel.workitem.id<x> : index
  %c1 = index.constant 1 : index
  %x = view.load %v[%c1, %i] : view<4x8xf32> -> f32
  view.store %x, %w[%c1] : f32, view<2xf32>";
    let a = compile(&kernel("%n: index, %b: buffer", body)).unwrap();
    assert_eq!(a.bindings()[0].min_bytes, Some(64 + 4 * 8 * 4));
    assert_eq!(a.bindings()[0].access, hrx_loom::Access::ReadWrite);
}

#[test]
fn unaligned_vector_access_falls_back_to_scalar_elements() {
    let body = "  %off = index.constant 4 : offset
  %v = buffer.view %b[%off] : buffer -> view<[%n]xf32>
  %i = kernel.workitem.dispatch.id<x> : index
  %q = vector.load %v[%i] : view<[%n]xf32> -> vector<3xf32>
  vector.store %q, %v[%i] : vector<3xf32>, view<[%n]xf32>";
    let a = compile(&kernel("%n: index, %b: buffer", body)).unwrap();
    assert_eq!(a.bindings()[0].element_bytes, 4);
}

#[test]
fn workgroup_memory_is_limited_by_the_target() {
    let body = "  %z = index.constant 0 : offset
  %bytes = index.constant 65536 : offset
  %m = buffer.alloca<workgroup> align(16) %bytes : buffer
  %v = buffer.view %m[%z] : buffer -> view<16384xf32>
  %i = kernel.workitem.id<x> : index
  %f = scalar.constant 1.0 : f32
  view.store %f, %v[%i] : f32, view<16384xf32>";
    let e = compile(&kernel("%n: index", body)).unwrap_err();
    assert!(e.to_string().contains("E0605"), "{e}");
}

#[test]
fn workgroup_allocations_near_u32_max_are_refused_not_wrapped() {
    for bytes in ["4294967295", "4294967290", "4294967280"] {
        let body = format!(
            "  %z = index.constant 0 : offset
  %bytes = index.constant {bytes} : offset
  %m = buffer.alloca<workgroup> align(16) %bytes : buffer
  %v = buffer.view %m[%z] : buffer -> view<16xf32>
  %i = kernel.workitem.id<x> : index
  %f = scalar.constant 1.0 : f32
  view.store %f, %v[%i] : f32, view<16xf32>"
        );
        let e = compile(&kernel("%n: index", &body)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("E0605") && text.contains(bytes), "{text}");
    }
}

#[test]
fn a_misaligned_constant_view_offset_is_an_error_at_the_view() {
    let body = "  %off = index.constant 6 : offset
  %v = buffer.view %b[%off] : buffer -> view<[%n]xf32>
  %i = kernel.workitem.dispatch.id<x> : index
  %f = scalar.constant 1.0 : f32
  view.store %f, %v[%i] : f32, view<[%n]xf32>";
    let src = kernel("%n: index, %b: buffer", body);
    let Err(Error::Compile { diagnostics, .. }) = compile(&src) else {
        panic!("a 6-byte offset into f32 elements compiled");
    };
    assert_eq!(diagnostics[0].code, "E0606", "{diagnostics:#?}");
    assert!(
        diagnostics[0].excerpt.contains("buffer.view"),
        "{diagnostics:#?}"
    );
}

#[test]
fn a_bare_barrier_is_a_workgroup_barrier() {
    let bare = kernel("%n: index", "  kernel.barrier");
    let tagged = kernel(
        "%n: index",
        "  kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)",
    );
    assert_eq!(
        compile(&bare).unwrap().spirv(),
        compile(&tagged).unwrap().spirv()
    );
}

#[test]
fn atomics_with_plain_loads_and_stores_on_one_buffer() {
    let body = "  %z = index.constant 0 : offset
  %v = buffer.view %b[%z] : buffer -> view<[%n]xu32>
  %i = kernel.workitem.dispatch.id<x> : index
  %x = view.load %v[%i] : view<[%n]xu32> -> u32
  %old = view.atomic.rmw<addi> %x, %v[%i] : u32, view<[%n]xu32> -> u32
  view.store %old, %v[%i] : u32, view<[%n]xu32>";
    compile(&kernel("%n: index, %b: buffer", body)).unwrap();
}

#[test]
fn non_finite_and_f16_constants_lower() {
    let body = "  %z = index.constant 0 : offset
  %v = buffer.view %b[%z] : buffer -> view<[%n]xf32>
  %h = buffer.view %c[%z] : buffer -> view<[%n]xf16>
  %i = kernel.workitem.dispatch.id<x> : index
  %inf = scalar.constant inf : f32
  %nan = scalar.constant nan : f32
  %s = scalar.addf %inf, %nan : f32
  view.store %s, %v[%i] : f32, view<[%n]xf32>
  %q = scalar.constant 0.25 : f16
  view.store %q, %h[%i] : f16, view<[%n]xf16>";
    compile(&kernel("%n: index, %b: buffer, %c: buffer", body)).unwrap();
}

/// The (memory scope, semantics) of each `OpControlBarrier` in `words`,
/// its operands resolved through the module's `OpConstant`s.
fn control_barriers(words: &[u32]) -> Vec<(u32, u32)> {
    let mut constants = std::collections::HashMap::new();
    let mut barriers = vec![];
    let mut at = 5;
    while at < words.len() {
        let (count, opcode) = ((words[at] >> 16) as usize, words[at] & 0xffff);
        let operands = &words[at + 1..at + count];
        match opcode {
            // OpConstant: result type, id, value.
            43 => {
                constants.insert(operands[1], operands[2]);
            }
            // OpControlBarrier: execution scope, memory scope, semantics.
            224 => barriers.push((operands[1], operands[2])),
            _ => {}
        }
        at += count.max(1);
    }
    barriers
        .into_iter()
        .map(|(scope, semantics)| (constants[&scope], constants[&semantics]))
        .collect()
}

#[test]
fn storage_barriers_order_storage_at_device_scope() {
    // Scope: Device 1, Workgroup 2. Semantics: AcquireRelease 0x8,
    // UniformMemory 0x40, WorkgroupMemory 0x100.
    let src = kernel(
        "%n: index, %b: buffer",
        "  kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
  kernel.barrier<storage> scope(device) ordering(acq_rel)
  kernel.barrier<storage>",
    );
    let a = compile(&src).unwrap();
    assert_eq!(
        control_barriers(a.spirv()),
        [(2, 0x108), (1, 0x148), (1, 0x148)]
    );
}

#[test]
fn workgroup_allocations_take_whole_16_byte_granules() {
    // SPIR-V cannot align workgroup variables, so each allocation is
    // rounded up to 16 bytes: a 4-byte flag then never leaves the next
    // allocation (a tile that cooperative loads read) off a 16-byte
    // boundary. Lavapipe has 32 KiB: 32760 + 4 bytes fit unrounded, but
    // not as 32768 + 16.
    let body = |flag: u32| {
        format!(
            "  %z = index.constant 0 : offset
  %fb = index.constant {flag} : offset
  %f = buffer.alloca<workgroup> align(4) %fb : buffer
  %fv = buffer.view %f[%z] : buffer -> view<1xu32>
  %tb = index.constant 32760 : offset
  %t = buffer.alloca<workgroup> align(16) %tb : buffer
  %tv = buffer.view %t[%z] : buffer -> view<8190xf32>
  %i = kernel.workitem.id<x> : index
  %one = scalar.constant 1.0 : f32
  %u = scalar.constant 1 : u32
  %c0 = index.constant 0 : index
  view.store %one, %tv[%i] : f32, view<8190xf32>
  view.store %u, %fv[%c0] : u32, view<1xu32>"
        )
    };
    let e = compile(&kernel("%n: index", &body(4))).unwrap_err();
    assert!(e.to_string().contains("total 32784 bytes"), "{e}");
    // Without the flag's rounding the tile alone fits.
    let mut lone = body(4).replace("  view.store %u, %fv[%c0] : u32, view<1xu32>", "");
    lone = lone.replace("%fv = buffer.view %f[%z] : buffer -> view<1xu32>\n", "");
    compile(&kernel("%n: index", &lone)).unwrap();
}

/// Compile `body` (in a kernel of workgroup size `wg`) for `target` and
/// return the one diagnostic, which must sit on the line holding `at`.
fn error_at(target: &Target, wg: &str, body: &str, at: &str) -> hrx_core::Diagnostic {
    let src = format!(
        "kernel.def @k(%n: index) {{
  %one = index.constant 1 : index
  %wg = index.constant 16 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size({wg}) : index
}} launch(%n: index, %b: buffer) {{
  %zero = index.constant 0 : offset
  %v = buffer.view %b[%zero] : buffer -> view<[%n]xu32>
  %i = kernel.workitem.dispatch.id<x> : index
{body}
  kernel.return
}}
"
    );
    let c = Compiler::for_target(None, target).unwrap();
    let result = c
        .module(&src)
        .and_then(|m| m.compile(&Specialization::new("@k")));
    let Err(Error::Compile {
        mut diagnostics, ..
    }) = result
    else {
        panic!("compiled:\n{src}");
    };
    assert_eq!(diagnostics.len(), 1, "{diagnostics:#?}");
    let d = diagnostics.remove(0);
    let line = src.lines().position(|l| l.contains(at)).unwrap() + 1;
    assert_eq!(d.line as usize, line, "{d:#?}");
    assert!(!d.message.contains('['), "naga handle in {:?}", d.message);
    d
}

#[test]
fn constant_operands_out_of_an_ops_domain_are_errors_at_the_op() {
    let lavapipe = Target::lavapipe();
    let flat = "%wg, %one, %one";
    let store = "\n  view.store %q, %v[%i] : u32, view<[%n]xu32>";
    let cases = [
        (
            "%a = scalar.constant 7 : u32\n  %z = scalar.constant 0 : u32\n  %q = scalar.divui %a, %z : u32",
            "scalar.divui",
        ),
        (
            "%a = scalar.constant 7 : u32\n  %z = scalar.constant 0 : u32\n  %q = scalar.remui %a, %z : u32",
            "scalar.remui",
        ),
        (
            "%z = index.constant 0 : index\n  %d = index.rem %i, %z : index\n  %q = index.cast %d : index -> u32",
            "index.rem",
        ),
        (
            "%a = scalar.constant 7 : u32\n  %s = scalar.constant 32 : u32\n  %q = scalar.shrui %a, %s : u32",
            "scalar.shrui",
        ),
        (
            "%a = scalar.constant 7 : u32\n  %w = vector.splat %a : u32 -> vector<2xu32>\n  %l = index.constant 2 : index\n  %q = vector.extract %w, %l : vector<2xu32> -> u32",
            "vector.extract",
        ),
    ];
    for (body, at) in cases {
        let d = error_at(&lavapipe, flat, &format!("  {body}{store}"), at);
        assert_eq!(d.code, "E0607", "{d:#?}");
    }
    // A case the lowering does not screen: naga's rejection still names the op.
    let vector_shift = "  %a = scalar.constant 7 : u32
  %c = scalar.constant 40 : u32
  %av = vector.splat %a : u32 -> vector<2xu32>
  %cv = vector.splat %c : u32 -> vector<2xu32>
  %s = scalar.shli %av, %cv : vector<2xu32>
  %l = index.constant 0 : index
  %q = vector.extract %s, %l : vector<2xu32> -> u32";
    let d = error_at(
        &lavapipe,
        flat,
        &format!("{vector_shift}{store}"),
        "scalar.shli",
    );
    assert_eq!(d.code, "E0601", "{d:#?}");
}

#[test]
fn subgroup_ids_need_a_one_dimensional_workgroup() {
    let body = "  %s = kernel.subgroup.id : index
  %q = index.cast %s : index -> u32
  view.store %q, %v[%i] : u32, view<[%n]xu32>";
    let d = error_at(
        &Target::hopper(),
        "%wg, %wg, %one",
        body,
        "kernel.subgroup.id",
    );
    assert_eq!(d.code, "E0604", "{d:#?}");
    assert!(d.message.contains("one-dimensional"), "{d:#?}");
}

//! One test per rejection of the loom front end and verifier: each asserts
//! the error code, the message and the line:column it points at.

use hrx_core::{Diagnostic, Error};

/// Parse and verify; the diagnostics of the failure.
fn errors(src: &str) -> Vec<Diagnostic> {
    let result = hrx_loom::front::parse(src).and_then(|ast| hrx_loom::verify::verify(&ast, src));
    match result {
        Ok(_) => panic!("expected errors for:\n{src}"),
        Err(Error::Compile { diagnostics, .. }) => diagnostics,
        Err(other) => panic!("expected a compile error, got {other}"),
    }
}

/// The single diagnostic of `src`.
fn one_error(src: &str) -> Diagnostic {
    let mut d = errors(src);
    assert_eq!(d.len(), 1, "expected one error, got {d:#?}");
    d.remove(0)
}

/// 1-based line and column of the `nth` occurrence of `needle`.
fn position(src: &str, needle: &str, nth: usize) -> (u32, u32) {
    let at = src
        .match_indices(needle)
        .nth(nth)
        .unwrap_or_else(|| panic!("`{needle}` not in source"))
        .0;
    let line = src[..at].matches('\n').count() + 1;
    let col = at - src[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
    (line as u32, col as u32)
}

fn assert_diag(d: &Diagnostic, code: &str, message: &str, src: &str, needle: &str, nth: usize) {
    assert_eq!(d.code, code, "{d:#?}");
    assert!(
        d.message.contains(message),
        "message {:?} lacks {message:?}",
        d.message
    );
    assert_eq!((d.line, d.column), position(src, needle, nth), "{d:#?}");
    assert!(d.excerpt.contains('^'), "{d:#?}");
}

/// A small valid kernel with `launch` extra launch ops and `body` body ops.
fn kernel(args: &str, body: &str) -> String {
    format!(
        "kernel.def @k(%n: index) {{
  %one = index.constant 1 : index
  %wg = index.constant 64 : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%wg, %one, %one) : index
}} launch(%n: index, %data: buffer{args}) {{
  %zero = index.constant 0 : offset
  %v = buffer.view %data[%zero] : buffer -> view<[%n]xf32>
  %i = kernel.workitem.dispatch.id<x> : index
{body}
  kernel.return
}}
"
    )
}

#[test]
fn the_base_kernel_is_valid() {
    let src = kernel("", "  %x = view.load %v[%i] : view<[%n]xf32> -> f32");
    let ast = hrx_loom::front::parse(&src).unwrap();
    let module = hrx_loom::verify::verify(&ast, &src).unwrap();
    assert_eq!(module.kernels.len(), 1);
    assert!(module.kernels[0].buffer_access[1].read);
    assert!(!module.kernels[0].buffer_access[1].written);
}

#[test]
fn undefined_value() {
    let src = kernel("", "  %x = view.load %v[%nope] : view<[%n]xf32> -> f32");
    assert_diag(
        &one_error(&src),
        "E0201",
        "undefined value %nope",
        &src,
        "%nope",
        0,
    );
}

#[test]
fn use_outside_its_region() {
    let src = kernel(
        "",
        "  %c = index.cmp ult, %i, %n : index
  scf.if %c {
    %x = view.load %v[%i] : view<[%n]xf32> -> f32
  }
  view.store %x, %v[%i] : f32, view<[%n]xf32>",
    );
    assert_diag(
        &one_error(&src),
        "E0203",
        "outside the region",
        &src,
        "%x,",
        0,
    );
}

#[test]
fn type_mismatch() {
    let src = kernel(
        "",
        "  %x = view.load %v[%i] : view<[%n]xf32> -> f32
  %y = scalar.addf %x, %i : f32",
    );
    assert_diag(
        &one_error(&src),
        "E0301",
        "%i has type index, expected f32",
        &src,
        "%i :",
        0,
    );
}

#[test]
fn wrong_operand_count() {
    let src = kernel("", "  %j = index.add %i, %i, %i : index");
    assert_diag(
        &one_error(&src),
        "E0302",
        "takes 2 operand(s), 3 given",
        &src,
        "index.add",
        0,
    );
}

#[test]
fn unknown_op() {
    let src = kernel("", "  %j = index.frobnicate %i, %i : index");
    assert_diag(
        &one_error(&src),
        "E0104",
        "unknown op `index.frobnicate`",
        &src,
        "index.frob",
        0,
    );
}

#[test]
fn unknown_type() {
    let src = kernel("", "  %x = view.load %v[%i] : view<[%n]xf32> -> f64");
    assert_diag(
        &one_error(&src),
        "E0303",
        "unknown type `f64`",
        &src,
        "f64",
        0,
    );
}

#[test]
fn store_through_a_readonly_buffer() {
    let src = kernel(
        ", %src: buffer {readonly}",
        "  %w = buffer.view %src[%zero] : buffer -> view<[%n]xf32>
  %x = view.load %v[%i] : view<[%n]xf32> -> f32
  view.store %x, %w[%i] : f32, view<[%n]xf32>",
    );
    assert_diag(
        &one_error(&src),
        "E0404",
        "read-only buffer %src",
        &src,
        "view.store",
        0,
    );
}

#[test]
fn barrier_in_divergent_control_flow() {
    let src = kernel(
        "",
        "  %c = index.cmp ult, %i, %n : index
  scf.if %c {
    kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
  }",
    );
    assert_diag(
        &one_error(&src),
        "E0401",
        "divergent control flow",
        &src,
        "kernel.barrier",
        0,
    );
}

#[test]
fn barrier_under_a_loop_carried_divergent_value() {
    // %acc starts uniform but becomes divergent through the yield: only the
    // fixpoint sees that the condition of the inner if is divergent.
    let src = kernel(
        "",
        "  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %r = scf.for %j = [%c0 to %n step %c1](%acc = %c0 : index) -> (index) {
    %p = index.cmp ult, %acc, %n : index
    scf.if %p {
      kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
    }
    %next = index.add %acc, %i : index
    scf.yield %next : index
  }",
    );
    assert_diag(
        &one_error(&src),
        "E0401",
        "divergent control flow",
        &src,
        "kernel.barrier",
        0,
    );
}

#[test]
fn divergence_through_a_long_chain_of_loop_carried_values() {
    // %a0 <- %a1 <- ... <- %aN <- %i: divergence reaches %a0 only after N
    // steps around the loop, and %a0 guards a barrier. The solver must
    // follow the whole chain (and, being linear, does it quickly).
    let links = 2000;
    let args: Vec<String> = (0..links).map(|k| format!("%a{k} = %c0 : index")).collect();
    let types = vec!["index"; links].join(", ");
    let mut body: Vec<String> = Vec::new();
    let mut yields = Vec::new();
    for k in 0..links {
        let from = if k + 1 < links {
            format!("%a{}", k + 1)
        } else {
            "%i".to_string()
        };
        body.push(format!("    %b{k} = index.add {from}, %c0 : index"));
        yields.push(format!("%b{k}"));
    }
    let results: Vec<String> = (0..links).map(|k| format!("%r{k}")).collect();
    let src = kernel(
        "",
        &format!(
            "  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  {} = scf.for %j = [%c0 to %n step %c1]({}) -> ({types}) {{
    %p = index.cmp ult, %a0, %n : index
    scf.if %p {{
      kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
    }}
{}
    scf.yield {} : {types}
  }}",
            results.join(", "),
            args.join(", "),
            body.join("\n"),
            yields.join(", "),
        ),
    );
    assert_diag(
        &one_error(&src),
        "E0401",
        "divergent control flow",
        &src,
        "kernel.barrier",
        0,
    );
}

#[test]
fn barrier_in_uniform_control_flow_is_accepted() {
    let src = kernel(
        "",
        "  %g = kernel.workgroup.id<x> : index
  %c = index.cmp ult, %g, %n : index
  scf.if %c {
    kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
  }",
    );
    let ast = hrx_loom::front::parse(&src).unwrap();
    hrx_loom::verify::verify(&ast, &src).unwrap();
}

#[test]
fn subgroup_barriers_need_subgroup_uniform_control_flow() {
    // A lane-dependent condition is refused; a subgroup-dependent one,
    // which a workgroup barrier could not sit under, is accepted.
    let divergent = kernel(
        "",
        "  %lane = kernel.subgroup.lane.id : index
  %c = index.cmp ult, %lane, %n : index
  scf.if %c {
    kernel.barrier<subgroup> scope(subgroup) ordering(acq_rel)
  }",
    );
    assert_diag(
        &one_error(&divergent),
        "E0401",
        "some invocations of a subgroup could skip it",
        &divergent,
        "kernel.barrier",
        0,
    );
    let by_subgroup = kernel(
        "",
        "  %s = kernel.subgroup.id : index
  %c = index.cmp ult, %s, %n : index
  scf.if %c {
    kernel.barrier<subgroup> scope(subgroup) ordering(acq_rel)
  }",
    );
    let ast = hrx_loom::front::parse(&by_subgroup).unwrap();
    hrx_loom::verify::verify(&ast, &by_subgroup).unwrap();
    let workgroup =
        by_subgroup.replace("<subgroup> scope(subgroup)", "<workgroup> scope(workgroup)");
    assert_diag(
        &one_error(&workgroup),
        "E0401",
        "divergent control flow",
        &workgroup,
        "kernel.barrier",
        0,
    );
}

#[test]
fn barrier_kinds_and_scopes_must_match() {
    let src = kernel(
        "",
        "  kernel.barrier<storage> scope(workgroup) ordering(acq_rel)",
    );
    assert_diag(
        &one_error(&src),
        "E0307",
        "unknown barrier scope `workgroup` (one of: device)",
        &src,
        "workgroup)",
        0,
    );
    let src = kernel("", "  kernel.barrier<device>");
    assert_diag(
        &one_error(&src),
        "E0307",
        "unknown barrier kind `device` (one of: workgroup subgroup storage)",
        &src,
        "device",
        0,
    );
}

#[test]
fn subgroup_collective_in_divergent_control_flow() {
    let src = kernel(
        "",
        "  %lane = kernel.subgroup.lane.id : index
  %c0 = index.constant 0 : index
  %c = index.cmp eq, %lane, %c0 : index
  scf.if %c {
    %x = view.load %v[%i] : view<[%n]xf32> -> f32
    %s = kernel.subgroup.reduce<addf> %x : f32
  }",
    );
    assert_diag(
        &one_error(&src),
        "E0402",
        "subgroup collective",
        &src,
        "%s =",
        0,
    );
}

#[test]
fn broadcast_lane_must_be_subgroup_uniform() {
    let src = kernel(
        "",
        "  %lane = kernel.subgroup.lane.id : index
  %x = view.load %v[%i] : view<[%n]xf32> -> f32
  %b = kernel.subgroup.broadcast %x, %lane : f32",
    );
    assert_diag(
        &one_error(&src),
        "E0403",
        "subgroup-uniform lane",
        &src,
        "%b =",
        0,
    );
}

#[test]
fn non_constant_workgroup_size() {
    let src = "kernel.def @k(%n: index) {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%n, %one, %one) : index
} launch() {
  kernel.return
}
";
    assert_diag(
        &one_error(src),
        "E0502",
        "must be a compile-time constant",
        src,
        "%n, %one, %one)",
        0,
    );
}

#[test]
fn missing_launch_config() {
    let src = "kernel.def @k(%n: index) {
  %one = index.constant 1 : index
} launch() {
  kernel.return
}
";
    assert_diag(
        &one_error(src),
        "E0504",
        "no `kernel.launch.config`",
        src,
        "@k",
        0,
    );
}

#[test]
fn duplicate_launch_config() {
    let src = "kernel.def @k() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch() {
  kernel.return
}
";
    assert_diag(
        &one_error(src),
        "E0505",
        "exactly one",
        src,
        "kernel.launch.config",
        1,
    );
}

#[test]
fn duplicate_symbol() {
    let one = kernel("", "");
    let src = format!("{one}\n{one}");
    assert_diag(
        &one_error(&src),
        "E0204",
        "duplicate symbol @k (first defined at 1:12)",
        &src,
        "@k",
        1,
    );
}

#[test]
fn duplicate_config_key() {
    let src = format!(
        "config.decl @k.w = 1 : index\nconfig.decl @k.w = 2 : index\n{}",
        kernel("", "")
    );
    assert_diag(
        &one_error(&src),
        "E0204",
        "duplicate symbol @k.w",
        &src,
        "@k.w",
        1,
    );
}

#[test]
fn unknown_config_key() {
    let src = format!(
        "config.decl @k.width = 64 : index\n{}",
        kernel("", "  %w = config.value @k.wdith : index")
    );
    assert_diag(
        &one_error(&src),
        "E0503",
        "unknown config key `@k.wdith`",
        &src,
        "@k.wdith",
        0,
    );
}

#[test]
fn duplicate_value() {
    let src = kernel("", "  %i = index.constant 3 : index");
    assert_diag(
        &one_error(&src),
        "E0202",
        "%i is already defined",
        &src,
        "%i =",
        1,
    );
}

#[test]
fn launch_region_allows_only_index_arithmetic() {
    let src = "kernel.def @k(%n: index) {
  %one = index.constant 1 : index
  %f = scalar.constant 1.0 : f32
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%one, %one, %one) : index
} launch() {
  kernel.return
}
";
    assert_diag(
        &one_error(src),
        "E0501",
        "not allowed in the launch region",
        src,
        "scalar.constant",
        0,
    );
}

#[test]
fn workload_arguments_are_not_visible_in_the_body() {
    let src = "kernel.def @k(%n: index) {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%one, %one, %one) : index
} launch() {
  %m = index.add %n, %n : index
  kernel.return
}
";
    let d = &errors(src)[0];
    assert_diag(
        d,
        "E0201",
        "visible only in the launch region",
        src,
        "%n, %n",
        0,
    );
}

#[test]
fn several_independent_errors_are_reported_together() {
    let src = kernel(
        "",
        "  %a = index.add %i : index
  %b = scalar.bogus %i : f32
  %c = view.load %v[%missing] : view<[%n]xf32> -> f32",
    );
    // The unknown op stops at parse time; fix it to see verifier errors too.
    let d = errors(&src);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].code, "E0104");
    let src = src.replace("scalar.bogus %i : f32", "scalar.negf %i : f32");
    let d = errors(&src);
    let codes: Vec<&str> = d.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["E0302", "E0301", "E0201"], "{d:#?}");
    assert!(d.windows(2).all(|w| w[0].line < w[1].line));
}

#[test]
fn several_syntax_errors_are_reported_together() {
    let src = kernel(
        "",
        "  %a = index.add %i, : index
  %b = index.add %i %i : index
  %c = index.constant 99999999999999999999 : index",
    );
    let d = errors(&src);
    let codes: Vec<&str> = d.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["E0103", "E0103", "E0102"], "{d:#?}");
}

#[test]
fn view_dimensions_must_be_in_scope() {
    let src = kernel(
        "",
        "  %w = buffer.view %data[%zero] : buffer -> view<[%rows]xf32>",
    );
    assert_diag(
        &one_error(&src),
        "E0201",
        "undefined value %rows",
        &src,
        "%rows",
        0,
    );
}

#[test]
fn deep_nesting_is_a_diagnostic_not_a_crash() {
    let depth = 20_000;
    let mut body = String::from("  %c = index.cmp ult, %i, %n : index\n");
    body.push_str(&"  scf.if %c {\n".repeat(depth));
    body.push_str(&"  }\n".repeat(depth));
    let src = kernel("", &body);
    let d = errors(&src);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].code, "E0105");
    assert!(d[0].message.contains("nested deeper than"));
}

#[test]
fn launch_grid_and_workgroup_size_evaluate_on_the_host() {
    let src = "config.decl @k.wg = 128 : index
kernel.def @k(%n: index) {
  %one = index.constant 1 : index
  %wg = config.value @k.wg : index
  %last = index.sub %wg, %one : index
  %padded = index.add %n, %last : index
  %groups = index.div %padded, %wg : index
  kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%wg, %one, %one) : index
} launch() {
  kernel.return
}
";
    let ast = hrx_loom::front::parse(src).unwrap();
    let module = hrx_loom::verify::verify(&ast, src).unwrap();
    let k = module.kernel("@k").unwrap();
    let default = |key: &str| module.config(key).map(|c| c.default);
    let grid = k.launch_grid(&[1000], &default).unwrap();
    assert_eq!(grid.workgroups, [8, 1, 1]);
    assert_eq!(grid.workgroup_size, [128, 1, 1]);
    let wide = |_: &str| Some(hrx_loom::ir::Literal::Int(256));
    assert_eq!(k.workgroup_size(&wide).unwrap(), [256, 1, 1]);
    assert_eq!(k.launch_grid(&[1000], &wide).unwrap().workgroups, [4, 1, 1]);
    let zero = |_: &str| Some(hrx_loom::ir::Literal::Int(0));
    let err = k.launch_grid(&[1000], &zero).unwrap_err();
    assert!(
        err.message.contains("below zero") || err.message.contains("by zero"),
        "{err:?}"
    );
    assert!(k.launch_grid(&[], &default).is_err());
}

#[test]
fn verifier_bounds_nesting_of_trees_built_by_hand() {
    use hrx_loom::front::ast::{Form, Item};
    let src = kernel(
        "",
        "  %c = index.cmp ult, %i, %n : index\n  scf.if %c {\n  }",
    );
    let mut ast = hrx_loom::front::parse(&src).unwrap();
    let Item::Kernel(k) = &mut ast.items[0] else {
        panic!("a kernel")
    };
    let at = k.body.iter().position(|o| o.name.text == "scf.if").unwrap();
    let template = k.body[at].clone();
    let mut op = template.clone();
    for _ in 0..hrx_loom::verify::MAX_DEPTH * 2 {
        let mut outer = template.clone();
        if let Form::If { then, .. } = &mut outer.form {
            then.ops = vec![op];
        }
        op = outer;
    }
    k.body[at] = op;
    let err = hrx_loom::verify::verify(&ast, &src).unwrap_err();
    let Error::Compile { diagnostics, .. } = err else {
        panic!("compile error")
    };
    assert!(
        diagnostics.iter().any(|d| d.code == "E0105"),
        "{diagnostics:#?}"
    );
}

#[test]
fn vector_extract_lane_type_must_match() {
    let src = kernel(
        "",
        "  %x = vector.load %v[%i] : view<[%n]xf32> -> vector<4xf32>\n  %e = vector.extract %x, %i : vector<4xf32> -> u32",
    );
    assert_diag(
        &one_error(&src),
        "E0304",
        "`vector.extract` cannot take u32 out of vector<4xf32>",
        &src,
        "vector.extract",
        0,
    );
}

#[test]
fn vector_extract_lane_is_an_index() {
    let src = kernel(
        "",
        "  %x = vector.load %v[%i] : view<[%n]xf32> -> vector<4xf32>\n  %l = scalar.constant 1 : u32\n  %e = vector.extract %x, %l : vector<4xf32> -> f32",
    );
    let d = one_error(&src);
    assert_eq!(d.code, "E0301", "{d:#?}");
}

#[test]
fn unpackf16_takes_a_word() {
    let src = kernel(
        "",
        "  %x = view.load %v[%i] : view<[%n]xf32> -> f32\n  %p = vector.unpackf16 %x : f32 -> vector<2xf32>",
    );
    assert_diag(
        &one_error(&src),
        "E0304",
        "`vector.unpackf16` converts u32 to vector<2xf32>, not f32 to vector<2xf32>",
        &src,
        "vector.unpackf16",
        0,
    );
}

#[test]
fn line_numbers_agree_for_every_line_ending() {
    let unix = kernel("", "  %x = view.load %v[%i] : view<[%n]xf32> -> f64");
    let expected = position(&unix, "f64", 0);
    for ending in ["\r\n", "\r"] {
        let src = unix.replace('\n', ending);
        let d = one_error(&src);
        assert_eq!(d.code, "E0303", "{ending:?}: {d:#?}");
        assert_eq!((d.line, d.column), expected, "{ending:?}");
    }
}

#[test]
fn errors_on_a_huge_line_stay_small() {
    // Thousands of bad ops on one line: the report is capped in count and
    // each excerpt in width, so its size does not grow with the line.
    let bad_ops = "%x = index.bogus %n : index ".repeat(20_000);
    let src = kernel("", &format!("  {bad_ops}"));
    let d = errors(&src);
    assert!(
        d.len() <= hrx_loom::diag::MAX_DIAGNOSTICS + 1,
        "{}",
        d.len()
    );
    let total: usize = d.iter().map(|d| d.excerpt.len() + d.message.len()).sum();
    assert!(total < 64 * 1024, "{total} bytes of diagnostics");
}

#[test]
fn select_takes_no_cooperative_matrices() {
    let src = kernel(
        "",
        "  %z = coop.zero : coopmat<16x16xf32, c>
  %p = index.cmp ult, %i, %n : index
  %s = scalar.select %p, %z, %z : coopmat<16x16xf32, c>",
    );
    assert_diag(
        &one_error(&src),
        "E0304",
        "expected a scalar or vector type",
        &src,
        "scalar.select",
        0,
    );
}

//! The kernel builder: built kernels print as, verify as and compile to
//! the same SPIR-V as their hand-written equivalents; mistakes the Rust
//! types cannot catch come back as the verifier's diagnostics; the
//! vectorize and rename passes.

use hrx_core::{Error, Target};
use hrx_loom::build::{Barrier, Built, Fragment, KernelBuilder, ModuleBuilder, Ty, passes};
use hrx_loom::ir::{Axis, FloatPredicate, IntPredicate, ReduceOp, Scalar};
use hrx_loom::{Compiler, Specialization};

const TEXT: &str = "config.decl @t.wg = 64 : index
kernel.def @t(%n: index) {
  %wg = config.value @t.wg : index
  %one = index.constant 1 : index
  %g = index.div %n, %wg : index
  kernel.launch.config workgroups(%g, %one, %one) workgroup_size(%wg, %one, %one) : index
} launch(%n: index, %x: buffer {readonly}, %y: buffer) {
  %zero = index.constant 0 : offset
  %xv = buffer.view %x[%zero] : buffer -> view<[%n]xf32>
  %yv = buffer.view %y[%zero] : buffer -> view<[%n]xf32>
  %bytes = index.constant 256 : offset
  %mem = buffer.alloca<workgroup> align(16) %bytes : buffer
  %tv = buffer.view %mem[%zero] : buffer -> view<64xf32>
  %tid = kernel.workitem.id<x> : index
  %i = kernel.workitem.dispatch.id<x> : index
  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %zf = scalar.constant 0.0 : f32
  %sum = scf.for %k = [%c0 to %n step %c1](%acc = %zf : f32) -> (f32) {
    %v = view.load %xv[%k] : view<[%n]xf32> -> f32
    %acc2 = scalar.addf %acc, %v : f32
    scf.yield %acc2 : f32
  }
  view.store %sum, %tv[%tid] : f32, view<64xf32>
  kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
  %t = view.load %tv[%tid] : view<64xf32> -> f32
  %s = kernel.subgroup.reduce<addf> %t : f32
  %in = index.cmp ult, %i, %n : index
  scf.if %in {
    %pos = scalar.cmpf ogt, %s, %zf : f32
    %r = scf.if %pos -> (f32) {
      %e = scalar.expf %s : f32
      scf.yield %e : f32
    } else {
      scf.yield %zf : f32
    }
    view.store %r, %yv[%i] : f32, view<[%n]xf32>
  }
  kernel.return
}
";

/// The kernel of [`TEXT`], built; with `named` every value gets the
/// text's name, else the builder's own.
fn built(named: bool) -> Built {
    let h = |b: &mut hrx_loom::build::Builder, name: &str| {
        if named {
            b.hint(name);
        }
    };
    let mut m = ModuleBuilder::new();
    let key = m.config("t.wg", 64);
    let mut k = KernelBuilder::new("t");
    let n = k.workload("n");
    h(&mut k, "wg");
    let wg = k.config_value(&key);
    h(&mut k, "one");
    let one = k.index(1);
    h(&mut k, "g");
    let g = k.div(n, wg);
    let mut k = k.launch_config([g, one, one], [wg, one, one]);
    let n = k.arg_index("n");
    let x = k.arg_buffer("x", true);
    let y = k.arg_buffer("y", false);
    h(&mut k, "zero");
    let zero = k.offset(0);
    h(&mut k, "xv");
    let xv = k.buffer_view(x, zero, [n.into()], Scalar::F32);
    h(&mut k, "yv");
    let yv = k.buffer_view(y, zero, [n.into()], Scalar::F32);
    h(&mut k, "bytes");
    let bytes = k.offset(256);
    h(&mut k, "mem");
    let mem = k.alloca_workgroup(bytes, 16);
    h(&mut k, "tv");
    let tv = k.buffer_view(mem, zero, [64u64.into()], Scalar::F32);
    h(&mut k, "tid");
    let tid = k.workitem_id(Axis::X);
    h(&mut k, "i");
    let i = k.dispatch_id(Axis::X);
    h(&mut k, "c0");
    let c0 = k.index(0);
    h(&mut k, "c1");
    let c1 = k.index(1);
    h(&mut k, "zf");
    let zf = k.float(0.0, Scalar::F32);
    h(&mut k, "k");
    let sum = k.for_carry(c0, n, c1, &[zf], |b, kk, acc| {
        h(b, "v");
        let v = b.load(xv, &[kk]);
        h(b, "acc2");
        vec![b.addf(acc[0], v)]
    });
    // The loop's names: the induction variable took "k" above; the
    // carried value and the result are renamed below when `named`.
    k.store(sum[0], tv, &[tid]);
    k.barrier(Barrier::Workgroup);
    h(&mut k, "t");
    let t = k.load(tv, &[tid]);
    h(&mut k, "s");
    let s = k.subgroup_reduce(ReduceOp::AddF, t);
    h(&mut k, "in");
    let inside = k.cmp(IntPredicate::Ult, i, n);
    k.if_(inside, |b| {
        h(b, "pos");
        let pos = b.cmpf(FloatPredicate::Ogt, s, zf);
        let r = b.if_else(
            pos,
            |b| {
                h(b, "e");
                vec![b.expf(s)]
            },
            |_| vec![zf],
        );
        b.store(r[0], yv, &[i]);
    });
    m.kernel(k.finish());
    m.finish()
}

fn spirv(text: &str) -> Vec<u32> {
    Compiler::for_target(None, &Target::lavapipe())
        .unwrap()
        .module(text)
        .unwrap()
        .compile_uncached(&Specialization::new("@t"))
        .unwrap()
        .spirv()
        .to_vec()
}

/// Up to the names the builder chose for the loop's carried value and
/// results, the built kernel prints as the text does.
#[test]
fn built_kernel_prints_as_its_text() {
    let canonical = hrx_loom::front::print(&hrx_loom::front::parse(TEXT).unwrap());
    let text = built(true)
        .into_text()
        .replace("%r = scf.for", "%sum = scf.for")
        .replace("view.store %r, %tv", "view.store %sum, %tv")
        .replace("%r_1 = scf.if", "%r = scf.if")
        .replace("view.store %r_1, %yv", "view.store %r, %yv");
    assert_eq!(text, canonical);
}

/// Names aside, the built kernel compiles to the text's SPIR-V.
#[test]
fn built_kernel_compiles_to_the_texts_spirv() {
    let unnamed = built(false);
    assert_ne!(unnamed.text(), built(true).text());
    assert_eq!(spirv(unnamed.text()), spirv(TEXT));
    let compiler = Compiler::for_target(None, &Target::lavapipe()).unwrap();
    let module = compiler.built(&unnamed).unwrap();
    assert_eq!(module.kernels(), ["t"]);
    assert_eq!(module.source(), unnamed.text());
}

/// Fresh names never collide, whatever the hints.
#[test]
fn hints_are_made_unique() {
    let mut k = KernelBuilder::new("u");
    let a = k.hint("x").index(1);
    let b = k.hint("x").index(2);
    let c = k.index(3);
    let d = k.index(4);
    assert_eq!(k.name(a), "x");
    assert_eq!(k.name(b), "x_1");
    assert_eq!(k.name(c), "c");
    assert_eq!(k.name(d), "c_1");
}

fn compile_error(built: &Built) -> Vec<hrx_core::Diagnostic> {
    let compiler = Compiler::for_target(None, &Target::lavapipe()).unwrap();
    match compiler.built(built) {
        Err(Error::Compile { diagnostics, .. }) => diagnostics,
        other => panic!("expected a compile error, got {other:?}"),
    }
}

/// A one-kernel module whose body `body` builds (over `%x: f32` and
/// `%h: f16` arguments).
fn with_body(body: impl FnOnce(&mut hrx_loom::build::Body)) -> Built {
    let mut k = KernelBuilder::new("e");
    let one = k.index(1);
    let mut k = k.launch_config([one, one, one], [one, one, one]);
    body(&mut k);
    Built::kernel(k.finish())
}

/// Element types are values: mixing them is the verifier's type error,
/// with its code and the position in the printed text.
#[test]
fn mixed_element_types_are_diagnosed() {
    let built = with_body(|k| {
        let x = k.arg_scalar("x", Scalar::F32);
        let h = k.arg_scalar("h", Scalar::F16);
        k.addf(x, h);
    });
    let diags = compile_error(&built);
    let d: Vec<_> = diags.iter().filter(|d| d.code == "E0301").collect();
    assert_eq!(d.len(), 1, "{diags:#?}");
    assert!(d[0].message.contains("%h has type f16"), "{d:#?}");
    let line = built.text().lines().nth(d[0].line as usize - 1).unwrap();
    assert!(line.contains("scalar.addf %x, %h"), "{line}");
}

/// A launch-region value used in the body is out of scope there.
#[test]
fn launch_values_do_not_reach_the_body() {
    let mut k = KernelBuilder::new("s");
    let one = k.index(1);
    let seven = k.hint("seven").index(7);
    let mut k = k.launch_config([one, one, one], [one, one, one]);
    let c = k.index(2);
    k.add(c, seven);
    let d = compile_error(&Built::kernel(k.finish()));
    assert!(
        d.iter()
            .any(|d| d.code.starts_with("E02") && d.message.contains("seven")),
        "{d:#?}"
    );
}

/// Also when the body has a value of the same name: the body's own names
/// start afresh, and a launch-region handle must not print as one of
/// them (it would silently read the body's value).
#[test]
fn launch_values_do_not_alias_body_values_of_their_name() {
    let mut k = KernelBuilder::new("s");
    let one = k.index(1);
    let launch_name = k.name(one).to_string();
    let mut k = k.launch_config([one, one, one], [one, one, one]);
    let sixteen = k.index(16);
    assert_eq!(
        k.name(sixteen),
        launch_name,
        "the body reuses the launch region's names"
    );
    k.add(sixteen, one);
    let d = compile_error(&Built::kernel(k.finish()));
    assert!(
        d.iter()
            .any(|d| d.code.starts_with("E02") && d.message.contains("of_the_launch_region")),
        "{d:#?}"
    );
}

/// Storing through a readonly buffer is the verifier's access error.
#[test]
fn stores_through_readonly_buffers_are_diagnosed() {
    let built = with_body(|k| {
        let b = k.arg_buffer("b", true);
        let zero = k.offset(0);
        let v = k.buffer_view(b, zero, [4u64.into()], Scalar::F32);
        let i = k.index(0);
        let x = k.float(1.0, Scalar::F32);
        k.store(x, v, &[i]);
    });
    let d = compile_error(&built);
    assert!(d.iter().any(|d| d.code.starts_with("E04")), "{d:#?}");
}

/// `x * sigmoid(x)` over `elem`.
fn silu(elem: Scalar) -> Fragment {
    Fragment::unary(Ty::Scalar(elem), |b, x| {
        let one = b.float(1.0, elem);
        let nx = b.negf(x);
        let e = b.expf(nx);
        let den = b.addf(e, one);
        let s = b.divf(one, den);
        b.mulf(x, s)
    })
}

/// Vectorizing splats constants and widens the lane-wise ops; inlining
/// twice renames apart; the result compiles.
#[test]
fn vectorized_fragments_inline_and_compile() {
    let wide = passes::vectorize(&silu(Scalar::F32), 4).unwrap();
    assert_eq!(
        wide.param_types().collect::<Vec<_>>(),
        [&Ty::vector(4, Scalar::F32)]
    );
    assert_eq!(wide.ops().len(), silu(Scalar::F32).ops().len() + 1);
    let built = with_body(|k| {
        let b = k.arg_buffer("b", false);
        let zero = k.offset(0);
        let v = k.buffer_view(b, zero, [8u64.into()], Scalar::F32);
        let i0 = k.index(0);
        let i4 = k.index(4);
        for i in [i0, i4] {
            let q = k.vector_load(v, &[i], 4);
            let r = k.inline(&wide, &[q]);
            k.vector_store(r[0], v, &[i]);
        }
    });
    let text = built.text();
    assert_eq!(text.matches("vector.splat").count(), 2, "{text}");
    assert_eq!(text.matches("scalar.expf").count(), 2, "{text}");
    let compiler = Compiler::for_target(None, &Target::lavapipe()).unwrap();
    compiler
        .built(&built)
        .unwrap()
        .compile_uncached(&Specialization::new("@e"))
        .unwrap();
}

/// Compares, conversions and integer ops have no vector form; the error
/// names the op.
#[test]
fn vectorize_refuses_what_is_not_lanewise() {
    let step = Fragment::unary(Ty::F32, |b, x| {
        let z = b.float(0.0, Scalar::F32);
        let pos = b.cmpf(FloatPredicate::Ogt, x, z);
        b.select(pos, x, z)
    });
    let err = passes::vectorize(&step, 4).unwrap_err().to_string();
    assert!(err.contains("scalar.cmpf"), "{err}");
    let round = Fragment::unary(Ty::F32, |b, x| {
        let i = b.fptosi(x, Scalar::I32);
        b.sitofp(i, Scalar::F32)
    });
    let err = passes::vectorize(&round, 4).unwrap_err().to_string();
    assert!(err.contains("scalar.fptosi"), "{err}");
}

/// Inlining binds parameters and keeps the fragment's own names where
/// they are free.
#[test]
fn inline_binds_parameters() {
    let built = with_body(|k| {
        let x = k.arg_scalar("x", Scalar::F32);
        let r = k.inline(&silu(Scalar::F32), &[x]);
        let r2 = k.inline(&silu(Scalar::F32), &r);
        assert_ne!(k.name(r[0]), k.name(r2[0]));
    });
    let text = built.text();
    assert!(text.contains("scalar.negf %x : f32"), "{text}");
    assert!(!text.contains("%p0"), "{text}");
    let compiler = Compiler::for_target(None, &Target::lavapipe()).unwrap();
    compiler.built(&built).unwrap();
}

/// A handle from another builder is no panic: it prints as a name the
/// kernel does not define, which the verifier reports.
#[test]
fn foreign_handles_are_diagnosed() {
    let mut other = KernelBuilder::new("other");
    for v in 0..40 {
        other.index(v);
    }
    let foreign = other.index(99);
    let built = with_body(|k| {
        let c = k.index(1);
        k.add(c, foreign);
    });
    let d = compile_error(&built);
    assert!(d.iter().any(|d| d.code.starts_with("E02")), "{d:#?}");
}

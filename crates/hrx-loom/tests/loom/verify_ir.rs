//! The shape of verified IR that later stages rely on.

use hrx_loom::ir::{BufferRef, OpKind, Type};

fn spelling() -> hrx_loom::ir::Module {
    let src = include_str!("../front/spelling.loom");
    let ast = hrx_loom::front::parse(src).unwrap();
    hrx_loom::verify::verify(&ast, src).unwrap()
}

#[test]
fn access_is_inferred_per_buffer_argument() {
    let m = spelling();
    let k = m.kernel("all").unwrap();
    let access = |name: &str| {
        let i = k.args.iter().position(|a| a.name == name).unwrap();
        (
            k.buffer_access[i].read,
            k.buffer_access[i].written,
            k.args[i].readonly,
        )
    };
    assert_eq!(access("data"), (true, true, false));
    assert_eq!(access("src"), (true, false, true));
    assert_eq!(access("halves"), (true, false, false));
    assert_eq!(access("counts"), (true, true, false));
    assert_eq!(access("s"), (false, false, false));
}

#[test]
fn regions_end_in_yield_and_views_trace_to_buffers() {
    let m = spelling();
    let k = m.kernel("@all").unwrap();
    assert!(matches!(
        k.body.ops.last().map(|o| &o.kind),
        Some(OpKind::Return)
    ));
    let mut ifs = 0;
    k.body.for_each_op(|op| match &op.kind {
        OpKind::If {
            then, otherwise, ..
        } => {
            ifs += 1;
            assert!(matches!(
                then.ops.last().map(|o| &o.kind),
                Some(OpKind::Yield(_))
            ));
            if let Some(e) = otherwise {
                assert!(matches!(
                    e.ops.last().map(|o| &o.kind),
                    Some(OpKind::Yield(_))
                ));
            }
        }
        OpKind::Alloca { .. } => {
            let r = op.results[0];
            assert_eq!(k.buffer_of[r.index()], Some(BufferRef::Alloca(r)));
        }
        OpKind::BufferView { .. } => {
            assert!(k.buffer_of[op.results[0].index()].is_some());
            assert!(matches!(
                k.value_types[op.results[0].index()],
                Type::View(_)
            ));
        }
        OpKind::ViewStore { .. } | OpKind::ViewLoad { .. } => assert!(op.results.len() <= 1),
        OpKind::AtomicRmw { .. } => assert_eq!(op.results.len(), 1),
        _ => {}
    });
    assert_eq!(ifs, 2);
    assert_eq!(m.configs.len(), 2);
    assert_eq!(
        k.workgroup_size(&|_| None).ok(),
        None,
        "config values must come from the caller"
    );
    let defaults = |key: &str| m.config(key).map(|c| c.default);
    assert_eq!(k.workgroup_size(&defaults).unwrap(), [64, 1, 1]);
}

#[test]
fn unnamed_results_still_exist_in_the_ir() {
    let src = "kernel.def @k() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%b: buffer) {
  %z = index.constant 0 : offset
  %i = index.constant 0 : index
  %x = scalar.constant 1 : u32
  %v = buffer.view %b[%z] : buffer -> view<16xu32>
  view.atomic.rmw<maxui> %x, %v[%i] : u32, view<16xu32> -> u32
  kernel.return
}
";
    let ast = hrx_loom::front::parse(src).unwrap();
    let m = hrx_loom::verify::verify(&ast, src).unwrap();
    let mut seen = false;
    m.kernels[0].body.for_each_op(|op| {
        if let OpKind::AtomicRmw { .. } = op.kind {
            seen = true;
            assert_eq!(op.results.len(), 1);
        }
    });
    assert!(seen);
}

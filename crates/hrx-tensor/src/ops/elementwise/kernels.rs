//! The elementwise kernels, built around an operation [`Fragment`] of one
//! or two inputs.
//!
//! - **Strided** (`unary`, `binary`): out[oo + i] = op(in[o + i . s], ..)
//!   over at most four (coalesced) axes, a stride of 0 for a broadcast
//!   axis; any element type the fragment is written for.
//! - **Wide** (`unary4`, `binary4`): every operand one aligned contiguous
//!   f32 run, read and written as `vector<4xf32>` quads, the fragment
//!   vectorized; each work item handles two quads a workgroup apart per
//!   trip (both loads in flight), then a lone last quad.
//!
//! Both are grid-stride loops: a workgroup of `@<symbol>.wg` work items,
//! at most `@<symbol>.max_groups` workgroups, any element count.

use hrx_loom::build::{Builder, Built, Fragment, Index, KernelBuilder, ModuleBuilder, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, Scalar};

/// Names of the inputs, in argument order.
const INPUTS: [&str; 2] = ["a", "b"];

/// A grid-stride kernel `symbol` over `workload` items: its module with
/// the config keys `<symbol>.wg` (default 256) and `<symbol>.max_groups`
/// (default 65535), and its body after a launch region of
/// `ceil(n / (wg * per_item))` workgroups capped at the maximum.
pub(crate) fn grid(
    symbol: &str,
    workload: &str,
    per_item: Option<u64>,
) -> (ModuleBuilder, hrx_loom::build::Body) {
    let mut module = ModuleBuilder::new();
    let wg_key = module.config(&format!("{symbol}.wg"), 256);
    let cap_key = module.config(&format!("{symbol}.max_groups"), 65535);
    let mut k = KernelBuilder::new(symbol);
    let n = k.workload(workload);
    let one = k.index(1);
    let two = per_item.map(|p| k.index(p));
    let wg = k.config_value(&wg_key);
    let cap = k.config_value(&cap_key);
    let chunk = match two {
        Some(two) => k.mul(wg, two),
        None => wg,
    };
    let last = k.sub(chunk, one);
    let padded = k.add(n, last);
    let groups = k.div(padded, chunk);
    let grid = k.min(groups, cap);
    (module, k.launch_config([grid, one, one], [wg, one, one]))
}

/// The coordinates `[i0, i1, i2, i3]` of element `i` of a row-major
/// `[_, d1, d2, d3]` shape (the strided kernels' four coalesced axes).
pub(crate) fn unravel4(
    b: &mut Builder,
    i: Value<Index>,
    [d1, d2, d3]: [Value<Index>; 3],
) -> [Value<Index>; 4] {
    let i3 = b.rem(i, d3);
    let q3 = b.div(i, d3);
    let i2 = b.rem(q3, d2);
    let q2 = b.div(q3, d2);
    let i1 = b.rem(q2, d1);
    let i0 = b.div(q2, d1);
    [i0, i1, i2, i3]
}

/// The element offset `offset + at . strides` of coordinates `at`.
pub(crate) fn strided_offset(
    b: &mut Builder,
    at: [Value<Index>; 4],
    strides: [Value<Index>; 4],
    offset: Value<Index>,
) -> Value<Index> {
    at.into_iter()
        .zip(strides)
        .fold(offset, |sum, (i, s)| b.madd(i, s, sum))
}

/// The strided kernel `symbol` applying `op` to elements of type `t`.
pub(crate) fn strided(symbol: &str, t: Scalar, op: &Fragment) -> Built {
    let inputs = &INPUTS[..op.param_types().count()];
    let (mut module, mut k) = grid(symbol, "n", None);
    let n = k.arg_index("n");
    let [d1, d2, d3] = ["d1", "d2", "d3"].map(|d| k.arg_index(d));
    let layouts: Vec<([Value<_>; 4], Value<_>, Value<_>)> = inputs
        .iter()
        .map(|x| {
            let s = [0, 1, 2, 3].map(|i| k.arg_index(&format!("s{x}{i}")));
            (
                s,
                k.arg_index(&format!("o{x}")),
                k.arg_index(&format!("l{x}")),
            )
        })
        .collect();
    let oo = k.arg_index("oo");
    let lo = k.arg_index("lo");
    let buffers: Vec<_> = inputs.iter().map(|x| k.arg_buffer(x, false)).collect();
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let views: Vec<Value<View>> = buffers
        .iter()
        .zip(&layouts)
        .map(|(&buf, (_, _, len))| k.buffer_view(buf, zero, [(*len).into()], t))
        .collect();
    let ov = k.buffer_view(out, zero, [lo.into()], t);
    k.for_each_in_grid(n, |b, i| {
        let coords = unravel4(b, i, [d1, d2, d3]);
        let at: Vec<_> = layouts
            .iter()
            .map(|&(s, offset, _)| strided_offset(b, coords, s, offset))
            .collect();
        let x: Vec<_> = views
            .iter()
            .zip(&at)
            .map(|(&v, &p)| b.load(v, &[p]))
            .collect();
        let r = b.inline(op, &x)[0];
        let po = b.add(oo, i);
        b.store(r, ov, &[po]);
    });
    module.kernel(k.finish());
    module.finish()
}

/// The 4-wide kernel `symbol` applying `op`, already vectorized to
/// `vector<4xf32>`.
pub(crate) fn wide(symbol: &str, op: &Fragment) -> Built {
    let inputs = &INPUTS[..op.param_types().count()];
    let (mut module, mut k) = grid(symbol, "n4", Some(2));
    let n4 = k.arg_index("n4");
    let quads: Vec<_> = inputs
        .iter()
        .map(|x| (k.arg_index(&format!("q{x}")), k.arg_index(&format!("l{x}"))))
        .collect();
    let qo = k.arg_index("qo");
    let lo = k.arg_index("lo");
    let buffers: Vec<_> = inputs.iter().map(|x| k.arg_buffer(x, false)).collect();
    let out = k.arg_buffer("out", false);
    let zero = k.offset(0);
    let two = k.index(2);
    let four = k.index(4);
    let views: Vec<Value<View>> = buffers
        .iter()
        .zip(&quads)
        .map(|(&buf, (_, len))| k.buffer_view(buf, zero, [(*len).into()], Scalar::F32))
        .collect();
    let ov = k.buffer_view(out, zero, [lo.into()], Scalar::F32);
    let lane = k.workitem_id(Axis::X);
    let group = k.workgroup_id(Axis::X);
    let size = k.workgroup_size(Axis::X);
    let count = k.workgroup_count(Axis::X);
    let chunk = k.mul(size, two);
    let first = k.mul(group, chunk);
    let step = k.mul(chunk, count);
    k.for_each(first, n4, step, |b, base| {
        let q = b.add(base, lane);
        let q2 = b.add(q, size);
        // Element offsets of quad q in each operand (inputs, then output).
        let at: Vec<_> = quads
            .iter()
            .map(|(first, _)| *first)
            .chain([qo])
            .map(|first| {
                let t = b.add(first, q);
                b.mul(t, four)
            })
            .collect();
        let (ins, po) = (&at[..inputs.len()], at[inputs.len()]);
        let full = b.cmp(IntPredicate::Ult, q2, n4);
        b.if_(full, |b| {
            let sa = b.mul(size, four);
            let next: Vec<_> = at.iter().map(|&p| b.add(p, sa)).collect();
            let xa: Vec<_> = views
                .iter()
                .zip(ins)
                .map(|(&v, &p)| b.vector_load(v, &[p], 4))
                .collect();
            let xb: Vec<_> = views
                .iter()
                .zip(&next)
                .map(|(&v, &p)| b.vector_load(v, &[p], 4))
                .collect();
            let ra = b.inline(op, &xa)[0];
            let rb = b.inline(op, &xb)[0];
            b.vector_store(ra, ov, &[po]);
            b.vector_store(rb, ov, &[next[inputs.len()]]);
        });
        let inside = b.cmp(IntPredicate::Ult, q, n4);
        let past = b.cmp(IntPredicate::Uge, q2, n4);
        let single = b.and(inside, past);
        b.if_(single, |b| {
            let xt: Vec<_> = views
                .iter()
                .zip(ins)
                .map(|(&v, &p)| b.vector_load(v, &[p], 4))
                .collect();
            let rt = b.inline(op, &xt)[0];
            b.vector_store(rt, ov, &[po]);
        });
    });
    module.kernel(k.finish());
    module.finish()
}

//! The finishing count of a product split along k over workgroups (the
//! cooperative split-k matmul and the split tiled quantised matmul): each
//! workgroup stores its partial sums, then counts itself done on its
//! tile's counter, and the last one to count sums the partials.

use hrx_loom::build::{AtomicRmw, Barrier, Bool, Builder, Extent, Index, Num, Value, View};
use hrx_loom::ir::{IntPredicate, Scalar};

/// Count this workgroup's split of `tile` done on `counters` (u32, one
/// per tile, zero before the dispatch) and return, uniformly across the
/// workgroup, whether it is the tile's last of `splits`; the last resets
/// the counter to zero, so every dispatch leaves the counters as it found
/// them. `lead` is true for exactly one work item. The storage barriers
/// around the count make the partial sums stored before it visible to
/// the workgroup that finishes.
pub(crate) fn last_split(
    k: &mut Builder,
    counters: Value<View>,
    tile: Value<Index>,
    splits: Value<Index>,
    lead: Value<Bool>,
) -> Value<Bool> {
    let (c0, c1) = (k.index(0), k.index(1));
    let zero = k.offset(0);
    let four = k.offset(4);
    let flag_mem = k.alloca_workgroup(four, 4);
    let flag = k.buffer_view(flag_mem, zero, [Extent::from(1usize)], Scalar::U32);
    let zu = k.hint("zu").int(0, Scalar::U32);
    let ou = k.hint("ou").int(1, Scalar::U32);
    k.barrier(Barrier::Storage);
    k.if_(lead, |b| {
        let seen = b.atomic(AtomicRmw::Add, ou, counters, &[tile]);
        let seen = b.to_index(seen);
        let final_split = b.sub(splits, c1);
        let last = b.cmp(IntPredicate::Eq, seen, final_split);
        let f = b.select(last, ou, zu);
        b.store(f, flag, &[c0]);
        b.if_(last, |b| b.store(zu, counters, &[tile]));
    });
    k.barrier(Barrier::Storage);
    let f = k.load(flag, &[c0]);
    k.cmpi(IntPredicate::Eq, f, ou)
}

/// The sum of `planes` partial sums (plane `p` at element `p * stride +
/// within` of `scratch`), added in plane order from zero: `UNROLL` loads
/// in flight per trip, so the last workgroup's sum costs a few round
/// trips rather than one per plane. Planes past the last reread it and
/// add nothing.
pub(crate) fn sum_planes(
    b: &mut Builder,
    scratch: Value<View>,
    planes: Value<Index>,
    stride: Value<Index>,
    within: Value<Index>,
) -> Value<Num> {
    const UNROLL: usize = 8;
    let (c0, c1) = (b.index(0), b.index(1));
    let step = b.index(UNROLL as u64);
    let last = b.sub(planes, c1);
    let zf = b.float(0.0, Scalar::F32);
    b.for_carry(c0, planes, step, &[zf], |b, p0, acc| {
        let loads: Vec<_> = (0..UNROLL)
            .map(|u| {
                let du = b.index(u as u64);
                let p = b.add(p0, du);
                let ok = b.cmp(IntPredicate::Ult, p, planes);
                let pc = b.min(p, last);
                let at = b.madd(pc, stride, within);
                (ok, b.load(scratch, &[at]))
            })
            .collect();
        let mut total = acc[0];
        for (ok, v) in loads {
            let v = b.select(ok, v, zf);
            total = b.addf(total, v);
        }
        vec![total]
    })[0]
}

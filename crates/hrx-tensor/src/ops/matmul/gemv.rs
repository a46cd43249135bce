//! The skinny-m (decode) matmul kernel: few rows of A against a streamed B,
//! memory-bound on B, built with [`hrx_loom::build`].
//!
//! Batched `C[b, i, j] = act(sum_k A[b, i, k] * B[b, k, j] + bias[j])`
//! for few rows: every workgroup streams B once for `MT` rows of A. f32
//! accumulation and output; A and B f32 or f16.
//!
//! A workgroup covers `CW = CT * V` columns (grid y) and `MT` rows (grid
//! x: the row tiles of one column slab are neighbours in dispatch order,
//! so they run together and share B through L2 rather than each streaming
//! it from DRAM). Its `WG` work items are `CT` column groups x `WG / CT`
//! k slices: work item (c, s) loads `V` consecutive columns of B row `kk`
//! (one 16-byte vector where the layout allows) for `kk = s, s + KT, ...`,
//! and accumulates them against `A[i, kk]` for its `MT` rows.
//! Out-of-range rows and columns are clamped to valid memory and dropped
//! at the store, so the loop has no branches; it is unrolled so each work
//! item has several loads of B in flight. The k slices are then summed:
//! first across the lanes of a subgroup with xor shuffles, then through
//! workgroup memory, one slot per subgroup (`NS` slots), and the epilogue
//! adds bias and activation.

use super::abi::MatmulArgs;
use crate::DType;
use crate::ops::UnaryOp;
use crate::ops::registry::{Generator, KernelKey, KernelSource};
use hrx_core::{DeviceKind, Target};
use hrx_loom::build::{
    Barrier, Builder, Built, Extent, Index, KernelBuilder, Num, Ty, Value, View,
};
use hrx_loom::ir::{Axis, IntPredicate, Scalar, ShuffleMode};

/// Most rows of A one workgroup accumulates (its accumulators live in
/// registers: `MT * V` per work item).
const MT: usize = 8;

/// Rows of B each work item loads per trip of the main loop.
const UNROLL: usize = 4;

/// Rows per workgroup for `m` rows: the next power of two up to [`MT`],
/// so a single row does no wasted multiply-adds.
fn row_tile(m: usize) -> usize {
    m.next_power_of_two().min(MT)
}

/// How a work item reads its columns of one row of B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BLoad {
    /// f16, one 16-byte load of 4 words = 8 columns, unpacked in pairs.
    Quad16,
    /// f32, one 16-byte load = 4 columns.
    Quad32,
    /// f16, one 4-byte word = 2 columns.
    Word16,
    /// One element addressed by strides (any layout).
    Scalar,
}

impl BLoad {
    /// Columns per load.
    fn width(self) -> usize {
        match self {
            BLoad::Quad16 => 8,
            BLoad::Quad32 => 4,
            BLoad::Word16 => 2,
            BLoad::Scalar => 1,
        }
    }

    /// Accumulator pieces per row, and the type and width of each.
    fn pieces(self) -> (usize, Ty, usize) {
        match self {
            BLoad::Quad16 => (4, Ty::vector(2, Scalar::F32), 2),
            BLoad::Quad32 => (1, Ty::vector(4, Scalar::F32), 4),
            BLoad::Word16 => (1, Ty::vector(2, Scalar::F32), 2),
            BLoad::Scalar => (1, Ty::F32, 1),
        }
    }

    /// Whether the binding must start 16-byte aligned.
    fn needs_16(self) -> bool {
        matches!(self, BLoad::Quad16 | BLoad::Quad32)
    }
}

/// What the selection needs to know about B as the kernel sees it.
pub(crate) struct BLayout {
    /// Element strides along k and n, and between batch entries.
    pub(crate) k_stride: usize,
    pub(crate) n_stride: usize,
    pub(crate) batch_stride: usize,
    /// Element offset of B in its binding, and the binding's byte offset.
    pub(crate) offset: u64,
    pub(crate) binding_offset: u64,
    /// Columns.
    pub(crate) n: usize,
}

impl BLayout {
    /// The same matrix seen transposed, `k` (its row count) as columns: a
    /// B contiguous along k reads as contiguous rows.
    pub(crate) fn along_k(&self, k: usize) -> BLayout {
        BLayout {
            k_stride: self.n_stride,
            n_stride: self.k_stride,
            n: k,
            ..*self
        }
    }
}

/// The widest load B's layout allows.
pub(crate) fn b_load(input: DType, b: &BLayout) -> BLoad {
    let candidates: &[BLoad] = if input == DType::F16 {
        &[BLoad::Quad16, BLoad::Word16]
    } else {
        &[BLoad::Quad32]
    };
    candidates
        .iter()
        .copied()
        .find(|l| {
            let v = l.width();
            b.n_stride == 1
                && b.n.is_multiple_of(v)
                && b.k_stride.is_multiple_of(v)
                && b.batch_stride.is_multiple_of(v)
                && b.offset.is_multiple_of(v as u64)
                && (!l.needs_16() || b.binding_offset.is_multiple_of(16))
        })
        .unwrap_or(BLoad::Scalar)
}

/// The largest m the decode kernel is chosen for. Row tiles of the same
/// columns are neighbours in dispatch order, so they run together and B
/// comes from DRAM about once, the other tiles reading it from L2.
/// Without cooperative matrices that beats the tiled kernel up to 64 rows
/// (lavapipe: 16 rows 0.18 s against 1.3 s for 32 rows tiled, k = n =
/// 4096), and up to 128 rows of an unbatched product (H200, a 128-token
/// sentence through an f32 BERT encoder, n of 384 to 1536: 0.45 ms of
/// matmuls against 2.0 ms tiled); a batch of them (attention's per-head
/// products) gives the tiled kernel workgroups enough. Where a cooperative-matrix kernel exists it takes over from 4
/// rows: on the H200 (k = n = 4096) the decode kernel's time grows with m
/// (its multiply-adds grow with m), about 9.6 / 10.5 / 15.4 us for 1 / 2 /
/// 4 rows, while the split-k kernel pads to 16 rows and takes about 14 us
/// for any of them (the two tie near 3 rows).
pub(crate) fn gemv_max_rows(coop: bool, batch: usize) -> usize {
    match (coop, batch) {
        (true, _) => 3,
        (false, 0 | 1) => 128,
        (false, _) => 64,
    }
}

/// Workgroup shape of the decode kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    wg: usize,
    ct: usize,
    /// Subgroup size when the k slices are first reduced with shuffles.
    sg: Option<usize>,
}

fn shape(target: &Target, load: BLoad, mt: usize) -> Shape {
    // 32 columns per workgroup: 64 bytes of f16 (or 128 of f32) per row of
    // B, so the 64-byte DRAM bursts are used whole, and n / 32 workgroups.
    let ct = 32 / load.width();
    let cpu = target.kind == DeviceKind::Cpu;
    // On GPUs 512 work items keep many loads of B in flight for one or two
    // rows; from 4 rows on (4 x 8 accumulators and up) a work item needs
    // more than the 128 registers that 512 of them may each use (NVIDIA:
    // 64 Ki per workgroup), so they get 256 and up to 255 registers
    // rather than spilling the accumulators. On CPU devices 32: llvmpipe
    // switches between a workgroup's invocations at every barrier, and
    // 128 of them made `hrx demo` on lavapipe about 1.5x slower.
    let gpu_wg = if mt * load.width() <= 16 { 512 } else { 256 };
    let max_wg = (target.max_workgroup_invocations as usize)
        .min(target.max_workgroup_size[0] as usize)
        .min(if cpu { 32 } else { gpu_wg });
    let sg = target.subgroup_size_max as usize;
    let fixed = target.subgroup_size_min == target.subgroup_size_max
        && sg.is_power_of_two()
        && sg >= ct
        && target.subgroup_ops.shuffle;
    let mut wg = max_wg.next_power_of_two();
    if wg > max_wg {
        wg /= 2;
    }
    let ct = ct.min(wg);
    let slot_bytes = |wg: usize, sg: Option<usize>| {
        let slots = match sg {
            Some(sg) => wg / sg,
            None => wg / ct,
        };
        slots * mt * ct * load.width() * 4
    };
    let sg = (fixed && wg >= sg).then_some(sg);
    while wg > ct && slot_bytes(wg, sg) > target.workgroup_memory_bytes as usize / 2 {
        wg /= 2;
    }
    let sg = sg.filter(|&s| wg >= s);
    Shape { wg, ct, sg }
}

/// The decode kernel for `input` elements, `load` and `m` rows, with
/// `act` applied after the bias.
pub(crate) fn gemv_key(
    target: &Target,
    input: DType,
    load: BLoad,
    m: usize,
    act: Option<UnaryOp>,
) -> KernelKey {
    // The row tile, not m, is what the kernel depends on: m of the same
    // tile share one kernel.
    let mt = row_tile(m);
    let target = target.clone();
    KernelKey {
        source: KernelSource::Built(Generator::new(
            format!("matmul_gemv {input:?} {load:?} {mt} {act:?}"),
            move || gemv_kernel(&target, input, load, mt, act),
        )),
        symbol: "matmul_gemv",
        config: Vec::new(),
    }
}

/// What the k loops need to load B and multiply-add: the values every
/// trip uses, fixed before the loops.
struct Stream {
    input: DType,
    load: BLoad,
    piece: Ty,
    av: Value<View>,
    bv: Value<View>,
    /// A's element step along k.
    sak: Value<Index>,
    /// Clamped start of each row of A in this workgroup.
    pa: Vec<Value<Index>>,
    /// Per-load offsets: k stride and column base of B, in elements or
    /// (16-byte and word loads) in loads.
    bk_stride: Value<Index>,
    b_base: Value<Index>,
    four: Option<Value<Index>>,
    /// Lane indices of a 16-byte f16 load.
    lanes: Vec<Value<Index>>,
}

impl Stream {
    /// The pieces of B's row `kk` this work item uses.
    fn load_b(&self, b: &mut Builder, kk: Value<Index>) -> Vec<Value<Num>> {
        let bk = b.madd(kk, self.bk_stride, self.b_base);
        let four = |s: &Self| s.four.expect("16-byte loads index in quads");
        match self.load {
            BLoad::Quad16 => {
                let bw = b.mul(bk, four(self));
                let q = b.vector_load(self.bv, &[bw], 4);
                self.lanes
                    .iter()
                    .map(|&l| {
                        let w = b.extract(q, l);
                        b.unpackf16(w)
                    })
                    .collect()
            }
            BLoad::Word16 => {
                let w = b.load(self.bv, &[bk]);
                vec![b.unpackf16(w)]
            }
            BLoad::Quad32 => {
                let be = b.mul(bk, four(self));
                vec![b.vector_load(self.bv, &[be], 4)]
            }
            BLoad::Scalar if self.input == DType::F16 => {
                let x = b.load(self.bv, &[bk]);
                vec![b.extf(x, Scalar::F32)]
            }
            BLoad::Scalar => vec![b.load(self.bv, &[bk])],
        }
    }

    /// The multiply-adds of row `kk` (B's pieces `bk`) into the
    /// accumulators `from` (row-major over rows and pieces).
    fn fmas(
        &self,
        b: &mut Builder,
        kk: Value<Index>,
        bk: &[Value<Num>],
        from: &[Value<Num>],
    ) -> Vec<Value<Num>> {
        let mut to = Vec::with_capacity(from.len());
        for (r, &pa) in self.pa.iter().enumerate() {
            let pk = b.madd(kk, self.sak, pa);
            let mut a = b.load(self.av, &[pk]);
            if self.input == DType::F16 {
                a = b.extf(a, Scalar::F32);
            }
            if let Ty::Vector { len, .. } = self.piece {
                a = b.splat(a, len);
            }
            for (p, &bp) in bk.iter().enumerate() {
                to.push(b.fmaf(a, bp, from[r * bk.len() + p]));
            }
        }
        to
    }
}

/// The decode kernel: the layout the module documentation describes, in
/// the shape [`shape`] picks for the target.
fn gemv_kernel(
    target: &Target,
    input: DType,
    load: BLoad,
    m: usize,
    act: Option<UnaryOp>,
) -> Built {
    let mt = row_tile(m);
    let Shape { wg, ct, sg } = shape(target, load, mt);
    let v = load.width();
    let cw = ct * v;
    let kt = wg / ct;
    let ns = match sg {
        Some(sg) => wg / sg,
        None => kt,
    };
    let elem = if input == DType::F16 {
        Scalar::F16
    } else {
        Scalar::F32
    };
    let (np, piece, pw) = load.pieces();
    let s_elems = ns * mt * cw;
    let n64 = |n: usize| n as u64;

    // Grid: row tiles along x (neighbours in dispatch order share B in
    // L2), column slabs along y, the batch along z.
    let mut k = KernelBuilder::new("matmul_gemv");
    let [wm, wn, batch] = ["m", "n", "batch"].map(|name| k.workload(name));
    let one = k.index(1);
    let cw_l = k.index(n64(cw));
    let cw1 = k.index(n64(cw - 1));
    let mt_l = k.index(n64(mt));
    let mt1 = k.index(n64(mt - 1));
    let pn = k.add(wn, cw1);
    let gx = k.div(pn, cw_l);
    let pm = k.add(wm, mt1);
    let gy = k.div(pm, mt_l);
    let wg_l = k.index(n64(wg));
    let mut k = k.launch_config([gy, gx, batch], [wg_l, one, one]);

    let MatmulArgs {
        m,
        n,
        k: kk,
        sab,
        sam,
        sak,
        oa,
        la,
        sbb,
        sbk,
        sbn,
        ob,
        lb,
        sbias,
        obias,
        lbias,
        scb,
        oc,
        lc,
        a,
        b: bbuf,
        bias,
        c,
    } = MatmulArgs::declare(&mut k, true);
    let zero = k.offset(0);
    let av = k.buffer_view(a, zero, [la.into()], elem);
    let bv = match load {
        BLoad::Quad16 | BLoad::Word16 => {
            let two = k.index(2);
            let lbw = k.div(lb, two);
            k.buffer_view(bbuf, zero, [lbw.into()], Scalar::U32)
        }
        BLoad::Quad32 => k.buffer_view(bbuf, zero, [lb.into()], Scalar::F32),
        BLoad::Scalar => k.buffer_view(bbuf, zero, [lb.into()], elem),
    };
    let biasv = k.buffer_view(bias, zero, [lbias.into()], Scalar::F32);
    let cv = k.buffer_view(c, zero, [lc.into()], Scalar::F32);
    let sbytes = k.offset(n64(s_elems * 4));
    let ms = k.alloca_workgroup(sbytes, 16);
    let ts = k.buffer_view(ms, zero, [Extent::from(s_elems)], Scalar::F32);
    let [c0, c1, cct, cv_, ckt, cmt, ccw, cns, cwg, cout] =
        [0, 1, ct, v, kt, mt, cw, ns, wg, mt * cw].map(|x| k.index(n64(x)));
    let tid = k.workitem_id(Axis::X);

    // Work item (column group, k slice), and the slot of workgroup memory
    // its partial sums go to: one per subgroup when the slices are first
    // reduced with shuffles (its first lane writes), else one per slice.
    let (ctc, slice, slot, first) = match sg {
        Some(sg) => {
            let lane = k.subgroup_lane_id();
            let slot = k.subgroup_id();
            let ctc = k.rem(lane, cct);
            let sin = k.div(lane, cct);
            let sgk = k.index(n64(sg / ct));
            let slice = k.madd(slot, sgk, sin);
            let first = k.cmp(IntPredicate::Eq, sin, c0);
            (ctc, slice, slot, first)
        }
        None => {
            let ctc = k.rem(tid, cct);
            let slice = k.div(tid, cct);
            let slot = k.add(slice, c0);
            let first = k.cmp(IntPredicate::Eq, c0, c0);
            (ctc, slice, slot, first)
        }
    };
    let wgx = k.workgroup_id(Axis::Y);
    let wgy = k.workgroup_id(Axis::X);
    let bi = k.workgroup_id(Axis::Z);
    let col0 = k.mul(wgx, ccw);
    let col = k.madd(ctc, cv_, col0);
    let nlast = k.sub(n, cv_);
    let colc = k.min(col, nlast);
    let row0 = k.mul(wgy, cmt);
    let mlast = k.sub(m, c1);
    let basea = k.madd(bi, sab, oa);
    let baseb = k.madd(bi, sbb, ob);
    let zf = k.float(0.0, Scalar::F32);

    // Out-of-range rows and columns are clamped to valid memory (and
    // dropped at the store), so the loops have no branches.
    let mut row_offsets = Vec::with_capacity(mt);
    let mut pa = Vec::with_capacity(mt);
    for r in 0..mt {
        let ro = k.index(n64(r));
        let rr = k.add(row0, ro);
        let rc = k.min(rr, mlast);
        row_offsets.push(ro);
        pa.push(k.madd(rc, sam, basea));
    }
    let (bk_stride, b_base, four) = match load {
        BLoad::Scalar => (sbk, k.madd(colc, sbn, baseb), None),
        _ => {
            let four = k.index(4);
            let bq0 = k.add(baseb, colc);
            let pbq = k.div(bq0, cv_);
            let sbkq = k.div(sbk, cv_);
            (sbkq, pbq, Some(four))
        }
    };
    let lanes = if load == BLoad::Quad16 {
        (0..4).map(|p| k.index(p)).collect()
    } else {
        Vec::new()
    };
    let z = match piece {
        Ty::Vector { len, .. } => k.splat(zf, len),
        _ => k.addf(zf, zf),
    };
    let stream = Stream {
        input,
        load,
        piece: piece.clone(),
        av,
        bv,
        sak,
        pa,
        bk_stride,
        b_base,
        four,
        lanes,
    };

    // Main loop: UNROLL rows of B per trip, their loads issued together so
    // several are in flight per work item; then the remaining rows.
    let un1 = k.index(n64((UNROLL - 1) * kt));
    let step = k.index(n64(UNROLL * kt));
    let kr = k.min(kk, un1);
    let kmain = k.sub(kk, kr);
    let init = vec![z; mt * np];
    let main = k.for_carry(slice, kmain, step, &init, |b, k0, acc| {
        let rows: Vec<(Value<Index>, Vec<Value<Num>>)> = (0..UNROLL)
            .map(|u| {
                let ko = b.index(n64(u * kt));
                let ku = b.add(k0, ko);
                (ku, stream.load_b(b, ku))
            })
            .collect();
        rows.iter()
            .fold(acc.to_vec(), |acc, (ku, bk)| stream.fmas(b, *ku, bk, &acc))
    });
    let km = k.max(kmain, slice);
    let kd = k.sub(km, slice);
    let stepm1 = k.sub(step, c1);
    let kd1 = k.add(kd, stepm1);
    let trips = k.div(kd1, step);
    let ktail = k.madd(trips, step, slice);
    let mut sums = k.for_carry(ktail, kk, ckt, &main, |b, tk, acc| {
        let bk = stream.load_b(b, tk);
        stream.fmas(b, tk, &bk, acc)
    });

    // Xor shuffles over the lane bits that select the k slice.
    if let Some(sg) = sg {
        let mut mask = ct;
        while mask < sg {
            let mask_l = k.index(n64(mask));
            for s in sums.iter_mut() {
                let sh = k.subgroup_shuffle(ShuffleMode::Xor, *s, mask_l);
                *s = k.addf(*s, sh);
            }
            mask *= 2;
        }
    }
    k.if_(first, |b| {
        let cvs = b.mul(ctc, cv_);
        for (r, &ro) in row_offsets.iter().enumerate() {
            let sr = b.madd(slot, cmt, ro);
            let sb = b.madd(sr, ccw, cvs);
            for p in 0..np {
                let po = b.index(n64(p * pw));
                let si = b.add(sb, po);
                let sum = sums[r * np + p];
                match piece {
                    Ty::Vector { .. } => b.vector_store(sum, ts, &[si]),
                    _ => b.store(sum, ts, &[si]),
                }
            }
        }
    });
    k.barrier(Barrier::Workgroup);

    // Epilogue: sum the slots, add bias and activation, store in range.
    let act = act.map(|op| op.fragment(Scalar::F32));
    k.for_each(tid, cout, cwg, |b, e| {
        let r = b.div(e, ccw);
        let cc = b.rem(e, ccw);
        let sum = b.for_carry(c0, cns, c1, &[zf], |b, q, acc| {
            let sr = b.madd(q, cmt, r);
            let si = b.madd(sr, ccw, cc);
            let p = b.load(ts, &[si]);
            vec![b.addf(acc[0], p)]
        })[0];
        let row = b.add(row0, r);
        let col = b.add(col0, cc);
        let okr = b.cmp(IntPredicate::Ult, row, m);
        let okc = b.cmp(IntPredicate::Ult, col, n);
        let ok = b.and(okr, okc);
        b.if_(ok, |b| {
            let pb = b.madd(col, sbias, obias);
            let bj = b.load(biasv, &[pb]);
            let x = b.addf(sum, bj);
            let y = match &act {
                Some(f) => b.inline(f, &[x])[0],
                None => x,
            };
            let crow = b.madd(row, n, oc);
            let cb = b.madd(bi, scb, crow);
            let ci = b.add(cb, col);
            b.store(y, cv, &[ci]);
        });
    });
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every load, row tile and subgroup arrangement (lavapipe's varying
    /// subgroup size reduces through workgroup memory only, the H200's
    /// fixed one with shuffles first) builds a kernel the verifier and
    /// naga accept.
    #[test]
    fn every_variant_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for (input, load) in [
                (DType::F16, BLoad::Quad16),
                (DType::F16, BLoad::Word16),
                (DType::F16, BLoad::Scalar),
                (DType::F32, BLoad::Quad32),
                (DType::F32, BLoad::Scalar),
            ] {
                for (m, act) in [
                    (1, None),
                    (3, Some(UnaryOp::Silu)),
                    (8, Some(UnaryOp::Gelu)),
                ] {
                    let text = gemv_key(&target, input, load, m, act).source();
                    compiler
                        .module(&text)
                        .and_then(|module| {
                            module.compile_uncached(&hrx_loom::Specialization::new("@matmul_gemv"))
                        })
                        .unwrap_or_else(|e| panic!("{input:?} {load:?} m={m}: {e}"));
                }
            }
        }
    }

    /// Rows of one row tile share a kernel: the key names the tile.
    #[test]
    fn rows_of_one_tile_share_a_key() {
        let t = Target::lavapipe();
        let key = |m| gemv_key(&t, DType::F32, BLoad::Quad32, m, None);
        assert_eq!(key(5), key(8));
        assert_ne!(key(4), key(5));
    }
}

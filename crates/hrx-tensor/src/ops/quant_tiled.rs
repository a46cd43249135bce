//! The tiled quantised matmul for many rows of x (prefill, batched
//! decode), built with [`hrx_loom::build`]: `out[i, j] = x[i, :] . w[j, :]`.
//!
//! A workgroup of 64 work items computes a 32 x 32 tile of out. Per step
//! along k it stages 32 columns: each work item loads two spans (8 values
//! each) of x rows and dequantises two spans of weight rows into
//! workgroup memory (k-major), then computes a 4 x 4 register tile of 4
//! consecutive rows and columns, reading each k's 4 values of x and of
//! the weights as one 16-byte load (a subgroup's loads of one k are
//! consecutive, so they do not conflict). Weights
//! are read and dequantised once per 32 rows of x. Rows of x and of the
//! weights past the ends are clamped into range and dropped at the store;
//! spans past a row's end (unblocked formats only) are zeroed.
//!
//! **Split k.** A product of few tiles (a decode batch of 64 rows by a
//! 576-wide layer makes 36) leaves most of a GPU idle, each workgroup
//! walking all of k one dependent step after another. The split variant
//! runs `splits` workgroups per tile along grid z, each over its own run
//! of steps, and stores its 4 x 4 partial sums into a scratch of `splits`
//! planes (rows and columns padded to whole tiles, so no guard). Behind a
//! storage barrier one work item counts the tile's finished splits with
//! an atomic; the workgroup that finishes last resets the counter and
//! sums the planes in split order from zero, so the result does not
//! depend on which workgroup finishes (the scheme of the cooperative
//! split-k matmul).

use super::QuantFormat;
use super::quant_spans::{QuantMatmulArgs, SPAN, span_values, x_span};
use super::registry::{Generator, KernelKey, KernelSource};
use hrx_core::{DeviceKind, Target};
use hrx_loom::build::{
    AtomicRmw, Barrier, Body, Builder, Built, Extent, Index, KernelBuilder, Num, Value, View,
};
use hrx_loom::ir::{Axis, IntPredicate, Scalar};

/// Rows of x and of the weights per workgroup tile: 32, so the model's
/// prefill products (n of 192 to 1536, a few hundred rows) give the H200's
/// 132 SMs enough workgroups (512 x 576 makes 288 of them).
pub(crate) const TILE: usize = 32;
/// Columns (k) staged per step: 4 spans.
const BK: usize = 32;
/// Work items per side of the workgroup (8 x 8), each a 4 x 4 tile.
const SIDE: usize = 8;
const REG: usize = TILE / SIDE;
/// Work items per workgroup.
const WG: usize = SIDE * SIDE;
/// Spans of x (and of the weights) each work item stages per step.
const PER: usize = TILE * (BK / SPAN) / WG;

/// Workgroups a split product aims for on a GPU: about two per SM of a
/// large part (the H200 has 132), so every SM has a second workgroup's
/// loads in flight while one computes.
const SPLIT_WORKGROUPS: usize = 256;
/// The fewest k steps a split takes (fewer cost more in scratch traffic
/// and in the finishing sum than they gain).
const MIN_SPLIT_STEPS: usize = 2;
/// The most splits of one tile.
const MAX_SPLITS: usize = 16;

/// How a tiled product is split along k: `splits` workgroups per tile,
/// each over `steps` k steps of [`BK`] columns (the last may take fewer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TiledSplit {
    pub(crate) splits: usize,
    pub(crate) steps: usize,
}

impl TiledSplit {
    /// The split of an `m` x `n` product over `cols` inputs on `target`:
    /// `forced` splits where given (clamped to the steps there are), else
    /// enough for [`SPLIT_WORKGROUPS`] on a GPU, none on a CPU device (its
    /// few threads are busy with the tiles alone).
    pub(crate) fn plan(
        target: &Target,
        forced: Option<usize>,
        m: usize,
        n: usize,
        cols: usize,
    ) -> TiledSplit {
        let steps = cols.div_ceil(BK).max(1);
        let tiles = m.div_ceil(TILE) * n.div_ceil(TILE);
        let wanted = match forced {
            Some(s) => s,
            None if target.kind == DeviceKind::Cpu || tiles >= SPLIT_WORKGROUPS => 1,
            None => SPLIT_WORKGROUPS
                .div_ceil(tiles.max(1))
                .min(steps / MIN_SPLIT_STEPS)
                .min(MAX_SPLITS),
        };
        let per = steps.div_ceil(wanted.clamp(1, steps));
        TiledSplit {
            splits: steps.div_ceil(per),
            steps: per,
        }
    }

    /// Elements of the partial sums' scratch for `m` x `n`.
    pub(crate) fn scratch_elements(&self, m: usize, n: usize) -> usize {
        self.splits * m.div_ceil(TILE) * TILE * n.div_ceil(TILE) * TILE
    }

    /// Tiles of `m` x `n` (one finishing counter each).
    pub(crate) fn tiles(m: usize, n: usize) -> usize {
        m.div_ceil(TILE) * n.div_ceil(TILE)
    }
}

/// The tiled kernel for `format`, x read in 16-byte quads (`xvec`), rows
/// ending in a partial span (`tail`), split along k (`split`).
pub(crate) fn tiled_key(format: QuantFormat, xvec: bool, tail: bool, split: bool) -> KernelKey {
    KernelKey {
        source: KernelSource::Built(Generator::new(
            format!("quant_tiled {format:?} {xvec} {tail} {split}"),
            move || tiled_kernel(format, xvec, tail, split),
        )),
        symbol: "quant_tiled",
        config: Vec::new(),
    }
}

/// The split variant's launch arguments, after the matmul's.
struct SplitArgs {
    splits: Value<Index>,
    /// k steps per split.
    steps: Value<Index>,
    /// Padded columns of a scratch plane, and a plane's elements.
    npad: Value<Index>,
    plane: Value<Index>,
    scratch: Value<View>,
    counters: Value<View>,
}

impl SplitArgs {
    fn declare(k: &mut Body) -> SplitArgs {
        let [splits, steps, npad, plane, lsc, lcnt] =
            ["splits", "sps", "npad", "plane", "lsc", "lcnt"].map(|a| k.arg_index(a));
        let scratch = k.arg_buffer("scratch", false);
        let counters = k.arg_buffer("cnt", false);
        let zero = k.offset(0);
        SplitArgs {
            splits,
            steps,
            npad,
            plane,
            scratch: k.buffer_view(scratch, zero, [lsc.into()], Scalar::F32),
            counters: k.buffer_view(counters, zero, [lcnt.into()], Scalar::U32),
        }
    }
}

fn tiled_kernel(format: QuantFormat, xvec: bool, tail: bool, split: bool) -> Built {
    let mut k = KernelBuilder::new("quant_tiled");
    let [wm, wn] = ["m", "n"].map(|name| k.workload(name));
    let one = k.index(1);
    let gz = if split { k.workload("splits") } else { one };
    let ct = k.index(n64(TILE));
    let gx = k.div_ceil(wn, ct);
    let gy = k.div_ceil(wm, ct);
    let wg = k.index(n64(WG));
    let mut k = k.launch_config([gx, gy, gz], [wg, one, one]);
    let a = QuantMatmulArgs::declare(&mut k, format, xvec, tail);
    let sa = split.then(|| SplitArgs::declare(&mut k));
    // The launch region's values are not visible in the body.
    let ct = k.index(n64(TILE));
    let zero = k.offset(0);
    let elems = BK * TILE;
    let bytes = k.offset(n64(elems * 4));
    let xs_buf = k.alloca_workgroup(bytes, 16);
    let ws_buf = k.alloca_workgroup(bytes, 16);
    let xs = k.buffer_view(xs_buf, zero, [Extent::from(elems)], Scalar::F32);
    let ws = k.buffer_view(ws_buf, zero, [Extent::from(elems)], Scalar::F32);
    let [c0, c1, c4, c7, c8] = [0, 1, 4, 7, 8].map(|v| k.index(v));
    let cside = k.index(n64(SIDE));
    let ctile = k.index(n64(TILE));
    let t = k.workitem_id(Axis::X);
    let tx = k.rem(t, cside);
    let ty = k.div(t, cside);
    let tx4 = k.mul(tx, c4);
    let ty4 = k.mul(ty, c4);
    let col0 = k.workgroup_id(Axis::X);
    let col0 = k.mul(col0, ct);
    let row0 = k.workgroup_id(Axis::Y);
    let row0 = k.mul(row0, ct);
    let m1 = k.sub(a.m, c1);
    let n1 = k.sub(a.n, c1);
    let cols7 = k.add(a.x.cols, c7);
    let spans = k.div(cols7, c8);
    let spans1 = k.sub(spans, c1);
    let c3 = k.index(3);
    let spans3 = k.add(spans, c3);
    let steps = k.div(spans3, c4);
    // This workgroup's run of steps: all of them, or its split's.
    let (first, last) = match &sa {
        Some(sa) => {
            let z = k.workgroup_id(Axis::Z);
            let first = k.mul(z, sa.steps);
            let end = k.add(first, sa.steps);
            (first, k.min(end, steps))
        }
        None => (c0, steps),
    };
    // The rows of x and of the weights this work item stages, and their
    // spans of the step.
    let cwg = k.index(n64(WG));
    let staged: Vec<_> = (0..PER)
        .map(|p| {
            let cp = k.index(n64(p));
            let e = k.madd(cp, cwg, t);
            let lr = k.div(e, c4);
            let lsp = k.rem(e, c4);
            let xr = k.add(row0, lr);
            let xr = k.min(xr, m1);
            let xrow = k.madd(xr, a.x.cols, a.ox);
            let wr = k.add(col0, lr);
            let wr = k.min(wr, n1);
            let wrow = k.madd(wr, a.w.row_words, a.ow);
            (lr, lsp, xrow, wrow)
        })
        .collect();
    let zf = k.float(0.0, Scalar::F32);
    let init = vec![zf; REG * REG];
    let acc = k.for_carry(first, last, c1, &init, |b, step, acc| {
        for &(lr, lsp, xrow, wrow) in &staged {
            let s = b.madd(step, c4, lsp);
            let ok = b.cmp(IntPredicate::Ult, s, spans);
            let sc = b.min(s, spans1);
            let xv = x_span(b, &a.x, xrow, sc);
            let wv = span_values(b, &a.w, wrow, sc);
            let kk0 = b.mul(lsp, c8);
            for i in 0..SPAN {
                let ci = b.index(n64(i));
                let kk = b.add(kk0, ci);
                let at = b.madd(kk, ctile, lr);
                let x = b.select(ok, xv[i], zf);
                let w = b.select(ok, wv[i], zf);
                b.store(x, xs, &[at]);
                b.store(w, ws, &[at]);
            }
        }
        b.barrier(Barrier::Workgroup);
        let mut acc = acc.to_vec();
        for kk in 0..BK {
            let base = b.index(n64(kk * TILE));
            let xr = quad(b, xs, base, ty4);
            let wc = quad(b, ws, base, tx4);
            for i in 0..REG {
                for j in 0..REG {
                    acc[i * REG + j] = b.fmaf(xr[i], wc[j], acc[i * REG + j]);
                }
            }
        }
        b.barrier(Barrier::Workgroup);
        acc
    });
    let row = k.add(row0, ty4);
    let col = k.add(col0, tx4);
    let Some(sa) = sa else {
        store_tile(&mut k, &a, row, col, &acc);
        return Built::kernel(k.finish());
    };
    // The partial sums into this split's plane, at the work item's 4 x 4
    // (inside the padded plane: no guard).
    let z = k.workgroup_id(Axis::Z);
    let plane0 = k.mul(z, sa.plane);
    let at = k.madd(row, sa.npad, col);
    let at = k.add(plane0, at);
    for i in 0..REG {
        let oi = k.index(n64(i));
        let r = k.madd(oi, sa.npad, at);
        for j in 0..REG {
            let oj = k.index(n64(j));
            let p = k.add(r, oj);
            k.store(acc[i * REG + j], sa.scratch, &[p]);
        }
    }
    // Count the finished splits; the last one sums the planes.
    let four = k.offset(4);
    let flag_mem = k.alloca_workgroup(four, 4);
    let flag = k.buffer_view(flag_mem, zero, [Extent::from(1usize)], Scalar::U32);
    let (zu, ou) = (k.int(0, Scalar::U32), k.int(1, Scalar::U32));
    let tiles_x = k.div(sa.npad, ctile);
    let gy = k.workgroup_id(Axis::Y);
    let gx = k.workgroup_id(Axis::X);
    let tile = k.madd(gy, tiles_x, gx);
    let lead = k.cmp(IntPredicate::Eq, t, c0);
    k.barrier(Barrier::Storage);
    k.if_(lead, |b| {
        let seen = b.atomic(AtomicRmw::Add, ou, sa.counters, &[tile]);
        let seen = b.to_index(seen);
        let final_split = b.sub(sa.splits, c1);
        let last = b.cmp(IntPredicate::Eq, seen, final_split);
        let f = b.select(last, ou, zu);
        b.store(f, flag, &[c0]);
        b.if_(last, |b| b.store(zu, sa.counters, &[tile]));
    });
    k.barrier(Barrier::Storage);
    let f = k.load(flag, &[c0]);
    let finish = k.cmpi(IntPredicate::Eq, f, ou);
    k.if_(finish, |b| {
        let at = b.madd(row, sa.npad, col);
        let init = vec![zf; REG * REG];
        let sums = b.for_carry(c0, sa.splits, c1, &init, |b, s, acc| {
            let base = b.madd(s, sa.plane, at);
            let mut acc = acc.to_vec();
            for i in 0..REG {
                let oi = b.index(n64(i));
                let r = b.madd(oi, sa.npad, base);
                for j in 0..REG {
                    let oj = b.index(n64(j));
                    let p = b.add(r, oj);
                    let v = b.load(sa.scratch, &[p]);
                    acc[i * REG + j] = b.addf(acc[i * REG + j], v);
                }
            }
            acc
        });
        store_tile(b, &a, row, col, &sums);
    });
    Built::kernel(k.finish())
}

/// Store a work item's 4 x 4 `acc` at (`row`, `col`) of out, dropping what
/// lies past its ends.
fn store_tile(
    k: &mut Builder,
    a: &QuantMatmulArgs,
    row: Value<Index>,
    col: Value<Index>,
    acc: &[Value<Num>],
) {
    for i in 0..REG {
        let oi = k.index(n64(i));
        let r = k.add(row, oi);
        let rok = k.cmp(IntPredicate::Ult, r, a.m);
        let orow = k.madd(r, a.n, a.oo);
        for j in 0..REG {
            let oj = k.index(n64(j));
            let c = k.add(col, oj);
            let cok = k.cmp(IntPredicate::Ult, c, a.n);
            let ok = k.and(rok, cok);
            let v = acc[i * REG + j];
            k.if_(ok, |b| {
                let p = b.add(orow, c);
                b.store(v, a.out, &[p]);
            });
        }
    }
}

fn n64(v: usize) -> u64 {
    v as u64
}

/// The 4 values at `base + at` of a staged tile (one 16-byte load).
fn quad(
    b: &mut Builder,
    tile: Value<View>,
    base: Value<Index>,
    at: Value<Index>,
) -> Vec<Value<Num>> {
    let p = b.add(base, at);
    let q = b.vector_load(tile, &[p], 4);
    (0..REG as u64)
        .map(|l| {
            let l = b.index(l);
            b.extract(q, l)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;

    /// A GPU splits products of few tiles into runs of at least two
    /// steps, no split is empty, and a CPU device or a product of many
    /// tiles is not split unless forced.
    #[test]
    fn splits_fill_the_gpu_and_stay_whole() {
        let gpu = Target::hopper();
        let plan = |m, n, cols| TiledSplit::plan(&gpu, None, m, n, cols);
        // A decode batch of 64 rows by SmolLM2's layers.
        assert_eq!(
            plan(64, 576, 576),
            TiledSplit {
                splits: 6,
                steps: 3
            }
        );
        assert_eq!(
            plan(64, 576, 1536),
            TiledSplit {
                splits: 8,
                steps: 6
            }
        );
        assert_eq!(
            plan(64, 3072, 576),
            TiledSplit {
                splits: 2,
                steps: 9
            }
        );
        assert_eq!(plan(64, 49152, 576).splits, 1);
        assert_eq!(plan(512, 576, 576).splits, 1);
        assert_eq!(plan(64, 576, 40).splits, 1);
        assert_eq!(
            TiledSplit::plan(&Target::lavapipe(), None, 64, 576, 576).splits,
            1
        );
        for (forced, cols) in [(3, 576), (7, 576), (100, 100), (0, 64), (5, 1)] {
            let p = TiledSplit::plan(&Target::lavapipe(), Some(forced), 40, 9, cols);
            let steps = cols.div_ceil(BK);
            assert!(
                p.splits >= 1 && p.splits <= steps.max(1),
                "{forced} {cols}: {p:?}"
            );
            assert!(
                (p.splits - 1) * p.steps < steps.max(1),
                "{forced} {cols}: {p:?}"
            );
            assert!(p.splits * p.steps >= steps, "{forced} {cols}: {p:?}");
        }
    }

    /// Every format and load variant builds a kernel the verifier and
    /// naga accept.
    #[test]
    fn every_variant_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for format in [
                QuantFormat::F32,
                QuantFormat::F16,
                QuantFormat::Q8_0,
                QuantFormat::Q4_1,
            ] {
                for (xvec, tail, split) in [
                    (true, false, false),
                    (false, true, false),
                    (true, false, true),
                    (false, true, true),
                ] {
                    let text = tiled_key(format, xvec, tail, split).source();
                    compiler
                        .module(&text)
                        .and_then(|m| {
                            m.compile_uncached(&hrx_loom::Specialization::new("@quant_tiled"))
                        })
                        .unwrap_or_else(|e| panic!("{format:?} {xvec} {tail} {split}: {e}"));
                }
            }
        }
    }
}

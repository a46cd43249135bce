//! The tiled quantised matmul for many rows of x (prefill, batched
//! decode), built with [`hrx_loom::build`]: `out[i, j] = x[i, :] . w[j, :]`.
//!
//! A workgroup of 64 work items (8 x 8) computes a square tile of out:
//! 32 x 32 (each work item 4 x 4 outputs) or, wide, 64 x 64 (each 8 x 8,
//! twice the multiply-adds per workgroup-memory load, which is what bounds
//! the narrow tile on a GPU). Per step along k it stages 32 columns: each
//! work item loads spans (8 values each) of x rows and dequantises spans
//! of weight rows into workgroup memory (k-major), then accumulates its
//! outputs, reading each k's values of x and of the weights in 16-byte
//! quads. A work item's rows (and columns) are quads 32 apart, `t * 4 +
//! 32 * h`, so the 8 work items of a row of the workgroup read 128
//! consecutive bytes per quad and do not conflict. Weights are read and
//! dequantised once per tile of x rows. Rows of x and of the weights past
//! the ends are clamped into range and dropped at the store; spans past a
//! row's end (unblocked formats only) are zeroed.
//!
//! **Split k.** A product of few tiles (a decode batch of 64 rows by a
//! 576-wide layer makes 36) leaves most of a GPU idle, each workgroup
//! walking all of k one dependent step after another. The split variant
//! runs `splits` workgroups per tile along grid z, each over its own run
//! of steps, and stores its partial sums into a scratch of `splits`
//! planes (rows and columns padded to whole tiles, so no guard). Behind a
//! storage barrier one work item counts the tile's finished splits with
//! an atomic; the workgroup that finishes last resets the counter and
//! sums the planes in split order from zero, so the result does not
//! depend on which workgroup finishes (the scheme of the cooperative
//! split-k matmul).

use super::spans::{Elements, QuantMatmulArgs, SPAN, span_values, x_span};
use crate::ops::QuantFormat;
use crate::ops::registry::{Generator, KernelKey, KernelSource};
use crate::ops::split_count::last_split;
use crate::ops::tuning::QuantTiling;
use hrx_core::{DeviceKind, Target};
use hrx_loom::build::{
    Barrier, Body, Builder, Built, Extent, Index, KernelBuilder, Num, Value, View,
};
use hrx_loom::ir::{Axis, IntPredicate, Scalar};

/// Columns (k) staged per step: 4 spans.
const BK: usize = 32;
/// Work items per side of the workgroup (8 x 8).
const SIDE: usize = 8;
/// Work items per workgroup.
const WG: usize = SIDE * SIDE;
/// The narrow tile; the wide one is twice as long.
const NARROW: usize = 32;
/// The fewest rows of x for the wide tile on a GPU: below, its tiles are
/// mostly empty.
const WIDE_MIN_ROWS: usize = 64;

/// A workgroup's tile: `4 * quads` outputs per work item and side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tile {
    quads: usize,
}

impl Tile {
    fn of(side: usize) -> Tile {
        Tile {
            quads: side / NARROW,
        }
    }

    /// Outputs per side of the tile.
    fn side(self) -> usize {
        NARROW * self.quads
    }

    /// Outputs per side of a work item.
    fn reg(self) -> usize {
        4 * self.quads
    }

    /// Spans of x (and of the weights) each work item stages per step.
    fn per(self) -> usize {
        self.side() * (BK / SPAN) / WG
    }
}

/// Tiles from which a product on a GPU is not split (about three per SM
/// of a 132-SM part: enough workgroups to hide one another's latency),
/// and from which the wide tile is taken where there are rows enough for
/// it.
const WHOLE_TILES: usize = 384;
/// Workgroups a split product aims for on a GPU (about six per SM).
const SPLIT_WORKGROUPS: usize = 768;
/// The fewest k steps a split takes (fewer cost more in scratch traffic
/// and in the finishing sum than they gain).
const MIN_SPLIT_STEPS: usize = 2;
/// The most splits of one tile.
const MAX_SPLITS: usize = 8;

/// How a tiled product runs: tiles of `tile` x `tile` outputs, `splits`
/// workgroups per tile along k, each over `steps` k steps of [`BK`]
/// columns (the last may take fewer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TiledPlan {
    pub(crate) tile: usize,
    pub(crate) splits: usize,
    pub(crate) steps: usize,
}

impl TiledPlan {
    /// The plan of an `m` x `n` product over `cols` inputs on `target`:
    /// `forced` where given (its splits clamped to the steps there are).
    /// Else on a GPU the wide tile where it makes [`WHOLE_TILES`] tiles,
    /// the narrow one split for [`SPLIT_WORKGROUPS`] where it makes fewer;
    /// on a CPU device the narrow tile and no split (its few threads are
    /// busy with the tiles alone). Measured on an H200 with SmolLM2's
    /// products: a 64-row decode batch by 576 columns runs 2.5x faster in
    /// 6 splits than whole; 512 rows by 3072 columns 1.25x faster in wide
    /// tiles than narrow, and 64 rows by the 49,152-row vocabulary 1.5x;
    /// 512 by 960 slower split than whole.
    pub(crate) fn new(
        target: &Target,
        forced: Option<QuantTiling>,
        m: usize,
        n: usize,
        cols: usize,
    ) -> TiledPlan {
        let steps = cols.div_ceil(BK).max(1);
        let cpu = target.kind == DeviceKind::Cpu;
        let count = |tile: usize| m.div_ceil(tile) * n.div_ceil(tile);
        let wide = 2 * NARROW;
        let tile = match forced {
            Some(f) => f.tile(),
            None if !cpu && m >= WIDE_MIN_ROWS && count(wide) >= WHOLE_TILES => wide,
            None => NARROW,
        };
        let tiles = count(tile);
        let wanted = match forced {
            Some(f) => f.splits(),
            None if cpu || tiles >= WHOLE_TILES => 1,
            None => SPLIT_WORKGROUPS
                .div_ceil(tiles.max(1))
                .min(steps / MIN_SPLIT_STEPS)
                .min(MAX_SPLITS),
        };
        let per = steps.div_ceil(wanted.clamp(1, steps));
        TiledPlan {
            tile,
            splits: steps.div_ceil(per),
            steps: per,
        }
    }

    /// Columns of a scratch plane for `n` (whole tiles).
    pub(crate) fn npad(&self, n: usize) -> usize {
        n.div_ceil(self.tile) * self.tile
    }

    /// Elements of the partial sums' scratch for `m` x `n`.
    pub(crate) fn scratch_elements(&self, m: usize, n: usize) -> usize {
        self.splits * m.div_ceil(self.tile) * self.tile * self.npad(n)
    }

    /// Tiles of `m` x `n` (one finishing counter each).
    pub(crate) fn tiles(&self, m: usize, n: usize) -> usize {
        m.div_ceil(self.tile) * n.div_ceil(self.tile)
    }

    /// The kernel for this plan, `format`, x read in 16-byte quads
    /// (`xvec`), rows ending in a partial span (`tail`); `split` false
    /// where the caller runs it unsplit; x and out of `elements`.
    pub(crate) fn key(
        &self,
        format: QuantFormat,
        (xvec, tail, split): (bool, bool, bool),
        elements: Elements,
    ) -> KernelKey {
        tiled_key(format, (xvec, tail, split), Tile::of(self.tile), elements)
    }
}

fn tiled_key(
    format: QuantFormat,
    flags: (bool, bool, bool),
    tile: Tile,
    elements: Elements,
) -> KernelKey {
    KernelKey {
        source: KernelSource::Built(Generator::new(
            format!("quant_tiled {format:?} {flags:?} {tile:?} {elements:?}"),
            move || tiled_kernel(format, flags, tile, elements),
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

fn tiled_kernel(
    format: QuantFormat,
    (xvec, tail, split): (bool, bool, bool),
    tile: Tile,
    elements: Elements,
) -> Built {
    let (side, reg) = (tile.side(), tile.reg());
    let mut k = KernelBuilder::new("quant_tiled");
    let [wm, wn] = ["m", "n"].map(|name| k.workload(name));
    let one = k.index(1);
    let gz = if split { k.workload("splits") } else { one };
    let ct = k.index(n64(side));
    let gx = k.div_ceil(wn, ct);
    let gy = k.div_ceil(wm, ct);
    let wg = k.index(n64(WG));
    let mut k = k.launch_config([gx, gy, gz], [wg, one, one]);
    let a = QuantMatmulArgs::declare(&mut k, format, (xvec, tail), elements);
    let sa = split.then(|| SplitArgs::declare(&mut k));
    // The launch region's values are not visible in the body.
    let zero = k.offset(0);
    let elems = BK * side;
    let bytes = k.offset(n64(elems * 4));
    let xs_buf = k.alloca_workgroup(bytes, 16);
    let ws_buf = k.alloca_workgroup(bytes, 16);
    let xs = k.buffer_view(xs_buf, zero, [Extent::from(elems)], Scalar::F32);
    let ws = k.buffer_view(ws_buf, zero, [Extent::from(elems)], Scalar::F32);
    let [c0, c1, c4, c7, c8] = [0, 1, 4, 7, 8].map(|v| k.index(v));
    let cside = k.index(n64(SIDE));
    let ctile = k.index(n64(side));
    let t = k.workitem_id(Axis::X);
    let tx = k.rem(t, cside);
    let ty = k.div(t, cside);
    let tx4 = k.mul(tx, c4);
    let ty4 = k.mul(ty, c4);
    let col0 = k.workgroup_id(Axis::X);
    let col0 = k.mul(col0, ctile);
    let row0 = k.workgroup_id(Axis::Y);
    let row0 = k.mul(row0, ctile);
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
    let staged: Vec<_> = (0..tile.per())
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
    let init = vec![zf; reg * reg];
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
            let base = b.index(n64(kk * side));
            let xr = quads(b, xs, base, ty4, tile);
            let wc = quads(b, ws, base, tx4, tile);
            for i in 0..reg {
                for j in 0..reg {
                    acc[i * reg + j] = b.fmaf(xr[i], wc[j], acc[i * reg + j]);
                }
            }
        }
        b.barrier(Barrier::Workgroup);
        acc
    });
    // The work item's output rows and columns.
    let rows = places(&mut k, row0, ty4, tile);
    let cols = places(&mut k, col0, tx4, tile);
    let Some(sa) = sa else {
        store_outputs(&mut k, &a, &rows, &cols, &acc);
        return Built::kernel(k.finish());
    };
    // The partial sums into this split's plane (inside the padded plane:
    // no guard).
    let z = k.workgroup_id(Axis::Z);
    let plane0 = k.mul(z, sa.plane);
    for (i, &r) in rows.iter().enumerate() {
        let at = k.madd(r, sa.npad, plane0);
        for (j, &c) in cols.iter().enumerate() {
            let p = k.add(at, c);
            k.store(acc[i * reg + j], sa.scratch, &[p]);
        }
    }
    // Count the finished splits; the last one sums the planes.
    let tiles_x = k.div(sa.npad, ctile);
    let gy = k.workgroup_id(Axis::Y);
    let gx = k.workgroup_id(Axis::X);
    let tile_id = k.madd(gy, tiles_x, gx);
    let lead = k.cmp(IntPredicate::Eq, t, c0);
    let finish = last_split(&mut k, sa.counters, tile_id, sa.splits, lead);
    k.if_(finish, |b| {
        let init = vec![zf; reg * reg];
        let sums = b.for_carry(c0, sa.splits, c1, &init, |b, s, acc| {
            let base = b.mul(s, sa.plane);
            let mut acc = acc.to_vec();
            for (i, &r) in rows.iter().enumerate() {
                let at = b.madd(r, sa.npad, base);
                for (j, &c) in cols.iter().enumerate() {
                    let p = b.add(at, c);
                    let v = b.load(sa.scratch, &[p]);
                    acc[i * reg + j] = b.addf(acc[i * reg + j], v);
                }
            }
            acc
        });
        store_outputs(b, &a, &rows, &cols, &sums);
    });
    Built::kernel(k.finish())
}

/// A work item's rows (or columns) of the tile starting at `first`: quads
/// at `at` and every 32 on.
fn places(k: &mut Builder, first: Value<Index>, at: Value<Index>, tile: Tile) -> Vec<Value<Index>> {
    let start = k.add(first, at);
    (0..tile.reg())
        .map(|i| {
            let off = k.index(n64(i / 4 * NARROW + i % 4));
            k.add(start, off)
        })
        .collect()
}

/// Store a work item's `acc` (rows x cols) into out, dropping what lies
/// past its ends.
fn store_outputs(
    k: &mut Builder,
    a: &QuantMatmulArgs,
    rows: &[Value<Index>],
    cols: &[Value<Index>],
    acc: &[Value<Num>],
) {
    for (i, &r) in rows.iter().enumerate() {
        let rok = k.cmp(IntPredicate::Ult, r, a.m);
        let orow = k.madd(r, a.n, a.oo);
        for (j, &c) in cols.iter().enumerate() {
            let cok = k.cmp(IntPredicate::Ult, c, a.n);
            let ok = k.and(rok, cok);
            let v = acc[i * cols.len() + j];
            k.if_(ok, |b| {
                let p = b.add(orow, c);
                a.store_out(b, v, p);
            });
        }
    }
}

fn n64(v: usize) -> u64 {
    v as u64
}

/// A work item's values of one k of a staged tile: quads at `base + at`
/// and every 32 on (one 16-byte load each).
fn quads(
    b: &mut Builder,
    staged: Value<View>,
    base: Value<Index>,
    at: Value<Index>,
    tile: Tile,
) -> Vec<Value<Num>> {
    let p = b.add(base, at);
    let mut out = Vec::with_capacity(tile.reg());
    for h in 0..tile.quads {
        let off = b.index(n64(h * NARROW));
        let ph = b.add(p, off);
        let q = b.vector_load(staged, &[ph], 4);
        for l in 0..4 {
            let l = b.index(l);
            out.push(b.extract(q, l));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;

    /// A GPU takes the wide tile for many rows and splits products of few
    /// tiles into runs of at least two steps; no split is empty; a CPU
    /// device takes the narrow tile unsplit unless forced.
    #[test]
    fn plans_fill_the_gpu_and_stay_whole() {
        let gpu = Target::hopper();
        let plan = |m, n, cols| TiledPlan::new(&gpu, None, m, n, cols);
        let narrow = |splits, steps| TiledPlan {
            tile: 32,
            splits,
            steps,
        };
        let wide = |splits, steps| TiledPlan {
            tile: 64,
            splits,
            steps,
        };
        // A decode batch of 64 rows by SmolLM2's layers.
        assert_eq!(plan(64, 576, 576), narrow(6, 3));
        assert_eq!(plan(64, 576, 1536), narrow(8, 6));
        assert_eq!(plan(64, 3072, 576), narrow(4, 5));
        assert_eq!(plan(64, 49152, 576), wide(1, 18));
        assert_eq!(plan(64, 576, 40), narrow(1, 2));
        // A 512-token prefill.
        assert_eq!(plan(512, 576, 576), narrow(3, 6));
        assert_eq!(plan(512, 960, 576), narrow(1, 18));
        assert_eq!(plan(512, 3072, 576), wide(1, 18));
        let cpu = Target::lavapipe();
        assert_eq!(TiledPlan::new(&cpu, None, 512, 576, 576), narrow(1, 18));
        for (forced, cols) in [(3, 576), (7, 576), (64, 100), (1, 64), (5, 1)] {
            let tiling = QuantTiling::new(64, forced).unwrap();
            let p = TiledPlan::new(&cpu, Some(tiling), 40, 9, cols);
            let steps = cols.div_ceil(BK);
            assert_eq!(p.tile, 64);
            assert!(p.splits >= 1 && p.splits <= steps, "{forced} {cols}: {p:?}");
            assert!((p.splits - 1) * p.steps < steps, "{forced} {cols}: {p:?}");
            assert!(p.splits * p.steps >= steps, "{forced} {cols}: {p:?}");
        }
    }

    /// Every format and load variant builds a kernel the verifier and
    /// naga accept.
    #[test]
    fn every_variant_compiles() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for format in QuantFormat::ALL {
                let half = Elements {
                    x: Scalar::F16,
                    out: Scalar::F16,
                };
                for (xvec, tail, split, side, elements) in [
                    (true, false, false, 32, Elements::F32),
                    (false, true, false, 64, half),
                    (true, false, true, 64, half),
                    (false, true, true, 32, Elements::F32),
                    (true, false, false, 64, half),
                ] {
                    let flags = (xvec, tail, split);
                    let text = tiled_key(format, flags, Tile::of(side), elements).source();
                    compiler
                        .module(&text)
                        .and_then(|m| {
                            m.compile_uncached(&hrx_loom::Specialization::new("@quant_tiled"))
                        })
                        .unwrap_or_else(|e| panic!("{format:?} {xvec} {tail} {split} {side}: {e}"));
                }
            }
        }
    }
}

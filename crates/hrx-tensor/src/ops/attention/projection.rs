//! The cached attention's fused output projection (`AttentionShape::project`,
//! built into `kernels::cached_attention`): the attention's output
//! projection and its residual, in the same dispatch. After the heads'
//! outputs are stored (and kept in the workgroup memory q is done with),
//! work item `t` takes output columns `t, t + wg, ..`, dots the weight
//! row's columns of this workgroup's heads with them, and stores the sum
//! into this workgroup's plane of the scratch (`[rows, workgroups per row,
//! width]`). The row's last workgroup to count itself done (`split_count`)
//! adds the planes in order to the residual (`sum_planes`). Its arguments
//! come after the attention's: `width`, the weight's row words, and the
//! offsets and lengths of the weight, the residual and the output; the
//! scratch and the per-row counters are bound whole, sized by the grid.
//!
//! Where the projection's columns of the workgroup's heads are few
//! (`AttentionShape::staged`: a few words a work item), every work item
//! loads its share of those weight words, and its output column's
//! residual, before the attention begins, and stores the words into
//! workgroup memory only after it: the loads' latency (device memory, the
//! weights being read once a step) passes under the attention instead of
//! following it, and the projection reads its weights from workgroup
//! memory.
//!
//! With `AttentionShape::splits` above 1, each group of heads takes that
//! many workgroups (grid x: groups times splits): each attends the
//! group's heads (the first split stores the attended rows) and projects
//! its share of the output columns into the group's plane; the planes
//! are counted per row and split, and the last group to finish a split
//! adds that split's columns. A few rows' projection then runs on more of
//! the GPU than one workgroup per group of heads.

use super::kernels::AttentionShape;
use crate::ops::QuantFormat;
use crate::ops::quant::spans::{SPAN, Weights, span_values};
use crate::ops::split_count::{last_split, sum_planes};
use hrx_loom::build::{Barrier, Body, Builder, Extent, Index, Num, Value, View};
use hrx_loom::ir::{Axis, IntPredicate, Scalar};

const F32: Scalar = Scalar::F32;

/// The most weight words a workgroup stages for its projection.
const STAGED_WORDS_MAX: usize = 6144;
/// The most staged words a work item loads (and holds through the
/// attention).
const STAGED_PER_ITEM_MAX: usize = 8;

/// Words of one projection row's columns over a workgroup's `values`
/// head values, where each head starts on a block of the format.
fn head_row_words(format: QuantFormat, hd: usize, values: usize) -> Option<usize> {
    if !hd.is_multiple_of(format.block_len()) {
        return None;
    }
    format.row_words(values).ok()
}

/// Whether a workgroup's projection onto `columns` output columns by
/// `format` is staged (`AttentionShape::staged`) for workgroups of `wg`
/// work items taking `heads` heads of `hd` values: its words fit the
/// workgroup memory budget, a work item loads a few, and one work item
/// holds each output column's residual.
pub(crate) fn stages(
    format: QuantFormat,
    (hd, heads): (usize, usize),
    columns: usize,
    wg: usize,
) -> bool {
    head_row_words(format, hd, hd * heads).is_some_and(|words| {
        let total = columns * words;
        total <= STAGED_WORDS_MAX && total.div_ceil(wg) <= STAGED_PER_ITEM_MAX && columns <= wg
    })
}

/// Bytes of workgroup memory the staged projection of `shape` takes.
pub(crate) fn staged_bytes(shape: &AttentionShape) -> usize {
    match (shape.project, shape.staged) {
        (Some(format), Some(columns)) => {
            4 * columns * head_row_words(format, shape.hd, shape.hd * shape.heads).unwrap_or(0)
        }
        _ => 0,
    }
}

/// The output projection's operands (`AttentionShape::project`).
pub(super) struct Projection {
    /// Output columns (the weight's rows).
    width: Value<Index>,
    weights: Weights,
    /// The weights' element offset.
    ow: Value<Index>,
    /// `[rows, width]` each: the residual and the output, with their
    /// element offsets.
    residual: (Value<View>, Value<Index>),
    out: (Value<View>, Value<Index>),
    /// Partial sums, `[rows, groups of heads, width]`, and a finishing
    /// counter per row and split.
    scratch: Value<View>,
    counters: Value<View>,
}

/// The output columns of one split of a projection: `count` from
/// `start`, split `part` of `splits`.
pub(super) struct Columns {
    start: Value<Index>,
    count: Value<Index>,
    part: Value<Index>,
    splits: Value<Index>,
}

impl Projection {
    /// Declares the projection's index arguments (after the attention's).
    pub(super) fn declare(k: &mut Body) -> [Value<Index>; 8] {
        ["width", "rw", "ow", "lw", "or", "lr", "oh", "lh"].map(|x| k.arg_index(x))
    }

    /// Binds the projection's buffers (after the attention's) by a weight
    /// of `format`, for a grid of `splits` workgroups per group of heads:
    /// the scratch and the counters are bound whole, sized by the grid
    /// (push constants are too few for their lengths), a plane of `width`
    /// per group of heads and row, a counter per row and split.
    pub(super) fn bind(
        k: &mut Body,
        format: QuantFormat,
        [width, rw, ow, lw, or, lr, oh, lh]: [Value<Index>; 8],
        splits: usize,
    ) -> Projection {
        let zero = k.offset(0);
        let per_row = k.workgroup_count(Axis::X);
        let rows = k.workgroup_count(Axis::Y);
        let splits = k.index(splits as u64);
        let head_groups = k.div(per_row, splits);
        let planes = k.mul(head_groups, rows);
        let tiles = k.mul(rows, splits);
        let lsc = k.mul(planes, width);
        let [wb, rb] = ["wo", "res"].map(|x| k.arg_buffer(x, true));
        let [hb, sb, cb] = ["h", "scratch", "cnt"].map(|x| k.arg_buffer(x, false));
        Projection {
            width,
            weights: Weights {
                format,
                view: k.buffer_view(wb, zero, [lw.into()], Scalar::U32),
                row_words: rw,
                tail: false,
            },
            ow,
            residual: (k.buffer_view(rb, zero, [lr.into()], F32), or),
            out: (k.buffer_view(hb, zero, [lh.into()], F32), oh),
            scratch: k.buffer_view(sb, zero, [lsc.into()], F32),
            counters: k.buffer_view(cb, zero, [tiles.into()], Scalar::U32),
        }
    }
}

impl Columns {
    /// Split `part` of `splits`' share of `p`'s output columns: an even
    /// share, the last split's cut at the width.
    pub(super) fn of_split(
        k: &mut Builder,
        p: &Projection,
        part: Value<Index>,
        splits: Value<Index>,
    ) -> Columns {
        let per = k.div_ceil(p.width, splits);
        let first = k.mul(part, per);
        let start = k.min(first, p.width);
        let room = k.sub(p.width, start);
        Columns {
            start,
            count: k.min(per, room),
            part,
            splits,
        }
    }
}

/// The fused output projection, after the heads' outputs are in `ys`
/// (`values` of them, the workgroup's heads side by side): this
/// workgroup's part, `wo[:, h0 * hd ..][.. values] . ys` for each of its
/// split's output columns, into its group of heads' plane of the
/// scratch; the last of the row's groups to finish a split adds the
/// planes of its columns in order to the residual.
pub(super) fn project(
    k: &mut Builder,
    (p, cols): (&Projection, &Columns),
    staged: Option<Staged>,
    (ys, values): (Value<View>, usize),
    (r, hg, h0, hd): (Value<Index>, Value<Index>, Value<Index>, usize),
    (t, wgs): (Value<Index>, Value<Index>),
) {
    k.barrier(Barrier::Workgroup);
    let c0 = k.index(0);
    let c8 = k.index(SPAN as u64);
    let hdc = k.index(hd as u64);
    let per_row = k.workgroup_count(Axis::X);
    let groups = k.div(per_row, cols.splits);
    // Staged: the rows of the split's columns alone, from workgroup
    // memory, by local column.
    let (weights, span0, first_word) = match &staged {
        Some(st) => (st.weights, c0, c0),
        None => {
            let column0 = k.mul(h0, hdc);
            (p.weights, k.div(column0, c8), p.ow)
        }
    };
    let row_plane = k.mul(r, groups);
    let plane = k.add(row_plane, hg);
    let plane_at = k.mul(plane, p.width);
    k.for_each(t, cols.count, wgs, |b, i| {
        let o = b.add(cols.start, i);
        let column = if staged.is_some() { i } else { o };
        let row = b.madd(column, weights.row_words, first_word);
        let (mut even, mut odd) = (b.float(0.0, F32), b.float(0.0, F32));
        for s in 0..values / SPAN {
            let ds = b.index(s as u64);
            let span = b.add(span0, ds);
            let ws = span_values(b, &weights, row, span);
            for (e, w) in ws.into_iter().enumerate() {
                let at = b.index((s * SPAN + e) as u64);
                let y = b.load(ys, &[at]);
                if e % 2 == 0 {
                    even = b.fmaf(w, y, even);
                } else {
                    odd = b.fmaf(w, y, odd);
                }
            }
        }
        let part = b.addf(even, odd);
        let at = b.add(plane_at, o);
        b.store(part, p.scratch, &[at]);
    });
    let lead = k.cmp(IntPredicate::Eq, t, c0);
    let tile = k.madd(r, cols.splits, cols.part);
    let last = last_split(k, p.counters, tile, groups, lead);
    k.if_(last, |b| {
        let first_plane = b.mul(row_plane, p.width);
        let finish = |b: &mut Builder, o: Value<Index>, residual: Value<Num>| {
            let within = b.add(first_plane, o);
            let sum = sum_planes(b, p.scratch, groups, p.width, within);
            let value = b.addf(residual, sum);
            let at = b.madd(r, p.width, o);
            let (hv, oh) = p.out;
            let hat = b.add(at, oh);
            b.store(value, hv, &[hat]);
        };
        match &staged {
            // One column a work item, its residual loaded at the start.
            Some(st) => {
                let inside = b.cmp(IntPredicate::Ult, t, cols.count);
                let o = b.add(cols.start, t);
                b.if_(inside, |b| finish(b, o, st.residual));
            }
            None => b.for_each(t, cols.count, wgs, |b, i| {
                let o = b.add(cols.start, i);
                let at = b.madd(r, p.width, o);
                let (rv, or) = p.residual;
                let rat = b.add(at, or);
                let residual = b.load(rv, &[rat]);
                finish(b, o, residual);
            }),
        }
    });
}

/// The staged projection's loads, held in registers through the
/// attention: this work item's weight words and its column's residual.
pub(super) struct StageLoads {
    words: Vec<Value<Num>>,
    residual: Value<Num>,
    view: Value<View>,
    /// Words staged in all, and each row's words.
    total: usize,
    row_words: usize,
    wg: usize,
    format: QuantFormat,
}

/// The staged projection as `project` reads it.
pub(super) struct Staged {
    weights: Weights,
    residual: Value<Num>,
}

/// Issues the loads of the staged projection of a workgroup of `wg` work
/// items taking `heads` heads of `hd` values from head `h0`: word
/// `i = t + j * wg` of the staged rows (`row_words` words of the split's output
/// column `i / row_words`, from the workgroup's first head's word
/// `h0 * head_words`) and the residual of the split's column `t` of row
/// `r`. Indices past the end are clamped (their words are loaded and
/// never stored or used).
pub(super) fn stage_loads(
    k: &mut Builder,
    (p, cols): (&Projection, &Columns),
    (hd, heads): (usize, usize),
    (columns, wg): (usize, usize),
    (t, r, h0): (Value<Index>, Value<Index>, Value<Index>),
) -> StageLoads {
    let format = p.weights.format;
    let row_words =
        head_row_words(format, hd, hd * heads).expect("`stages` admits heads that start on blocks");
    let head_words = format.row_words(hd).unwrap_or(0);
    let total = columns * row_words;
    let [last, rw, hw, c1] = [total - 1, row_words, head_words, 1].map(|v| k.index(v as u64));
    let head_at = k.madd(h0, hw, p.ow);
    let last_column = k.sub(p.width, c1);
    let words = (0..total.div_ceil(wg))
        .map(|j| {
            let offset = k.index((j * wg) as u64);
            let i = k.add(t, offset);
            let i = k.min(i, last);
            let local = k.div(i, rw);
            let column = k.add(cols.start, local);
            let column = k.min(column, last_column);
            let within = k.rem(i, rw);
            let row = k.madd(column, p.weights.row_words, head_at);
            let at = k.add(row, within);
            k.load(p.weights.view, &[at])
        })
        .collect();
    let column = k.add(cols.start, t);
    let column = k.min(column, last_column);
    let (rv, or) = p.residual;
    let at = k.madd(r, p.width, column);
    let at = k.add(at, or);
    let residual = k.load(rv, &[at]);
    let zero = k.offset(0);
    let bytes = k.offset(4 * total as u64);
    let buffer = k.alloca_workgroup(bytes, 16);
    let view = k.buffer_view(buffer, zero, [Extent::from(total)], Scalar::U32);
    StageLoads {
        words,
        residual,
        view,
        total,
        row_words,
        wg,
        format: p.weights.format,
    }
}

impl StageLoads {
    /// Stores the held words into workgroup memory (the projection's
    /// barrier follows before any is read).
    pub(super) fn store(self, k: &mut Builder, t: Value<Index>) -> Staged {
        let total = k.index(self.total as u64);
        for (j, &word) in self.words.iter().enumerate() {
            let offset = k.index((j * self.wg) as u64);
            let i = k.add(t, offset);
            let inside = k.cmp(IntPredicate::Ult, i, total);
            k.if_(inside, |b| b.store(word, self.view, &[i]));
        }
        Staged {
            weights: Weights {
                format: self.format,
                view: self.view,
                row_words: k.index(self.row_words as u64),
                tail: false,
            },
            residual: self.residual,
        }
    }
}

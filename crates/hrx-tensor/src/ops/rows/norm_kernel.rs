//! The subgroup-a-row norm kernel, built: layer or RMS norm (with the
//! fused add and the f16 copy of `norm4`, same arguments plus the row
//! count) of aligned contiguous rows of quads short enough that a
//! subgroup holds one in registers. Its embedding form normalises
//! `table[ids[r]] + positions[r % seq]` instead of a row of `a` (an
//! encoder's embeddings in one dispatch; an id outside the table adds a
//! row of zeros, as the gather does).
//!
//! Each subgroup takes one row and each lane `per_lane` of its quads
//! (quad `lane + i * sg`), read once: the mean and the mean square of
//! `x - mean` are two subgroup reductions over those registers (an exact
//! two-pass variance at no second read), and the output is written from
//! them. No workgroup memory and no barrier: a workgroup is only a batch
//! of `rows_per_wg` subgroups, so short rows (a 384-wide encoder's
//! residual norms) fill the device without the per-row workgroup's
//! barriers and idle work items.

use super::kernels::{Norm4Io, Residual};
use hrx_loom::build::{Built, KernelBuilder, Num, Value};
use hrx_loom::ir::{Axis, IntPredicate, ReduceOp, Scalar};

const F32: Scalar = Scalar::F32;

/// The most quads a lane holds: rows up to `16 * 4 * sg` elements.
pub(crate) const MAX_QUADS_PER_LANE: usize = 16;

/// Where a row's values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RowInput {
    /// Row `r` of `a`, plus row `r` of `c` with a `residual` (its sum
    /// stored to `sum` where kept).
    Rows { residual: Residual },
    /// Row `ids[r]` of the table `a` plus row `r % seq` of `positions`:
    /// after `norm4`'s arguments (and the copy's), `vocab, seq, sp4, qp,
    /// lp, qi, li` and the buffers `ids` (i32) and `positions`.
    Embedding,
}

impl RowInput {
    /// The kernel's entry point.
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            RowInput::Rows {
                residual: Residual::None,
            } => "norm4_rows",
            RowInput::Rows { .. } => "add_norm4_rows",
            RowInput::Embedding => "embedding_norm4_rows",
        }
    }
}

/// The kernel for subgroups of `sg` invocations, `rows_per_wg` rows a
/// workgroup, rows of at most `per_lane * sg` quads; `center` for layer
/// norm, `copy` as `norm4`'s, the output of `out` elements. Its last
/// argument is `rows`.
pub(crate) fn norm4_rows(
    sg: usize,
    rows_per_wg: usize,
    per_lane: usize,
    (input, center, copy): (RowInput, bool, bool),
    out: Scalar,
) -> Built {
    assert!(
        sg > 0 && rows_per_wg > 0 && (1..=MAX_QUADS_PER_LANE).contains(&per_lane),
        "{sg} lanes, {rows_per_wg} rows, {per_lane} quads a lane"
    );
    let residual = match input {
        RowInput::Rows { residual } => residual,
        RowInput::Embedding => Residual::None,
    };
    let symbol = input.symbol();
    let mut k = KernelBuilder::new(symbol);
    let rows = k.workload("rows");
    let one = k.index(1);
    let per_wg = k.index(rows_per_wg as u64);
    let spare = k.index(rows_per_wg as u64 - 1);
    let padded = k.add(rows, spare);
    let groups = k.div(padded, per_wg);
    let size = k.index((sg * rows_per_wg) as u64);
    let mut k = k.launch_config([groups, one, one], [size, one, one]);
    let io = Norm4Io::declare(&mut k, residual, (copy, out));
    let embedding = (input == RowInput::Embedding).then(|| {
        let [vocab, seq, sp4, qp, lp, qi, li] =
            ["vocab", "seq", "sp4", "qp", "lp", "qi", "li"].map(|n| k.arg_index(n));
        let [ids, positions] = ["ids", "positions"].map(|n| k.arg_buffer(n, false));
        let zero = k.offset(0);
        let idv = k.buffer_view(ids, zero, [li.into()], Scalar::I32);
        let pv = k.buffer_view(positions, zero, [lp.into()], F32);
        (vocab, seq, sp4, qp, qi, idv, pv)
    });
    let nrows = k.arg_index("rows");
    let [four, rpw] = [4, rows_per_wg as u64].map(|v| k.index(v));
    let wgid = k.workgroup_id(Axis::X);
    let sgid = k.subgroup_id();
    let lane = k.subgroup_lane_id();
    // Subgroup-uniform: every lane of a subgroup takes the same row.
    let r = k.madd(wgid, rpw, sgid);
    let inside = k.cmp(IntPredicate::Ult, r, nrows);
    k.if_(inside, |b| {
        let zf = b.float(0.0, F32);
        let zv = b.splat(zf, 4);
        // The row of `a` to read (its table row for an embedding), the
        // position row's base, and whether the row is in the table.
        let (abase, found) = match embedding {
            Some((vocab, seq, sp4, qp, qi, idv, _)) => {
                let pi = b.add(qi, r);
                let id = b.load(idv, &[pi]);
                let id = b.bitcast(id, Scalar::U32);
                let vocab = b.index_cast(vocab, Scalar::U32);
                let found = b.cmpi(IntPredicate::Ult, id, vocab);
                let none = b.int(0, Scalar::U32);
                let id = b.select(found, id, none);
                let row = b.to_index(id);
                let p = b.rem(r, seq);
                let pbase = b.madd(p, sp4, qp);
                (b.madd(row, io.srow4, io.qa), Some((found, pbase)))
            }
            None => (b.madd(r, io.srow4, io.qa), None),
        };
        let obase = b.madd(r, io.c4, io.qo);
        let added = io.added.map(|(cv, qc, kept)| {
            let cbase = b.madd(r, io.srow4, qc);
            (cv, cbase, kept.map(|(sv, qs)| (sv, b.madd(r, io.c4, qs))))
        });
        let copied = io.copied.map(|(kv, qk)| (kv, b.madd(r, io.c4, qk)));
        // Element index of quad `j` of a row based at quad `base`.
        let at = |b: &mut hrx_loom::build::Builder, base, j| {
            let t = b.add(base, j);
            b.mul(t, four)
        };
        // This lane's quads (zeros past the row), whether each is in it.
        let mut xs = Vec::with_capacity(per_lane);
        let mut present = Vec::with_capacity(per_lane);
        for i in 0..per_lane {
            let off = b.index((i * sg) as u64);
            let j = b.add(lane, off);
            let here = b.cmp(IntPredicate::Ult, j, io.c4);
            let x = b.if_else(
                here,
                |b| {
                    let x = match (embedding, found) {
                        // A table row only for an id in the table (an
                        // empty table reads nothing).
                        (Some((.., pv)), Some((found, pbase))) => {
                            let x = b.if_else(
                                found,
                                |b| {
                                    let pa = at(b, abase, j);
                                    vec![b.vector_load(io.av, &[pa], 4)]
                                },
                                |_| vec![zv],
                            )[0];
                            let pp = at(b, pbase, j);
                            let y = b.vector_load(pv, &[pp], 4);
                            b.addf(x, y)
                        }
                        _ => {
                            let pa = at(b, abase, j);
                            b.vector_load(io.av, &[pa], 4)
                        }
                    };
                    let x = match added {
                        Some((cv, cbase, kept)) => {
                            let pc = at(b, cbase, j);
                            let y = b.vector_load(cv, &[pc], 4);
                            let x = b.addf(x, y);
                            if let Some((sv, sbase)) = kept {
                                let ps = at(b, sbase, j);
                                b.vector_store(x, sv, &[ps]);
                            }
                            x
                        }
                        None => x,
                    };
                    vec![x]
                },
                |_| vec![zv],
            )[0];
            xs.push((j, x));
            present.push(here);
        }
        let c4u = b.index_cast(io.c4, Scalar::U32);
        let quads = b.uitofp(c4u, F32);
        let four_f = b.float(4.0, F32);
        let count = b.mulf(quads, four_f);
        // The row's total of a quad per lane: lanes summed, then the four.
        let row_sum = |b: &mut hrx_loom::build::Builder, part: Value<Num>| {
            let v = b.subgroup_reduce(ReduceOp::AddF, part);
            let lanes = [0, 1, 2, 3].map(|l| {
                let i = b.index(l);
                b.extract(v, i)
            });
            let s01 = b.addf(lanes[0], lanes[1]);
            let s23 = b.addf(lanes[2], lanes[3]);
            b.addf(s01, s23)
        };
        let mean = if center {
            let part = xs[1..].iter().fold(xs[0].1, |s, &(_, x)| b.addf(s, x));
            let total = row_sum(b, part);
            b.divf(total, count)
        } else {
            zf
        };
        let meanv = b.splat(mean, 4);
        let centred: Vec<Value<Num>> = xs
            .iter()
            .zip(&present)
            .map(|(&(_, x), &here)| {
                let d = b.subf(x, meanv);
                b.select(here, d, zv)
            })
            .collect();
        let part = centred[1..]
            .iter()
            .fold(b.mulf(centred[0], centred[0]), |s, &d| b.fmaf(d, d, s));
        let sq = row_sum(b, part);
        let var = b.divf(sq, count);
        let ve = b.addf(var, io.eps);
        let rstd = b.rsqrtf(ve);
        let rstdv = b.splat(rstd, 4);
        let affine = io.affine(b);
        for ((&(j, _), &d), &here) in xs.iter().zip(&centred).zip(&present) {
            b.if_(here, |b| {
                let y = b.mulf(d, rstdv);
                io.write_quad(b, affine, (j, y), obase, copied);
            });
        }
    });
    Built::kernel(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;

    /// Every form builds a kernel the verifier and naga accept, on a CPU
    /// and a GPU target.
    #[test]
    fn every_variant_compiles() {
        for (target, sg, rows) in [(Target::lavapipe(), 8, 2), (Target::hopper(), 32, 8)] {
            let compiler = hrx_loom::Compiler::for_target(None, &target).unwrap();
            for per_lane in [1, 3, MAX_QUADS_PER_LANE] {
                for bits in 0..16u8 {
                    let residual = match bits / 4 {
                        0 => Residual::None,
                        1 => Residual::Kept,
                        _ => Residual::Unkept,
                    };
                    let input = match bits / 4 {
                        3 => RowInput::Embedding,
                        _ => RowInput::Rows { residual },
                    };
                    let flags = (input, bits & 1 != 0, bits & 2 != 0);
                    // The f16 output only where there is no copy.
                    let out = match bits & 2 == 0 && bits & 1 == 0 {
                        true => Scalar::F16,
                        false => F32,
                    };
                    let built = norm4_rows(sg, rows, per_lane, flags, out);
                    let symbol = input.symbol();
                    compiler
                        .built(&built)
                        .and_then(|m| m.compile_uncached(&hrx_loom::Specialization::new(symbol)))
                        .unwrap_or_else(|e| panic!("{} {per_lane} {flags:?}: {e}", target.name));
                }
            }
        }
    }
}

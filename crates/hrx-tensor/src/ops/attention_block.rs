//! The attention half of a decoder block in one dispatch, for decode: the
//! RMS norm of the block's input, the query-key-value projection, RoPE,
//! the cache store, attention over the cache and the output projection
//! with the residual ([`Ops::record_attention_block`]).
//!
//! A decode step is bound by its dependent dispatches, not by its bytes,
//! and the projection that feeds an attention is one of them. A decode
//! row's attention needs of the projection only its own head's query and
//! its kv head's key and value, so a few workgroups per head compute
//! those rows, and the last of them to finish attends
//! (`attention_block_kernel`). The price: rows of one
//! sequence in one dispatch do not see each other's keys, so the operator
//! serves decode rows of distinct sequences (a prompt's rows take
//! [`Ops::record_rotary_attention_projected`] after a product that stores
//! the keys).

use super::attention::{AttentionOutput, Query, index};
use super::attention_block_kernel::QkvShape;
use super::attention_kernels::AttentionShape;
use super::operand::{Operand, check_inputs, disjoint, operand, quad_offset};
use super::quant_resident::{MAX_SPANS_PER_LANE, spans_per_lane};
use super::quant_spans::SPAN;
use super::{Ops, QuantMatrix, Rotary, RowNorm};
use crate::{DType, DeviceTensor};
use hrx_core::{Error, Result, Target};
use hrx_loom::ScalarValue;
use hrx_runtime::{BufferView, Graph, Runtime};

/// The start of an attention block: its input rows, their RMS norm and
/// the stacked query-key-value projection.
#[derive(Clone, Copy, Debug)]
pub struct AttentionInput<'a> {
    /// f32 `[rows, width]`, contiguous: the block's input, not normalised
    /// (the projection reads `rms_norm(x)`; x itself is not changed).
    pub x: &'a DeviceTensor,
    /// The norm of each row of x before the projection.
    pub norm: RowNorm<'a>,
    /// `[(heads + 2 * kv_heads) * head_dim, width]`: the queries' rows,
    /// then the keys', then the values'.
    pub weight: &'a QuantMatrix,
}

/// The most workgroups sharing a head group's projection rows.
const MAX_SPLITS: usize = 16;

/// The bound input: launch scalars and buffers after the projection's,
/// and the scratch elements and counters its split rows need after the
/// projection's.
pub(super) struct BoundInput {
    pub(super) scalars: Vec<ScalarValue>,
    pub(super) views: Vec<BufferView>,
    pub(super) scratch: usize,
    pub(super) counters: usize,
}

/// Check `input` against an attention of `rows` rows of `heads` query
/// heads over `kv_heads` (the caches' head size), whose output projection
/// is `width` wide, and bind it; sets `shape.qkv`. The caches (written)
/// must overlap neither each other nor the input nor `others`: the
/// attention's and the projection's other buffers.
#[allow(clippy::too_many_arguments)]
pub(super) fn bind_input(
    runtime: &Runtime,
    target: &Target,
    operation: &str,
    input: AttentionInput,
    shape: &mut AttentionShape,
    (rows, heads, kv_heads, width): (usize, usize, usize, usize),
    caches: [&Operand; 2],
    others: &[&BufferView],
) -> Result<BoundInput> {
    let AttentionInput { x, norm, weight } = input;
    check_inputs(runtime, operation, &[x, norm.weight, weight.words()])?;
    let hd = shape.hd;
    let contiguous_f32 = |t: &DeviceTensor, what: &str, want: &[usize]| {
        let d = t.desc();
        if d.dtype() != DType::F32 || d.shape() != want || !d.is_contiguous() {
            return Err(Error::Message(format!(
                "{operation}: {what} must be a contiguous f32 {want:?}, got {d}"
            )));
        }
        Ok(())
    };
    contiguous_f32(x, "x", &[rows, width])?;
    contiguous_f32(norm.weight, "the norm weight", &[width])?;
    if !norm.eps.is_finite() || norm.eps < 0.0 {
        return Err(Error::Message(format!(
            "{operation}: the norm's eps {} is not a finite non-negative number",
            norm.eps
        )));
    }
    let stacked = (heads + 2 * kv_heads) * hd;
    if weight.rows() != stacked || weight.cols() != width {
        return Err(Error::Message(format!(
            "{operation}: the query-key-value weight must be [{stacked}, {width}] \
             ({heads} query and 2 x {kv_heads} kv heads of {hd} over the output width), \
             not [{}, {}]",
            weight.rows(),
            weight.cols()
        )));
    }
    if !shape.rotary {
        return Err(Error::Message(format!(
            "{operation}: the projected form turns q and k by RoPE"
        )));
    }
    if !width.is_multiple_of(SPAN) {
        return Err(Error::Unsupported(format!(
            "{operation}: a width of {width} is not whole spans of {SPAN}"
        )));
    }
    let spl = spans_per_lane(width, target.subgroup_size_min as usize);
    if spl > MAX_SPANS_PER_LANE {
        return Err(Error::Unsupported(format!(
            "{operation}: rows of {width} do not fit a subgroup's registers"
        )));
    }
    // The stage's workgroup memory: the projected rows and the key.
    let extra = 4 * ((shape.heads + 2) * hd + hd);
    let subgroups = (shape.wg / shape.sg_min.max(1)).max(1);
    let memory = 4 * shape.heads * (hd + 2 * subgroups + subgroups * hd) + extra;
    if memory > target.workgroup_memory_bytes as usize {
        return Err(Error::Unsupported(format!(
            "{operation}: the projected form needs {memory} bytes of workgroup memory"
        )));
    }
    let (kx, kn, kw) = (
        operand(x, target, operation)?,
        operand(norm.weight, target, operation)?,
        operand(weight.words(), target, operation)?,
    );
    let inputs = [("x", &kx), ("the norm weight", &kn), ("the weight", &kw)];
    for (what, cache) in [("k_cache", caches[0]), ("v_cache", caches[1])] {
        for (other, o) in inputs {
            disjoint(operation, (what, cache), (other, o))?;
        }
        if others.iter().any(|o| cache.view.overlaps(o)) {
            return Err(Error::Message(format!(
                "{operation}: {what} must not overlap the other operands"
            )));
        }
    }
    disjoint(operation, ("k_cache", caches[0]), ("v_cache", caches[1]))?;
    // A head group's rows over enough workgroups for about one row a
    // subgroup.
    let stacked_rows = (shape.heads + 2) * hd;
    let splits = stacked_rows.div_ceil(subgroups).clamp(1, MAX_SPLITS);
    let groups = heads / shape.heads;
    if groups * splits > target.max_workgroup_count[0] as usize {
        return Err(Error::Unsupported(format!(
            "{operation}: {groups} head groups of {splits} workgroups exceed the device's grid"
        )));
    }
    shape.qkv = Some(QkvShape {
        format: weight.format(),
        spl,
        quads: quad_offset(&kx).is_some() && quad_offset(&kn).is_some(),
        splits,
    });
    let row_words = weight.format().row_words(width)?;
    Ok(BoundInput {
        scalars: vec![
            index(row_words),
            ScalarValue::Index(kw.offset),
            ScalarValue::Index(kx.offset),
            ScalarValue::Index(kn.offset),
            ScalarValue::F32(norm.eps),
        ],
        views: vec![kx.view, kn.view, kw.view],
        scratch: rows * groups * stacked_rows,
        counters: rows * groups,
    })
}

impl Ops {
    /// Record the attention half of a decoder block in one dispatch, for
    /// decode rows. For each active row `r` (slot `s = sequence[r]` and
    /// position `p = position[r]` in range):
    ///
    /// - `[q | k | v] = rms_norm(input.x[r]) . input.weight^T` (the norm
    ///   as [`QuantFusion::norm`](super::QuantFusion::norm) applies it);
    /// - k turned by RoPE at `p` and v stored at `[s, kv head, p, :]` of
    ///   the caches, as [`Ops::record_rope_kv_store`] would;
    /// - q turned and `out[r] =` its attention over the slot's cache
    ///   positions `0..p` and its own key and value (position `p`);
    /// - `projection.out[r] = projection.residual[r] + out[r] .
    ///   projection.weight^T`.
    ///
    /// The values of [`Ops::record_quant_matmul_fused`] with the norm and
    /// the cache store, then [`Ops::record_rotary_attention_projected`],
    /// up to rounding, for rows of distinct sequences: a row sees the
    /// cache as it was before the dispatch plus its own key and value, so
    /// rows of one sequence here do not see each other. An inactive row
    /// stores nothing and gives zeros (its projection: the residual).
    ///
    /// Shapes: `out: [rows, heads, head_dim]` (contiguous f32), caches
    /// `[slots, kv_heads, capacity, head_dim]` as for
    /// [`Ops::record_cached_attention`], `input.x`, the residual and
    /// `projection.out` `[rows, width]` with `width` the projection's
    /// rows, a multiple of 8; the caches overlap no other operand.
    /// `Error::Unsupported` where the device cannot run the fused form
    /// (no subgroup operations, rows too wide for a subgroup's registers,
    /// too little workgroup memory): record the separate operators then.
    #[allow(clippy::too_many_arguments)]
    pub fn record_attention_block(
        &self,
        graph: &mut Graph,
        input: AttentionInput,
        rotary: Rotary,
        [k_cache, v_cache, sequence, position]: [&DeviceTensor; 4],
        scale: f32,
        out: &DeviceTensor,
        projection: AttentionOutput,
    ) -> Result<()> {
        let operation = format!(
            "attention_block of {} over {}, by {} and {}",
            input.x.desc(),
            k_cache.desc(),
            input.weight.label(),
            projection.weight.label()
        );
        self.record_attention(
            graph,
            &operation,
            Query::Projected(input),
            Some(rotary),
            [k_cache, v_cache, sequence, position],
            scale,
            (out, Some(projection)),
        )
    }
}

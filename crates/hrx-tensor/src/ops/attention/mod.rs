//! The attention-side operators of a decoder engine: the key/value cache
//! store and causal attention over the cache, here; rotary position
//! embedding (`token::rope`) and the SwiGLU gate (`token::swiglu`) share this
//! module's conventions and checks.
//!
//! A token row is one token of one sequence. Every row carries its
//! sequence slot `sequence[r]` and its position `position[r]` (i32, one
//! each per row) as device data, so one prepared graph serves prefill
//! (many rows of one sequence at consecutive positions) and decode (one
//! row per active sequence) and is replayed with new data. A row whose
//! slot or position is out of range (negatives included) is inactive: it
//! writes nothing to a cache and its attention output is zeros (RoPE,
//! which reads no slot, copies a row at a negative position).
//!
//! The key/value cache of a layer is one contiguous tensor `[slots,
//! kv_heads, capacity, head_dim]`. The store declares the whole cache
//! written and attention declares it read, so a store then an attention
//! in one graph are ordered by the runtime's hazard tracking.
//!
//! Caches are f32, or f16 where the device has 16-bit storage and f16
//! arithmetic: half the memory and half the bytes each attention step
//! reads, each value rounded to nearest as it is stored and widened to
//! f32 as it is read; every product and softmax stays in f32.
//!
//! The attention's queries and output, and the rotated store's keys and
//! values, may be f16 too (f16 activations): widened as they are read,
//! rounded to nearest as they are written.
//!
//! Checks: f32 or f16 activations, caches of one element type, i32
//! contiguous `[rows]` slot and position tensors, matching head counts and
//! sizes, contiguous outputs (activations may be strided views, e.g.
//! slices of a fused projection); every failure names the operator and
//! the shapes before anything is recorded.

pub(super) mod encoder;
pub(super) mod encoder_coop;
pub(super) mod encoder_kernel;
pub(super) mod encoder_tiled;
pub(super) mod kernels;
mod projection;

use crate::ops::{
    Ops, QuantMatrix,
    operand::{
        Operand, check_inputs, check_output, float_out_dtype, float_output, operand, quad_offset,
    },
    registry::{Generator, KernelKey, KernelSource},
    token::rope::{Rotary, rotation},
};
use crate::{DType, DeviceTensor, TensorDesc};
use hrx_core::{DeviceKind, Error, Result, Target};
use hrx_loom::ScalarValue;
use hrx_loom::ir::Scalar;
use hrx_runtime::Graph;
use kernels::AttentionShape;

/// The largest head size the attention kernel is built for.
const MAX_HEAD_DIM: usize = 256;

/// Work items per attention workgroup on a GPU, by the number of
/// workgroups (rows x heads): a workgroup's subgroups split its positions
/// (chunks of 32), so few workgroups (batch-1 decode: 9) take 1024 work
/// items, 32 subgroups, and a 2k context is 2 chunks deep per subgroup;
/// many (batched decode, prefill) take 256 and fill the device with
/// workgroups instead. `(most workgroups, work items)`, first match. At
/// batch 1 the projected attention of SmolLM2's shapes at position 144
/// took 14.8-16.0 us a layer on an H200 with 1024 (2026-12-06,
/// `Tuning::attention_workgroup`), against 17.9 with 512, 20.2 with 256,
/// 23.9 with 128 and 34.2 with 64: its output projection then gives each
/// work item at most one of the 576 columns. (The projected attention
/// of so few workgroups now splits its projection instead:
/// `SPLIT_MOST_GROUPS`.)
const GPU_ATTENTION_WG: [(usize, usize); 3] = [(128, 1024), (512, 512), (usize::MAX, 256)];

/// On a GPU, the projected attention of a grid of at most
/// `SPLIT_MOST_GROUPS` groups of heads (a decode step of up to four
/// sequences of SmolLM2: 9 groups a sequence) splits each group's output
/// projection over workgroups of `SPLIT_WG` work items, about
/// `SPLIT_WORKGROUPS` in all; each attends the group's heads again (a
/// short chain beside the projection) and projects its share of the
/// columns. SmolLM2 at position 144 on an H100 (2026-12-06,
/// `Tuning::attention_splits` and `attention_workgroup`), the attention
/// a layer and the whole step: one sequence 14.5-14.7 us unsplit with
/// 1024 work items, 10.9 with 4 splits of 256, 10.3 with 3, 9.9 with 8
/// (the step 1,034-1,038 against 909-910 us), 11.9 with 2 of 512, 11.2
/// with 8 of 128; two sequences 14.6 unsplit (step 1,137 us), 13.8 with
/// 2 splits (1,110), 10.1 with 4 (1,009); four sequences 14.7 unsplit
/// (1,457), 16.9 unsplit with 256 work items (1,520), 13.9 with 2 splits
/// (1,424).
const SPLIT_MOST_GROUPS: usize = 36;
const SPLIT_WORKGROUPS: usize = 72;
const SPLIT_WG: usize = 256;

/// The built-in splits of the projected attention's groups of heads, and
/// the most work items of its workgroups, for `groups` groups of heads
/// on a device of `kind`.
fn projection_splits(kind: DeviceKind, groups: usize) -> (usize, usize) {
    if kind == DeviceKind::Cpu || groups > SPLIT_MOST_GROUPS {
        return (1, usize::MAX);
    }
    (SPLIT_WORKGROUPS.div_ceil(groups.max(1)), SPLIT_WG)
}

/// The most query heads one attention workgroup takes (those of one kv
/// head, reading each key and value row once for all): each adds its
/// score, softmax state and accumulators to every lane.
const MAX_SHARED_HEADS: usize = 4;

/// On a GPU, the fewest workgroups (rows x kv heads) for which a
/// workgroup takes all the query heads of its kv head; below, one head
/// per workgroup spreads the work over more of the device. Measured on an
/// H200 with SmolLM2's 9 query heads over 3: a 512-token prefill's
/// attention 48 against 79 us a layer, a 64-row decode batch 17 against
/// 19 us, but one row 17 against 11 us (3 workgroups instead of 9). A CPU
/// device always shares (fewer workgroups, fewer barrier switches).
const SHARED_HEADS_MIN_WORKGROUPS: usize = 128;

/// Work items per attention workgroup on a CPU device, where every
/// barrier switches all of a workgroup's coroutines (see rows.rs).
const CPU_ATTENTION_WG: usize = 16;

pub(super) fn index(v: usize) -> ScalarValue {
    ScalarValue::Index(v as u64)
}

/// Check that `t` is an f32 tensor of rank `rank`.
pub(super) fn f32_rank(operation: &str, what: &str, t: &DeviceTensor, rank: usize) -> Result<()> {
    if t.desc().dtype() != DType::F32 || t.desc().rank() != rank {
        return Err(Error::Message(format!(
            "{operation}: {what} {} must be an f32 tensor of rank {rank}",
            t.desc()
        )));
    }
    Ok(())
}

/// Check that `t` is an f32 or f16 tensor of rank `rank`: its element
/// type as a kernel reads it (f16 only on devices with f16 arithmetic and
/// 16-bit storage, else `Unsupported`).
pub(super) fn float_rank(
    operation: &str,
    what: &str,
    t: &DeviceTensor,
    rank: usize,
    target: &Target,
) -> Result<Scalar> {
    let dtype = t.desc().dtype();
    if !matches!(dtype, DType::F32 | DType::F16) || t.desc().rank() != rank {
        return Err(Error::Message(format!(
            "{operation}: {what} {} must be an f32 or f16 tensor of rank {rank}",
            t.desc()
        )));
    }
    float_output(target, dtype, operation)
}

/// Check a per-row i32 tensor (slots or positions) of shape `[rows]`.
pub(super) fn row_data(operation: &str, what: &str, t: &DeviceTensor, rows: usize) -> Result<()> {
    let desc = t.desc();
    if desc.dtype() != DType::I32 || desc.shape() != [rows] || !desc.is_contiguous() {
        return Err(Error::Message(format!(
            "{operation}: {what} {desc} must be a contiguous i32 tensor of shape [{rows}]"
        )));
    }
    Ok(())
}

/// Check a cache: contiguous f32 or f16 `[slots, kv_heads, capacity,
/// head_dim]` with the given head count and size. Returns (slots,
/// capacity).
pub(super) fn cache_shape(
    operation: &str,
    what: &str,
    cache: &DeviceTensor,
    kv_heads: usize,
    head_dim: usize,
) -> Result<(usize, usize)> {
    let desc = cache.desc();
    if !matches!(desc.dtype(), DType::F32 | DType::F16) || desc.rank() != 4 {
        return Err(Error::Message(format!(
            "{operation}: {what} {desc} must be an f32 or f16 tensor of rank 4"
        )));
    }
    let s = cache.desc().shape();
    if s[1] != kv_heads || s[3] != head_dim || !cache.desc().is_contiguous() {
        return Err(Error::Message(format!(
            "{operation}: {what} {} must be a contiguous [slots, {kv_heads}, capacity, {head_dim}]",
            cache.desc()
        )));
    }
    Ok((s[0], s[2]))
}

/// The element type of a layer's key and value caches, checked by
/// [`cache_shape`]: both f32, or both f16 where `target` stores and
/// converts 16-bit floats (kernels widen each cached value to f32 as
/// they read it and round to f16 as they store it).
pub(super) fn cache_element(
    operation: &str,
    target: &Target,
    k_cache: &DeviceTensor,
    v_cache: &DeviceTensor,
) -> Result<Scalar> {
    let (k, v) = (k_cache.desc().dtype(), v_cache.desc().dtype());
    if k != v {
        return Err(Error::Message(format!(
            "{operation}: k_cache {} and v_cache {} must share an element type",
            k_cache.desc(),
            v_cache.desc()
        )));
    }
    match k {
        DType::F16 if target.shader_f16 && target.storage_16bit => Ok(Scalar::F16),
        DType::F16 => Err(Error::Unsupported(format!(
            "{operation}: f16 caches need 16-bit storage and f16 arithmetic, which the device \
             lacks"
        ))),
        _ => Ok(Scalar::F32),
    }
}

/// Refuse an output that shares storage with an input.
pub(super) fn no_alias(operation: &str, out: &Operand, input: &Operand) -> Result<()> {
    if out.view.overlaps(&input.view) {
        return Err(Error::Message(format!(
            "{operation}: the output must not overlap the input"
        )));
    }
    Ok(())
}

/// The output projection fused into an attention dispatch
/// ([`Ops::record_rotary_attention_projected`]).
#[derive(Clone, Copy, Debug)]
pub struct AttentionOutput<'a> {
    /// `[width, heads * head_dim]`.
    pub weight: &'a QuantMatrix,
    /// f32 `[rows, width]`, contiguous.
    pub residual: &'a DeviceTensor,
    /// f32 `[rows, width]`, contiguous, overlapping no other operand.
    pub out: &'a DeviceTensor,
}

/// Workgroup memory of the cached attention for workgroups of `wg` work
/// items taking `heads` heads of `hd` values: q, and each subgroup's
/// maximum, sum and accumulators per head.
fn attention_memory(hd: usize, heads: usize, wg: usize, sg_min: usize) -> usize {
    let subgroups = (wg / sg_min).max(1);
    4 * heads * (hd + 2 * subgroups + subgroups * hd)
}

/// A bound projection: its launch scalars (after the attention's), its
/// buffers (weights, residual, output; the scratch and counters follow)
/// and its width.
struct BoundProjection {
    scalars: Vec<ScalarValue>,
    views: Vec<hrx_runtime::BufferView>,
    width: usize,
}

/// Check `p` against attention over `rows` rows of `columns` (heads
/// side by side) with heads of `hd`, and bind it; the output must not
/// overlap `others` (the attention's operands).
fn bind_projection(
    runtime: &hrx_runtime::Runtime,
    target: &hrx_core::Target,
    operation: &str,
    p: AttentionOutput,
    (rows, columns, hd): (usize, usize, usize),
    others: [&Operand; 6],
) -> Result<BoundProjection> {
    check_inputs(runtime, operation, &[p.weight.words(), p.residual])?;
    let width = p.weight.rows();
    if p.weight.cols() != columns || !hd.is_multiple_of(8) || width == 0 {
        return Err(Error::Message(format!(
            "{operation}: the projection must be [width, {columns}] over heads of a multiple \
             of 8, not [{width}, {}] over heads of {hd}",
            p.weight.cols()
        )));
    }
    let rd = p.residual.desc();
    if rd.dtype() != DType::F32 || rd.shape() != [rows, width] || !rd.is_contiguous() {
        return Err(Error::Message(format!(
            "{operation}: the residual {rd} must be a contiguous f32 [{rows}, {width}]"
        )));
    }
    check_output(runtime, operation, p.out, DType::F32, &[rows, width])?;
    let (kw, kr, kh) = (
        operand(p.weight.words(), target, operation)?,
        operand(p.residual, target, operation)?,
        operand(p.out, target, operation)?,
    );
    for input in others.into_iter().chain([&kw, &kr]) {
        no_alias(operation, &kh, input)?;
    }
    let row_words = p.weight.format().row_words(columns)?;
    Ok(BoundProjection {
        scalars: [index(width), index(row_words)]
            .into_iter()
            .chain(kw.scalars())
            .chain(kr.scalars())
            .chain(kh.scalars())
            .collect(),
        views: vec![kw.view, kr.view, kh.view],
        width,
    })
}

impl Ops {
    /// Record the key/value cache store: `cache[sequence[r], h,
    /// position[r], :] = new[r, h, :]` for every active row (`0 <=
    /// sequence < slots`, `0 <= position < capacity`); other rows write
    /// nothing. `new: [rows, kv_heads, head_dim]` f32 (may be strided),
    /// `sequence`, `position`: i32 `[rows]`, `cache`: contiguous f32 or
    /// f16 `[slots, kv_heads, capacity, head_dim]` (f16: each value
    /// rounded to nearest), declared written as a whole. Two active rows
    /// naming the same slot and position leave one of them.
    pub fn record_kv_store(
        &self,
        graph: &mut Graph,
        new: &DeviceTensor,
        sequence: &DeviceTensor,
        position: &DeviceTensor,
        cache: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("kv_store of {} into {}", new.desc(), cache.desc());
        let operation = operation.as_str();
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[new, sequence, position, cache])?;
        f32_rank(operation, "new", new, 3)?;
        let [rows, kvh, hd] = [0, 1, 2].map(|i| new.desc().shape()[i]);
        row_data(operation, "sequence", sequence, rows)?;
        row_data(operation, "position", position, rows)?;
        let (slots, cap) = cache_shape(operation, "cache", cache, kvh, hd)?;
        let target = self.registry.target()?;
        let element = cache_element(operation, &target, cache, cache)?;
        if new.desc().is_empty() || cache.desc().is_empty() {
            return Ok(());
        }
        let (kn, ks, kp, kc) = (
            operand(new, &target, operation)?,
            operand(sequence, &target, operation)?,
            operand(position, &target, operation)?,
            operand(cache, &target, operation)?,
        );
        no_alias(operation, &kc, &kn)?;
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("kv_store {element:?}"),
                move || crate::ops::token::kernels::kv_store(element),
            )),
            symbol: "kv_store",
            config: self.grid_config("kv_store.wg", "kv_store.max_groups")?,
        })?;
        let n = new.desc().elements();
        let s = new.desc().strides();
        let scalars: Vec<ScalarValue> = [n, kvh, hd, slots, cap, s[0], s[1], s[2]]
            .map(index)
            .into_iter()
            .chain(kn.scalars())
            .chain(ks.scalars())
            .chain(kp.scalars())
            .chain(kc.scalars())
            .collect();
        kernel.record(
            graph,
            operation,
            &[kn.view, ks.view, kp.view, kc.view],
            &scalars,
            &[n as u64],
        )
    }

    /// The key/value cache store (see [`Ops::record_kv_store`]), run
    /// eagerly: submitted after every operand's producer, and made the
    /// cache's producer.
    pub fn kv_store(
        &self,
        new: &DeviceTensor,
        sequence: &DeviceTensor,
        position: &DeviceTensor,
        cache: &mut DeviceTensor,
    ) -> Result<()> {
        let mut graph = self.runtime().graph();
        self.record_kv_store(&mut graph, new, sequence, position, cache)?;
        let dependencies: Vec<_> = [new, sequence, position, &*cache]
            .iter()
            .map(|t| t.completion().clone())
            .collect();
        let done = graph.prepare()?.submit_after(&dependencies)?;
        cache.set_producer(done);
        Ok(())
    }

    /// The attention kernel's shape for head size `hd`, `workgroups`
    /// (row, head) pairs, over these operands. The kernel shuffles weights
    /// across lanes; its workgroup memory grows with the subgroup count,
    /// so the workgroup shrinks until that fits.
    fn attention_shape(
        &self,
        hd: usize,
        (rows, heads, group): (usize, usize, usize),
        operands: &[&Operand],
        operation: &str,
    ) -> Result<AttentionShape> {
        let target = self.registry.target()?;
        if !(target.subgroup_ops.shuffle && target.subgroup_ops.arithmetic) {
            return Err(Error::Unsupported(format!(
                "{operation}: the device lacks subgroup shuffles or arithmetic"
            )));
        }
        let w = if hd.is_multiple_of(4) && operands.iter().all(|o| quad_offset(o).is_some()) {
            4
        } else {
            1
        };
        let cpu = target.kind == DeviceKind::Cpu;
        let shared = if group <= MAX_SHARED_HEADS
            && (cpu || rows * (heads / group) >= SHARED_HEADS_MIN_WORKGROUPS)
        {
            group
        } else {
            1
        };
        let workgroups = rows * heads / shared;
        let built_in = if cpu {
            CPU_ATTENTION_WG
        } else {
            GPU_ATTENTION_WG
                .iter()
                .find(|(most, _)| workgroups <= *most)
                .map_or(256, |&(_, wg)| wg)
        };
        let most =
            (target.max_workgroup_invocations as usize).min(target.max_workgroup_size[0] as usize);
        let base = self
            .tuning()
            .attention_workgroup
            .filter(|&wg| wg <= most)
            .unwrap_or(built_in);
        let sg_min = (target.subgroup_size_min as usize).max(1);
        let sg_max = (target.subgroup_size_max as usize).max(sg_min);
        // A power of two, so every subgroup is whole.
        let mut wg = base.max(sg_max).min(most);
        wg = 1 << wg.ilog2();
        let memory = |wg: usize| attention_memory(hd, shared, wg, sg_min);
        while wg > sg_max && memory(wg) > target.workgroup_memory_bytes as usize {
            wg /= 2;
        }
        if memory(wg) > target.workgroup_memory_bytes as usize {
            return Err(Error::Unsupported(format!(
                "{operation}: head_dim {hd} needs more workgroup memory than the device has"
            )));
        }
        Ok(AttentionShape {
            hd,
            w,
            wg,
            sg_min,
            sg_fixed: sg_max == sg_min,
            rotary: false,
            heads: shared,
            project: None,
            staged: None,
            splits: 1,
            cache: Scalar::F32,
            q: Scalar::F32,
            out: Scalar::F32,
        })
    }

    /// Record causal attention over the cache: for row `r` and query head
    /// `h` (kv head `g = h / (heads / kv_heads)`), `out[r, h, :] =
    /// sum_{p=0..=position[r]} softmax_p(scale * q[r, h, :] . K[s, g, p,
    /// :]) V[s, g, p, :]` with `s = sequence[r]`; an inactive row (slot or
    /// position out of range) gives zeros. `q: [rows, heads, head_dim]` f32
    /// (may be strided), `k_cache`, `v_cache`: contiguous `[slots,
    /// kv_heads, capacity, head_dim]`, both f32 or both f16 (each value
    /// widened to f32 as it is read), `heads` a multiple of `kv_heads`,
    /// `head_dim <= 256`; `sequence`, `position`: i32 `[rows]`; `out`:
    /// contiguous, `q`'s shape, f32 or f16 (the f32 result rounded to
    /// nearest; on devices with f16 arithmetic and 16-bit storage, else
    /// `Unsupported`). One workgroup per (row, head); see
    /// `kernels` for the online softmax.
    #[allow(clippy::too_many_arguments)]
    pub fn record_cached_attention(
        &self,
        graph: &mut Graph,
        q: &DeviceTensor,
        k_cache: &DeviceTensor,
        v_cache: &DeviceTensor,
        sequence: &DeviceTensor,
        position: &DeviceTensor,
        scale: f32,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("cached_attention of {} over {}", q.desc(), k_cache.desc());
        self.record_attention(
            graph,
            &operation,
            q,
            None,
            [k_cache, v_cache, sequence, position],
            scale,
            (out, None),
        )
    }

    /// Record [`Ops::record_cached_attention`] of `q` turned by rotary
    /// position embedding at each row's position, as [`Ops::record_rope`]
    /// turns it (the same bits), in the attention's one dispatch: a decode
    /// step's query rotation costs no dispatch of its own. The keys in the
    /// cache are expected already turned (see
    /// [`Ops::record_rope_kv_store`]). Arguments and checks as for
    /// `record_cached_attention`, and `rotary` as for `record_rope`.
    #[allow(clippy::too_many_arguments)]
    pub fn record_rotary_attention(
        &self,
        graph: &mut Graph,
        q: &DeviceTensor,
        rotary: Rotary,
        k_cache: &DeviceTensor,
        v_cache: &DeviceTensor,
        sequence: &DeviceTensor,
        position: &DeviceTensor,
        scale: f32,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!("rotary_attention of {} over {}", q.desc(), k_cache.desc());
        self.record_attention(
            graph,
            &operation,
            q,
            Some(rotary),
            [k_cache, v_cache, sequence, position],
            scale,
            (out, None),
        )
    }

    /// Record [`Ops::record_rotary_attention`] and the attention's output
    /// projection in the same dispatch: besides `out`, `projection.out =
    /// projection.residual + out . projection.weight^T` (each row's heads
    /// side by side, `[rows, heads * head_dim]`, by a `[width, heads *
    /// head_dim]` matrix), the values of [`Ops::record_quant_matmul_fused`]
    /// with the residual, up to rounding. Each workgroup projects its own
    /// heads into a plane of partial sums; the last of a row to finish adds
    /// them in order to the residual. `residual` and `projection.out`:
    /// contiguous f32 `[rows, width]`, the output overlapping no other
    /// operand; `head_dim` a multiple of 8.
    #[allow(clippy::too_many_arguments)]
    pub fn record_rotary_attention_projected(
        &self,
        graph: &mut Graph,
        q: &DeviceTensor,
        rotary: Rotary,
        [k_cache, v_cache, sequence, position]: [&DeviceTensor; 4],
        scale: f32,
        out: &DeviceTensor,
        projection: AttentionOutput,
    ) -> Result<()> {
        let operation = format!(
            "rotary_attention of {} over {}, projected by {}",
            q.desc(),
            k_cache.desc(),
            projection.weight.label()
        );
        self.record_attention(
            graph,
            &operation,
            q,
            Some(rotary),
            [k_cache, v_cache, sequence, position],
            scale,
            (out, Some(projection)),
        )
    }

    /// Cached attention, with q turned on load where `rotary` is given:
    /// the checks and the recording.
    #[allow(clippy::too_many_arguments)]
    fn record_attention(
        &self,
        graph: &mut Graph,
        operation: &str,
        q: &DeviceTensor,
        rotary: Option<Rotary>,
        [k_cache, v_cache, sequence, position]: [&DeviceTensor; 4],
        scale: f32,
        (out, projection): (&DeviceTensor, Option<AttentionOutput>),
    ) -> Result<()> {
        let runtime = self.runtime();
        check_inputs(
            runtime,
            operation,
            &[q, k_cache, v_cache, sequence, position],
        )?;
        let target = self.registry.target()?;
        let q_element = float_rank(operation, "q", q, 3, &target)?;
        if k_cache.desc().rank() != 4 {
            return Err(Error::Message(format!(
                "{operation}: k_cache {} must be a tensor of rank 4",
                k_cache.desc()
            )));
        }
        let [rows, heads, hd] = [0, 1, 2].map(|i| q.desc().shape()[i]);
        let turn = rotary
            .map(|r| Ok::<_, Error>((r.dims, rotation(operation, r.dims, r.base, hd)?)))
            .transpose()?;
        let kvh = k_cache.desc().shape()[1];
        let (slots, cap) = cache_shape(operation, "k_cache", k_cache, kvh, hd)?;
        if v_cache.desc().shape() != k_cache.desc().shape() {
            return Err(Error::Message(format!(
                "{operation}: v_cache {} must have the shape of k_cache",
                v_cache.desc()
            )));
        }
        cache_shape(operation, "v_cache", v_cache, kvh, hd)?;
        if kvh == 0 || !heads.is_multiple_of(kvh) {
            return Err(Error::Message(format!(
                "{operation}: {heads} query heads are not a multiple of {kvh} kv heads"
            )));
        }
        if hd > MAX_HEAD_DIM {
            return Err(Error::Unsupported(format!(
                "{operation}: head_dim {hd} is over {MAX_HEAD_DIM}"
            )));
        }
        row_data(operation, "sequence", sequence, rows)?;
        row_data(operation, "position", position, rows)?;
        if !scale.is_finite() {
            return Err(Error::Message(format!(
                "{operation}: scale {scale} must be finite"
            )));
        }
        let out_dtype = float_out_dtype(out);
        check_output(runtime, operation, out, out_dtype, q.desc().shape())?;
        let out_element = float_output(&target, out_dtype, operation)?;
        let element = cache_element(operation, &target, k_cache, v_cache)?;
        if out.desc().is_empty() {
            return Ok(());
        }
        let grid = target.max_workgroup_count;
        if heads > grid[0] as usize || rows > grid[1] as usize {
            return Err(Error::Unsupported(format!(
                "{operation}: {rows} rows x {heads} heads exceed the device's grid {grid:?}"
            )));
        }
        // Empty caches (no slot or no position): every row is inactive,
        // the kernel reads nothing and writes zeros.
        let cache_operand = |c: &DeviceTensor| -> Result<Operand> {
            if c.desc().is_empty() {
                let view = self.registry.zeros()?;
                return Ok(Operand {
                    view,
                    offset: 0,
                    len: 4,
                });
            }
            operand(c, &target, operation)
        };
        let (slots, cap) = if k_cache.desc().is_empty() {
            (0, 0)
        } else {
            (slots, cap)
        };
        let (kq, kk, kv, ks, kp, ko) = (
            operand(q, &target, operation)?,
            cache_operand(k_cache)?,
            cache_operand(v_cache)?,
            operand(sequence, &target, operation)?,
            operand(position, &target, operation)?,
            operand(out, &target, operation)?,
        );
        for input in [&kq, &kk, &kv, &ks, &kp] {
            no_alias(operation, &ko, input)?;
        }
        let mut shape = self.attention_shape(hd, (rows, heads, heads / kvh), &[&kk], operation)?;
        shape.rotary = turn.is_some();
        shape.cache = element;
        shape.q = q_element;
        shape.out = out_element;
        let projected = projection
            .map(|p| {
                let inputs = [&kq, &kk, &kv, &ks, &kp, &ko];
                bind_projection(
                    runtime,
                    &target,
                    operation,
                    p,
                    (rows, heads * hd, hd),
                    inputs,
                )
            })
            .transpose()?;
        shape.project = projection.map(|p| p.weight.format());
        if let Some(p) = &projected {
            let per_row = heads / shape.heads;
            let tuning = self.tuning();
            let (splits, wg) = projection_splits(target.kind, rows * per_row);
            // Grid x holds a row's groups of heads times the splits.
            shape.splits = tuning
                .attention_splits
                .unwrap_or(splits)
                .min(grid[0] as usize / per_row)
                .clamp(1, p.width);
            if tuning.attention_workgroup.is_none() {
                shape.wg = shape.wg.min(wg);
            }
        }
        // The projection's weights staged under the attention where they
        // are few and the workgroup memory holds them beside its own.
        shape.staged = shape
            .project
            .zip(projected.as_ref())
            .map(|(format, p)| (format, p.width.div_ceil(shape.splits)))
            .filter(|&(format, columns)| {
                projection::stages(format, (hd, shape.heads), columns, shape.wg)
            })
            .map(|(_, columns)| columns)
            .filter(|_| self.tuning().stage_projection != Some(false));
        let memory = attention_memory(hd, shape.heads, shape.wg, shape.sg_min)
            + projection::staged_bytes(&shape);
        if memory > target.workgroup_memory_bytes as usize {
            shape.staged = None;
        }
        let kernel = self.registry.kernel(KernelKey {
            source: KernelSource::Built(Generator::new(
                format!("cached_attention {shape:?}"),
                move || kernels::cached_attention(shape),
            )),
            symbol: "cached_attention",
            config: Vec::new(),
        })?;
        let s = q.desc().strides();
        let scalars: Vec<ScalarValue> = [heads, heads / kvh, kvh, slots, cap]
            .map(index)
            .into_iter()
            .chain([ScalarValue::F32(scale)])
            .chain(
                turn.into_iter()
                    .flat_map(|(dims, c)| [index(dims), ScalarValue::F32(c)]),
            )
            .chain([s[0], s[1], s[2]].map(index))
            .chain(kq.scalars())
            .chain(kk.scalars())
            .chain(kv.scalars())
            .chain(ko.scalars())
            .chain(ks.scalars())
            .chain(kp.scalars())
            .chain(projected.iter().flat_map(|p| p.scalars.clone()))
            .collect();
        let mut views = vec![kq.view, kk.view, kv.view, ks.view, kp.view, ko.view];
        let grid = [heads as u64, rows as u64];
        let Some(p) = projected else {
            return kernel.record(graph, operation, &views, &scalars, &grid);
        };
        let launch = kernel.launch(operation, &scalars, &grid)?;
        // Graph storage is taken only now, when nothing else can fail; each
        // row's last workgroup leaves its counter at zero.
        let planes = rows * (heads / shape.heads) * p.width;
        views.extend(p.views);
        views.push(graph.scratch(4 * planes)?);
        views.push(graph.zeroed_scratch(4 * rows * shape.splits)?);
        launch.record(graph, &views)
    }

    /// Causal attention over the cache (see
    /// [`Ops::record_cached_attention`]), run eagerly.
    pub fn cached_attention(
        &self,
        q: &DeviceTensor,
        k_cache: &DeviceTensor,
        v_cache: &DeviceTensor,
        sequence: &DeviceTensor,
        position: &DeviceTensor,
        scale: f32,
    ) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(DType::F32, q.desc().shape().to_vec())?;
        self.eager(
            &[q, k_cache, v_cache, sequence, position],
            desc,
            |g, out| {
                self.record_cached_attention(g, q, k_cache, v_cache, sequence, position, scale, out)
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decode steps of one, two and four sequences of SmolLM2 (9 groups
    /// of heads a sequence) split into 8, 4 and 2 workgroups a group of
    /// 256 work items on a GPU, as measured; larger grids and CPU devices
    /// keep one workgroup a group.
    #[test]
    fn small_projected_grids_split_on_a_gpu() {
        assert_eq!(projection_splits(DeviceKind::Discrete, 9), (8, 256));
        assert_eq!(projection_splits(DeviceKind::Discrete, 18), (4, 256));
        assert_eq!(projection_splits(DeviceKind::Discrete, 36), (2, 256));
        assert_eq!(projection_splits(DeviceKind::Discrete, 1), (72, 256));
        assert_eq!(projection_splits(DeviceKind::Discrete, 37).0, 1);
        assert_eq!(projection_splits(DeviceKind::Discrete, 576).0, 1);
        assert_eq!(projection_splits(DeviceKind::Cpu, 9).0, 1);
    }
}

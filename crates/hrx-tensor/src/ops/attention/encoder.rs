//! Bidirectional self-attention of an encoder layer in one dispatch
//! ([`Ops::record_encoder_attention`]; the kernel in
//! `encoder_kernel.rs`).
//!
//! As separate operators, an encoder's attention is a packing copy of q, k
//! and v by head, the batched `q k^T`, the masked softmax, the batched
//! `p v` and a copy back to rows by position: seven dispatches, and
//! scores and probabilities of `[batch, heads, seq, seq]` written and read
//! back. Here the stacked query-key-value projection goes in, the
//! per-position contexts come out, and the scores never leave registers
//! (or, with f16 projections on tensor cores, `encoder_coop.rs`, and
//! with short sequences or small batches on a GPU, the tiled kernel of
//! `encoder_tiled.rs`, workgroup memory).

use super::encoder_coop::{self, CoopAttention};
use super::encoder_kernel::{self, OnlineShape};
use super::encoder_tiled::{self, TiledAttention};
use crate::ops::{
    Ops,
    operand::{check_inputs, disjoint, float_output, operand, quad_offset},
    registry::{Generator, KernelKey, KernelSource},
};
use crate::{DType, DeviceTensor};
use hrx_core::{DeviceKind, Error, Result};
use hrx_loom::ScalarValue;
use hrx_loom::build::{Body, Buffer, Index, KernelBuilder, Num, Value};
use hrx_loom::ir::Scalar;
use hrx_runtime::Graph;

/// A kernel body as [`encoder_launch`] declares it, with its arguments:
/// the indices `[seq, row, width, qa, la, qb, lb, qo, lo]` (positions per
/// sentence; elements of a projection row, three widths, and of a width;
/// the element offset of the queries and the projection's length, the
/// bias's offset and length, the output's offset and length), the score
/// scale, and the buffers `[qkv, bias, out]`.
pub(super) type EncoderLaunch = (Body, [Value<Index>; 9], Value<Num>, [Value<Buffer>; 3]);

/// The launch every encoder attention kernel declares, in the order
/// [`Ops::record_encoder_attention`] records it: kernel `name` of
/// workgroups of `work_items`, over a grid of (query blocks, heads,
/// sentences).
pub(super) fn encoder_launch(name: &str, work_items: usize) -> EncoderLaunch {
    let mut k = KernelBuilder::new(name);
    let [blocks, heads, batch] = ["blocks", "heads", "batch"].map(|n| k.workload(n));
    let (one, size) = (k.index(1), k.index(work_items as u64));
    let mut k = k.launch_config([blocks, heads, batch], [size, one, one]);
    let indices =
        ["seq", "row", "width", "qa", "la", "qb", "lb", "qo", "lo"].map(|n| k.arg_index(n));
    let scale = k.arg_scalar("scale", Scalar::F32);
    let buffers = ["qkv", "bias", "out"].map(|n| k.arg_buffer(n, false));
    (k, indices, scale, buffers)
}

/// The largest head the kernel keeps in registers (a query and its
/// output accumulator, `head / 4` four-wide vectors each).
pub const ENCODER_ATTENTION_MAX_HEAD: usize = 128;

/// Workgroup memory for a block's keys and values on a GPU: 128 queries
/// (and keys) a block with heads of 32, 32 with heads of 128. On a CPU
/// device, where llvmpipe runs a workgroup's invocations as coroutines
/// switching at every barrier, blocks of 16.
const GPU_BLOCK_BYTES: usize = 32 << 10;
const GPU_BLOCK: (usize, usize) = (32, 128);
const CPU_BLOCK: usize = 16;
/// On a GPU the tiled kernel runs wherever it takes at most this much
/// workgroup memory: MiniLM's heads of 32 up to 64 keys, where an H100
/// ran its attention 1.3 to 2.5 times as fast as the online-softmax
/// kernel at every batch from 1 to 1024 (the kernels' device time,
/// 2026-12-06) ...
const TILED_ALWAYS_BYTES: usize = 24 << 10;
/// ... and, taking more, wherever the online-softmax kernel would launch
/// fewer workgroups than this: it then leaves multiprocessors idle while
/// the tiled kernel splits each head's queries four ways. With 128 keys
/// the tiled kernel ran 2.7 times as fast at one sequence (12
/// workgroups), 1.1 at 24 (288), the same at 32 (384) and 0.85 at 64
/// (768).
const TILED_BELOW_WORKGROUPS: usize = 384;
/// Heads up to which a work item takes two queries: each key and
/// value read from workgroup memory then feeds both, and the two queries'
/// registers (2 x 2 x head values) still fit. On a GPU these heads are
/// also split over two lanes: each lane holds half of its two queries'
/// values, so a key or value quad it reads feeds the same multiply-adds
/// with half the registers and twice the work items a block. MiniLM's f32
/// attention at 1,024 x 128 (heads of 32) on an H100 took 9.63 ms a batch
/// unsplit with four-lane partial dot products, 8.30 split with scalar
/// ones (2026-12-06).
const TWO_QUERIES_MAX_HEAD: usize = 32;

/// Whether the tiled kernel of `shape` is the built-in choice: on a GPU,
/// off tensor cores, where it is small or the online-softmax kernel would
/// launch few workgroups (`online_workgroups`).
fn tiled_built_in(gpu: bool, coop: bool, shape: &TiledAttention, online_workgroups: usize) -> bool {
    let small = shape.workgroup_bytes() <= TILED_ALWAYS_BYTES;
    gpu && !coop && (small || online_workgroups < TILED_BELOW_WORKGROUPS)
}

/// Whether `target` runs the online-softmax kernel with a head of `head`
/// values split over `split` lanes in workgroups of `wg`: `split` divides
/// the head's quads, subgroups shuffle and hold `split` lanes, and the
/// workgroup is whole subgroups of any size the device may pick.
fn split_fits(target: &hrx_core::Target, head: usize, split: usize, wg: usize) -> bool {
    split == 1
        || (head.is_multiple_of(4 * split)
            && target.subgroup_ops.shuffle
            && split <= target.subgroup_size_min as usize
            && wg.is_multiple_of(target.subgroup_size_max.max(1) as usize))
}

/// The lanes the built-in online-softmax kernel splits a head over for
/// `wg` work items unsplit (at most `most` a workgroup): two on a GPU for
/// heads up to [`TWO_QUERIES_MAX_HEAD`] values where the split fits
/// ([`split_fits`]); one otherwise.
fn built_in_split(target: &hrx_core::Target, head: usize, wg: usize, most: usize) -> usize {
    let split = target.kind != DeviceKind::Cpu
        && head <= TWO_QUERIES_MAX_HEAD
        && 2 * wg <= most
        && split_fits(target, head, 2, 2 * wg);
    if split { 2 } else { 1 }
}

impl Ops {
    /// Record an encoder's multi-head self-attention:
    /// `out[b, i, h, :] = sum_j softmax_j(scale q[b, i, h] . k[b, j, h] +
    /// bias[b, j]) v[b, j, h]`, every query over every key of its
    /// sequence (no causal mask; a padding mask goes in `bias`, e.g.
    /// -10000 on padded keys).
    ///
    /// `qkv` is the stacked projection `[batch, seq, 3 * width]` (queries,
    /// then keys, then values, each `heads` heads of `width / heads`
    /// values), contiguous, f32 or f16; `bias` f32 `[batch, seq]`; `out`
    /// `[batch, seq, width]`, contiguous, f32 or f16 (f16 in or out where
    /// the device has f16 arithmetic and 16-bit storage; rounded from
    /// f32). Scores, softmax and sums are f32. With an f16 `qkv` on a
    /// device with tensor cores (16x16x16 f16 cooperative matrices,
    /// subgroups of 32), heads and sequences multiples of 16 whose scores
    /// fit workgroup memory (heads of 32 up to 256 positions), the
    /// products run on tensor cores, the probabilities rounded to f16.
    /// The head size must be a multiple of 4 and at most
    /// [`ENCODER_ATTENTION_MAX_HEAD`], every tensor 16-byte aligned, `out`
    /// apart from the inputs (`Unsupported` otherwise, nothing recorded).
    ///
    /// ```
    /// use hrx_tensor::{DType, DeviceTensor, Ops, TensorDesc};
    /// let runtime = hrx_runtime::Runtime::new()?;
    /// let ops = Ops::new(&runtime);
    /// // One sequence of two tokens, one head of 4: the second key masked,
    /// // so both queries take the first value (1, 2, 3, 4).
    /// let mut qkv = vec![0.0; 2 * 12];
    /// qkv[8..12].copy_from_slice(&[1., 2., 3., 4.]);
    /// qkv[20..24].copy_from_slice(&[5., 6., 7., 8.]);
    /// let qkv = DeviceTensor::from_values(&runtime, DType::F32, vec![1, 2, 12], &qkv)?;
    /// let bias = DeviceTensor::from_values(&runtime, DType::F32, vec![1, 2], &[0., -1e4])?;
    /// let mut out = ops.output(TensorDesc::new(DType::F32, vec![1, 2, 4])?)?;
    /// let mut graph = runtime.graph();
    /// ops.record_encoder_attention(&mut graph, &qkv, &bias, 1, 1.0, &out)?;
    /// let inputs = [&qkv, &bias].map(|t| t.completion().clone());
    /// out.set_producer(graph.prepare()?.submit_after(&inputs)?);
    /// assert_eq!(out.to_values()?, [1., 2., 3., 4., 1., 2., 3., 4.]);
    /// # Ok::<(), hrx_tensor::Error>(())
    /// ```
    pub fn record_encoder_attention(
        &self,
        graph: &mut Graph,
        qkv: &DeviceTensor,
        bias: &DeviceTensor,
        heads: usize,
        scale: f32,
        out: &DeviceTensor,
    ) -> Result<()> {
        let operation = format!(
            "encoder attention of {} with bias {} over {heads} heads",
            qkv.desc(),
            bias.desc()
        );
        let operation = operation.as_str();
        let refuse = |why: String| Err(Error::Unsupported(format!("{operation}: {why}")));
        let wrong = |why: String| Err(Error::Message(format!("{operation}: {why}")));
        let runtime = self.runtime();
        check_inputs(runtime, operation, &[qkv, bias])?;
        out.check_runtime(runtime, operation)?;
        let &[batch, seq, stacked] = qkv.desc().shape() else {
            return wrong("qkv must be [batch, seq, 3 * width]".into());
        };
        if !matches!(qkv.desc().dtype(), DType::F32 | DType::F16) {
            return refuse(format!(
                "qkv must be f32 or f16, not {}",
                qkv.desc().dtype()
            ));
        }
        if bias.desc().dtype() != DType::F32 {
            return refuse("the bias must be f32".into());
        }
        if heads == 0 || !stacked.is_multiple_of(3 * heads) {
            return wrong(format!(
                "the last axis ({stacked}) must hold queries, keys and values of {heads} heads"
            ));
        }
        let width = stacked / 3;
        let head = width / heads;
        if bias.desc().shape() != [batch, seq] {
            return wrong(format!("the bias must have shape [{batch}, {seq}]"));
        }
        if !scale.is_finite() {
            return wrong(format!("scale {scale} must be finite"));
        }
        let target = self.registry.target()?;
        let input = float_output(&target, qkv.desc().dtype(), operation)?;
        let narrow = float_output(&target, out.desc().dtype(), operation)?;
        if out.desc().shape() != [batch, seq, width] || !out.desc().is_contiguous() {
            return wrong(format!(
                "the output {} must be a contiguous [{batch}, {seq}, {width}]",
                out.desc()
            ));
        }
        if out.desc().is_empty() {
            return Ok(());
        }
        if !head.is_multiple_of(4) || head > ENCODER_ATTENTION_MAX_HEAD {
            return refuse(format!(
                "heads of {head} values (a multiple of 4 up to {ENCODER_ATTENTION_MAX_HEAD} runs)"
            ));
        }
        if !(qkv.desc().is_contiguous() && bias.desc().is_contiguous()) {
            return refuse("qkv and the bias must be contiguous".into());
        }
        let (kq, kb, ko) = (
            operand(qkv, &target, operation)?,
            operand(bias, &target, operation)?,
            operand(out, &target, operation)?,
        );
        let (Some(qq), Some(qo)) = (quad_offset(&kq), quad_offset(&ko)) else {
            return refuse("qkv or the output does not start 16-byte aligned".into());
        };
        // f16 inputs on tensor cores, where the shape fits (fragments are
        // read from 16-byte boundaries: eight halves).
        let coop = CoopAttention::for_input(&target, input, head, seq)
            .filter(|_| kq.offset.is_multiple_of(8));
        let block = match target.kind {
            DeviceKind::Cpu => CPU_BLOCK,
            _ => (GPU_BLOCK_BYTES / (8 * head)).clamp(GPU_BLOCK.0, GPU_BLOCK.1),
        };
        let per_item = if head <= TWO_QUERIES_MAX_HEAD { 2 } else { 1 };
        let most =
            (target.max_workgroup_invocations as usize).min(target.max_workgroup_size[0] as usize);
        // Whole groups of four keys (Vulkan guarantees 128 invocations).
        let wg = (block / per_item).min(most);
        let wg = wg - wg % 4;
        let split = built_in_split(&target, head, wg, most);
        let built_in = OnlineShape {
            dh: head,
            wg: wg * split,
            per_item,
            split,
        };
        // A tuning's block where its workgroup and its keys, values and
        // biases in workgroup memory fit, and its split divides the head
        // and the device's subgroups, and its work items whole subgroups.
        let online = self
            .tuning()
            .encoder_block
            .map(|b| OnlineShape {
                dh: head,
                wg: b.keys() / b.per_item() * b.split(),
                per_item: b.per_item(),
                split: b.split(),
            })
            .filter(|s| {
                let bytes = 4 * s.block() * (2 * head + 1);
                s.wg <= most
                    && bytes <= target.workgroup_memory_bytes as usize
                    && split_fits(&target, head, s.split, s.wg)
            })
            .unwrap_or(built_in);
        let block = online.block();
        // The tiled kernel where its scores fit: off tensor cores on a GPU
        // where it is small or the online-softmax kernel's grid is (see
        // the constants); where a tuning asks for it, on any device and
        // before tensor cores.
        let online_workgroups = seq.div_ceil(block) * heads * batch;
        let tiled = TiledAttention::new(
            head,
            seq,
            input,
            narrow,
            target.workgroup_memory_bytes as usize,
        )
        .filter(|shape| {
            let gpu = target.kind != DeviceKind::Cpu;
            let built_in = tiled_built_in(gpu, coop.is_some(), shape, online_workgroups);
            self.tuning().encoder_tiles.unwrap_or(built_in)
        });
        let coop = coop.filter(|_| tiled.is_none());
        let blocks = match (coop, tiled) {
            (Some(shape), _) => seq / (16 * shape.subgroups),
            (None, Some(_)) => seq.div_ceil(encoder_tiled::QUERIES),
            (None, None) => seq.div_ceil(block),
        };
        let fits = |n: usize, axis: usize| n as u64 <= u64::from(target.max_workgroup_count[axis]);
        if !(fits(blocks, 0) && fits(heads, 1) && fits(batch, 2)) {
            return refuse("more workgroups than the device launches".into());
        }
        disjoint(operation, ("out", &ko), ("qkv", &kq))?;
        disjoint(operation, ("out", &ko), ("the bias", &kb))?;
        let kernel = self.registry.kernel(match (coop, tiled) {
            (Some(shape), _) => KernelKey {
                source: KernelSource::Built(Generator::new(
                    format!("encoder_attention_coop {shape:?} {narrow:?}"),
                    move || encoder_coop::encoder_attention_coop(shape, narrow),
                )),
                symbol: "encoder_attention_coop",
                config: Vec::new(),
            },
            (None, Some(shape)) => KernelKey {
                source: KernelSource::Built(Generator::new(
                    format!("encoder_attention_tiled {shape:?}"),
                    move || encoder_tiled::encoder_attention_tiled(shape),
                )),
                symbol: "encoder_attention_tiled",
                config: Vec::new(),
            },
            (None, None) => KernelKey {
                source: KernelSource::Built(Generator::new(
                    format!("encoder_attention {online:?} {input:?} {narrow:?}"),
                    move || encoder_kernel::encoder_attention(online, input, narrow),
                )),
                symbol: "encoder_attention",
                config: Vec::new(),
            },
        })?;
        let scalars: Vec<ScalarValue> = [
            seq as u64,
            stacked as u64,
            width as u64,
            qq * 4,
            kq.len,
            kb.offset,
            kb.len,
            qo * 4,
            ko.len,
        ]
        .map(ScalarValue::Index)
        .into_iter()
        .chain([ScalarValue::F32(scale)])
        .collect();
        kernel.record(
            graph,
            operation,
            &[kq.view, kb.view, ko.view],
            &scalars,
            &[blocks as u64, heads as u64, batch as u64],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_core::Target;
    use hrx_loom::ir::Scalar;

    /// MiniLM's heads of 32 split over two lanes on a GPU (128 work items
    /// for a block of 128 queries); heads over 32 values or not a
    /// multiple of 8, CPU devices and devices without shuffles do not.
    #[test]
    fn heads_of_up_to_32_split_on_a_gpu() {
        let gpu = Target::hopper();
        assert_eq!(built_in_split(&gpu, 32, 64, 1024), 2);
        assert_eq!(built_in_split(&gpu, 16, 64, 1024), 2);
        assert_eq!(built_in_split(&gpu, 64, 32, 1024), 1);
        assert_eq!(built_in_split(&gpu, 12, 64, 1024), 1);
        assert_eq!(built_in_split(&gpu, 32, 64, 64), 1);
        assert_eq!(built_in_split(&gpu, 32, 8, 1024), 1, "half a subgroup");
        let no_shuffle = Target {
            subgroup_ops: hrx_core::SubgroupOps {
                shuffle: false,
                ..gpu.subgroup_ops
            },
            ..gpu.clone()
        };
        assert_eq!(built_in_split(&no_shuffle, 32, 64, 1024), 1);
        assert_eq!(built_in_split(&Target::lavapipe(), 32, 16, 1024), 1);
    }

    /// MiniLM's shapes on an H200's workgroup memory: the tiled kernel up
    /// to 64 tokens at any batch, at 128 tokens below 32 sentences (12
    /// heads, one online-softmax block each), never with tensor cores or
    /// on a CPU device.
    #[test]
    fn the_tiled_kernel_is_built_in_where_it_was_measured_faster() {
        let memory = Target::hopper().workgroup_memory_bytes as usize;
        let shape = |seq| TiledAttention::new(32, seq, Scalar::F32, Scalar::F32, memory).unwrap();
        let online = |batch: usize| 12 * batch;
        for seq in [16, 32, 64] {
            assert!(
                tiled_built_in(true, false, &shape(seq), online(1024)),
                "{seq}"
            );
        }
        assert!(tiled_built_in(true, false, &shape(128), online(1)));
        assert!(tiled_built_in(true, false, &shape(128), online(31)));
        assert!(!tiled_built_in(true, false, &shape(128), online(32)));
        assert!(!tiled_built_in(true, false, &shape(128), online(1024)));
        assert!(!tiled_built_in(true, true, &shape(64), online(1)));
        assert!(!tiled_built_in(false, false, &shape(64), online(1)));
    }
}

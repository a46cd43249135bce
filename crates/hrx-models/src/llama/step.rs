//! One forward step over a fixed number of token rows, recorded once into
//! a prepared graph and replayed with new data.
//!
//! A row is one token of one sequence: its id, its sequence's cache slot
//! and its position are device data, so the same graph serves a prompt's
//! rows (prefill: consecutive positions of one sequence), one row per
//! running sequence (decode), or any mixture. Rows with slot -1 are
//! inactive: they write no cache entry and their results are unused.
//! Within a step every row's key and value are stored before any row
//! attends, so a prompt's rows see each other causally.
//!
//! Dependent dispatches bound a decode step, so a layer takes few. Up to
//! `QUANT_GATED_MAX_ROWS` rows: the query-key-value projection (which
//! RMS-normalises its input as it reads it, and stores the keys, turned
//! by RoPE, and the values into the caches), the attention (which turns
//! the queries as it reads them, and projects its output, adding the
//! residual, in the same dispatch), the gate-and-up projection with its
//! norm and SwiGLU, and the down projection with the second residual:
//! four a layer. Above, the tiled products fuse nothing: the key rotation
//! with the cache store, each residual add with the next norm, and the
//! SwiGLU are dispatches of their own (nine a layer). The head (final
//! norm, the picked rows, the vocabulary projection and the argmax) is
//! one dispatch for up to `QUANT_LOGITS_MAX_PICKS` picks, four beyond.
//!
//! Inputs (host-visible, written before each replay): `tokens`,
//! `sequence`, `position` (i32 `[rows]`) and `picks` (i32 `[outputs]`:
//! the rows whose next token is wanted). Outputs: `next` (i32
//! `[outputs]`, host-visible: the argmax of each pick's logits, so a greedy
//! step reads back 4 bytes a sequence) and `logits` (f32
//! `[outputs, vocab]`, device-local).
//!
//! A step with sampled picks runs a second prepared graph after it: the
//! top-k of each pick's logits with the softmax denominator at the pick's
//! temperature ([`CANDIDATES`] values, ids and one sum a pick, host
//! visible). A draw needs the whole row of logits only where it reaches
//! past the candidates; the top-k is kept out of the step graph so that
//! greedy steps do not pay for it.

use super::sampling::Candidates;
use super::weights::{Block, LlamaWeights, Stacked};
use crate::gguf::LlamaConfig;
use hrx_core::{Error, Result};
use hrx_inference::ModelContext;
use hrx_runtime::{Completion, ExecutableGraph, Graph, MemoryPlacement};
use hrx_tensor::ops::{
    AttentionOutput, KvStore, QUANT_GATED_MAX_ROWS, QUANT_LOGITS_MAX_PICKS, QuantFusion, Rotary,
    RowNorm,
};
use hrx_tensor::{DType, DeviceTensor, TensorDesc};

/// The key and value caches of every layer: `[slots, kv_heads, capacity,
/// head_dim]` each, of the options' [`CacheFormat`](super::CacheFormat).
pub(crate) struct KvCache {
    pub keys: Vec<DeviceTensor>,
    pub values: Vec<DeviceTensor>,
}

impl KvCache {
    /// A slot per sequence of `options`, each holding its context.
    pub fn new(
        context: &ModelContext,
        config: &LlamaConfig,
        options: &super::GeneratorOptions,
    ) -> Result<Self> {
        let (slots, capacity) = (options.sequences, options.context);
        let shape = vec![slots, config.kv_heads, capacity, config.head_dim];
        let dtype = options.cache.dtype();
        let layer = || context.allocate(TensorDesc::new(dtype, shape.clone())?);
        let keys = (0..config.layers).map(|_| layer()).collect::<Result<_>>()?;
        let values = (0..config.layers).map(|_| layer()).collect::<Result<_>>()?;
        Ok(KvCache { keys, values })
    }

    /// Device bytes of both caches.
    pub fn bytes(&self) -> usize {
        self.keys
            .iter()
            .chain(&self.values)
            .map(|t| t.desc().bytes())
            .sum()
    }
}

/// The top-k a sampled pick reads back: enough that a draw at usual
/// settings (top-k 40-50, or a nucleus at 0.9-0.95 of a peaked
/// distribution) seldom reaches past it.
pub(crate) const CANDIDATES: usize = 64;

/// One row of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    pub token: u32,
    pub slot: usize,
    pub position: usize,
}

/// A prepared step for `rows` token rows and `outputs` picked rows.
pub(crate) struct StepGraph {
    pub rows: usize,
    pub outputs: usize,
    /// Device bytes of the step's activations and logits.
    pub activation_bytes: usize,
    tokens: DeviceTensor,
    sequence: DeviceTensor,
    position: DeviceTensor,
    picks: DeviceTensor,
    next: DeviceTensor,
    logits: DeviceTensor,
    graph: Option<ExecutableGraph>,
    /// The sampling candidates' graph; `None` on a device without the
    /// top-k kernel (subgroup arithmetic), where draws read the logits.
    candidates: Option<CandidateGraph>,
    context: ModelContext,
}

/// The top-k of a step's logits with each row's softmax denominator.
struct CandidateGraph {
    /// f32 `[outputs]`, host-visible: each pick's temperature (1 for
    /// greedy picks, whose candidates are not read).
    temperature: DeviceTensor,
    /// f32 `[outputs, k]`, i32 `[outputs, k]`, f32 `[outputs]`, all
    /// host-visible.
    values: DeviceTensor,
    indices: DeviceTensor,
    mass: DeviceTensor,
    graph: ExecutableGraph,
}

impl CandidateGraph {
    /// The prepared top-k of `logits` (`[outputs, vocab]`), or `None`
    /// where the device has no top-k kernel.
    fn new(context: &ModelContext, logits: &DeviceTensor) -> Result<Option<Self>> {
        let [outputs, vocab] = [0, 1].map(|i| logits.desc().shape()[i]);
        let k = CANDIDATES.min(vocab);
        let host = |shape: Vec<usize>, dtype: DType| {
            context.allocate_with(TensorDesc::new(dtype, shape)?, MemoryPlacement::HostVisible)
        };
        let temperature = host(vec![outputs], DType::F32)?;
        let values = host(vec![outputs, k], DType::F32)?;
        let indices = host(vec![outputs, k], DType::I32)?;
        let mass = host(vec![outputs], DType::F32)?;
        let mut g = context.runtime().graph();
        match context
            .ops()
            .record_top_k(&mut g, logits, &temperature, &values, &indices, &mass)
        {
            Err(Error::Unsupported(_)) => return Ok(None),
            other => other?,
        }
        Ok(Some(CandidateGraph {
            temperature,
            values,
            indices,
            mass,
            graph: g.prepare()?,
        }))
    }
}

/// The per-step intermediates.
struct Scratch {
    x: DeviceTensor,
    h: DeviceTensor,
    norm: DeviceTensor,
    /// Query, key and value by row: stacked `[rows, width + 2 kv]`, or one
    /// tensor each.
    qkv: Outputs,
    attended: DeviceTensor,
    proj: DeviceTensor,
    /// Gate and up by row, stacked or each.
    gate_up: Outputs,
    act: DeviceTensor,
    /// The picked rows, normalised.
    picked: DeviceTensor,
}

impl Scratch {
    /// Device bytes of every intermediate.
    fn bytes(&self) -> usize {
        let rows: usize = [
            &self.x,
            &self.h,
            &self.norm,
            &self.attended,
            &self.proj,
            &self.act,
            &self.picked,
        ]
        .into_iter()
        .map(|t| t.desc().bytes())
        .sum();
        rows + self.qkv.bytes() + self.gate_up.bytes()
    }
}

impl StepGraph {
    /// Records the forward pass of `rows` rows, `outputs` of them picked
    /// for the output projection, without preparing it; the activations
    /// between its kernels of `activations` (f32 or f16).
    pub fn record(
        context: &ModelContext,
        (config, weights, cache): (&LlamaConfig, &LlamaWeights, &KvCache),
        (rows, outputs): (usize, usize),
        activations: DType,
    ) -> Result<(Graph, Self)> {
        let c = config;
        let ops = context.ops();
        let host = |shape: Vec<usize>, dtype: DType| {
            context.allocate_with(TensorDesc::new(dtype, shape)?, MemoryPlacement::HostVisible)
        };
        let tokens = host(vec![rows], DType::I32)?;
        let sequence = host(vec![rows], DType::I32)?;
        let position = host(vec![rows], DType::I32)?;
        let picks = host(vec![outputs], DType::I32)?;
        let next = host(vec![outputs], DType::I32)?;
        let logits = context.allocate(TensorDesc::new(DType::F32, vec![outputs, c.vocab_size])?)?;
        let f32s = |shape: Vec<usize>| context.allocate(TensorDesc::new(DType::F32, shape)?);
        let read = |shape: Vec<usize>| context.allocate(TensorDesc::new(activations, shape)?);
        let (w, kv, ffn) = (c.width, c.kv_heads * c.head_dim, c.ffn_width);
        let qkv_matrices = weights.blocks.iter().map(|b| &b.qkv);
        // A decode-sized step gates a stacked gate-and-up product in its
        // dispatch (no output of its own).
        let gate_up_matrices = weights
            .blocks
            .iter()
            .map(|b| &b.gate_up)
            .filter(|m| rows > QUANT_GATED_MAX_ROWS || !matches!(m, Stacked::One(_)));
        let s = Scratch {
            x: f32s(vec![rows, w])?,
            h: f32s(vec![rows, w])?,
            norm: read(vec![rows, w])?,
            qkv: Outputs::new(context, (rows, &[w, kv, kv]), activations, qkv_matrices)?,
            attended: read(vec![rows, c.heads, c.head_dim])?,
            proj: f32s(vec![rows, w])?,
            gate_up: Outputs::new(context, (rows, &[ffn, ffn]), activations, gate_up_matrices)?,
            act: read(vec![rows, c.ffn_width])?,
            picked: read(vec![outputs, w])?,
        };
        let activation_bytes = s.bytes() + logits.desc().bytes();
        let eps = c.rms_eps as f32;
        let rotary = Rotary {
            dims: c.rope_dims,
            base: c.rope_base as f32,
        };
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        let heads = |t: &DeviceTensor, n: usize| split_heads(t, rows, n, c.head_dim);
        // A decode-sized step folds each RMS norm into the product that
        // reads it and each residual add into the product before it (four
        // dispatches a layer); larger steps record them as their own
        // dispatches, `s.norm` holding each product's normalised input.
        let fused = rows <= QUANT_GATED_MAX_ROWS;
        let normed = |weight| QuantFusion {
            norm: Some(RowNorm { weight, eps }),
            ..QuantFusion::default()
        };
        let plus = |residual| QuantFusion {
            residual: Some(residual),
            ..QuantFusion::default()
        };
        let unfused = QuantFusion::default();
        let mut g = context.runtime().graph();
        ops.record_quant_gather(&mut g, &weights.embedding, &tokens, &s.x)?;
        if !fused {
            let first_norm = &weights.blocks[0].attn_norm;
            ops.record_rms_norm(&mut g, &s.x, Some(first_norm), None, eps, &s.norm)?;
        }
        for (layer, b) in weights.blocks.iter().enumerate() {
            // `s.x` holds this layer's input. A decode-sized stacked
            // projection also stores the keys (turned) and values.
            let (keys, values) = (&cache.keys[layer], &cache.values[layer]);
            let stored = fused && matches!(b.qkv, Stacked::One(_));
            let (input, fusion) = match fused {
                true => (&s.x, normed(&b.attn_norm)),
                false => (&s.norm, unfused),
            };
            let fusion = QuantFusion {
                kv_store: stored.then_some(KvStore {
                    query_width: w,
                    sequence: &sequence,
                    position: &position,
                    rotary,
                    k_cache: keys,
                    v_cache: values,
                }),
                ..fusion
            };
            let [q, k, v] = &s.qkv.project(ops, &mut g, input, &b.qkv, &fusion)?[..] else {
                return Err(Error::Message(
                    "query, key and value are three projections".into(),
                ));
            };
            let (q, k, v) = (
                heads(q, c.heads)?,
                heads(k, c.kv_heads)?,
                heads(v, c.kv_heads)?,
            );
            if !stored {
                ops.record_rope_kv_store(
                    &mut g,
                    &k,
                    &v,
                    &sequence,
                    &position,
                    rotary.dims,
                    rotary.base,
                    keys,
                    values,
                )?;
            }
            // q turns as the attention reads it; at decode sizes the
            // output projection (with the residual: h = x + attention)
            // rides in the attention's dispatch.
            let cache = [keys, values, &sequence, &position];
            let projected = match fused {
                true => {
                    let projection = AttentionOutput {
                        weight: &b.output,
                        residual: &s.x,
                        out: &s.h,
                    };
                    let attended = &s.attended;
                    ops.record_rotary_attention_projected(
                        &mut g, &q, rotary, cache, scale, attended, projection,
                    )
                }
                false => Err(Error::Unsupported("a projection of many rows".into())),
            };
            if let Err(Error::Unsupported(_)) = projected {
                ops.record_rotary_attention(
                    &mut g,
                    &q,
                    rotary,
                    keys,
                    values,
                    &sequence,
                    &position,
                    scale,
                    &s.attended,
                )?;
                let attended = s.attended.reshape(vec![rows, w])?;
                // h = x + attention (and norm = rms_norm(h) unfused).
                if fused {
                    let plus = plus(&s.x);
                    ops.record_quant_matmul_fused(&mut g, &attended, &b.output, &plus, &s.h)?;
                } else {
                    ops.record_quant_matmul(&mut g, &attended, &b.output, &s.proj)?;
                    let norm = &b.ffn_norm;
                    ops.record_add_rms_norm(&mut g, &s.x, &s.proj, norm, eps, Some(&s.h), &s.norm)?;
                }
            } else {
                projected?;
            }
            // x = h + feed-forward (and, unfused, normalised for the next
            // layer or the output).
            let next_norm = weights
                .blocks
                .get(layer + 1)
                .map_or(&weights.output_norm, |next| &next.attn_norm);
            feed_forward(ops, &mut g, &s, b, fused, (eps, next_norm))?;
        }
        // The head: the picked rows, normalised by the output norm,
        // projected onto the vocabulary, and their argmax. A few picks
        // take one dispatch; more (or a device without the kernel) take
        // four.
        let output_norm = RowNorm {
            weight: &weights.output_norm,
            eps,
        };
        let head = match fused && outputs <= QUANT_LOGITS_MAX_PICKS {
            true => ops.record_quant_logits(
                &mut g,
                &s.x,
                &picks,
                output_norm,
                &weights.output,
                &logits,
                &next,
            ),
            false => Err(Error::Unsupported("four dispatches".into())),
        };
        match head {
            Err(Error::Unsupported(_)) => {
                if fused {
                    let weight = Some(output_norm.weight);
                    ops.record_rms_norm(&mut g, &s.x, weight, None, eps, &s.norm)?;
                }
                ops.record_gather(&mut g, &s.norm, &picks, &s.picked)?;
                ops.record_quant_matmul(&mut g, &s.picked, &weights.output, &logits)?;
                ops.record_argmax(&mut g, &logits, &next)?;
            }
            other => other?,
        }
        Ok((
            g,
            StepGraph {
                rows,
                outputs,
                activation_bytes,
                tokens,
                sequence,
                position,
                picks,
                next,
                logits,
                graph: None,
                candidates: None,
                context: context.clone(),
            },
        ))
    }

    /// Records and prepares the step, with the sampling candidates' graph
    /// where `options` samples on the device (and the device has the
    /// top-k kernel).
    pub fn new(
        context: &ModelContext,
        model: (&LlamaConfig, &LlamaWeights, &KvCache),
        rows: usize,
        outputs: usize,
        options: &super::GeneratorOptions,
    ) -> Result<Self> {
        let activations = options.activations.dtype();
        let (graph, mut step) = Self::record(context, model, (rows, outputs), activations)?;
        step.graph = Some(graph.prepare()?);
        if options.sample_on_device {
            step.candidates = CandidateGraph::new(context, &step.logits)?;
        }
        Ok(step)
    }

    /// Writes the inputs of `rows` and `picks` (see [`submit`](Self::submit)).
    pub fn write_inputs(&self, rows: &[Row], picks: &[usize]) -> Result<()> {
        if rows.len() > self.rows || picks.len() > self.outputs {
            return Err(Error::Message(format!(
                "a step of {} rows and {} picks exceeds its graph ({} rows, {} picks)",
                rows.len(),
                picks.len(),
                self.rows,
                self.outputs
            )));
        }
        let column = |f: &dyn Fn(&Row) -> i32, inactive: i32| -> Vec<i32> {
            (0..self.rows)
                .map(|i| rows.get(i).map_or(inactive, f))
                .collect()
        };
        write_i32(&self.tokens, &column(&|r| r.token as i32, 0))?;
        write_i32(&self.sequence, &column(&|r| r.slot as i32, -1))?;
        write_i32(&self.position, &column(&|r| r.position as i32, -1))?;
        let picked: Vec<i32> = (0..self.outputs)
            .map(|i| picks.get(i).map_or(0, |&p| p as i32))
            .collect();
        write_i32(&self.picks, &picked)
    }

    /// Writes `rows` (at most [`rows`](Self::rows); the rest inactive) and
    /// `picks` (indices into `rows`, at most [`outputs`](Self::outputs);
    /// the rest repeat row 0) and submits the step after `after`.
    pub fn submit(
        &self,
        rows: &[Row],
        picks: &[usize],
        after: &[Completion],
    ) -> Result<Completion> {
        let graph = self
            .graph
            .as_ref()
            .ok_or_else(|| Error::Message("the step graph was not prepared".into()))?;
        self.write_inputs(rows, picks)?;
        graph.submit_after(after)
    }

    /// The argmax token of each pick, after the step completed.
    pub fn read_next(&self, picks: usize) -> Result<Vec<u32>> {
        let view = self.next.binding().ok_or_else(empty)?;
        let bytes = view.map_read()?;
        Ok(bytes
            .chunks_exact(4)
            .take(picks)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
            .collect())
    }

    /// Submits the top-k of the picks' logits after `after` (the step),
    /// at `temperatures` (one a pick; 0 for greedy picks): `None` where
    /// the device has no top-k kernel.
    pub fn submit_candidates(
        &self,
        temperatures: &[f32],
        after: &Completion,
    ) -> Result<Option<Completion>> {
        let Some(c) = &self.candidates else {
            return Ok(None);
        };
        let view = c.temperature.binding().ok_or_else(empty)?;
        let mut bytes = view.map_write()?;
        for (n, chunk) in bytes.chunks_exact_mut(4).enumerate() {
            // Unread rows (greedy or unused) take 1: any positive value.
            let t = temperatures.get(n).copied().filter(|&t| t > 0.0);
            chunk.copy_from_slice(&t.unwrap_or(1.0).to_le_bytes());
        }
        drop(bytes);
        c.graph.submit_after(std::slice::from_ref(after)).map(Some)
    }

    /// The candidates of pick `index` after [`submit_candidates`]'s
    /// submission completed (`None` without a top-k kernel).
    ///
    /// [`submit_candidates`]: Self::submit_candidates
    pub fn read_candidates(&self, index: usize) -> Result<Option<Candidates>> {
        let Some(c) = &self.candidates else {
            return Ok(None);
        };
        let k = c.values.desc().shape()[1];
        let words = |t: &DeviceTensor, start: usize, len: usize| -> Result<Vec<[u8; 4]>> {
            let view = t.binding().ok_or_else(empty)?;
            let bytes = view.map_read()?;
            Ok(bytes
                .chunks_exact(4)
                .skip(start)
                .take(len)
                .map(|b| [b[0], b[1], b[2], b[3]])
                .collect())
        };
        let ids: Vec<i32> = words(&c.indices, index * k, k)?
            .into_iter()
            .map(i32::from_le_bytes)
            .collect();
        let logits = words(&c.values, index * k, k)?;
        let mass = words(&c.mass, index, 1)?;
        // Ids of -1 end the row's values above -inf.
        let n = ids.iter().take_while(|&&id| id >= 0).count();
        Ok(Some(Candidates {
            ids: ids[..n].iter().map(|&id| id as u32).collect(),
            logits: logits[..n].iter().map(|&b| f32::from_le_bytes(b)).collect(),
            mass: mass
                .first()
                .map_or(f64::NAN, |&b| f64::from(f32::from_le_bytes(b))),
            complete: n < k || k == self.logits.desc().shape()[1],
            row_len: self.logits.desc().shape()[1],
        }))
    }

    /// The logits of pick `index` of the step that `done` observes.
    pub fn read_logits(&self, index: usize, done: &Completion) -> Result<Vec<f32>> {
        let mut row = self.logits.slice(0, index..index + 1)?;
        row.set_producer(done.clone());
        let bytes = self.context.download(&row)?.wait()?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

/// A layer's feed-forward block as separate dispatches, `s.h` in, `s.x`
/// out: at decode sizes the gate (with its norm) and the down product
/// (with the residual); larger, the products, SwiGLU, and the residual
/// add with the next norm (`next_norm`) into `s.norm`.
fn feed_forward(
    ops: &hrx_tensor::Ops,
    g: &mut Graph,
    s: &Scratch,
    b: &Block,
    fused: bool,
    (eps, next_norm): (f32, &DeviceTensor),
) -> Result<()> {
    let (input, fusion) = match fused {
        true => {
            let norm = RowNorm {
                weight: &b.ffn_norm,
                eps,
            };
            let fusion = QuantFusion {
                norm: Some(norm),
                ..QuantFusion::default()
            };
            (&s.h, fusion)
        }
        false => (&s.norm, QuantFusion::default()),
    };
    match &b.gate_up {
        // The gate inside the projection's dispatch.
        Stacked::One(matrix) if fused => {
            ops.record_quant_swiglu_fused(g, input, matrix, &fusion, &s.act)?;
        }
        _ => {
            let [gate, up] = &s.gate_up.project(ops, g, input, &b.gate_up, &fusion)?[..] else {
                return Err(Error::Message("gate and up are two projections".into()));
            };
            ops.record_swiglu(g, gate, up, &s.act)?;
        }
    }
    if fused {
        let plus = QuantFusion {
            residual: Some(&s.h),
            ..QuantFusion::default()
        };
        ops.record_quant_matmul_fused(g, &s.act, &b.down, &plus, &s.x)
    } else {
        ops.record_quant_matmul(g, &s.act, &b.down, &s.proj)?;
        ops.record_add_rms_norm(g, &s.h, &s.proj, next_norm, eps, Some(&s.x), &s.norm)
    }
}

/// The outputs of projections that read the same input: one tensor of
/// their columns side by side for a stacked matrix, and one tensor each
/// for separate ones; each form allocated only where some layer has it.
struct Outputs {
    widths: Vec<usize>,
    stacked: Option<DeviceTensor>,
    each: Vec<DeviceTensor>,
}

impl Outputs {
    /// Outputs of `rows` rows of `widths` columns for the layers'
    /// `matrices`.
    fn new<'a>(
        context: &ModelContext,
        (rows, widths): (usize, &[usize]),
        dtype: DType,
        matrices: impl Iterator<Item = &'a Stacked> + Clone,
    ) -> Result<Self> {
        let tensor = |shape: Vec<usize>| context.allocate(TensorDesc::new(dtype, shape)?);
        let mut kinds = matrices.map(|m| matches!(m, Stacked::One(_)));
        let stacked = match kinds.clone().any(|one| one) {
            true => Some(tensor(vec![rows, widths.iter().sum()])?),
            false => None,
        };
        let each = match kinds.any(|one| !one) {
            true => widths
                .iter()
                .map(|&w| tensor(vec![rows, w]))
                .collect::<Result<_>>()?,
            false => Vec::new(),
        };
        Ok(Outputs {
            widths: widths.to_vec(),
            stacked,
            each,
        })
    }

    /// Device bytes of the outputs.
    fn bytes(&self) -> usize {
        self.stacked
            .iter()
            .chain(&self.each)
            .map(|t| t.desc().bytes())
            .sum()
    }

    /// Records `matrices` applied to `x` with `fusion`; each projection's `[rows, width]`
    /// output (a column view of the stacked output, or its own tensor).
    fn project(
        &self,
        ops: &hrx_tensor::Ops,
        g: &mut Graph,
        x: &DeviceTensor,
        matrices: &Stacked,
        fusion: &QuantFusion,
    ) -> Result<Vec<DeviceTensor>> {
        match matrices {
            Stacked::One(matrix) => {
                let stacked = self.stacked.as_ref().ok_or_else(|| {
                    Error::Message("a stacked projection without its output".into())
                })?;
                ops.record_quant_matmul_fused(g, x, matrix, fusion, stacked)?;
                let (rows, dtype) = (stacked.desc().shape()[0], stacked.desc().dtype());
                let total: usize = self.widths.iter().sum();
                let mut start = 0;
                self.widths
                    .iter()
                    .map(|&width| {
                        let desc = TensorDesc::strided(dtype, vec![rows, width], vec![total, 1])?;
                        let view = stacked.view(start * dtype.bytes(), desc);
                        start += width;
                        view
                    })
                    .collect()
            }
            Stacked::Each(matrices) => {
                if self.each.len() != matrices.len() {
                    return Err(Error::Message(
                        "separate projections without their outputs".into(),
                    ));
                }
                for (matrix, out) in matrices.iter().zip(&self.each) {
                    ops.record_quant_matmul_fused(g, x, matrix, fusion, out)?;
                }
                Ok(self.each.clone())
            }
        }
    }
}

/// `t` (`[rows, heads * head_dim]`, possibly a column view) as
/// `[rows, heads, head_dim]`.
fn split_heads(
    t: &DeviceTensor,
    rows: usize,
    heads: usize,
    head_dim: usize,
) -> Result<DeviceTensor> {
    let row_stride = t.desc().strides()[0];
    let desc = TensorDesc::strided(
        t.desc().dtype(),
        vec![rows, heads, head_dim],
        vec![row_stride, head_dim, 1],
    )?;
    t.view(0, desc)
}

fn empty() -> Error {
    Error::Message("a step graph has an empty input".into())
}

fn write_i32(tensor: &DeviceTensor, values: &[i32]) -> Result<()> {
    let view = tensor.binding().ok_or_else(empty)?;
    let mut bytes = view.map_write()?;
    for (chunk, value) in bytes.chunks_exact_mut(4).zip(values) {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
    Ok(())
}

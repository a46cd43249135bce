//! The encoder's forward pass for one fixed shape (`batch` sentences of
//! `seq` tokens), recorded into one slot's graph.
//!
//! Inputs (the slot's fixed-address IO, in this order):
//! 0. `ids` i32 `[batch, seq]`: token ids, padding with any valid id;
//! 1. `bias` f32 `[batch, seq]`: 0 for a token, [`MASKED`] for padding,
//!    added to every attention score of that key position;
//! 2. `pool` f32 `[batch, seq]`: the pooling weights (`1/len` on the
//!    tokens for mean pooling, one-hot on `[CLS]` for CLS pooling, all
//!    zero for an unused row).
//!
//! Output: `embeddings` f32 `[batch, hidden]`.
//!
//! The embeddings (word row, position row, layer norm) are one dispatch
//! where the device runs `record_embedding_layer_norm`, else a gather, an
//! add and the norm.
//!
//! Intermediates are allocated once per slot and reused by every layer;
//! the graph derives the ordering between the layers' reads and writes.
//!
//! Attention is one dispatch (`record_encoder_attention`: the stacked
//! projection in, the contexts by position out) or separate operators
//! (q, k and v packed by head, the batched `q k^T`, the masked softmax,
//! `p v`, and the contexts copied back by position), as the encoder's
//! [`AttentionPath`] and the heads decide.

use super::{AttentionPath, BertConfig, BertEncoder, Pooling, Precision};
use hrx_core::{Error, Result};
use hrx_inference::SlotBuilder;
use hrx_tensor::{
    DType, DeviceTensor, Ops, TensorDesc,
    ops::{BinaryOp, EmbeddingNorm, MatmulOptions, UnaryOp},
};

/// The attention bias of a padding position: far below any real score,
/// yet finite in f16 and f32, so a row with no token stays finite.
pub const MASKED: f32 = -10_000.0;

/// The per-slot intermediates.
struct Scratch {
    /// Hidden states between layers, and after attention: `[rows, d]`.
    x: DeviceTensor,
    y: DeviceTensor,
    /// The embeddings' sum where they are not one dispatch: `[rows, d]`.
    /// (The layers' residual norms do not keep their sums.)
    sum: DeviceTensor,
    /// A projection's output: `[rows, d]`.
    proj: DeviceTensor,
    /// The stacked query-key-value projection `[rows, 3 d]`: in f16 where
    /// the matmuls are f16 and a kernel writes it (the tensor-core
    /// attention then reads it), otherwise f32; each allocated by its
    /// first use.
    qkv: Option<DeviceTensor>,
    qkv_low: Option<DeviceTensor>,
    /// The per-head path's intermediates, allocated by its first use, and
    /// the biased scores of its unfused softmax.
    by_head: Option<ByHead>,
    summed: Option<DeviceTensor>,
    /// The context by position, in the matmul precision: `[rows, d]`.
    packed: DeviceTensor,
    /// The f32 feed-forward activations `[rows, intermediate]`, allocated
    /// by their first use (in f16 only where the tensor-core kernel does
    /// not write `up_low` itself).
    up: Option<DeviceTensor>,
    /// `x`-shaped and `up`-shaped f16 operands when the matmuls are f16.
    x_low: Option<DeviceTensor>,
    /// Whether `x_low` holds `x` already (its norm wrote both).
    x_low_holds_x: bool,
    up_low: Option<DeviceTensor>,
}

/// What attention as separate operators needs (where the one-dispatch
/// kernel does not apply).
#[derive(Clone)]
struct ByHead {
    /// q, k and v by head, in the matmul precision: `[batch, heads, seq, dh]`.
    heads: [DeviceTensor; 3],
    scores: DeviceTensor,
    /// The attention probabilities, in the matmul precision.
    probs: DeviceTensor,
    context: DeviceTensor,
}

struct Recorder<'e, 's, 'a> {
    encoder: &'e BertEncoder,
    slot: &'s mut SlotBuilder<'a>,
    ops: &'a Ops,
    batch: usize,
    seq: usize,
    s: Scratch,
}

impl<'e> Recorder<'e, '_, '_> {
    fn weight(&self, name: &str) -> Result<&'e DeviceTensor> {
        let encoder: &'e BertEncoder = self.encoder;
        encoder.weights.get(name)
    }

    fn config(&self) -> &'e BertConfig {
        let encoder: &'e BertEncoder = self.encoder;
        &encoder.config
    }

    /// `a` as a matmul operand: itself in f32, cast into `low` in f16.
    fn operand<'t>(
        &mut self,
        a: &'t DeviceTensor,
        low: &'t Option<DeviceTensor>,
    ) -> Result<&'t DeviceTensor> {
        match low {
            None => Ok(a),
            Some(low) => {
                self.ops.record_cast(self.slot.graph(), a, low)?;
                Ok(low)
            }
        }
    }

    /// The feed-forward up projection with its activation, as the down
    /// projection's operand. In f16 the tensor-core kernel writes it in
    /// f16 itself; where another kernel runs (it refuses an f16 output)
    /// it goes through f32 and a cast.
    fn up_projection(
        &mut self,
        a: &DeviceTensor,
        name: &str,
        activation: UnaryOp,
    ) -> Result<DeviceTensor> {
        let up_low = self.s.up_low.clone();
        if let Some(low) = &up_low {
            match self.linear(a, name, Some(activation), low) {
                Err(Error::Unsupported(_)) => {}
                recorded => return recorded.map(|()| low.clone()),
            }
        }
        let up = match &self.s.up {
            Some(up) => up.clone(),
            None => {
                let rows = self.batch * self.seq;
                let up = self.slot.scratch_f32(&[rows, self.config().intermediate])?;
                self.s.up = Some(up.clone());
                up
            }
        };
        self.linear(a, name, Some(activation), &up)?;
        self.operand(&up, &up_low).cloned()
    }

    /// `out = act(a @ {name}.weight + {name}.bias)`.
    fn linear(
        &mut self,
        a: &DeviceTensor,
        name: &str,
        activation: Option<UnaryOp>,
        out: &DeviceTensor,
    ) -> Result<()> {
        let w = self.weight(&format!("{name}.weight"))?;
        let b = self.weight(&format!("{name}.bias"))?;
        let options = MatmulOptions {
            activation,
            ..MatmulOptions::default()
        };
        self.ops
            .record_matmul(self.slot.graph(), a, w, Some(b), options, out)
    }

    /// `out = layer_norm(a + b)` with the weights `{name}.*`, one dispatch
    /// that does not store the sum (nothing reads it). Where the matmuls are f16 and a
    /// matmul will read `out` (`operand`), the same dispatch writes `out`'s
    /// f16 operand too, where it can: the operand is returned then.
    fn add_norm(
        &mut self,
        a: &DeviceTensor,
        b: &DeviceTensor,
        (name, operand): (&str, bool),
        out: &DeviceTensor,
    ) -> Result<Option<DeviceTensor>> {
        let (weight, bias) = (
            Some(self.weight(&format!("{name}.weight"))?),
            Some(self.weight(&format!("{name}.bias"))?),
        );
        let eps = self.config().layer_norm_eps;
        let g = self.slot.graph();
        if let Some(low) = self.s.x_low.as_ref().filter(|_| operand) {
            match self
                .ops
                .record_add_layer_norm_with_f16(g, a, b, weight, bias, eps, None, out, low)
            {
                Err(Error::Unsupported(_)) => {}
                recorded => return recorded.map(|()| Some(low.clone())),
            }
        }
        self.ops
            .record_add_layer_norm(g, a, b, weight, bias, eps, None, out)?;
        Ok(None)
    }

    /// Self-attention of `x` into `s.packed` (the per-head contexts by
    /// position, before the output projection).
    fn attention(&mut self, layer: usize, x: &DeviceTensor, bias: &DeviceTensor) -> Result<()> {
        let c = self.config();
        let (b, s, d, h) = (self.batch, self.seq, c.hidden, c.heads);
        let dh = c.head_dim();
        let x_low = self.s.x_low.clone();
        let x = match &x_low {
            Some(low) if self.s.x_low_holds_x => low,
            _ => self.operand(x, &x_low)?,
        };
        let qkv = self.qkv_projection(x, &format!("layer.{layer}.qkv"))?;
        let packed = self.s.packed.reshape(vec![b, s, d])?;
        let stacked = qkv.reshape(vec![b, s, 3 * d])?;
        if self.fused_attention() {
            // The query is pre-scaled in the weights: scale 1.
            match self.ops.record_encoder_attention(
                self.slot.graph(),
                &stacked,
                bias,
                h,
                1.0,
                &packed,
            ) {
                Err(Error::Unsupported(_)) => {}
                done => return done,
            }
        }
        let by_head = self.by_head(dh)?;
        // q, k and v by head: one packing copy each (a cast in f16), since
        // a matmul batches over one merged axis.
        let dtype = qkv.desc().dtype();
        for (part, out) in by_head.heads.iter().enumerate() {
            let desc =
                TensorDesc::strided(dtype, vec![b, h, s, dh], vec![s * 3 * d, dh, 3 * d, 1])?;
            let view = qkv.view(part * d * dtype.bytes(), desc)?;
            if out.desc().dtype() == dtype {
                self.ops.record_copy(self.slot.graph(), &view, out)?;
            } else {
                self.ops.record_cast(self.slot.graph(), &view, out)?;
            }
        }
        let [q, k, v] = &by_head.heads;
        let transposed = MatmulOptions {
            transpose_b: true,
            ..MatmulOptions::default()
        };
        self.ops
            .record_matmul(self.slot.graph(), q, k, None, transposed, &by_head.scores)?;
        self.masked_softmax(&by_head.scores, bias, &by_head.probs)?;
        self.ops.record_matmul(
            self.slot.graph(),
            &by_head.probs,
            v,
            None,
            MatmulOptions::default(),
            &by_head.context,
        )?;
        let by_position = Ops::permuted(&by_head.context, &[0, 2, 1, 3])?;
        let packed = self.s.packed.reshape(vec![b, s, h, dh])?;
        if packed.desc().dtype() == DType::F32 {
            self.ops
                .record_copy(self.slot.graph(), &by_position, &packed)
        } else {
            self.ops
                .record_cast(self.slot.graph(), &by_position, &packed)
        }
    }

    /// The stacked query-key-value projection of `x`: into f16 where the
    /// matmuls are f16, attention is one dispatch and the matmul writes
    /// f16 (on tensor cores), otherwise into f32.
    fn qkv_projection(&mut self, x: &DeviceTensor, name: &str) -> Result<DeviceTensor> {
        let rows = self.batch * self.seq;
        let width = 3 * self.config().hidden;
        // Only the tensor-core matmul writes f16: asked before the f16
        // scratch is allocated, so no device holds one it cannot fill.
        let weight = self.weight(&format!("{name}.weight"))?;
        let tensor_cores = self.s.x_low.is_some()
            && self
                .ops
                .matmul_kernel(x, weight, MatmulOptions::default())?
                == "cooperative matrix";
        if tensor_cores && self.fused_attention() {
            let low = match &self.s.qkv_low {
                Some(low) => low.clone(),
                None => {
                    let desc = TensorDesc::new(DType::F16, vec![rows, width])?;
                    let low = self.slot.scratch(desc)?;
                    self.s.qkv_low = Some(low.clone());
                    low
                }
            };
            match self.linear(x, name, None, &low) {
                Err(Error::Unsupported(_)) => {}
                recorded => return recorded.map(|()| low),
            }
        }
        let qkv = match &self.s.qkv {
            Some(qkv) => qkv.clone(),
            None => {
                let qkv = self.slot.scratch_f32(&[rows, width])?;
                self.s.qkv = Some(qkv.clone());
                qkv
            }
        };
        self.linear(x, name, None, &qkv)?;
        Ok(qkv)
    }

    /// Whether to try the one-dispatch attention kernel (see
    /// [`AttentionPath`]).
    fn fused_attention(&self) -> bool {
        match self.encoder.attention {
            AttentionPath::Auto | AttentionPath::Fused => true,
            AttentionPath::ByHead => false,
        }
    }

    /// The per-head path's intermediates (allocated once per slot).
    fn by_head(&mut self, dh: usize) -> Result<ByHead> {
        if let Some(by_head) = &self.s.by_head {
            return Ok(by_head.clone());
        }
        let (b, s, h) = (self.batch, self.seq, self.config().heads);
        let low = self.s.packed.desc().dtype();
        let mut typed = |shape: &[usize]| self.slot.scratch(TensorDesc::new(low, shape.to_vec())?);
        let heads = [
            typed(&[b, h, s, dh])?,
            typed(&[b, h, s, dh])?,
            typed(&[b, h, s, dh])?,
        ];
        let probs = typed(&[b, h, s, s])?;
        let scores = self.slot.scratch_f32(&[b, h, s, s])?;
        let context = self.slot.scratch_f32(&[b, h, s, dh])?;
        self.s.by_head = Some(ByHead {
            heads,
            scores,
            probs,
            context,
        });
        self.by_head(dh)
    }

    /// `probs = softmax(scores + bias)` over the keys, `bias` `[batch, seq]`
    /// broadcast over heads and queries: one pass where the layout allows
    /// (rows a multiple of 4 long, 16-byte aligned tensors); otherwise the
    /// add, the softmax and (in f16) a cast, through an f32 scratch.
    fn masked_softmax(
        &mut self,
        scores: &DeviceTensor,
        bias: &DeviceTensor,
        probs: &DeviceTensor,
    ) -> Result<()> {
        match self
            .ops
            .record_biased_softmax(self.slot.graph(), scores, bias, probs)
        {
            Err(Error::Unsupported(_)) => {}
            done => return done,
        }
        let summed = match &self.s.summed {
            Some(summed) => summed.clone(),
            None => {
                let summed = self.slot.scratch_f32(scores.desc().shape())?;
                self.s.summed = Some(summed.clone());
                summed
            }
        };
        let key_bias = bias.reshape(vec![self.batch, 1, 1, self.seq])?;
        let g = self.slot.graph();
        self.ops
            .record_binary(g, BinaryOp::Add, scores, &key_bias, &summed)?;
        if probs.desc().dtype() == DType::F32 {
            self.ops.record_softmax(g, &summed, probs)
        } else {
            self.ops.record_softmax(g, &summed, scores)?;
            self.ops.record_cast(g, scores, probs)
        }
    }

    /// The embeddings into `x`: word rows plus the (position + token type
    /// 0) rows, layer-normalised; one dispatch where the device runs it
    /// (with `x`'s f16 operand in f16), else a gather, an add and the norm.
    fn embeddings(&mut self, ids: &DeviceTensor) -> Result<()> {
        let c = self.config();
        let (eps, d) = (c.layer_norm_eps, c.hidden);
        let (batch, seq) = (self.batch, self.seq);
        let word = self.weight("embed.word")?;
        let positions = self.weight("embed.position")?.slice(0, 0..seq)?;
        let (weight, bias) = (
            Some(self.weight("embed.norm.weight")?),
            Some(self.weight("embed.norm.bias")?),
        );
        let x = self.s.x.reshape(vec![batch, seq, d])?;
        let norm = EmbeddingNorm {
            table: word,
            positions: &positions,
            weight,
            bias,
            eps,
        };
        let low = self
            .s
            .x_low
            .as_ref()
            .map(|t| t.reshape(vec![batch, seq, d]))
            .transpose()?;
        let g = self.slot.graph();
        let fused = match self
            .ops
            .record_embedding_layer_norm(g, &norm, ids, &x, low.as_ref())
        {
            Err(Error::Unsupported(_)) if low.is_some() => {
                // Perhaps only the copy is refused: try without it.
                self.ops
                    .record_embedding_layer_norm(g, &norm, ids, &x, None)
            }
            recorded => {
                self.s.x_low_holds_x = recorded.is_ok() && low.is_some();
                recorded
            }
        };
        match fused {
            Err(Error::Unsupported(_)) => {}
            recorded => return recorded,
        }
        let words = self.s.proj.reshape(vec![batch, seq, d])?;
        self.ops.record_gather(g, word, ids, &words)?;
        let sum = self.s.sum.clone();
        let sum3 = sum.reshape(vec![batch, seq, d])?;
        self.ops
            .record_binary(g, BinaryOp::Add, &words, &positions, &sum3)?;
        self.ops
            .record_layer_norm(g, &sum, weight, bias, eps, &self.s.x)
    }

    /// One encoder layer: `x` in, `x` out (through `y`).
    fn layer(&mut self, layer: usize, bias: &DeviceTensor) -> Result<()> {
        let name = |n: &str| format!("layer.{layer}.{n}");
        let Scratch {
            x, y, proj, packed, ..
        } = &self.s;
        let (x, y, proj, packed) = (x.clone(), y.clone(), proj.clone(), packed.clone());
        self.attention(layer, &x, bias)?;
        self.linear(&packed, &name("attn_out"), None, &proj)?;
        let y_low = self.add_norm(&x, &proj, (&name("attn_norm"), true), &y)?;
        let activation = match self.config().activation {
            super::Activation::Gelu => UnaryOp::Gelu,
            super::Activation::GeluTanh => UnaryOp::GeluTanh,
        };
        let x_low = self.s.x_low.clone();
        let y_op = match &y_low {
            Some(low) => low,
            None => self.operand(&y, &x_low)?,
        };
        let up_op = self.up_projection(y_op, &name("up"), activation)?;
        self.linear(&up_op, &name("down"), None, &proj)?;
        // The last layer's output goes to the pooling (f32), not a matmul.
        let last = layer + 1 == self.config().layers;
        let x_low = self.add_norm(&y, &proj, (&name("out_norm"), !last), &x)?;
        self.s.x_low_holds_x = x_low.is_some();
        Ok(())
    }
}

impl Scratch {
    fn new(
        slot: &mut SlotBuilder<'_>,
        c: &BertConfig,
        precision: Precision,
        batch: usize,
        seq: usize,
    ) -> Result<Scratch> {
        let d = c.hidden;
        let rows = batch * seq;
        let low = match precision {
            Precision::F32 => DType::F32,
            Precision::F16 => DType::F16,
        };
        let mut f32s = |shape: &[usize]| slot.scratch_f32(shape);
        let (x, y, sum, proj) = (
            f32s(&[rows, d])?,
            f32s(&[rows, d])?,
            f32s(&[rows, d])?,
            f32s(&[rows, d])?,
        );
        let mut typed = |shape: &[usize]| slot.scratch(TensorDesc::new(low, shape.to_vec())?);
        let packed = typed(&[rows, d])?;
        let (x_low, up_low) = match precision {
            Precision::F32 => (None, None),
            Precision::F16 => (
                Some(typed(&[rows, d])?),
                Some(typed(&[rows, c.intermediate])?),
            ),
        };
        Ok(Scratch {
            x,
            y,
            sum,
            proj,
            qkv: None,
            qkv_low: None,
            by_head: None,
            summed: None,
            packed,
            up: None,
            x_low,
            x_low_holds_x: false,
            up_low,
        })
    }
}

/// Record the whole forward pass of `encoder` for `batch` sentences of
/// `seq` tokens into `slot`.
pub(crate) fn record(
    encoder: &BertEncoder,
    slot: &mut SlotBuilder<'_>,
    batch: usize,
    seq: usize,
) -> Result<()> {
    let c = &encoder.config;
    let d = c.hidden;
    let ops = slot.ops();
    let ids = slot.input(TensorDesc::new(DType::I32, vec![batch, seq])?)?;
    let bias = slot.input(TensorDesc::new(DType::F32, vec![batch, seq])?)?;
    let pool = slot.input(TensorDesc::new(DType::F32, vec![batch, seq])?)?;
    let embeddings = slot.output(TensorDesc::new(DType::F32, vec![batch, d])?)?;
    let s = Scratch::new(slot, c, encoder.precision, batch, seq)?;
    let mut r = Recorder {
        encoder,
        slot,
        ops,
        batch,
        seq,
        s,
    };
    r.embeddings(&ids)?;
    for layer in 0..c.layers {
        r.layer(layer, &bias)?;
    }
    // Pooling as a batched matmul: [batch, 1, seq] @ [batch, seq, d].
    let weights = pool.reshape(vec![batch, 1, seq])?;
    let states = r.s.x.reshape(vec![batch, seq, d])?;
    let pooled = r.s.proj.slice(0, 0..batch)?.reshape(vec![batch, 1, d])?;
    ops.record_matmul(
        r.slot.graph(),
        &weights,
        &states,
        None,
        MatmulOptions::default(),
        &pooled,
    )?;
    let pooled = pooled.reshape(vec![batch, d])?;
    if c.normalize {
        // x / max(|x|, 1e-12) as x / sqrt(sum(x^2) + 1e-24): an RMS norm
        // whose weight is 1/sqrt(d) and whose epsilon is 1e-24/d.
        let unit = r.weight("pool.unit")?;
        let eps = 1e-24 / d as f32;
        ops.record_rms_norm(r.slot.graph(), &pooled, Some(unit), None, eps, &embeddings)
    } else {
        ops.record_copy(r.slot.graph(), &pooled, &embeddings)
    }
}

/// Which rows of the pooling weights a sentence of `len` tokens (padded
/// to `seq`) gives weight to, and how much.
pub(crate) fn pool_weight(pooling: Pooling, len: usize, position: usize) -> f32 {
    match pooling {
        Pooling::Mean if position < len => 1.0 / len as f32,
        Pooling::Cls if position == 0 && len > 0 => 1.0,
        _ => 0.0,
    }
}

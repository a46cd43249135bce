//! The transformer's device weights and the recording of its forward pass
//! into a slot.

use super::{Transformer, TransformerConfig, reference::LN_EPS};
use crate::Weights;
use hrx_core::Result;
use hrx_inference::SlotBuilder;
use hrx_tensor::{
    DType, DeviceTensor, Ops, TensorDesc,
    ops::{BinaryOp, MatmulOptions, UnaryOp},
};

/// The weights in device layout: q, k, v fused per block (the query part
/// pre-scaled by `1/sqrt(dh)`), plus the causal mask. Every tensor the
/// model reads is checked for presence and shape here.
pub(crate) fn device_weights(c: &TransformerConfig, weights: &Weights) -> Result<Weights> {
    let (d, f, v) = (c.d_model, c.d_ff, c.vocab);
    let mut out = Weights::new();
    let mut copy = |name: &str, shape: Vec<usize>| -> Result<()> {
        let values = weights.get(name, &shape)?.to_vec();
        out.insert(name, shape, values)
    };
    copy("embed", vec![v, d])?;
    copy("pos", vec![c.seq, d])?;
    for b in 0..c.blocks {
        for name in ["ln1", "ln2"] {
            copy(&format!("blocks.{b}.{name}.weight"), vec![d])?;
            copy(&format!("blocks.{b}.{name}.bias"), vec![d])?;
        }
        copy(&format!("blocks.{b}.attn.o.weight"), vec![d, d])?;
        copy(&format!("blocks.{b}.attn.o.bias"), vec![d])?;
        copy(&format!("blocks.{b}.mlp.up.weight"), vec![d, f])?;
        copy(&format!("blocks.{b}.mlp.up.bias"), vec![f])?;
        copy(&format!("blocks.{b}.mlp.down.weight"), vec![f, d])?;
        copy(&format!("blocks.{b}.mlp.down.bias"), vec![d])?;
    }
    copy("ln_f.weight", vec![d])?;
    copy("ln_f.bias", vec![d])?;
    copy("head.weight", vec![d, v])?;
    copy("head.bias", vec![v])?;
    let scale = 1.0 / ((d / c.heads) as f32).sqrt();
    for b in 0..c.blocks {
        let part = |p: &str| -> Result<(&[f32], &[f32])> {
            let name = format!("blocks.{b}.attn.{p}");
            Ok((
                weights.get(&format!("{name}.weight"), &[d, d])?,
                weights.get(&format!("{name}.bias"), &[d])?,
            ))
        };
        let parts = [(part("q")?, scale), (part("k")?, 1.0), (part("v")?, 1.0)];
        let mut w = Vec::with_capacity(3 * d * d);
        for row in 0..d {
            for ((pw, _), s) in parts {
                w.extend(pw[row * d..(row + 1) * d].iter().map(|x| x * s));
            }
        }
        let bias = parts
            .iter()
            .flat_map(|((_, pb), s)| pb.iter().map(move |x| x * s));
        out.insert(&format!("blocks.{b}.attn.qkv.weight"), vec![d, 3 * d], w)?;
        out.insert(
            &format!("blocks.{b}.attn.qkv.bias"),
            vec![3 * d],
            bias.collect(),
        )?;
    }
    let mask = (0..c.seq * c.seq)
        .map(|i| {
            if i % c.seq > i / c.seq {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    out.insert("causal_mask", vec![c.seq, c.seq], mask)?;
    Ok(out)
}

/// Records into one slot; holds what every step needs.
struct Recorder<'m, 's, 'a> {
    model: &'m Transformer,
    slot: &'s mut SlotBuilder<'a>,
    ops: &'a Ops,
}

impl<'m> Recorder<'m, '_, '_> {
    /// A shared weight; borrowed from the model, not from the recorder.
    fn weight(&self, name: &str) -> Result<&'m DeviceTensor> {
        let model: &'m Transformer = self.model;
        model.weights.get(name)
    }

    /// `out = act(a @ {name}.weight + {name}.bias)` into new scratch.
    fn linear(
        &mut self,
        a: &DeviceTensor,
        name: &str,
        act: Option<UnaryOp>,
    ) -> Result<DeviceTensor> {
        let (w, b) = (
            self.weight(&format!("{name}.weight"))?,
            self.weight(&format!("{name}.bias"))?,
        );
        let shape = Ops::matmul_shape(a.desc(), w.desc(), MatmulOptions::default())?;
        let out = self.slot.scratch_f32(&shape)?;
        let options = MatmulOptions {
            activation: act,
            ..MatmulOptions::default()
        };
        self.ops
            .record_matmul(self.slot.graph(), a, w, Some(b), options, &out)?;
        Ok(out)
    }

    fn norm(&mut self, a: &DeviceTensor, name: &str) -> Result<DeviceTensor> {
        let (w, b) = (
            self.weight(&format!("{name}.weight"))?,
            self.weight(&format!("{name}.bias"))?,
        );
        let out = self.slot.scratch_f32(a.desc().shape())?;
        self.ops
            .record_layer_norm(self.slot.graph(), a, Some(w), Some(b), LN_EPS, &out)?;
        Ok(out)
    }

    fn binary(&mut self, op: BinaryOp, a: &DeviceTensor, b: &DeviceTensor) -> Result<DeviceTensor> {
        let out = self.slot.scratch_f32(a.desc().shape())?;
        self.ops.record_binary(self.slot.graph(), op, a, b, &out)?;
        Ok(out)
    }

    /// Causal multi-head attention over `qkv [rows, 3d]`, giving the
    /// per-head contexts packed as `[rows, d]` (before the o projection).
    fn attention(&mut self, qkv: &DeviceTensor) -> Result<DeviceTensor> {
        let c = self.model.config;
        let (b, s, d, heads) = (c.batch, c.seq, c.d_model, c.heads);
        let dh = d / heads;
        // q, k and v as [batch, heads, seq, dh] views into qkv; the
        // (batch, heads) axes only merge into one matmul batch axis when
        // batch is 1, otherwise the views are packed first.
        let mut part = |i: usize| -> Result<DeviceTensor> {
            let desc = TensorDesc::strided(
                DType::F32,
                vec![b, heads, s, dh],
                vec![s * 3 * d, dh, 3 * d, 1],
            )?;
            let view = qkv.view(i * d * 4, desc)?;
            if b == 1 {
                Ok(view)
            } else {
                self.ops.record_contiguous(self.slot.graph(), &view)
            }
        };
        let (q, k, v) = (part(0)?, part(1)?, part(2)?);
        let scores = self.slot.scratch_f32(&[b, heads, s, s])?;
        let transposed = MatmulOptions {
            transpose_b: true,
            ..MatmulOptions::default()
        };
        self.ops
            .record_matmul(self.slot.graph(), &q, &k, None, transposed, &scores)?;
        let masked = self.binary(BinaryOp::Add, &scores, self.weight("causal_mask")?)?;
        let probs = self.slot.scratch_f32(&[b, heads, s, s])?;
        self.ops
            .record_softmax(self.slot.graph(), &masked, &probs)?;
        let context = self.slot.scratch_f32(&[b, heads, s, dh])?;
        self.ops.record_matmul(
            self.slot.graph(),
            &probs,
            &v,
            None,
            MatmulOptions::default(),
            &context,
        )?;
        let by_position = Ops::permuted(&context, &[0, 2, 1, 3])?;
        let packed = self
            .ops
            .record_contiguous(self.slot.graph(), &by_position)?;
        packed.reshape(vec![b * s, d])
    }

    fn block(&mut self, h: &DeviceTensor, block: usize) -> Result<DeviceTensor> {
        let name = |n: &str| format!("blocks.{block}.{n}");
        let a = self.norm(h, &name("ln1"))?;
        let qkv = self.linear(&a, &name("attn.qkv"), None)?;
        let context = self.attention(&qkv)?;
        let o = self.linear(&context, &name("attn.o"), None)?;
        let h = self.binary(BinaryOp::Add, h, &o)?;
        let m = self.norm(&h, &name("ln2"))?;
        let up = self.linear(&m, &name("mlp.up"), Some(UnaryOp::GeluTanh))?;
        let down = self.linear(&up, &name("mlp.down"), None)?;
        self.binary(BinaryOp::Add, &h, &down)
    }
}

/// Record the whole forward pass of `model` into `slot`.
pub(crate) fn record(model: &Transformer, slot: &mut SlotBuilder<'_>) -> Result<()> {
    let c = model.config;
    let (rows, d) = (c.batch * c.seq, c.d_model);
    let ops = slot.ops();
    let tokens = slot.input(TensorDesc::new(DType::I32, vec![c.batch, c.seq])?)?;
    let logits = slot.output(TensorDesc::new(DType::F32, vec![c.batch, c.seq, c.vocab])?)?;
    let mut r = Recorder { model, slot, ops };
    let embedded = r.slot.scratch_f32(&[c.batch, c.seq, d])?;
    let embed = r.weight("embed")?;
    ops.record_gather(r.slot.graph(), embed, &tokens, &embedded)?;
    let mut h = r
        .binary(BinaryOp::Add, &embedded, r.weight("pos")?)?
        .reshape(vec![rows, d])?;
    for block in 0..c.blocks {
        h = r.block(&h, block)?;
    }
    let f = r.norm(&h, "ln_f")?;
    let (w, b) = (r.weight("head.weight")?, r.weight("head.bias")?);
    let out = logits.reshape(vec![rows, c.vocab])?;
    ops.record_matmul(
        r.slot.graph(),
        &f,
        w,
        Some(b),
        MatmulOptions::default(),
        &out,
    )
}

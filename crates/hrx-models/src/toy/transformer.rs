//! A small GPT-style transformer: its configuration, seeded weights, CPU
//! reference and the device model.

use super::{mlp::run_once, reference};
use crate::{
    Weights,
    weights::{Seeded, elements},
};
use hrx_core::{Error, Result};
use hrx_inference::{ModelContext, PreparedModel, SharedWeights, SlotBuilder};
use hrx_tensor::Ops;

/// Sizes of a [`Transformer`]: pre-norm blocks with causal self-attention
/// and a GELU (tanh form) MLP, then a final norm and a vocabulary head.
/// Input: tokens i32 `[batch, seq]`; output: logits f32 `[batch, seq,
/// vocab]`.
///
/// Weight names and shapes (`d` = `d_model`): `embed [vocab, d]`, `pos
/// [seq, d]`; for each block `b`: `blocks.{b}.ln1.weight`/`.bias [d]`,
/// `blocks.{b}.attn.{q,k,v,o}.weight [d, d]` / `.bias [d]`,
/// `blocks.{b}.ln2.weight`/`.bias [d]`, `blocks.{b}.mlp.up.weight [d,
/// d_ff]` / `.bias [d_ff]`, `blocks.{b}.mlp.down.weight [d_ff, d]` /
/// `.bias [d]`; then `ln_f.weight`/`.bias [d]`, `head.weight [d, vocab]` /
/// `head.bias [vocab]`. Norms use eps 1e-5 and the biased variance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransformerConfig {
    /// Token ids are `0..vocab`; logits per position.
    pub vocab: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Attention heads; `d_model` must be a multiple.
    pub heads: usize,
    /// Width of the MLP's hidden layer.
    pub d_ff: usize,
    /// Transformer blocks.
    pub blocks: usize,
    /// Positions per sequence (fixed).
    pub seq: usize,
    /// Sequences per request.
    pub batch: usize,
}

/// `4 * product`, or `None` on overflow.
fn bytes(factors: &[usize]) -> Option<usize> {
    elements(factors)?.checked_mul(4)
}

impl TransformerConfig {
    /// The demo default: vocab 256, d_model 64, 4 heads, d_ff 256, 2
    /// blocks, seq 16, batch 1.
    pub fn small() -> TransformerConfig {
        TransformerConfig {
            vocab: 256,
            d_model: 64,
            heads: 4,
            d_ff: 256,
            blocks: 2,
            seq: 16,
            batch: 1,
        }
    }

    /// Nonzero sizes, `d_model` a multiple of `heads`, token ids that fit
    /// i32, and every tensor size and the parameter count within `usize`.
    pub fn validate(&self) -> Result<()> {
        let fail = |why: &str| Err(Error::Message(format!("transformer {self:?}: {why}")));
        let c = self;
        if [
            c.vocab, c.d_model, c.heads, c.d_ff, c.blocks, c.seq, c.batch,
        ]
        .contains(&0)
        {
            return fail("sizes must be nonzero");
        }
        if !c.d_model.is_multiple_of(c.heads) {
            return fail("d_model must be a multiple of heads");
        }
        if i32::try_from(c.vocab).is_err() {
            return fail("token ids must fit i32");
        }
        let (d, rows) = (c.d_model, c.batch.checked_mul(c.seq));
        let sizes = [
            bytes(&[c.vocab, d]),
            bytes(&[c.seq, d]),
            bytes(&[3, d, d]),
            bytes(&[d, c.d_ff]),
            rows.and_then(|r| bytes(&[r, 3, d])),
            rows.and_then(|r| bytes(&[r, c.d_ff.max(c.vocab)])),
            bytes(&[c.batch, c.heads, c.seq, c.seq]),
            self.checked_parameter_count()
                .and_then(|n| n.checked_mul(4)),
        ];
        if sizes.contains(&None) {
            return fail("sizes overflow");
        }
        Ok(())
    }

    fn checked_parameter_count(&self) -> Option<usize> {
        let (d, f) = (self.d_model, self.d_ff);
        let block = [
            elements(&[4, d]), // four norm vectors
            elements(&[4, d, d]),
            elements(&[4, d]), // four projection biases
            elements(&[2, d, f]),
            Some(f.checked_add(d)?),
        ];
        let block = block
            .into_iter()
            .try_fold(0usize, |s, n| s.checked_add(n?))?;
        [
            elements(&[self.vocab, d]),
            elements(&[self.seq, d]),
            block.checked_mul(self.blocks),
            elements(&[2, d]),
            elements(&[d, self.vocab]),
            Some(self.vocab),
        ]
        .into_iter()
        .try_fold(0usize, |s, n| s.checked_add(n?))
    }

    /// The number of parameters (saturating for configurations that fail
    /// [`validate`](Self::validate)).
    pub fn parameter_count(&self) -> usize {
        self.checked_parameter_count().unwrap_or(usize::MAX)
    }

    /// Deterministic weights for a valid configuration: linear weights up
    /// to `1/sqrt(fan_in)`, norm weights near 1, small biases, never zero.
    pub fn seeded_weights(&self, seed: u64) -> Weights {
        let (d, f, v) = (self.d_model, self.d_ff, self.vocab);
        let mut rng = Seeded::new(seed);
        let mut w = Weights::new();
        let linear = |rng: &mut Seeded, w: &mut Weights, name: &str, din: usize, dout: usize| {
            let scale = 1.0 / (din as f32).sqrt();
            rng.fill(w, &format!("{name}.weight"), &[din, dout], 0.0, scale);
            rng.fill(w, &format!("{name}.bias"), &[dout], 0.0, 0.05);
        };
        let norm = |rng: &mut Seeded, w: &mut Weights, name: &str| {
            rng.fill(w, &format!("{name}.weight"), &[d], 1.0, 0.1);
            rng.fill(w, &format!("{name}.bias"), &[d], 0.0, 0.05);
        };
        rng.fill(&mut w, "embed", &[v, d], 0.0, 0.5);
        rng.fill(&mut w, "pos", &[self.seq, d], 0.0, 0.1);
        for b in 0..self.blocks {
            norm(&mut rng, &mut w, &format!("blocks.{b}.ln1"));
            for p in ["q", "k", "v", "o"] {
                linear(&mut rng, &mut w, &format!("blocks.{b}.attn.{p}"), d, d);
            }
            norm(&mut rng, &mut w, &format!("blocks.{b}.ln2"));
            linear(&mut rng, &mut w, &format!("blocks.{b}.mlp.up"), d, f);
            linear(&mut rng, &mut w, &format!("blocks.{b}.mlp.down"), f, d);
        }
        norm(&mut rng, &mut w, "ln_f");
        linear(&mut rng, &mut w, "head", d, v);
        w
    }

    /// The CPU reference logits for `tokens [batch, seq]`, accumulated in
    /// f64.
    pub fn reference(&self, weights: &Weights, tokens: &[i32]) -> Result<Vec<f32>> {
        reference::transformer(self, weights, tokens)
    }

    /// `tokens` has `batch * seq` ids, each in `0..vocab`.
    pub(crate) fn check_tokens(&self, tokens: &[i32]) -> Result<()> {
        if tokens.len() != self.batch * self.seq {
            return Err(Error::Message(format!(
                "transformer input needs {} tokens ([{}, {}]), got {}",
                self.batch * self.seq,
                self.batch,
                self.seq,
                tokens.len()
            )));
        }
        if let Some((i, t)) = tokens
            .iter()
            .enumerate()
            .find(|&(_, &t)| usize::try_from(t).map_or(true, |t| t >= self.vocab))
        {
            return Err(Error::Message(format!(
                "token {t} at index {i} is outside the vocabulary 0..{}",
                self.vocab
            )));
        }
        Ok(())
    }
}

/// A transformer with its weights on the device, ready to build slots
/// from. Input tokens i32 `[batch, seq]`; output logits f32 `[batch, seq,
/// vocab]`. Token ids outside `0..vocab` are not read on the device: the
/// gather kernel gives them an all-zero embedding row, so
/// [`run_naive`](Self::run_naive) rejects them on the host and servers
/// should too.
///
/// On upload, each block's q, k and v projections are fused into one
/// `blocks.{b}.attn.qkv` weight `[d, 3d]` (one matmul instead of three)
/// with the query part pre-scaled by `1/sqrt(d_model / heads)`, and a
/// `causal_mask [seq, seq]` (0 on and below the diagonal, -inf above) is
/// added; all are shared by every slot.
pub struct Transformer {
    pub(crate) context: ModelContext,
    pub(crate) config: TransformerConfig,
    pub(crate) weights: SharedWeights,
    pub(crate) ops: Ops,
}

impl Transformer {
    /// Check `weights` against `config`, derive the device layout and
    /// upload it once.
    pub fn new(
        context: &ModelContext,
        config: TransformerConfig,
        weights: &Weights,
    ) -> Result<Transformer> {
        config.validate()?;
        let device = super::layers::device_weights(&config, weights)?;
        Ok(Transformer {
            context: context.clone(),
            config,
            weights: SharedWeights::upload_f32(context, device.iter())?,
            ops: context.ops().clone(),
        })
    }

    /// The model's sizes.
    pub fn config(&self) -> TransformerConfig {
        self.config
    }

    /// The device weights shared by every slot.
    pub fn weights(&self) -> &SharedWeights {
        &self.weights
    }

    /// Record the forward pass into `slot`: input tokens, output logits,
    /// and the slot's private activations.
    pub fn build_slot(&self, slot: &mut SlotBuilder<'_>) -> Result<()> {
        super::layers::record(self, slot)
    }

    /// A pool of `capacity` slots sharing the weights.
    pub fn prepare(&self, capacity: usize) -> Result<PreparedModel> {
        PreparedModel::prepare(&self.context, capacity, |context| {
            let mut slot = SlotBuilder::new(context, &self.ops);
            self.build_slot(&mut slot)?;
            slot.finish()
        })
    }

    /// The naive path, for comparison: check the tokens, build, prepare
    /// and run a fresh slot for this one call and read the logits back.
    pub fn run_naive(&self, tokens: &[i32]) -> Result<Vec<f32>> {
        self.config.check_tokens(tokens)?;
        let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        run_once(&self.prepare(1)?, &bytes)
    }
}

//! A 3-layer perceptron: `y = relu(relu(x W0 + b0) W1 + b1) W2 + b2`.

use super::reference;
use crate::{Weights, weights::Seeded};
use hrx_core::{Error, Result};
use hrx_inference::{ModelContext, PreparedModel, SharedWeights, SlotBuilder};
use hrx_tensor::{
    DType, Ops, TensorDesc,
    ops::{MatmulOptions, UnaryOp},
};

/// Sizes of an [`Mlp`]: `x [batch, input] -> [batch, hidden] -> [batch,
/// hidden] -> y [batch, output]`. Weights are `layers.{i}.weight` of shape
/// `[in, out]` and `layers.{i}.bias` of shape `[out]`, `i` in 0..3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlpConfig {
    /// Features per input row.
    pub input: usize,
    /// Width of both hidden layers.
    pub hidden: usize,
    /// Features per output row.
    pub output: usize,
    /// Rows per request.
    pub batch: usize,
}

impl MlpConfig {
    /// A small model for tests and examples (input 64, hidden 128, output
    /// 32, batch 4).
    pub fn small() -> MlpConfig {
        MlpConfig {
            input: 64,
            hidden: 128,
            output: 32,
            batch: 4,
        }
    }

    /// The benchmark model (input 512, hidden 2048, output 512, batch 16).
    pub fn bench() -> MlpConfig {
        MlpConfig {
            input: 512,
            hidden: 2048,
            output: 512,
            batch: 16,
        }
    }

    /// `(fan_in, fan_out)` of each layer.
    pub(crate) fn layers(&self) -> [(usize, usize); 3] {
        [
            (self.input, self.hidden),
            (self.hidden, self.hidden),
            (self.hidden, self.output),
        ]
    }

    /// Nonzero sizes whose tensors fit the address space.
    pub fn validate(&self) -> Result<()> {
        let sizes = [self.input, self.hidden, self.output, self.batch];
        if sizes.contains(&0) {
            return Err(Error::Message(format!(
                "mlp {self:?}: sizes must be nonzero"
            )));
        }
        let (b, i, h, o) = (self.batch, self.input, self.hidden, self.output);
        let products = [(b, i), (b, h), (b, o), (i, h), (h, h), (h, o)];
        let bytes = |(x, y): (usize, usize)| x.checked_mul(y).and_then(|n| n.checked_mul(4));
        if products.into_iter().any(|p| bytes(p).is_none()) {
            return Err(Error::Message(format!("mlp {self:?}: sizes overflow")));
        }
        Ok(())
    }

    /// Deterministic weights: uniform magnitudes up to `1/sqrt(fan_in)`,
    /// never zero.
    pub fn seeded_weights(&self, seed: u64) -> Weights {
        let mut rng = Seeded::new(seed);
        let mut weights = Weights::new();
        for (i, (fan_in, fan_out)) in self.layers().into_iter().enumerate() {
            let scale = 1.0 / (fan_in as f32).sqrt();
            let name = format!("layers.{i}.weight");
            rng.fill(&mut weights, &name, &[fan_in, fan_out], 0.0, scale);
            let name = format!("layers.{i}.bias");
            rng.fill(&mut weights, &name, &[fan_out], 0.0, 0.1);
        }
        weights
    }

    /// The CPU reference for `x [batch, input]`, accumulated in f64.
    pub fn reference(&self, weights: &Weights, x: &[f32]) -> Result<Vec<f32>> {
        reference::mlp(self, weights, x)
    }
}

/// A 3-layer perceptron with its weights on the device, ready to build
/// slots from. Input `x` f32 `[batch, input]`, output `y` f32
/// `[batch, output]`; the first two layers apply ReLU in the matmul
/// epilogue, so a forward pass is three dispatches.
pub struct Mlp {
    context: ModelContext,
    config: MlpConfig,
    weights: SharedWeights,
    ops: Ops,
}

impl Mlp {
    /// Check `weights` against `config` and upload them once.
    pub fn new(context: &ModelContext, config: MlpConfig, weights: &Weights) -> Result<Mlp> {
        config.validate()?;
        let mut used = Weights::new();
        for (i, (fan_in, fan_out)) in config.layers().into_iter().enumerate() {
            for (name, shape) in [
                (format!("layers.{i}.weight"), vec![fan_in, fan_out]),
                (format!("layers.{i}.bias"), vec![fan_out]),
            ] {
                let values = weights.get(&name, &shape)?.to_vec();
                used.insert(&name, shape, values)?;
            }
        }
        Ok(Mlp {
            context: context.clone(),
            config,
            weights: SharedWeights::upload_f32(context, used.iter())?,
            ops: context.ops().clone(),
        })
    }

    /// The model's sizes.
    pub fn config(&self) -> MlpConfig {
        self.config
    }

    /// The device weights shared by every slot.
    pub fn weights(&self) -> &SharedWeights {
        &self.weights
    }

    /// Record the forward pass into `slot`: input `x` f32 `[batch,
    /// input]`, output `y` f32 `[batch, output]`, two hidden scratch
    /// tensors.
    pub fn build_slot(&self, slot: &mut SlotBuilder<'_>) -> Result<()> {
        let c = self.config;
        let ops = slot.ops();
        let x = slot.input(TensorDesc::new(DType::F32, vec![c.batch, c.input])?)?;
        let h0 = slot.scratch_f32(&[c.batch, c.hidden])?;
        let h1 = slot.scratch_f32(&[c.batch, c.hidden])?;
        let y = slot.output(TensorDesc::new(DType::F32, vec![c.batch, c.output])?)?;
        let relu = MatmulOptions {
            activation: Some(UnaryOp::Relu),
            ..MatmulOptions::default()
        };
        let layers = [(&x, &h0, relu), (&h0, &h1, relu)];
        let last = (&h1, &y, MatmulOptions::default());
        for (i, (a, out, options)) in layers.into_iter().chain([last]).enumerate() {
            let w = self.weights.get(&format!("layers.{i}.weight"))?;
            let b = self.weights.get(&format!("layers.{i}.bias"))?;
            ops.record_matmul(slot.graph(), a, w, Some(b), options, out)?;
        }
        Ok(())
    }

    /// A pool of `capacity` slots sharing the weights.
    pub fn prepare(&self, capacity: usize) -> Result<PreparedModel> {
        PreparedModel::prepare(&self.context, capacity, |context| {
            let mut slot = SlotBuilder::new(context, &self.ops);
            self.build_slot(&mut slot)?;
            slot.finish()
        })
    }

    /// The naive path, for comparison: build, prepare and run a fresh slot
    /// for this one call and read the result back.
    pub fn run_naive(&self, x: &[f32]) -> Result<Vec<f32>> {
        let c = self.config;
        if x.len() != c.batch * c.input {
            return Err(Error::Message(format!(
                "mlp input needs {} values ([{}, {}]), got {}",
                c.batch * c.input,
                c.batch,
                c.input,
                x.len()
            )));
        }
        run_once(&self.prepare(1)?, &f32_bytes(x))
    }
}

/// Little-endian bytes of `values`.
pub(crate) fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Submit one input to `model` and read its one f32 output back.
pub(crate) fn run_once(model: &PreparedModel, input: &[u8]) -> Result<Vec<f32>> {
    let out = model.submit_host(&[input])?.download()?.wait()?;
    let bytes = out
        .first()
        .ok_or_else(|| Error::Message("model has no output".into()))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

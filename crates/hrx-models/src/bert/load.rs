//! From a Hugging Face BERT checkpoint (safetensors) to the encoder's
//! device layout: linear weights transposed to `[in, out]`, q, k and v
//! fused into one projection with the query pre-scaled by `1/sqrt(head)`,
//! the first token-type row folded into the position table, matrices in
//! the chosen precision and everything else in f32.

use super::{BertConfig, Precision};
use hrx_core::{Error, Result};
use hrx_tensor::{DType, TensorDesc};
use safetensors::{Dtype, SafeTensors};

/// One device tensor: name, descriptor and little-endian bytes.
pub(crate) struct DeviceWeight {
    pub name: String,
    pub desc: TensorDesc,
    pub bytes: Vec<u8>,
}

/// The checkpoint, with the name prefix its tensors carry (`""` for a
/// `BertModel`, `"bert."` for a checkpoint saved from a task model).
struct Checkpoint<'a> {
    file: SafeTensors<'a>,
    prefix: &'static str,
}

impl Checkpoint<'_> {
    /// The tensor `name` as f32, checked against `shape`.
    fn read(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let full = format!("{}{name}", self.prefix);
        let view = self.file.tensor(&full).map_err(|_| {
            Error::msg(format!(
                "model.safetensors has no tensor {full:?} (the encoder needs it, shape {shape:?})"
            ))
        })?;
        if view.shape() != shape {
            return Err(Error::msg(format!(
                "model.safetensors: tensor {full:?} has shape {:?}, the config needs {shape:?}",
                view.shape()
            )));
        }
        let data = view.data();
        let halves = || {
            data.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
        };
        Ok(match view.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::F16 => halves().map(|b| half::f16::from_bits(b).to_f32()).collect(),
            Dtype::BF16 => halves()
                .map(|b| half::bf16::from_bits(b).to_f32())
                .collect(),
            other => {
                return Err(Error::msg(format!(
                    "model.safetensors: tensor {full:?} has dtype {other:?} (F32, F16 and BF16 are read)"
                )));
            }
        })
    }

    /// A linear layer's `[out, in]` weight, transposed to `[in, out]`.
    fn linear_weight(&self, name: &str, inputs: usize, outputs: usize) -> Result<Vec<f32>> {
        let w = self.read(&format!("{name}.weight"), &[outputs, inputs])?;
        let mut t = vec![0.0; w.len()];
        for (o, row) in w.chunks_exact(inputs).enumerate() {
            for (i, &x) in row.iter().enumerate() {
                t[i * outputs + o] = x;
            }
        }
        Ok(t)
    }
}

/// Collects device tensors in their final encoding.
struct Layout {
    precision: Precision,
    out: Vec<DeviceWeight>,
}

impl Layout {
    fn f32(&mut self, name: String, shape: Vec<usize>, values: &[f32]) -> Result<()> {
        self.out.push(DeviceWeight {
            desc: TensorDesc::new(DType::F32, shape)?,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            name,
        });
        Ok(())
    }

    /// A matrix in the encoder's precision.
    fn matrix(&mut self, name: String, shape: Vec<usize>, values: &[f32]) -> Result<()> {
        match self.precision {
            Precision::F32 => self.f32(name, shape, values),
            Precision::F16 => {
                self.out.push(DeviceWeight {
                    desc: TensorDesc::new(DType::F16, shape)?,
                    bytes: values
                        .iter()
                        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                        .collect(),
                    name,
                });
                Ok(())
            }
        }
    }
}

/// Parse a safetensors checkpoint and lay it out for the device.
pub(crate) fn device_weights(
    c: &BertConfig,
    bytes: &[u8],
    precision: Precision,
) -> Result<Vec<DeviceWeight>> {
    let file = SafeTensors::deserialize(bytes)
        .map_err(|e| Error::msg(format!("malformed model.safetensors: {e}")))?;
    let prefix = if file
        .names()
        .iter()
        .any(|n| n.starts_with("bert.embeddings."))
    {
        "bert."
    } else {
        ""
    };
    let ck = Checkpoint { file, prefix };
    let (d, f, dh) = (c.hidden, c.intermediate, c.head_dim());
    let mut out = Layout {
        precision,
        out: Vec::new(),
    };
    let word = ck.read("embeddings.word_embeddings.weight", &[c.vocab_size, d])?;
    out.f32("embed.word".into(), vec![c.vocab_size, d], &word)?;
    // Every sentence has token type 0, so its row joins the positions.
    let mut position = ck.read(
        "embeddings.position_embeddings.weight",
        &[c.max_position, d],
    )?;
    let types = ck
        .file
        .tensor(&format!("{prefix}embeddings.token_type_embeddings.weight"))
        .map(|v| v.shape().first().copied().unwrap_or(0))
        .unwrap_or(0);
    if types > 0 {
        let token_type = ck.read("embeddings.token_type_embeddings.weight", &[types, d])?;
        for row in position.chunks_exact_mut(d) {
            row.iter_mut()
                .zip(&token_type[..d])
                .for_each(|(p, t)| *p += t);
        }
    }
    out.f32("embed.position".into(), vec![c.max_position, d], &position)?;
    norm(&ck, &mut out, "embeddings.LayerNorm", "embed.norm", d)?;
    let scale = 1.0 / (dh as f32).sqrt();
    for l in 0..c.layers {
        let hf = |n: &str| format!("encoder.layer.{l}.{n}");
        let ours = |n: &str| format!("layer.{l}.{n}");
        let parts = ["query", "key", "value"].map(|p| {
            let name = hf(&format!("attention.self.{p}"));
            Ok::<_, Error>((
                ck.linear_weight(&name, d, d)?,
                ck.read(&format!("{name}.bias"), &[d])?,
            ))
        });
        let mut w = Vec::with_capacity(3 * d * d);
        let mut b = Vec::with_capacity(3 * d);
        let scales = [scale, 1.0, 1.0];
        let parts: Vec<_> = parts.into_iter().collect::<Result<_>>()?;
        for row in 0..d {
            for ((pw, _), s) in parts.iter().zip(scales) {
                w.extend(pw[row * d..(row + 1) * d].iter().map(|x| x * s));
            }
        }
        for ((_, pb), s) in parts.iter().zip(scales) {
            b.extend(pb.iter().map(|x| x * s));
        }
        out.matrix(ours("qkv.weight"), vec![d, 3 * d], &w)?;
        out.f32(ours("qkv.bias"), vec![3 * d], &b)?;
        linear(
            &ck,
            &mut out,
            &hf("attention.output.dense"),
            &ours("attn_out"),
            d,
            d,
        )?;
        norm(
            &ck,
            &mut out,
            &hf("attention.output.LayerNorm"),
            &ours("attn_norm"),
            d,
        )?;
        linear(&ck, &mut out, &hf("intermediate.dense"), &ours("up"), d, f)?;
        linear(&ck, &mut out, &hf("output.dense"), &ours("down"), f, d)?;
        norm(&ck, &mut out, &hf("output.LayerNorm"), &ours("out_norm"), d)?;
    }
    // L2 normalisation runs as an RMS norm whose weight is 1/sqrt(d).
    let unit = vec![1.0 / (d as f32).sqrt(); d];
    out.f32("pool.unit".into(), vec![d], &unit)?;
    Ok(out.out)
}

fn linear(
    ck: &Checkpoint<'_>,
    out: &mut Layout,
    hf: &str,
    ours: &str,
    inputs: usize,
    outputs: usize,
) -> Result<()> {
    let w = ck.linear_weight(hf, inputs, outputs)?;
    out.matrix(format!("{ours}.weight"), vec![inputs, outputs], &w)?;
    let b = ck.read(&format!("{hf}.bias"), &[outputs])?;
    out.f32(format!("{ours}.bias"), vec![outputs], &b)
}

fn norm(ck: &Checkpoint<'_>, out: &mut Layout, hf: &str, ours: &str, d: usize) -> Result<()> {
    for part in ["weight", "bias"] {
        let v = ck.read(&format!("{hf}.{part}"), &[d])?;
        out.f32(format!("{ours}.{part}"), vec![d], &v)?;
    }
    Ok(())
}

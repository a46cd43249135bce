//! CPU references of the toy models, accumulated in f64.

use super::{MlpConfig, TransformerConfig};
use crate::Weights;
use hrx_core::{Error, Result};

/// Layer-norm epsilon of every norm in the transformer.
pub(crate) const LN_EPS: f32 = 1e-5;

/// `x [rows, din] @ w [din, dout] + b`.
fn linear(x: &[f64], rows: usize, w: &[f32], b: &[f32], din: usize, dout: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows * dout];
    for r in 0..rows {
        let out = &mut y[r * dout..(r + 1) * dout];
        for (o, &bias) in out.iter_mut().zip(b) {
            *o = f64::from(bias);
        }
        for k in 0..din {
            let xk = x[r * din + k];
            for (o, &wk) in out.iter_mut().zip(&w[k * dout..(k + 1) * dout]) {
                *o += xk * f64::from(wk);
            }
        }
    }
    y
}

fn relu(x: &mut [f64]) {
    x.iter_mut().for_each(|v| *v = v.max(0.0));
}

/// The tanh form of GELU (what `UnaryOp::GeluTanh` computes).
fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044_715 * x * x * x)).tanh())
}

/// Layer norm of each `d`-row with the biased variance.
fn layer_norm(x: &[f64], d: usize, w: &[f32], b: &[f32]) -> Vec<f64> {
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks_exact(d) {
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
        let inv = 1.0 / (var + f64::from(LN_EPS)).sqrt();
        for ((&v, &w), &b) in row.iter().zip(w).zip(b) {
            y.push((v - mean) * inv * f64::from(w) + f64::from(b));
        }
    }
    y
}

fn narrow(values: Vec<f64>) -> Vec<f32> {
    values.into_iter().map(|v| v as f32).collect()
}

pub(crate) fn mlp(config: &MlpConfig, weights: &Weights, x: &[f32]) -> Result<Vec<f32>> {
    config.validate()?;
    let rows = config.batch;
    if x.len() != rows * config.input {
        return Err(Error::Message(format!(
            "mlp reference input needs {} values, got {}",
            rows * config.input,
            x.len()
        )));
    }
    let mut h: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    for (i, (fan_in, fan_out)) in config.layers().into_iter().enumerate() {
        let w = weights.get(&format!("layers.{i}.weight"), &[fan_in, fan_out])?;
        let b = weights.get(&format!("layers.{i}.bias"), &[fan_out])?;
        h = linear(&h, rows, w, b, fan_in, fan_out);
        if i < 2 {
            relu(&mut h);
        }
    }
    Ok(narrow(h))
}

/// Causal attention of one block on the normed activations `a [rows, d]`.
fn attention(
    c: &TransformerConfig,
    weights: &Weights,
    block: usize,
    a: &[f64],
) -> Result<Vec<f64>> {
    let (d, s, heads) = (c.d_model, c.seq, c.heads);
    let dh = d / heads;
    let rows = c.batch * s;
    let project = |name: &str| -> Result<Vec<f64>> {
        let w = weights.get(&format!("blocks.{block}.attn.{name}.weight"), &[d, d])?;
        let b = weights.get(&format!("blocks.{block}.attn.{name}.bias"), &[d])?;
        Ok(linear(a, rows, w, b, d, d))
    };
    let (q, k, v) = (project("q")?, project("k")?, project("v")?);
    let scale = 1.0 / (dh as f64).sqrt();
    let mut context = vec![0.0; rows * d];
    let mut scores = vec![0.0; s];
    for batch in 0..c.batch {
        for head in 0..heads {
            let at = |t: usize, j: usize| (batch * s + t) * d + head * dh + j;
            for i in 0..s {
                for (t, score) in scores.iter_mut().enumerate().take(i + 1) {
                    *score = (0..dh).map(|j| q[at(i, j)] * k[at(t, j)]).sum::<f64>() * scale;
                }
                let max = scores[..=i]
                    .iter()
                    .copied()
                    .fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = scores[..=i].iter().map(|x| (x - max).exp()).sum();
                for t in 0..=i {
                    let p = (scores[t] - max).exp() / total;
                    for j in 0..dh {
                        context[at(i, j)] += p * v[at(t, j)];
                    }
                }
            }
        }
    }
    let w = weights.get(&format!("blocks.{block}.attn.o.weight"), &[d, d])?;
    let b = weights.get(&format!("blocks.{block}.attn.o.bias"), &[d])?;
    Ok(linear(&context, rows, w, b, d, d))
}

pub(crate) fn transformer(
    c: &TransformerConfig,
    weights: &Weights,
    tokens: &[i32],
) -> Result<Vec<f32>> {
    c.validate()?;
    c.check_tokens(tokens)?;
    let (d, s, rows) = (c.d_model, c.seq, c.batch * c.seq);
    let embed = weights.get("embed", &[c.vocab, d])?;
    let pos = weights.get("pos", &[s, d])?;
    let mut h = Vec::with_capacity(rows * d);
    for (index, &token) in tokens.iter().enumerate() {
        let row = &embed[token as usize * d..(token as usize + 1) * d];
        let p = &pos[(index % s) * d..(index % s + 1) * d];
        h.extend(
            row.iter()
                .zip(p)
                .map(|(&e, &p)| f64::from(e) + f64::from(p)),
        );
    }
    let vector = |name: String, n: usize| weights.get(&name, &[n]);
    for block in 0..c.blocks {
        let ln = |i: u8| -> Result<(&[f32], &[f32])> {
            let w = vector(format!("blocks.{block}.ln{i}.weight"), d)?;
            Ok((w, vector(format!("blocks.{block}.ln{i}.bias"), d)?))
        };
        let (w1, b1) = ln(1)?;
        let att = attention(c, weights, block, &layer_norm(&h, d, w1, b1))?;
        h.iter_mut().zip(&att).for_each(|(h, a)| *h += a);
        let (w2, b2) = ln(2)?;
        let m = layer_norm(&h, d, w2, b2);
        let mlp = |name: &str, din: usize, dout: usize| -> Result<(&[f32], &[f32])> {
            let w = weights.get(&format!("blocks.{block}.mlp.{name}.weight"), &[din, dout])?;
            Ok((w, vector(format!("blocks.{block}.mlp.{name}.bias"), dout)?))
        };
        let (up_w, up_b) = mlp("up", d, c.d_ff)?;
        let mut u = linear(&m, rows, up_w, up_b, d, c.d_ff);
        u.iter_mut().for_each(|v| *v = gelu_tanh(*v));
        let (down_w, down_b) = mlp("down", c.d_ff, d)?;
        let down = linear(&u, rows, down_w, down_b, c.d_ff, d);
        h.iter_mut().zip(&down).for_each(|(h, a)| *h += a);
    }
    let f = layer_norm(
        &h,
        d,
        vector("ln_f.weight".into(), d)?,
        vector("ln_f.bias".into(), d)?,
    );
    let head_w = weights.get("head.weight", &[d, c.vocab])?;
    let head_b = vector("head.bias".into(), c.vocab)?;
    Ok(narrow(linear(&f, rows, head_w, head_b, d, c.vocab)))
}

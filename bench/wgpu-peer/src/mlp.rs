//! The MLP forward pass of hrx's `MlpConfig::bench()` (x[16, 512] ->
//! relu(x W0 + b0)[2048] -> relu(. W1 + b1)[2048] -> . W2 + b2 [512]), or of
//! `MlpConfig::small()` (64-128-128-32, batch 4) where hrx's inference
//! benchmark takes it (a CPU device), one request at a time (one client):
//! upload the input, 3 dispatches, read the output back. Checked against a
//! CPU reference (f64 accumulation).

use crate::{
    gpu::{Gpu, map_read},
    report::{Better, Entry},
    stats::percentile,
};
use wgpu::BufferUsages as U;

/// The sizes of an `MlpConfig`.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub input: usize,
    pub hidden: usize,
    pub output: usize,
    pub batch: usize,
}

impl Shape {
    /// `MlpConfig::bench()`.
    pub const BENCH: Shape = Shape {
        input: 512,
        hidden: 2048,
        output: 512,
        batch: 16,
    };
    /// `MlpConfig::small()`.
    pub const SMALL: Shape = Shape {
        input: 64,
        hidden: 128,
        output: 32,
        batch: 4,
    };

    /// (fan in, fan out, relu) per layer.
    fn layers(self) -> [(usize, usize, bool); 3] {
        [
            (self.input, self.hidden, true),
            (self.hidden, self.hidden, true),
            (self.hidden, self.output, false),
        ]
    }

    /// The model's name in hrx's inference benchmark.
    fn name(self) -> String {
        let Shape {
            input,
            hidden,
            output,
            batch,
        } = self;
        format!("MLP {input}-{hidden}-{hidden}-{output} x{batch}")
    }
}

/// The kernel's tile edge.
const TILE: usize = 16;

/// A deterministic generator (splitmix64), so runs are repeatable.
struct Seeded(u64);

impl Seeded {
    /// Uniform in [-1, 1), never exactly 0.
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let v = ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        if v == 0.0 { 0.5 } else { v }
    }

    fn vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| self.next() * scale).collect()
    }
}

/// Weights (row-major [in, out]) and biases per layer.
struct Model {
    shape: Shape,
    layers: Vec<(Vec<f32>, Vec<f32>)>,
}

impl Model {
    fn seeded(shape: Shape, seed: u64) -> Model {
        let mut rng = Seeded(seed);
        let layers = shape
            .layers()
            .iter()
            .map(|&(fan_in, fan_out, _)| {
                let scale = 1.0 / (fan_in as f32).sqrt();
                (rng.vec(fan_in * fan_out, scale), rng.vec(fan_out, scale))
            })
            .collect();
        Model { shape, layers }
    }

    /// The CPU reference, accumulating in f64.
    fn reference(&self, x: &[f32]) -> Vec<f32> {
        let batch = self.shape.batch;
        let mut h = x.to_vec();
        for ((w, b), &(fan_in, fan_out, relu)) in self.layers.iter().zip(&self.shape.layers()) {
            let mut next = vec![0.0f32; batch * fan_out];
            for m in 0..batch {
                for n in 0..fan_out {
                    let mut acc = f64::from(b[n]);
                    for k in 0..fan_in {
                        acc += f64::from(h[m * fan_in + k]) * f64::from(w[k * fan_out + n]);
                    }
                    let v = acc as f32;
                    next[m * fan_out + n] = if relu { v.max(0.0) } else { v };
                }
            }
            h = next;
        }
        h
    }
}

/// Worst |a - b| beyond `atol + rtol |b|`, as (index, got, expected).
fn mismatch(got: &[f32], expected: &[f32]) -> Option<(usize, f32, f32)> {
    let (atol, rtol) = (1e-3, 1e-3);
    got.iter()
        .zip(expected)
        .enumerate()
        .find(|(_, (g, e))| (**g - **e).abs() > atol + rtol * e.abs() || g.is_nan())
        .map(|(i, (g, e))| (i, *g, *e))
}

/// Latency p50 and p99 of `requests` forward passes, one at a time.
pub fn run(gpu: &Gpu, shape: Shape, requests: usize) -> Result<Vec<Entry>, String> {
    let (input, output, batch) = (shape.input, shape.output, shape.batch);
    let model = Model::seeded(shape, 7);
    let pipeline = gpu.pipeline("linear", include_str!("shaders/linear.wgsl"));
    let storage = |label: &str, len: usize| {
        gpu.buffer(
            label,
            (len * 4) as u64,
            U::STORAGE | U::COPY_DST | U::COPY_SRC,
        )
    };
    let x = storage("x", batch * input);
    let hidden = [
        storage("h0", batch * shape.hidden),
        storage("h1", batch * shape.hidden),
    ];
    let y = storage("y", batch * output);
    let staging = gpu.buffer(
        "y read-back",
        (batch * output * 4) as u64,
        U::MAP_READ | U::COPY_DST,
    );
    let io = [&x, &hidden[0], &hidden[1], &y];
    let mut binds = Vec::new();
    // Kept alive for the bind groups.
    let mut held = Vec::new();
    let layers = shape.layers();
    for (i, ((w, b), &(fan_in, fan_out, relu))) in model.layers.iter().zip(&layers).enumerate() {
        let shape = gpu.buffer("shape", 16, U::UNIFORM | U::COPY_DST);
        let words = [batch as u32, fan_out as u32, fan_in as u32, u32::from(relu)];
        gpu.queue
            .write_buffer(&shape, 0, bytemuck::cast_slice(&words));
        let wb = storage("weight", w.len());
        gpu.queue.write_buffer(&wb, 0, bytemuck::cast_slice(w));
        let bb = storage("bias", b.len());
        gpu.queue.write_buffer(&bb, 0, bytemuck::cast_slice(b));
        binds.push((
            gpu.bind(&pipeline, &[&shape, io[i], &wb, &bb, io[i + 1]]),
            fan_out.div_ceil(TILE) as u32,
        ));
        held.push((shape, wb, bb));
    }
    gpu.queue.submit([]);
    gpu.wait(None)?;
    gpu.check("MLP setup")?;

    let mut rng = Seeded(11);
    let inputs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(batch * input, 1.0)).collect();
    let forward = |input: &[f32]| -> Result<Vec<f32>, String> {
        gpu.queue.write_buffer(&x, 0, bytemuck::cast_slice(input));
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            for (bind, groups_x) in &binds {
                pass.set_bind_group(0, bind, &[]);
                pass.dispatch_workgroups(*groups_x, batch.div_ceil(TILE) as u32, 1);
            }
        }
        encoder.copy_buffer_to_buffer(&y, 0, &staging, 0, None);
        let index = gpu.queue.submit([encoder.finish()]);
        Ok(bytemuck::pod_collect_to_vec(&map_read(
            gpu,
            &staging,
            Some(index),
        )?))
    };

    // Check every distinct input once before timing.
    for (i, input) in inputs.iter().enumerate() {
        let got = forward(input)?;
        if let Some((at, g, e)) = mismatch(&got, &model.reference(input)) {
            return Err(format!(
                "MLP: input {i}, output {at} is {g}, the CPU reference {e}"
            ));
        }
    }
    let mut last = Vec::new();
    let mut next = 0;
    let mut samples = crate::stats::sample(requests, || {
        last = forward(&inputs[next % inputs.len()])?;
        next += 1;
        Ok(())
    })?;
    gpu.check("MLP")?;
    let expected = model.reference(&inputs[(next - 1) % inputs.len()]);
    if let Some((at, g, e)) = mismatch(&last, &expected) {
        return Err(format!(
            "MLP: last request, output {at} is {g}, the CPU reference {e}"
        ));
    }

    let how = "wgpu: Queue::write_buffer of the input, one compute pass of 3 tiled \
               matmul + bias (+ relu) dispatches, copy to a MAP_READ buffer, submit, \
               map_async + poll(Wait), copy out, unmap";
    // hrx's counterpart: the pool with one slot and one client thread, the
    // name bench_inference gives it.
    let model = shape.name();
    Ok([("p50", 50.0), ("p99", 99.0)]
        .into_iter()
        .map(|(label, p)| Entry {
            name: format!("{model}, 1 client: {label} latency per request"),
            unit: "us",
            value: percentile(&mut samples, p) * 1e6,
            how: how.into(),
            better: Better::Lower,
            pairs_with: (
                "inference",
                format!("{model}, 1 slot*, 1 client*: {label} latency*"),
            ),
        })
        .collect())
}

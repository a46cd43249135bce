//! SAXPY bandwidth over `vec4<f32>`: hrx's loom SAXPY measurement (several
//! dependent dispatches per submission, 12 bytes per element per dispatch).

use crate::{
    gpu::{Gpu, WORKGROUP},
    report::{Better, Entry},
    stats::median,
};
use wgpu::BufferUsages as U;

/// The workload's size.
pub struct Saxpy {
    /// Elements (a multiple of 1024).
    pub n: usize,
    /// Dependent dispatches per submission.
    pub reps: usize,
    /// Timed submissions.
    pub rounds: usize,
}

const A: f32 = 1e-3;

impl Saxpy {
    /// GB/s of the median submission.
    pub fn run(&self, gpu: &Gpu) -> Result<Entry, String> {
        let quads = u32::try_from(self.n / 4).map_err(|_| "SAXPY n too large")?;
        let bytes = self.n as u64 * 4;
        let (gx, gy) = gpu.grid(quads.div_ceil(WORKGROUP));
        let pipeline = gpu.pipeline("saxpy4", include_str!("shaders/saxpy4.wgsl"));
        let args = gpu.buffer("args", 16, U::UNIFORM | U::COPY_DST);
        let words = [quads, A.to_bits(), gx * WORKGROUP, 0];
        gpu.queue
            .write_buffer(&args, 0, bytemuck::cast_slice(&words));
        let x = gpu.buffer("x", bytes, U::STORAGE | U::COPY_DST);
        let y = gpu.buffer("y", bytes, U::STORAGE | U::COPY_DST | U::COPY_SRC);
        fill(gpu, &x, 1.0, bytes)?;
        fill(gpu, &y, 2.0, bytes)?;
        let bind = gpu.bind(&pipeline, &[&args, &x, &y]);
        gpu.check("SAXPY setup")?;

        let submit = || {
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            {
                // wgpu orders each dispatch after the previous one's writes
                // to y itself (a barrier per dispatch), as hrx's graph does.
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind, &[]);
                for _ in 0..self.reps {
                    pass.dispatch_workgroups(gx, gy, 1);
                }
            }
            let index = gpu.queue.submit([encoder.finish()]);
            gpu.wait(Some(index))
        };
        submit()?;
        let mut times = Vec::with_capacity(self.rounds);
        for _ in 0..self.rounds {
            let start = std::time::Instant::now();
            submit()?;
            times.push(start.elapsed().as_secs_f64());
        }
        gpu.check("SAXPY")?;

        // Every element saw (rounds + 1) * reps updates of y += a * 1.
        let steps = ((self.rounds + 1) * self.reps) as f32;
        let expected = 2.0 + steps * A;
        for offset in [0, bytes / 2, bytes - 4096] {
            let got: Vec<f32> = bytemuck::pod_collect_to_vec(&gpu.read(&y, offset, 4096)?);
            if let Some(v) = got
                .iter()
                .find(|v| (**v - expected).abs() > 1e-3 * expected)
            {
                return Err(format!(
                    "SAXPY: y = {v} at byte {offset}.., expected {expected}"
                ));
            }
        }

        let traffic = 12.0 * self.n as f64 * self.reps as f64 / 1e9;
        let name = format!(
            "SAXPY vector<4xf32>, n = {}, {} dependent dispatches per submission",
            self.n, self.reps
        );
        Ok(Entry {
            unit: "GB/s",
            value: traffic / median(&mut times),
            how: format!(
                "wgpu: the same kernel in WGSL (wgpu's default bounds checks), {} dispatches \
                 in one compute pass, submit + poll(Wait)",
                self.reps
            ),
            better: Better::Higher,
            pairs_with: ("loom", name.clone()),
            name,
        })
    }
}

/// Fill `buffer` with `value` from the host in 64 MiB pieces.
pub fn fill(gpu: &Gpu, buffer: &wgpu::Buffer, value: f32, bytes: u64) -> Result<(), String> {
    let piece = bytes.min(64 << 20);
    let host = vec![value; (piece / 4) as usize];
    let mut offset = 0;
    while offset < bytes {
        let len = piece.min(bytes - offset);
        gpu.queue.write_buffer(
            buffer,
            offset,
            bytemuck::cast_slice(&host[..(len / 4) as usize]),
        );
        gpu.queue.submit([]);
        offset += len;
    }
    gpu.wait(None)
}

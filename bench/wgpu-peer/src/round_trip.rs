//! Round trip of a one-dispatch compute pass: hrx's "submit + wait,
//! 1-dispatch graph" (4 KiB buffers, 16 workgroups of 64).

use crate::{
    gpu::Gpu,
    report::{Better, Entry},
    stats::percentile,
};
use wgpu::BufferUsages as U;

/// Words in each buffer (4 KiB), as in hrx's runtime benchmark.
const WORDS: u32 = 1024;

/// Median and p99 of `iters` round trips.
pub fn run(gpu: &Gpu, iters: usize) -> Result<Vec<Entry>, String> {
    let pipeline = gpu.pipeline("add_one", include_str!("shaders/add_one.wgsl"));
    let bytes = u64::from(WORDS) * 4;
    let src = gpu.buffer("src", bytes, U::STORAGE | U::COPY_DST);
    let dst = gpu.buffer("dst", bytes, U::STORAGE | U::COPY_SRC);
    let input: Vec<u32> = (0..WORDS).collect();
    gpu.queue
        .write_buffer(&src, 0, bytemuck::cast_slice(&input));
    let bind = gpu.bind(&pipeline, &[&src, &dst]);
    gpu.check("round trip setup")?;

    // wgpu command buffers are single-use, so every round trip records its
    // pass again; that is the cost a wgpu user pays per submission.
    let round_trip = || {
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(WORDS / 64, 1, 1);
        }
        let index = gpu.queue.submit([encoder.finish()]);
        gpu.wait(Some(index))
    };
    let mut samples = crate::stats::sample(iters, round_trip)?;
    gpu.check("round trip")?;

    let out: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu.read(&dst, 0, bytes)?);
    if let Some(i) = (0..WORDS as usize).find(|&i| out[i] != input[i] + 1) {
        return Err(format!(
            "round trip: dst[{i}] = {}, expected {}",
            out[i],
            input[i] + 1
        ));
    }

    let how = "wgpu: record a compute pass (set pipeline, bind group, 1 dispatch), \
               finish, Queue::submit, Device::poll(Wait) on that submission";
    Ok([("median", 50.0), ("p99", 99.0)]
        .into_iter()
        .map(|(label, p)| {
            let name = format!("submit + wait, 1-dispatch graph ({label})");
            Entry {
                unit: "us",
                value: percentile(&mut samples, p) * 1e6,
                how: how.into(),
                better: Better::Lower,
                pairs_with: ("runtime", name.clone()),
                name,
            }
        })
        .collect())
}

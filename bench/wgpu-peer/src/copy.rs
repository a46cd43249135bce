//! Device-to-device copy between two device buffers: hrx's "device copy"
//! measurement, counted as (read + written bytes) / median time.

use crate::{
    gpu::Gpu,
    report::{Better, Entry},
    stats::median,
};
use wgpu::BufferUsages as U;

/// GB/s of `copy_buffer_to_buffer` over `bytes` bytes, median of `iters`.
pub fn run(gpu: &Gpu, bytes: u64, iters: usize) -> Result<Entry, String> {
    let src = gpu.buffer("copy src", bytes, U::COPY_SRC | U::COPY_DST);
    let dst = gpu.buffer("copy dst", bytes, U::COPY_SRC | U::COPY_DST);
    // A distinct word everywhere, so a partial copy cannot pass the check.
    let piece = bytes.min(64 << 20);
    let mut offset = 0;
    while offset < bytes {
        let len = piece.min(bytes - offset);
        let first = (offset / 4) as u32;
        let words: Vec<u32> = (0..(len / 4) as u32)
            .map(|i| first.wrapping_add(i))
            .collect();
        gpu.queue
            .write_buffer(&src, offset, bytemuck::cast_slice(&words));
        gpu.queue.submit([]);
        offset += len;
    }
    gpu.wait(None)?;
    gpu.check("copy setup")?;

    let copy = || {
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&src, 0, &dst, 0, bytes);
        let index = gpu.queue.submit([encoder.finish()]);
        gpu.wait(Some(index))
    };
    copy()?;
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let start = std::time::Instant::now();
        copy()?;
        times.push(start.elapsed().as_secs_f64());
    }
    gpu.check("copy")?;

    for offset in [0, bytes / 2, bytes - 4096] {
        let got: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu.read(&dst, offset, 4096)?);
        let first = (offset / 4) as u32;
        if let Some(i) = (0..got.len()).find(|&i| got[i] != first.wrapping_add(i as u32)) {
            return Err(format!("copy: word {} differs", first as usize + i));
        }
    }

    let mib = bytes >> 20;
    let name = format!("device copy {mib} MiB (GB/s = (read + written bytes) / median time)");
    Ok(Entry {
        unit: "GB/s",
        value: 2.0 * bytes as f64 / 1e9 / median(&mut times),
        how: "wgpu: CommandEncoder::copy_buffer_to_buffer of the whole buffer, submit + \
              poll(Wait)"
            .into(),
        better: Better::Higher,
        pairs_with: ("runtime", name.clone()),
        name,
    })
}

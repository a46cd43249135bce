//! The raw-ash side: the same workloads recorded by hand into command
//! buffers, with the barriers a careful Vulkan programmer would write.

use super::{
    contender::{CHAIN_LEN, CHAIN_WORDS, Contender, ONE_WORDS},
    kernel,
    raw::{Access, RawBuffer, RawGpu, RawResult, barrier},
    raw_kernel::RawKernel,
};
use ash::vk;

/// The workloads on the raw harness's device.
pub struct RawSide {
    // Fields drop in order: command buffers die with the pool in `gpu`, so
    // buffers and the kernel go first, the device last.
    one: vk::CommandBuffer,
    one_dst: RawBuffer,
    _one_src: RawBuffer,
    chain: vk::CommandBuffer,
    chain_a: RawBuffer,
    _chain_b: RawBuffer,
    chain_replays: u32,
    copy: Option<Copy>,
    _kernel: RawKernel,
    gpu: RawGpu,
}

struct Copy {
    cb: vk::CommandBuffer,
    dst: RawBuffer,
    _src: RawBuffer,
}

const FILL: u32 = 0x5a5a_a5a5;

const ALL: Access = (
    vk::PipelineStageFlags2::ALL_COMMANDS,
    vk::AccessFlags2::from_raw(
        vk::AccessFlags2::MEMORY_READ.as_raw() | vk::AccessFlags2::MEMORY_WRITE.as_raw(),
    ),
);

/// Fill `buffers` with `value`, then make the writes visible to all later
/// work on the queue.
fn fill(gpu: &mut RawGpu, buffers: &[&RawBuffer], value: u32) -> RawResult<()> {
    let cb = gpu.record(|device, cb| {
        for b in buffers {
            // SAFETY: recording state; the whole buffer, a multiple of 4 bytes.
            unsafe { device.cmd_fill_buffer(cb, b.buffer, 0, vk::WHOLE_SIZE, value) };
        }
        barrier(device, cb, ALL, ALL);
    })?;
    gpu.run(cb)
}

impl RawSide {
    /// Build the kernel and record the one-dispatch and chain command buffers.
    pub fn new(mut gpu: RawGpu, spirv: &[u32]) -> RawResult<RawSide> {
        let kernel = RawKernel::new(&gpu, spirv, kernel::ENTRY, 2, 0, 8)?;
        let (one_src, one_dst) = (
            gpu.buffer(ONE_WORDS * 4, false)?,
            gpu.buffer(ONE_WORDS * 4, false)?,
        );
        let (chain_a, chain_b) = (
            gpu.buffer(CHAIN_WORDS * 4, false)?,
            gpu.buffer(CHAIN_WORDS * 4, false)?,
        );
        fill(&mut gpu, &[&one_src, &one_dst, &chain_a, &chain_b], 0)?;
        let one_set = kernel.bind(&[&one_src, &one_dst])?;
        let forward = kernel.bind(&[&chain_a, &chain_b])?;
        let backward = kernel.bind(&[&chain_b, &chain_a])?;
        let one = gpu.record(|device, cb| {
            // SAFETY: recording state; the pipeline, layout and set belong
            // to this device; the grid is small and non-zero.
            unsafe {
                device.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, kernel.pipeline);
                let sets = [one_set];
                device.cmd_bind_descriptor_sets(
                    cb,
                    vk::PipelineBindPoint::COMPUTE,
                    kernel.layout,
                    0,
                    &sets,
                    &[],
                );
                device.cmd_dispatch(cb, kernel::groups(ONE_WORDS), 1, 1);
            }
        })?;
        let compute = vk::PipelineStageFlags2::COMPUTE_SHADER;
        let written = (compute, vk::AccessFlags2::SHADER_STORAGE_WRITE);
        let next = (
            compute,
            vk::AccessFlags2::SHADER_STORAGE_READ | vk::AccessFlags2::SHADER_STORAGE_WRITE,
        );
        let chain = gpu.record(|device, cb| {
            // SAFETY: recording state; the pipeline belongs to this device.
            unsafe {
                device.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, kernel.pipeline)
            };
            for step in 0..CHAIN_LEN {
                if step > 0 {
                    barrier(device, cb, written, next);
                }
                let sets = [if step % 2 == 0 { forward } else { backward }];
                // SAFETY: the sets match the pipeline's layout; the grid is
                // non-zero and small.
                unsafe {
                    device.cmd_bind_descriptor_sets(
                        cb,
                        vk::PipelineBindPoint::COMPUTE,
                        kernel.layout,
                        0,
                        &sets,
                        &[],
                    );
                    device.cmd_dispatch(cb, kernel::groups(CHAIN_WORDS), 1, 1);
                }
            }
        })?;
        Ok(RawSide {
            one,
            one_dst,
            _one_src: one_src,
            chain,
            chain_a,
            _chain_b: chain_b,
            chain_replays: 0,
            copy: None,
            _kernel: kernel,
            gpu,
        })
    }
}

/// The first `words` words of `buffer`, through a host-visible copy.
fn read_back(gpu: &mut RawGpu, buffer: &RawBuffer, words: usize) -> RawResult<Vec<u32>> {
    let host = gpu.buffer(words * 4, true)?;
    let cb = gpu.record(|device, cb| {
        barrier(device, cb, ALL, ALL);
        let region = [vk::BufferCopy {
            src_offset: 0,
            dst_offset: 0,
            size: (words * 4) as u64,
        }];
        // SAFETY: recording state; both buffers hold at least `words` words.
        unsafe { device.cmd_copy_buffer(cb, buffer.buffer, host.buffer, &region) };
        let to_host = (vk::PipelineStageFlags2::HOST, vk::AccessFlags2::HOST_READ);
        barrier(device, cb, ALL, to_host);
    })?;
    gpu.run(cb)?;
    host.read_words(words)
}

impl Contender for RawSide {
    fn round_trip(&mut self) -> Result<(), String> {
        self.gpu.run(self.one)
    }

    fn burst(&mut self, n: usize) -> Result<(), String> {
        let mut last = 0;
        for _ in 0..n {
            last = self.gpu.submit(self.one, true)?;
        }
        self.gpu.wait(last)
    }

    fn chain(&mut self, n: usize) -> Result<(), String> {
        let mut last = 0;
        for _ in 0..n {
            last = self.gpu.submit(self.chain, true)?;
            self.chain_replays = self.chain_replays.wrapping_add(1);
        }
        self.gpu.wait(last)
    }

    fn prepare_copy(&mut self, bytes: usize) -> Result<(), String> {
        let (src, dst) = (
            self.gpu.buffer(bytes, false)?,
            self.gpu.buffer(bytes, false)?,
        );
        fill(&mut self.gpu, &[&src], FILL)?;
        fill(&mut self.gpu, &[&dst], 0)?;
        let cb = self.gpu.record(|device, cb| {
            let region = [vk::BufferCopy {
                src_offset: 0,
                dst_offset: 0,
                size: bytes as u64,
            }];
            // SAFETY: recording state; both buffers hold `bytes` bytes and
            // are distinct.
            unsafe { device.cmd_copy_buffer(cb, src.buffer, dst.buffer, &region) };
        })?;
        self.copy = Some(Copy { cb, dst, _src: src });
        Ok(())
    }

    fn copy(&mut self) -> Result<(), String> {
        let cb = self.copy.as_ref().ok_or("raw: copy not prepared")?.cb;
        self.gpu.run(cb)
    }

    fn verify_and_release(&mut self) -> Result<(), String> {
        let one = read_back(&mut self.gpu, &self.one_dst, ONE_WORDS)?;
        let chain = read_back(&mut self.gpu, &self.chain_a, CHAIN_WORDS)?;
        let expected = self.chain_replays.wrapping_mul(CHAIN_LEN as u32);
        if one.iter().any(|&w| w != 1) {
            return Err("raw: the one-dispatch command buffer computed wrong words".into());
        }
        if let Some(i) = chain.iter().position(|&w| w != expected) {
            return Err(format!(
                "raw: chain word {i} is {}, expected {expected}",
                chain[i]
            ));
        }
        if let Some(copy) = self.copy.take() {
            let words = copy.dst.bytes.min(1 << 20) / 4;
            let head = read_back(&mut self.gpu, &copy.dst, words)?;
            if head.iter().any(|&w| w != FILL) {
                return Err("raw: the copy's destination differs from its source".into());
            }
        }
        Ok(())
    }
}

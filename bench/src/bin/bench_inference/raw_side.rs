//! The raw-ash baseline: the plan's kernels, buffers and dispatches recorded
//! once by hand into one command buffer (upload from host-visible staging,
//! the dispatches with a barrier wherever one reads or overwrites what an
//! earlier one wrote, readback into host-visible staging), submitted per
//! request with a timeline-semaphore wait.

use super::{
    plan::{Plan, Range},
    raw::{RawBuffer, RawGpu, RawResult, barrier},
    raw_kernel::RawKernel,
};
use ash::vk;
use std::ffi::CString;

/// The baseline, ready to serve requests one at a time.
pub struct RawSide {
    // Drop order: buffers and kernels before the device.
    request: vk::CommandBuffer,
    stage_in: RawBuffer,
    stage_out: RawBuffer,
    _regions: Vec<RawBuffer>,
    _kernels: Vec<RawKernel>,
    gpu: RawGpu,
}

const COMPUTE: vk::PipelineStageFlags2 = vk::PipelineStageFlags2::COMPUTE_SHADER;
const COPY: vk::PipelineStageFlags2 = vk::PipelineStageFlags2::COPY;
const SHADER_RW: vk::AccessFlags2 = vk::AccessFlags2::from_raw(
    vk::AccessFlags2::SHADER_STORAGE_READ.as_raw()
        | vk::AccessFlags2::SHADER_STORAGE_WRITE.as_raw(),
);

fn overlaps(a: &Range, b: &Range) -> bool {
    a.region == b.region && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes
}

/// Copy `bytes` of `src` into `dst` at the given offsets.
fn copy(
    device: &ash::Device,
    cb: vk::CommandBuffer,
    src: (&RawBuffer, usize),
    dst: (&RawBuffer, usize),
    bytes: usize,
) {
    let region = [vk::BufferCopy {
        src_offset: src.1 as u64,
        dst_offset: dst.1 as u64,
        size: bytes as u64,
    }];
    // SAFETY: recording state; both ranges lie inside their buffers (the
    // plan's ranges come from checked views) and the buffers are distinct.
    unsafe { device.cmd_copy_buffer(cb, src.0.buffer, dst.0.buffer, &region) };
}

impl RawSide {
    /// Create the plan's buffers (filled with its bytes), pipelines and
    /// descriptor sets, and record the request's command buffer.
    pub fn new(mut gpu: RawGpu, plan: &Plan) -> RawResult<RawSide> {
        let mut kernels = Vec::new();
        for code in &plan.kernels {
            let entry = CString::new(code.contract.entry_point.as_str())
                .map_err(|_| "raw: NUL in an entry point".to_string())?;
            kernels.push(RawKernel::new(
                &gpu,
                &code.spirv,
                &entry,
                code.contract.bindings.len() as u32,
                code.contract.push_constant_bytes,
                code.uses,
            )?);
        }
        let regions = plan
            .regions
            .iter()
            .map(|bytes| gpu.buffer(bytes.len().max(4), false))
            .collect::<RawResult<Vec<_>>>()?;
        upload(&mut gpu, &regions, &plan.regions)?;
        let stage_in = gpu.buffer(plan.input.bytes, true)?;
        let stage_out = gpu.buffer(plan.output.bytes, true)?;
        let sets = plan
            .dispatches
            .iter()
            .map(|d| {
                let ranges: Vec<_> = d
                    .bindings
                    .iter()
                    .map(|r| (&regions[r.region], r.offset, r.bytes))
                    .collect();
                kernels[d.kernel].bind_ranges(&ranges)
            })
            .collect::<RawResult<Vec<_>>>()?;

        let request = gpu.record(|device, cb| {
            let input = &plan.input;
            copy(
                device,
                cb,
                (&stage_in, 0),
                (&regions[input.region], input.offset),
                input.bytes,
            );
            let copied = (COPY, vk::AccessFlags2::TRANSFER_WRITE);
            barrier(
                device,
                cb,
                copied,
                (COMPUTE, vk::AccessFlags2::SHADER_STORAGE_READ),
            );
            // Ranges read and written since the last barrier.
            let (mut reads, mut writes): (Vec<Range>, Vec<Range>) = (Vec::new(), Vec::new());
            for (dispatch, set) in plan.dispatches.iter().zip(&sets) {
                let kernel = &kernels[dispatch.kernel];
                let contract = &plan.kernels[dispatch.kernel].contract;
                let access = || dispatch.bindings.iter().zip(&contract.bindings);
                let hazard = access().any(|(range, binding)| {
                    writes.iter().any(|w| overlaps(w, range))
                        || (binding.access.writes() && reads.iter().any(|r| overlaps(r, range)))
                });
                if hazard {
                    barrier(
                        device,
                        cb,
                        (COMPUTE, vk::AccessFlags2::SHADER_STORAGE_WRITE),
                        (COMPUTE, SHADER_RW),
                    );
                    reads.clear();
                    writes.clear();
                }
                for (range, binding) in access() {
                    if binding.access.reads() {
                        reads.push(*range);
                    }
                    if binding.access.writes() {
                        writes.push(*range);
                    }
                }
                let [x, y, z] = dispatch.workgroups;
                // SAFETY: recording state; pipeline, layout and set belong
                // to this device and match; the constants have the layout's
                // size; the grid is the one hrx checked against the limits.
                unsafe {
                    device.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, kernel.pipeline);
                    device.cmd_bind_descriptor_sets(
                        cb,
                        vk::PipelineBindPoint::COMPUTE,
                        kernel.layout,
                        0,
                        &[*set],
                        &[],
                    );
                    if !dispatch.constants.is_empty() {
                        device.cmd_push_constants(
                            cb,
                            kernel.layout,
                            vk::ShaderStageFlags::COMPUTE,
                            0,
                            &dispatch.constants,
                        );
                    }
                    device.cmd_dispatch(cb, x, y, z);
                }
            }
            let written = (COMPUTE, vk::AccessFlags2::SHADER_STORAGE_WRITE);
            barrier(device, cb, written, (COPY, vk::AccessFlags2::TRANSFER_READ));
            let output = &plan.output;
            copy(
                device,
                cb,
                (&regions[output.region], output.offset),
                (&stage_out, 0),
                output.bytes,
            );
            let host = (vk::PipelineStageFlags2::HOST, vk::AccessFlags2::HOST_READ);
            barrier(device, cb, copied, host);
        })?;
        Ok(RawSide {
            request,
            stage_in,
            stage_out,
            _regions: regions,
            _kernels: kernels,
            gpu,
        })
    }

    /// One request: write the input into staging, submit the recorded
    /// command buffer, wait, read the output from staging.
    pub fn run(&mut self, input: &[u8], output: &mut [u8]) -> RawResult<()> {
        self.stage_in.write_bytes(0, input)?;
        self.gpu.run(self.request)?;
        self.stage_out.read_bytes(0, output)
    }
}

/// Fill `regions` with `contents` through one host-visible staging buffer.
fn upload(gpu: &mut RawGpu, regions: &[RawBuffer], contents: &[Vec<u8>]) -> RawResult<()> {
    let total: usize = contents.iter().map(Vec::len).sum();
    let staging = gpu.buffer(total.max(4), true)?;
    let mut at = 0;
    let mut offsets = Vec::new();
    for bytes in contents {
        staging.write_bytes(at, bytes)?;
        offsets.push(at);
        at += bytes.len();
    }
    let cb = gpu.record(|device, cb| {
        for ((region, bytes), &offset) in regions.iter().zip(contents).zip(&offsets) {
            if !bytes.is_empty() {
                copy(device, cb, (&staging, offset), (region, 0), bytes.len());
            }
        }
        let all = (
            vk::PipelineStageFlags2::ALL_COMMANDS,
            vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE,
        );
        barrier(device, cb, (COPY, vk::AccessFlags2::TRANSFER_WRITE), all);
    })?;
    gpu.run(cb)
}

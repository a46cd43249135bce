//! The wgpu device and the few helpers every workload shares.

use std::sync::{Arc, Mutex};

/// Invocations per workgroup of the one-dimensional kernels.
pub const WORKGROUP: u32 = 256;

/// An opened wgpu device on the Vulkan backend.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    /// wgpu's per-dimension dispatch limit (65,535 on every backend today).
    pub max_groups: u32,
    /// Validation errors wgpu reported outside any scope, checked after each
    /// workload, so a misuse fails the run instead of skewing a figure.
    errors: Arc<Mutex<Vec<String>>>,
}

/// The adapter hrx would choose: `HRX_DEVICE` as a name fragment, else the
/// first discrete, integrated, virtual and CPU device, in that order.
fn choose(adapters: Vec<wgpu::Adapter>) -> Result<wgpu::Adapter, String> {
    let wanted = std::env::var("HRX_DEVICE")
        .ok()
        .filter(|t| !t.trim().is_empty());
    if let Some(text) = wanted {
        let text = text.trim().to_lowercase();
        if text.parse::<usize>().is_err() {
            return adapters
                .into_iter()
                .find(|a| a.get_info().name.to_lowercase().contains(&text))
                .ok_or_else(|| format!("no wgpu Vulkan adapter named like `{text}`"));
        }
        eprintln!(
            "wgpu-peer: HRX_DEVICE as an index is not mapped to wgpu's order; choosing by type"
        );
    }
    use wgpu::DeviceType::{Cpu, DiscreteGpu, IntegratedGpu, VirtualGpu};
    for kind in [DiscreteGpu, IntegratedGpu, VirtualGpu, Cpu] {
        if let Some(i) = adapters
            .iter()
            .position(|a| a.get_info().device_type == kind)
        {
            return Ok(adapters.into_iter().nth(i).expect("position is in range"));
        }
    }
    adapters
        .into_iter()
        .next()
        .ok_or_else(|| "no Vulkan adapter found by wgpu".into())
}

impl Gpu {
    /// Open the chosen adapter with its own limits (the defaults cap buffers
    /// at 256 MiB, below the 1 GiB workloads).
    pub fn open() -> Result<Gpu, String> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN;
        // No validation layers or debug labels: the figures are for release use.
        desc.flags = wgpu::InstanceFlags::empty();
        let instance = wgpu::Instance::new(desc);
        let adapter = choose(pollster::block_on(
            instance.enumerate_adapters(wgpu::Backends::VULKAN),
        ))?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("wgpu-peer"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| format!("wgpu request_device: {e}"))?;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&errors);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut list) = sink.lock() {
                list.push(e.to_string());
            }
        }));
        Ok(Gpu {
            device,
            queue,
            info,
            max_groups: limits.max_compute_workgroups_per_dimension,
            errors,
        })
    }

    /// Whether the adapter is a CPU implementation (lavapipe): the suites
    /// then use their smaller default sizes, as hrx's benches do.
    pub fn is_cpu(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// Fail with every error wgpu reported since the last check.
    pub fn check(&self, what: &str) -> Result<(), String> {
        let mut list = self.errors.lock().map_err(|_| "error sink poisoned")?;
        if list.is_empty() {
            Ok(())
        } else {
            let text = list.join("; ");
            list.clear();
            Err(format!("{what}: wgpu reported: {text}"))
        }
    }

    /// Block until `index` (or everything submitted) has completed.
    pub fn wait(&self, index: Option<wgpu::SubmissionIndex>) -> Result<(), String> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: index,
                timeout: None,
            })
            .map(|_| ())
            .map_err(|e| format!("wgpu poll: {e}"))
    }

    /// A device buffer of `bytes` bytes.
    pub fn buffer(&self, label: &str, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage,
            mapped_at_creation: false,
        })
    }

    /// A compute pipeline from WGSL with the layout wgpu derives from it.
    pub fn pipeline(&self, label: &str, wgsl: &str) -> wgpu::ComputePipeline {
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Wgsl(wgsl.into()),
            });
        self.device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions::default(),
                cache: None,
            })
    }

    /// A bind group at index 0 of `pipeline` binding `buffers` in order.
    pub fn bind(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// A 2-D grid of at least `groups` workgroups within the dispatch limit;
    /// kernels linearize it with the x extent.
    pub fn grid(&self, groups: u32) -> (u32, u32) {
        let x = groups.min(self.max_groups).max(1);
        (x, groups.div_ceil(x))
    }

    /// Copy `bytes` bytes at `offset` of `source` to the host.
    pub fn read(&self, source: &wgpu::Buffer, offset: u64, bytes: u64) -> Result<Vec<u8>, String> {
        let staging = self.buffer(
            "read-back",
            bytes,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(source, offset, &staging, 0, bytes);
        let index = self.queue.submit([encoder.finish()]);
        map_read(self, &staging, Some(index))
    }
}

/// Map `staging` (whose copy was submitted as `index`), copy it out, unmap.
pub fn map_read(
    gpu: &Gpu,
    staging: &wgpu::Buffer,
    index: Option<wgpu::SubmissionIndex>,
) -> Result<Vec<u8>, String> {
    let mapped = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&mapped);
    staging.map_async(wgpu::MapMode::Read, .., move |result| {
        if let Ok(mut s) = slot.lock() {
            *s = Some(result);
        }
    });
    gpu.wait(index)?;
    let outcome = mapped
        .lock()
        .map_err(|_| "map callback poisoned")?
        .take()
        .ok_or("map_async did not complete after the wait")?;
    outcome.map_err(|e| format!("map_async: {e}"))?;
    let bytes = staging
        .get_mapped_range(..)
        .map_err(|e| format!("get_mapped_range: {e}"))?
        .to_vec();
    staging.unmap();
    Ok(bytes)
}

//! The runtime on its own: your SPIR-V, your buffers, one prepared graph.
//!
//! Compiles a SAXPY kernel from WGSL with naga, records upload -> dispatch
//! -> readback into one graph, replays it, and checks the result on the CPU.
//! Run with `cargo run --release -p hrx-runtime --example hello`.

use hrx_runtime::{
    Access, BindingContract, GpuKernel, KernelContract, MemoryPlacement, Result, Runtime,
};
use std::time::Instant;

const SAXPY: &str = r#"
struct Params { n: u32, a: f32 }
var<immediate> params: Params;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < params.n) { y[id.x] = params.a * x[id.x] + y[id.x]; }
}
"#;

fn spirv(wgsl: &str) -> Vec<u32> {
    use naga::back::spv;
    let module = naga::front::wgsl::parse_str(wgsl).expect("valid WGSL");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::IMMEDIATES,
    )
    .validate(&module)
    .expect("valid module");
    let options = spv::Options {
        lang_version: (1, 3),
        flags: spv::WriterFlags::empty(),
        ..spv::Options::default()
    };
    spv::write_vec(&module, &info, &options, None).expect("SPIR-V")
}

fn main() -> Result<()> {
    let runtime = Runtime::from_env()?;
    let target = runtime.gpu()?.target();
    println!(
        "device: {} ({:?}, Vulkan {:?})",
        target.name, target.kind, target.api_version
    );

    let n: u32 = 1 << 20;
    let bytes = n as usize * 4;
    let x = runtime.allocate(bytes, MemoryPlacement::HostVisible)?;
    let y_host = runtime.allocate(bytes, MemoryPlacement::HostVisible)?;
    let y = runtime.allocate(bytes, MemoryPlacement::GpuLocal)?;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5).collect();
    x.map_write()?
        .copy_from_slice(&xs.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());

    let binding = |access| BindingContract {
        min_bytes: bytes,
        alignment: 4,
        access,
    };
    let kernel = GpuKernel::new(
        &runtime,
        &spirv(SAXPY),
        KernelContract {
            entry_point: "main".into(),
            bindings: vec![binding(Access::Read), binding(Access::ReadWrite)],
            push_constant_bytes: 8,
            workgroup_size: [256, 1, 1],
        },
    )?;
    let mut constants = n.to_le_bytes().to_vec();
    constants.extend_from_slice(&2.0f32.to_le_bytes());

    // One graph: y += 2x, then copy y to the host. prepare() derives the
    // read-after-write barrier between the dispatch and the copy.
    let mut graph = runtime.graph();
    graph.dispatch(
        &kernel,
        &[x.view(), y.view()],
        &constants,
        [n.div_ceil(256), 1, 1],
    )?;
    graph.copy(y_host.view(), y.view())?;
    let graph = graph.prepare()?;
    println!("prepared graph: {} barrier(s)", graph.barriers().len());

    let replays = 10;
    let start = Instant::now();
    let mut last = graph.submit()?;
    for _ in 1..replays {
        last = graph.submit()?;
    }
    last.wait()?;
    let elapsed = start.elapsed();

    let result = y_host.map_read()?;
    let mismatches = result
        .chunks_exact(4)
        .zip(&xs)
        .filter(|(got, x)| {
            f32::from_le_bytes((*got).try_into().unwrap()) != 2.0 * replays as f32 * **x
        })
        .count();
    println!(
        "{replays} replays of SAXPY over {n} floats in {:.2} ms; {mismatches} mismatches",
        elapsed.as_secs_f64() * 1e3
    );
    if mismatches > 0 {
        return Err(hrx_runtime::Error::Message(format!(
            "{mismatches} wrong results"
        )));
    }
    println!("ok");
    Ok(())
}

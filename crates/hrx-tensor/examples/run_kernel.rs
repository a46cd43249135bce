//! Compile a loom kernel for the live device and run it.
//!
//! The kernel sums each block of `cfg.width` u32 values with a tree
//! reduction in workgroup memory. The block width is a config value, so one
//! module is specialized twice (64 and 256) and the compiler's cache answers
//! a repeated compile from memory. Every block sum is checked on the CPU.
//!
//! The compiler and the runtime meet only through hrx-core's kernel
//! vocabulary: the artifact's `contract()` and SPIR-V build the pipeline,
//! its `dispatch_args()` give the push constants and workgroup grid of a
//! graph dispatch. (hrx-tensor's operator library does the same for every
//! kernel it compiles.) Run with
//! `cargo run -p hrx-tensor --example run_kernel`.

use hrx_loom::{Compiler, ScalarValue, Specialization, artifact::report};
use hrx_runtime::{Error, GpuKernel, MemoryPlacement, Result, Runtime};

const SOURCE: &str = r#"
// out[g] = sum of in[g*W .. g*W+W) (missing tail elements count as 0)
config.decl @cfg.width = 64 : index     // W: the workgroup size, a power of two
config.decl @cfg.steps = 6 : index      // log2(W): halving steps of the tree
kernel.def @block_sum(%n: index) {
  %one = index.constant 1 : index
  %wg = config.value @cfg.width : index
  %last = index.sub %wg, %one : index
  %padded = index.add %n, %last : index
  %groups = index.div %padded, %wg : index
  kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%wg, %one, %one) : index
} launch(%n: index, %groups: index, %in: buffer {readonly}, %out: buffer) {
  %zero = index.constant 0 : offset
  %iv = buffer.view %in[%zero] : buffer -> view<[%n]xu32>
  %ov = buffer.view %out[%zero] : buffer -> view<[%groups]xu32>
  %width = config.value @cfg.width : index
  %word = index.constant 4 : offset
  %width_bytes = index.cast %width : index -> offset
  %bytes = index.mul %width_bytes, %word : offset
  %tile_memory = buffer.alloca<workgroup> align(16) %bytes : buffer
  %tile = buffer.view %tile_memory[%zero] : buffer -> view<[%width]xu32>

  %i = kernel.workitem.dispatch.id<x> : index
  %l = kernel.workitem.id<x> : index
  %inside = index.cmp ult, %i, %n : index
  %x = scf.if %inside -> (u32) {
    %v = view.load %iv[%i] : view<[%n]xu32> -> u32
    scf.yield %v : u32
  } else {
    %z = scalar.constant 0 : u32
    scf.yield %z : u32
  }
  view.store %x, %tile[%l] : u32, view<[%width]xu32>
  kernel.barrier<workgroup>

  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %c2 = index.constant 2 : index
  %steps = config.value @cfg.steps : index
  %half = index.div %width, %c2 : index
  // Each step folds the upper half of the live range onto the lower half.
  // The bounds are config values, so control stays workgroup-uniform and
  // the barrier inside the loop is allowed.
  scf.for %k = [%c0 to %steps step %c1](%s = %half : index) -> (index) {
    %active = index.cmp ult, %l, %s : index
    scf.if %active {
      %j = index.add %l, %s : index
      %a = view.load %tile[%l] : view<[%width]xu32> -> u32
      %b = view.load %tile[%j] : view<[%width]xu32> -> u32
      %sum = scalar.addi %a, %b : u32
      view.store %sum, %tile[%l] : u32, view<[%width]xu32>
    }
    kernel.barrier<workgroup>
    %next = index.div %s, %c2 : index
    scf.yield %next : index
  }

  %leader = index.cmp eq, %l, %c0 : index
  scf.if %leader {
    %g = kernel.workgroup.id<x> : index
    %total = view.load %tile[%c0] : view<[%width]xu32> -> u32
    view.store %total, %ov[%g] : u32, view<[%groups]xu32>
  }
  kernel.return
}
"#;

fn main() -> Result<()> {
    let runtime = Runtime::from_env()?;
    let target = runtime.gpu()?.target().clone();
    println!("device: {} ({:?})", target.name, target.kind);

    // Parse and verify once; specialize per width below.
    let compiler = Compiler::for_target(None, &target)?;
    let module = compiler.module(SOURCE)?;
    println!("module kernels: {:?}", module.kernels());

    let n: u32 = 100_000;
    let values: Vec<u32> = (0..n).map(|i| i % 1000 + 1).collect();
    let input = runtime.allocate(n as usize * 4, MemoryPlacement::HostVisible)?;
    input.map_write()?.copy_from_slice(
        &values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>(),
    );

    for steps in [6u32, 8] {
        let width = 1u32 << steps;
        // index keys take u64: a plain `64` literal would be an i32 (E0507).
        let spec = Specialization::new("@block_sum")
            .with_config("cfg.width", u64::from(width))
            .with_config("cfg.steps", u64::from(steps));
        let artifact = module.compile(&spec)?;
        if width == 64 {
            print!("{}", report(&artifact));
        }
        let kernel = GpuKernel::new(&runtime, artifact.spirv(), artifact.contract())?;

        let groups = n.div_ceil(width);
        let output = runtime.allocate(groups as usize * 4, MemoryPlacement::HostVisible)?;
        let args = artifact.dispatch_args(
            &[
                ScalarValue::Index(u64::from(n)),
                ScalarValue::Index(u64::from(groups)),
            ],
            &[u64::from(n)],
        )?;
        let mut graph = runtime.graph();
        let views = [input.view(), output.view()];
        graph.dispatch(&kernel, &views, &args.push_constants, args.workgroups)?;
        graph.prepare()?.submit()?.wait()?;

        let sums = output.map_read()?;
        let wrong = sums
            .chunks_exact(4)
            .zip(values.chunks(width as usize))
            .filter(|(got, block)| {
                let got = u32::from_le_bytes([got[0], got[1], got[2], got[3]]);
                got != block.iter().sum::<u32>()
            })
            .count();
        println!(
            "width {width}: grid {:?}, {groups} block sums, {wrong} wrong",
            args.workgroups
        );
        if wrong > 0 {
            return Err(Error::msg(format!(
                "width {width}: {wrong} wrong block sums"
            )));
        }
    }

    // The same specialization again comes from the in-memory cache.
    module.compile(
        &Specialization::new("@block_sum")
            .with_config("cfg.width", 64u64)
            .with_config("cfg.steps", 6u64),
    )?;
    let stats = compiler.cache_stats();
    println!(
        "compiler cache: {} compiles, {} memory hits",
        stats.compiles, stats.memory_hits
    );
    if stats.compiles != 2 || stats.memory_hits != 1 {
        return Err(Error::msg(format!("unexpected cache counters {stats:?}")));
    }
    println!("ok");
    Ok(())
}

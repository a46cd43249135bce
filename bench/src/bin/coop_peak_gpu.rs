//! The ceilings of 16x16x16 f16 -> f32 cooperative-matrix multiply-adds on
//! this device, as loom kernels reach them (run on the H200): what the
//! matmul kernels could at best do, without their copies.
//!
//! - `registers`: each subgroup multiplies fragments it holds, into 8
//!   independent accumulators, in a loop: the multiply-add ceiling.
//! - `workgroup tiles`: each subgroup also loads its 4 A and 2 B fragments
//!   from workgroup tiles every 16-deep product, as the 128x256 matmul
//!   kernel's subgroups do (4 x 2 fragments, 16 subgroups), but nothing is
//!   copied into the tiles in the loop: the ceiling of that arrangement
//!   with free copies.
//!
//! `cargo run --release -p hrx-bench --bin coop_peak_gpu`
//! prints TFLOP/s per variant (best of 5 runs); devices without a
//! 16x16x16 f16 -> f32 shape say so.

use hrx_bench::best_run::best_run_seconds;
use hrx_loom::{Compiler, ScalarValue, Specialization};
use hrx_runtime::{GpuKernel, MemoryPlacement, Runtime};
use hrx_tensor::ops::coop_matmul_source;

/// Subgroups per workgroup and accumulators per subgroup.
const SUBGROUPS: usize = 16;
const ACCS: usize = 8;

/// The kernel text: `%t`-indexed fragment loads from workgroup tiles when
/// `tiles`, else fragments loaded once from storage.
fn source(tiles: bool, sg: usize) -> String {
    let threads = SUBGROUPS * sg;
    let ty_c = "coopmat<16x16xf32, c>";
    let mut body = String::new();
    if tiles {
        // A tile of 64 x 40 halves and a B tile of 32 x 40, each subgroup
        // reading rows 16i.. of A and columns 16j.. of B at k offset
        // 16 * (t % 2): addresses change with t, so nothing is hoisted.
        body += "    %tk = index.rem %t, %c2 : index\n    %ko = index.mul %tk, %c16 : index\n";
        for i in 0..4 {
            body += &format!(
                "    %ra{i} = index.constant {} : index
    %fa{i} = coop.load<row_major> %ta[%ra{i}, %ko] : view<64x40xf16> -> coopmat<16x16xf16, a>\n",
                16 * i
            );
        }
        for j in 0..2 {
            body += &format!(
                "    %cb{j} = index.constant {} : index
    %fb{j} = coop.load<row_major> %tb[%ko, %cb{j}] : view<32x40xf16> -> coopmat<16x16xf16, b>\n",
                16 * j
            );
        }
    }
    // Accumulator q multiplies A fragment q / 2 by B fragment q % 2 (the
    // kernel's 4 x 2 arrangement), or the two fragments held throughout.
    let a_of = |q: usize| {
        if tiles {
            format!("%fa{}", q / 2)
        } else {
            "%ga".to_string()
        }
    };
    let b_of = |q: usize| {
        if tiles {
            format!("%fb{}", q % 2)
        } else {
            "%gb".to_string()
        }
    };
    for q in 0..ACCS {
        body += &format!(
            "    %n{q} = coop.mma {}, {}, %s{q} : coopmat<16x16xf16, a>, coopmat<16x16xf16, b>, {ty_c}\n",
            a_of(q),
            b_of(q)
        );
    }
    let carried: Vec<String> = (0..ACCS).map(|q| format!("%s{q} = %z : {ty_c}")).collect();
    let types = [ty_c; ACCS].join(", ");
    let results: Vec<String> = (0..ACCS).map(|q| format!("%r{q}")).collect();
    let yields: Vec<String> = (0..ACCS).map(|q| format!("%n{q}")).collect();
    let mut stores = String::new();
    for q in 0..ACCS {
        stores += &format!(
            "  %o{q} = index.constant {} : index
  %w{q} = index.add %base, %o{q} : index
  coop.store<row_major> %r{q}, %cv[%w{q}, %c0] : {ty_c}, view<[%crows]x16xf32>\n",
            16 * q
        );
    }
    let staging = if tiles {
        "  %ma = buffer.alloca<workgroup> align(16) %abytes : buffer
  %mb = buffer.alloca<workgroup> align(16) %bbytes : buffer
  %ta = buffer.view %ma[%zero] : buffer -> view<64x40xf16>
  %tb = buffer.view %mb[%zero] : buffer -> view<32x40xf16>
  scf.for %e = [%tid to %c2560 step %cth] {
    %er = index.div %e, %c40 : index
    %ec = index.rem %e, %c40 : index
    %eq = index.rem %e, %c16 : index
    %x = view.load %av[%eq, %eq] : view<16x16xf16> -> f16
    view.store %x, %ta[%er, %ec] : f16, view<64x40xf16>
    %inb = index.cmp ult, %er, %c32 : index
    scf.if %inb {
      view.store %x, %tb[%er, %ec] : f16, view<32x40xf16>
    }
  }
  kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
"
    } else {
        ""
    };
    format!(
        "kernel.def @coop_peak(%groups: index) {{
  %one = index.constant 1 : index
  %wg = index.constant {threads} : index
  kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%wg, %one, %one) : index
}} launch(%iters: index, %crows: index, %a: buffer {{readonly}}, %c: buffer) {{
  %zero = index.constant 0 : offset
  %abytes = index.constant 5120 : offset
  %bbytes = index.constant 2560 : offset
  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %c2 = index.constant 2 : index
  %c16 = index.constant 16 : index
  %c32 = index.constant 32 : index
  %c40 = index.constant 40 : index
  %c2560 = index.constant 2560 : index
  %cth = index.constant {threads} : index
  %cacc = index.constant {rows} : index
  %av = buffer.view %a[%zero] : buffer -> view<16x16xf16>
  %cv = buffer.view %c[%zero] : buffer -> view<[%crows]x16xf32>
  %tid = kernel.workitem.id<x> : index
  %sg = kernel.subgroup.id : index
  %wgx = kernel.workgroup.id<x> : index
  %nsg = index.constant {SUBGROUPS} : index
  %slot = index.madd %wgx, %nsg, %sg : index
  %base = index.mul %slot, %cacc : index
{staging}  %ga = coop.load<row_major> %av[%c0, %c0] : view<16x16xf16> -> coopmat<16x16xf16, a>
  %gb = coop.load<row_major> %av[%c0, %c0] : view<16x16xf16> -> coopmat<16x16xf16, b>
  %z = coop.zero : {ty_c}
  {results} = scf.for %t = [%c0 to %iters step %c1]({carried}) -> ({types}) {{
{body}    scf.yield {yields} : {types}
  }}
{stores}  kernel.return
}}
",
        rows = 16 * ACCS,
        results = results.join(", "),
        carried = carried.join(", "),
        yields = yields.join(", "),
    )
}

fn main() -> hrx_core::Result<()> {
    let runtime = Runtime::from_env()?;
    let target = runtime.gpu()?.target().clone();
    // Where the matmul kernel cannot run (no 16x16x16 f16 -> f32 shape, or
    // subgroups of varying size), neither can these.
    if coop_matmul_source(&target, 8192, false, None).is_none() {
        println!("{}: no cooperative-matrix matmul kernel here", target.name);
        return Ok(());
    }
    let sg = target.subgroup_size_max as usize;
    let compiler = Compiler::for_target(None, &target)?;
    // Several waves of one workgroup per compute unit on a 132-SM GPU.
    let (groups, iters) = (132 * 8, 2048usize);
    let crows = groups * SUBGROUPS * 16 * ACCS;
    let a = runtime.allocate(512, MemoryPlacement::HostVisible)?;
    a.map_write()?.fill(0x3c); // f16 bytes 0x3c3c (about 1.06): finite
    let c = runtime.allocate(crows * 16 * 4, MemoryPlacement::GpuLocal)?;
    for (name, tiles) in [("registers", false), ("workgroup tiles", true)] {
        let artifact = compiler
            .module(&source(tiles, sg))
            .and_then(|m| m.compile(&Specialization::new("@coop_peak")))?;
        let kernel = GpuKernel::new(&runtime, artifact.spirv(), artifact.contract())?;
        let constants = artifact.push_constants_from(&[
            ScalarValue::Index(iters as u64),
            ScalarValue::Index(crows as u64),
        ])?;
        let grid = artifact.launch(&[groups as u64])?;
        let mut graph = runtime.graph();
        graph.dispatch(&kernel, &[a.view(), c.view()], &constants, grid)?;
        let best = best_run_seconds(graph)?;
        let flop = (groups * SUBGROUPS * iters * ACCS) as f64 * 2.0 * 4096.0;
        println!(
            "{}: {name}: {:.1} TFLOP/s ({:.0} us)",
            target.name,
            flop / best / 1e12,
            best * 1e6
        );
    }
    Ok(())
}

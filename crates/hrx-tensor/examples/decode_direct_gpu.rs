//! Decode matmul without workgroup memory (run on the H200): each subgroup
//! loads its fragments of A and B straight from storage buffers and
//! multiplies them, with no barrier in its k loop, so subgroups never wait
//! for each other; split k's partial sums are summed by a second dispatch.
//! Measures whether that beats staging tiles between barriers.
//!
//! `cargo run --release -p hrx-tensor --example decode_direct_gpu [m]`
//! checks sampled elements exactly (small-integer inputs) and prints
//! TFLOP/s per variant; `HRX_DIRECT=g,wn,u,splits,prefetch,bt;...` picks
//! the variants.

use hrx_loom::{Artifact, Compiler, ScalarValue, Specialization};
use hrx_runtime::{Buffer, Graph, MemoryPlacement, Runtime};
use hrx_tensor::ops::{coop_matmul_source, kernel_from_artifact};
use std::time::Instant;

/// One variant: `g` subgroups per workgroup, each with `wn` column
/// fragments and all row fragments, `u` 16-deep products per iteration,
/// `splits` of k, fragments of the next iteration loaded before this one's
/// products (`prefetch`), B stored n x k (`bt`) and loaded column-major.
#[derive(Clone, Copy, Debug)]
struct Variant {
    g: usize,
    wn: usize,
    u: usize,
    splits: usize,
    prefetch: bool,
    bt: bool,
}

fn source(v: Variant, mf: usize) -> String {
    let ty_c = "coopmat<16x16xf32, c>";
    let ty_a = "coopmat<16x16xf16, a>";
    let ty_b = "coopmat<16x16xf16, b>";
    let cols = v.g * 16 * v.wn;
    let bview = if v.bt {
        "view<[%n]x[%k]xf16>"
    } else {
        "view<[%k]x[%n]xf16>"
    };
    let accs: Vec<(usize, usize)> = (0..mf)
        .flat_map(|i| (0..v.wn).map(move |j| (i, j)))
        .collect();
    // Lines loading the fragments at k offset `kv` into `%{p}a_{u}_{i}`,
    // `%{p}b_{u}_{j}`.
    let loads = |p: &str, kv: &str| {
        let mut l = String::new();
        for u in 0..v.u {
            l += &format!("    %{p}k_{u} = index.add {kv}, %du_{u} : index\n");
            for i in 0..mf {
                l += &format!(
                    "    %{p}a_{u}_{i} = coop.load<row_major> %av[%ri_{i}, %{p}k_{u}] : view<[%m]x[%k]xf16> -> {ty_a}\n"
                );
            }
            for j in 0..v.wn {
                l += &if v.bt {
                    format!(
                        "    %{p}b_{u}_{j} = coop.load<col_major> %bv[%cj_{j}, %{p}k_{u}] : {bview} -> {ty_b}\n"
                    )
                } else {
                    format!(
                        "    %{p}b_{u}_{j} = coop.load<row_major> %bv[%{p}k_{u}, %cj_{j}] : {bview} -> {ty_b}\n"
                    )
                };
            }
        }
        l
    };
    let frag_names: Vec<String> = (0..v.u)
        .flat_map(|u| {
            (0..mf)
                .map(move |i| format!("a_{u}_{i}"))
                .chain((0..v.wn).map(move |j| format!("b_{u}_{j}")))
        })
        .collect();
    let frag_ty = |name: &str| if name.starts_with('a') { ty_a } else { ty_b };
    let mut carried: Vec<String> = accs
        .iter()
        .map(|(i, j)| format!("%s_{i}_{j} = %z : {ty_c}"))
        .collect();
    let mut types: Vec<&str> = vec![ty_c; accs.len()];
    let mut results: Vec<String> = accs.iter().map(|(i, j)| format!("%r_{i}_{j}")).collect();
    let mut yields: Vec<String> = vec![];
    let mut setup = String::new();
    let mut body = String::new();
    // The fragments the products use: loaded in this iteration, or carried.
    let cur = if v.prefetch { "%h" } else { "%l" };
    if v.prefetch {
        setup += &loads("p", "%kbeg");
        for f in &frag_names {
            carried.push(format!("%h{f} = %p{f} : {}", frag_ty(f)));
            types.push(frag_ty(f));
            results.push(format!("%e{f}"));
        }
        body += "    %t1 = index.add %t, %c1 : index
    %tn = index.min %t1, %last : index
    %kn = index.madd %tn, %cstep, %kbeg : index
";
        body += &loads("l", "%kn");
    } else {
        body += "    %kt = index.madd %t, %cstep, %kbeg : index\n";
        body += &loads("l", "%kt");
    }
    let mut acc_name: Vec<String> = accs.iter().map(|(i, j)| format!("%s_{i}_{j}")).collect();
    for u in 0..v.u {
        for (q, (i, j)) in accs.iter().enumerate() {
            let next = format!("%m_{u}_{i}_{j}");
            body += &format!(
                "    {next} = coop.mma {cur}a_{u}_{i}, {cur}b_{u}_{j}, {} : {ty_a}, {ty_b}, {ty_c}\n",
                acc_name[q]
            );
            acc_name[q] = next;
        }
    }
    yields.extend(acc_name);
    if v.prefetch {
        yields.extend(frag_names.iter().map(|f| format!("%l{f}")));
    }
    let mut consts = String::new();
    for i in 0..mf {
        consts += &format!("  %ri_{i} = index.constant {} : index\n", 16 * i);
    }
    for j in 0..v.wn {
        consts += &format!(
            "  %dj_{j} = index.constant {} : index\n  %cj_{j} = index.add %col, %dj_{j} : index\n",
            16 * j
        );
    }
    for u in 0..v.u {
        consts += &format!("  %du_{u} = index.constant {} : index\n", 16 * u);
    }
    let mut stores = String::new();
    for (i, j) in &accs {
        stores += &format!(
            "  %wr_{i}_{j} = index.add %wrow, %ri_{i} : index
  coop.store<row_major> %r_{i}_{j}, %wv[%wr_{i}_{j}, %cj_{j}] : {ty_c}, view<[%wrows]x[%n]xf32>\n"
        );
    }
    format!(
        "kernel.def @decode_direct(%n: index, %splits: index) {{
  %one = index.constant 1 : index
  %cols = index.constant {cols} : index
  %gx = index.div %n, %cols : index
  %wg = index.constant {threads} : index
  kernel.launch.config workgroups(%gx, %splits, %one) workgroup_size(%wg, %one, %one) : index
}} launch(%m: index, %n: index, %k: index, %ks: index, %wrows: index,
         %a: buffer {{readonly}}, %b: buffer {{readonly}}, %w: buffer) {{
  %zero = index.constant 0 : offset
  %av = buffer.view %a[%zero] : buffer -> view<[%m]x[%k]xf16>
  %bv = buffer.view %b[%zero] : buffer -> {bview}
  %wv = buffer.view %w[%zero] : buffer -> view<[%wrows]x[%n]xf32>
  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %cstep = index.constant {step} : index
  %ccols = index.constant {cols} : index
  %cwn = index.constant {wcols} : index
  %cmp = index.constant {rows} : index
  %sg = kernel.subgroup.id : index
  %wgx = kernel.workgroup.id<x> : index
  %split = kernel.workgroup.id<y> : index
  %col0 = index.mul %wgx, %ccols : index
  %col = index.madd %sg, %cwn, %col0 : index
  %kbeg = index.mul %split, %ks : index
  %steps = index.div %ks, %cstep : index
  %last = index.sub %steps, %c1 : index
  %wrow = index.mul %split, %cmp : index
{consts}  %z = coop.zero : {ty_c}
{setup}  {results} = scf.for %t = [%c0 to %steps step %c1]({carried}) -> ({types}) {{
{body}    scf.yield {yields} : {types}
  }}
{stores}  kernel.return
}}
",
        threads = v.g * 32,
        step = 16 * v.u,
        wcols = 16 * v.wn,
        rows = 16 * mf,
        results = results.join(", "),
        carried = carried.join(", "),
        types = types.join(", "),
        yields = yields.join(", "),
    )
}

/// C[i, j] = sum over s of W[s * rows + i, j].
const SUM: &str = "kernel.def @splits_sum(%total: index) {
  %one = index.constant 1 : index
  %wg = index.constant 256 : index
  %l = index.constant 255 : index
  %p = index.add %total, %l : index
  %gx = index.div %p, %wg : index
  kernel.launch.config workgroups(%gx, %one, %one) workgroup_size(%wg, %one, %one) : index
} launch(%total: index, %splits: index, %lw: index, %w: buffer {readonly}, %c: buffer) {
  %zero = index.constant 0 : offset
  %wv = buffer.view %w[%zero] : buffer -> view<[%lw]xf32>
  %cv = buffer.view %c[%zero] : buffer -> view<[%total]xf32>
  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %c256 = index.constant 256 : index
  %tid = kernel.workitem.id<x> : index
  %wgx = kernel.workgroup.id<x> : index
  %i = index.madd %wgx, %c256, %tid : index
  %in = index.cmp ult, %i, %total : index
  scf.if %in {
    %f0 = scalar.constant 0.0 : f32
    %sum = scf.for %s = [%c0 to %splits step %c1](%acc = %f0 : f32) -> (f32) {
      %at = index.madd %s, %total, %i : index
      %x = view.load %wv[%at] : view<[%lw]xf32> -> f32
      %y = scalar.addf %acc, %x : f32
      scf.yield %y : f32
    }
    view.store %sum, %cv[%i] : f32, view<[%total]xf32>
  }
  kernel.return
}
";

fn a_value(i: usize, k: usize) -> f32 {
    ((i * 3 + k * 5) % 7) as f32 - 3.0
}
fn b_value(k: usize, j: usize) -> f32 {
    ((k * 7 + j * 11) % 5) as f32 - 2.0
}

/// A device-local buffer holding `halves`, uploaded through a staging copy.
fn upload(runtime: &Runtime, halves: &[half::f16]) -> hrx_core::Result<Buffer> {
    let bytes: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let staging = runtime.allocate(bytes.len(), MemoryPlacement::HostVisible)?;
    staging.map_write()?.copy_from_slice(&bytes);
    let device = runtime.allocate(bytes.len(), MemoryPlacement::GpuLocal)?;
    let mut graph = runtime.graph();
    graph.copy(device.view(), staging.view())?;
    graph.prepare()?.submit()?.wait()?;
    Ok(device)
}

fn compile(compiler: &Compiler, text: &str, symbol: &str) -> hrx_core::Result<Artifact> {
    compiler
        .module(text)
        .and_then(|m| m.compile(&Specialization::new(symbol)))
}

fn variants() -> Vec<Variant> {
    let text = std::env::var("HRX_DIRECT").unwrap_or_else(|_| {
        "4,2,2,8,1,0;4,2,2,8,0,0;4,1,4,8,1,0;4,2,2,8,1,1;8,1,2,8,1,0;4,2,2,4,1,0;4,2,2,16,1,0"
            .into()
    });
    text.split(';')
        .filter_map(|v| {
            let d: Vec<usize> = v
                .split(',')
                .map(|x| x.trim().parse().ok())
                .collect::<Option<_>>()?;
            let [g, wn, u, splits, prefetch, bt]: [usize; 6] = d.try_into().ok()?;
            Some(Variant {
                g,
                wn,
                u,
                splits,
                prefetch: prefetch != 0,
                bt: bt != 0,
            })
        })
        .collect()
}

fn main() -> hrx_core::Result<()> {
    let m: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let runtime = Runtime::new()?;
    let target = runtime.gpu()?.target().clone();
    if coop_matmul_source(&target, 8192, false, None).is_none() {
        // Compile for the H200's facts instead, so the kernels can be
        // checked (spirv-val with HRX_SPIRV_VAL) where they cannot run.
        let hopper = hrx_core::Target::hopper();
        let compiler = Compiler::for_target(None, &hopper)?;
        for v in variants() {
            compile(&compiler, &source(v, m.div_ceil(16)), "@decode_direct")?;
            println!("{v:?}: compiles for {}", hopper.name);
        }
        println!("{}: no cooperative-matrix matmul kernel here", target.name);
        return Ok(());
    }
    let (n, k) = if target.name.contains("llvmpipe") {
        (512, 512)
    } else {
        (4096, 4096)
    };
    let mf = m.div_ceil(16);
    let rows = 16 * mf;
    let compiler = Compiler::for_target(None, &target)?;
    let a: Vec<half::f16> = (0..rows * k)
        .map(|e| {
            half::f16::from_f32(if e / k < m {
                a_value(e / k, e % k)
            } else {
                0.0
            })
        })
        .collect();
    let b_kn: Vec<half::f16> = (0..k * n)
        .map(|e| half::f16::from_f32(b_value(e / n, e % n)))
        .collect();
    let b_nk: Vec<half::f16> = (0..n * k)
        .map(|e| half::f16::from_f32(b_value(e % k, e / k)))
        .collect();
    let a_buf = upload(&runtime, &a)?;
    let b_buf = upload(&runtime, &b_kn)?;
    let bt_buf = upload(&runtime, &b_nk)?;
    let c_buf = runtime.allocate(rows * n * 4, MemoryPlacement::GpuLocal)?;
    let readback = runtime.allocate(rows * n * 4, MemoryPlacement::HostVisible)?;
    let sum_artifact = compile(&compiler, SUM, "@splits_sum")?;
    let sum_kernel = kernel_from_artifact(&runtime, &sum_artifact)?;
    let samples: Vec<(usize, usize)> = (0..61).map(|s| ((s * 13) % m, (s * 577 + 3) % n)).collect();
    let flop = 2.0 * (m * n * k) as f64;
    for v in variants() {
        let cols = v.g * 16 * v.wn;
        let ks = k / v.splits;
        if n % cols != 0 || k % v.splits != 0 || ks % (16 * v.u) != 0 {
            println!("{v:?}: does not divide {m}x{k}x{n}, skipped");
            continue;
        }
        let artifact = match compile(&compiler, &source(v, mf), "@decode_direct") {
            Ok(a) => a,
            Err(e) => {
                println!("{v:?}: does not compile: {e}");
                continue;
            }
        };
        let kernel = kernel_from_artifact(&runtime, &artifact)?;
        let wrows = v.splits * rows;
        let w_buf = runtime.allocate(wrows * n * 4, MemoryPlacement::GpuLocal)?;
        let index = |x: usize| ScalarValue::Index(x as u64);
        let constants = artifact.push_constants_from(&[
            index(m),
            index(n),
            index(k),
            index(ks),
            index(wrows),
        ])?;
        let grid = artifact.launch(&[n as u64, v.splits as u64])?;
        let total = rows * n;
        let sum_constants =
            sum_artifact.push_constants_from(&[index(total), index(v.splits), index(wrows * n)])?;
        let sum_grid = sum_artifact.launch(&[total as u64])?;
        let b_view = if v.bt { bt_buf.view() } else { b_buf.view() };
        let record = |graph: &mut Graph| -> hrx_core::Result<()> {
            graph.dispatch(
                &kernel,
                &[a_buf.view(), b_view.clone(), w_buf.view()],
                &constants,
                grid,
            )?;
            graph.dispatch(
                &sum_kernel,
                &[w_buf.view(), c_buf.view()],
                &sum_constants,
                sum_grid,
            )
        };
        // Check once.
        let mut graph = runtime.graph();
        record(&mut graph)?;
        graph.copy(readback.view(), c_buf.view())?;
        graph.prepare()?.submit()?.wait()?;
        let got: Vec<f32> = readback
            .map_read()?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let wrong = samples
            .iter()
            .filter(|&&(i, j)| {
                let want: f32 = (0..k).map(|q| a_value(i, q) * b_value(q, j)).sum();
                got[i * n + j] != want
            })
            .count();
        // Time 200 in a row, best of 5 submissions.
        let reps = 200;
        let mut graph = runtime.graph();
        for _ in 0..reps {
            record(&mut graph)?;
        }
        let prepared = graph.prepare()?;
        prepared.submit()?.wait()?;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            prepared.submit()?.wait()?;
            best = best.min(start.elapsed().as_secs_f64() / reps as f64);
        }
        println!(
            "m={m} {v:?}: {:.1} TFLOP/s ({:.2} us), {} of {} samples wrong",
            flop / best / 1e12,
            best * 1e6,
            wrong,
            samples.len()
        );
    }
    Ok(())
}

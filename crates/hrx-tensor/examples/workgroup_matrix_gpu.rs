//! Workgroup-scope cooperative matrices (`VK_NV_cooperative_matrix2`) on
//! this device: the probes behind docs/tensor.md's "Workgroup-scope
//! matrices" (run on the H200; hrx's own kernels do not use them).
//!
//! The SPIR-V comes from `bench/workgroup_matrix/probe_spirv.py` (loom
//! lowers through naga, which has no workgroup-scope matrices or tensor
//! layouts), one file per probe, named `KIND_{a}x{b}x{c}_{threads}.spv`:
//!
//! - `wg`, `wt`, `wp`: C = A B at 8192^3 (A, B f16 row-major, C f32) with
//!   BM x BN x BK workgroup tiles: plain loads, tensor-addressed loads, and
//!   tensor-addressed loads issued a step ahead. 97 sampled elements are
//!   checked exactly (small-integer inputs).
//! - `pkr`, `pks`: the multiply-add ceiling of one BM x BN x BK product per
//!   step, factors held in registers or loaded from workgroup memory.
//! - `dk`: decode-shaped split-k partial sums, M x 4096 x 4096 with M = a,
//!   2, 4 or 8 splits, checked in 31 sampled elements.
//!
//! ```text
//! python3 bench/workgroup_matrix/probe_spirv.py probes wt,128,128,32,128 pkr,128,256,32,256
//! cargo run --release -p hrx-tensor --example workgroup_matrix_gpu -- probes/*.spv
//! ```

#[path = "common/best_run.rs"]
mod best_run;

use best_run::best_run_seconds;
use hrx_core::{Error, Result};
use hrx_runtime::{
    Access, BindingContract, Buffer, GpuKernel, KernelContract, MemoryPlacement, Runtime,
    RuntimeOptions,
};

fn value_a(i: usize, k: usize) -> f32 {
    ((i * 3 + k * 5) % 7) as f32 - 3.0
}

fn value_b(k: usize, j: usize) -> f32 {
    ((k * 2 + j * 7) % 5) as f32 - 2.0
}

fn main() -> Result<()> {
    let runtime = Runtime::with_options(RuntimeOptions::default().with_workgroup_matrices())?;
    let target = runtime.gpu()?.target().clone();
    let Some(facts) = &target.workgroup_matrices else {
        println!("{}: no workgroup-scope cooperative matrices", target.name);
        return Ok(());
    };
    println!("{}: {facts:?}", target.name);
    for path in std::env::args().skip(1) {
        let name = std::path::Path::new(&path)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let Some((kind, dims)) = parse(&name) else {
            println!("{name}: not a probe name");
            continue;
        };
        let words = read_spirv(&path)?;
        match kind {
            "wg" | "wt" | "wp" => matmul(&runtime, &name, words, dims)?,
            "pkr" | "pks" => peak(&runtime, &name, words, dims)?,
            "dk" => decode(&runtime, &name, words, dims)?,
            _ => println!("{name}: unknown probe kind"),
        }
    }
    Ok(())
}

/// `KIND_{a}x{b}x{c}_{threads}` -> (KIND, [a, b, c, threads]).
fn parse(name: &str) -> Option<(&str, [usize; 4])> {
    let (kind, rest) = name.split_once('_')?;
    let dims: Vec<usize> = rest
        .split(['x', '_'])
        .map(|d| d.parse().ok())
        .collect::<Option<_>>()?;
    Some((kind, dims.try_into().ok()?))
}

fn read_spirv(path: &str) -> Result<Vec<u32>> {
    let bytes = std::fs::read(path).map_err(|e| Error::Message(format!("{path}: {e}")))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect())
}

/// The kernel, or `None` (reported) when the driver refuses it.
fn kernel(
    runtime: &Runtime,
    name: &str,
    words: Vec<u32>,
    bindings: &[(usize, Access)],
    push_constant_bytes: u32,
    threads: usize,
) -> Option<GpuKernel> {
    let contract = KernelContract {
        entry_point: "main".into(),
        bindings: bindings
            .iter()
            .map(|&(min_bytes, access)| BindingContract {
                min_bytes,
                alignment: 16,
                access,
            })
            .collect(),
        push_constant_bytes,
        workgroup_size: [threads as u32, 1, 1],
    };
    GpuKernel::new(runtime, &words, contract)
        .map_err(|e| println!("{name}: {e}"))
        .ok()
}

/// A device-local `rows x cols` f16 matrix of `f(row, col)`.
fn upload(
    runtime: &Runtime,
    rows: usize,
    cols: usize,
    f: fn(usize, usize) -> f32,
) -> Result<Buffer> {
    let bytes = rows * cols * 2;
    let host = runtime.allocate(bytes, MemoryPlacement::HostVisible)?;
    {
        let mut map = host.map_write()?;
        for (i, half) in map.chunks_exact_mut(2).enumerate() {
            let value = half::f16::from_f32(f(i / cols, i % cols));
            half.copy_from_slice(&value.to_bits().to_le_bytes());
        }
    }
    let device = runtime.allocate(bytes, MemoryPlacement::GpuLocal)?;
    let mut graph = runtime.graph();
    graph.copy(device.view(), host.view())?;
    graph.prepare()?.submit()?.wait()?;
    Ok(device)
}

/// The f32 at element `i` of a mapped buffer.
fn f32_at(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

/// Sampled (row, column) pairs of an `m x n` result.
fn samples(count: usize, m: usize, n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..count).map(move |s| ((s * 7919 + 13) % m, (s * 104_729 + 5) % n))
}

/// The exact product element (i, j) of the probe inputs, depth `k`.
fn reference(i: usize, j: usize, k: usize) -> f32 {
    (0..k).map(|q| value_a(i, q) * value_b(q, j)).sum()
}

/// One dispatch into `c` (poisoned with NaN first so unwritten elements
/// fail), copied to the host-visible `readback`.
fn run_into(
    runtime: &Runtime,
    dispatch: (&GpuKernel, &[hrx_runtime::BufferView], &[u8], [u32; 3]),
    c: &Buffer,
    readback: &Buffer,
) -> Result<()> {
    let (kernel, views, constants, grid) = dispatch;
    let mut graph = runtime.graph();
    graph.fill(c.view(), 0x7fc0_0000)?;
    graph.dispatch(kernel, views, constants, grid)?;
    graph.copy(readback.view(), c.view())?;
    graph.prepare()?.submit()?.wait()?;
    Ok(())
}

/// Seconds per dispatch: the best of five replays of `reps` in one graph.
fn seconds_per_dispatch(
    runtime: &Runtime,
    dispatch: (&GpuKernel, &[hrx_runtime::BufferView], &[u8], [u32; 3]),
    reps: usize,
) -> Result<f64> {
    let (kernel, views, constants, grid) = dispatch;
    let mut graph = runtime.graph();
    for _ in 0..reps {
        graph.dispatch(kernel, views, constants, grid)?;
    }
    Ok(best_run_seconds(graph)? / reps as f64)
}

fn push_constants(values: &[usize]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| (v as u32).to_le_bytes())
        .collect()
}

/// C = A B at 8192^3 with `bm x bn` tiles per workgroup.
fn matmul(runtime: &Runtime, name: &str, words: Vec<u32>, dims: [usize; 4]) -> Result<()> {
    let [bm, bn, _, threads] = dims;
    let size = 8192;
    let (m, n, k) = (size, size, size);
    let bindings = [
        (m * k * 2, Access::Read),
        (k * n * 2, Access::Read),
        (m * n * 4, Access::Write),
    ];
    let Some(kernel) = kernel(runtime, name, words, &bindings, 12, threads) else {
        return Ok(());
    };
    let a = upload(runtime, m, k, value_a)?;
    let b = upload(runtime, k, n, value_b)?;
    let c = runtime.allocate(m * n * 4, MemoryPlacement::GpuLocal)?;
    let readback = runtime.allocate(m * n * 4, MemoryPlacement::HostVisible)?;
    let constants = push_constants(&[m, n, k]);
    let grid = [(n / bn) as u32, (m / bm) as u32, 1];
    let views = [a.view(), b.view(), c.view()];
    let dispatch = (&kernel, &views[..], &constants[..], grid);
    run_into(runtime, dispatch, &c, &readback)?;
    let wrong = {
        let map = readback.map_read()?;
        samples(97, m, n)
            .filter(|&(i, j)| f32_at(&map, i * n + j) != reference(i, j, k))
            .count()
    };
    let seconds = seconds_per_dispatch(runtime, dispatch, 10)?;
    let flop = 2.0 * (m * n * k) as f64;
    println!(
        "{name}: {:.1} TFLOP/s ({:.0} us), {wrong} of 97 sampled elements wrong",
        flop / seconds / 1e12,
        seconds * 1e6
    );
    Ok(())
}

/// The multiply-add ceiling: 4 workgroups per SM of a 132-SM GPU, each
/// 2048 products of its tile.
fn peak(runtime: &Runtime, name: &str, words: Vec<u32>, dims: [usize; 4]) -> Result<()> {
    let [bm, bn, bk, threads] = dims;
    let (groups, iterations) = (132 * 4, 2048);
    let a_bytes = (bm * bk).max(bk * bn) * 2;
    let c_bytes = groups * bm * bn * 4;
    let bindings = [(a_bytes, Access::Read), (c_bytes, Access::Write)];
    let Some(kernel) = kernel(runtime, name, words, &bindings, 4, threads) else {
        return Ok(());
    };
    let a = runtime.allocate(a_bytes, MemoryPlacement::GpuLocal)?;
    let c = runtime.allocate(c_bytes, MemoryPlacement::GpuLocal)?;
    let mut graph = runtime.graph();
    graph.fill(a.view(), 0x3c00_3c00)?; // f16 ones: finite products
    graph.prepare()?.submit()?.wait()?;
    let mut graph = runtime.graph();
    let constants = push_constants(&[iterations]);
    graph.dispatch(
        &kernel,
        &[a.view(), c.view()],
        &constants,
        [groups as u32, 1, 1],
    )?;
    let seconds = best_run_seconds(graph)?;
    let flop = 2.0 * (groups * bm * bn * bk * iterations) as f64;
    println!(
        "{name}: {:.1} TFLOP/s ({:.0} us)",
        flop / seconds / 1e12,
        seconds * 1e6
    );
    Ok(())
}

/// Decode split-k: per split s, `C_s = A[:, s*kr..] B[s*kr.., :]` (no
/// reduction), `m x 4096 x 4096`.
fn decode(runtime: &Runtime, name: &str, words: Vec<u32>, dims: [usize; 4]) -> Result<()> {
    let [m, bn, _, threads] = dims;
    let (n, k) = (4096, 4096);
    let a = upload(runtime, m, k, value_a)?;
    let b = upload(runtime, k, n, value_b)?;
    for splits in [2usize, 4, 8] {
        let c_bytes = splits * m * n * 4;
        let bindings = [
            (m * k * 2, Access::Read),
            (k * n * 2, Access::Read),
            (c_bytes, Access::Write),
        ];
        let Some(kernel) = kernel(runtime, name, words.clone(), &bindings, 16, threads) else {
            return Ok(());
        };
        let c = runtime.allocate(c_bytes, MemoryPlacement::GpuLocal)?;
        let readback = runtime.allocate(c_bytes, MemoryPlacement::HostVisible)?;
        let constants = push_constants(&[m, n, k, k / splits]);
        let grid = [(n / bn) as u32, splits as u32, 1];
        let views = [a.view(), b.view(), c.view()];
        let dispatch = (&kernel, &views[..], &constants[..], grid);
        run_into(runtime, dispatch, &c, &readback)?;
        let wrong = {
            let map = readback.map_read()?;
            samples(31, m, n)
                .filter(|&(i, j)| {
                    let got: f32 = (0..splits).map(|s| f32_at(&map, (s * m + i) * n + j)).sum();
                    got != reference(i, j, k)
                })
                .count()
        };
        let seconds = seconds_per_dispatch(runtime, dispatch, 50)?;
        let flop = 2.0 * (m * n * k) as f64;
        println!(
            "{name} splits {splits}: {:.1} TFLOP/s ({:.1} us), {wrong} of 31 sampled elements wrong",
            flop / seconds / 1e12,
            seconds * 1e6
        );
    }
    Ok(())
}

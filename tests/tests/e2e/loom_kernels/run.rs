//! Helpers for running loom kernels on the live device (lavapipe in CI):
//! one shared runtime, compilation for its `Target`, poisoned buffers with
//! guard words, a seeded PRNG and tolerance checks against f64 references.
#![allow(dead_code)]

use hrx::{
    Target,
    execution::{Buffer, GpuKernel, MemoryPlacement, Runtime},
    loom::{Artifact, Compiler, ScalarValue, Specialization},
};

/// The word every output is filled with before a run: a quiet NaN as f32,
/// an odd pattern as an integer, so an unwritten element never passes.
pub const POISON: u32 = 0x7fc0_dead;
/// Words after every output that the kernel must leave poisoned.
pub const GUARD: usize = 16;

/// The shared device, its target and a compiler for it.
pub struct Gpu {
    pub runtime: Runtime,
    pub target: Target,
    compiler: Compiler,
}

/// This thread's device (opened once per test thread). Each test gets its
/// own runtime domain: hrx-runtime records graphs from one command pool per
/// domain without a lock, so concurrent `prepare`s on one domain from
/// several test threads trip the validation layers' threading checks.
pub fn gpu() -> &'static Gpu {
    thread_local! {
        static GPU: &'static Gpu = Box::leak(Box::new(open()));
    }
    GPU.with(|g| *g)
}

fn open() -> Gpu {
    let runtime = Runtime::from_env().expect("runtime");
    let target = runtime.gpu().expect("device").target().clone();
    let compiler = Compiler::for_target(None, &target).expect("compiler");
    Gpu {
        runtime,
        target,
        compiler,
    }
}

/// A compiled kernel and its pipeline.
pub struct Kernel {
    pub artifact: Artifact,
    pub gpu: GpuKernel,
}

impl Gpu {
    /// Compile `spec` of `source` for the live target and build its pipeline.
    pub fn kernel(&self, source: &str, spec: &Specialization) -> Kernel {
        let module = self
            .compiler
            .module(source)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.symbol()));
        let artifact = module
            .compile(spec)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.symbol()));
        let gpu = GpuKernel::new(&self.runtime, artifact.spirv(), artifact.contract())
            .unwrap_or_else(|e| panic!("{}: {e}", spec.symbol()));
        Kernel { artifact, gpu }
    }

    /// A host-visible buffer holding `words`, then `GUARD` poisoned words.
    pub fn input(&self, words: &[u32]) -> Buffer {
        let buffer = self
            .runtime
            .allocate(4 * (words.len() + GUARD), MemoryPlacement::HostVisible)
            .expect("allocate");
        let mut mapped = buffer.map_write().expect("map_write");
        let all = words.iter().copied().chain(std::iter::repeat(POISON));
        for (chunk, w) in mapped.chunks_exact_mut(4).zip(all) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        drop(mapped);
        buffer
    }

    /// A host-visible buffer of `words` poisoned words plus the guard.
    pub fn output(&self, words: usize) -> Buffer {
        self.input(&vec![POISON; words])
    }

    /// Dispatch `k` once over `buffers` (whole) with `scalars` as push
    /// constants and the grid the launch region gives for `workload`;
    /// wait for it.
    pub fn run(&self, k: &Kernel, buffers: &[&Buffer], scalars: &[ScalarValue], workload: &[u64]) {
        let args = k
            .artifact
            .dispatch_args(scalars, workload)
            .expect("dispatch arguments");
        let views: Vec<_> = buffers.iter().map(|b| b.view()).collect();
        let mut graph = self.runtime.graph();
        graph
            .dispatch(&k.gpu, &views, &args.push_constants, args.workgroups)
            .expect("dispatch");
        let done = graph.prepare().expect("prepare").submit().expect("submit");
        done.wait().expect("wait");
    }
}

/// Every word of a buffer.
pub fn words(b: &Buffer) -> Vec<u32> {
    let mapped = b.map_read().expect("map_read");
    mapped
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

/// The first `n` words of a buffer, after checking that the guard words
/// from `n` on are still poisoned.
pub fn read(label: &str, b: &Buffer, n: usize) -> Vec<u32> {
    let all = words(b);
    for (i, &w) in all.iter().enumerate().skip(n) {
        assert_eq!(w, POISON, "{label}: word {i} past the output was written");
    }
    all[..n].to_vec()
}

/// The first `n` f32s of a buffer (guard checked).
pub fn read_f32(label: &str, b: &Buffer, n: usize) -> Vec<f32> {
    read(label, b, n).into_iter().map(f32::from_bits).collect()
}

/// f32 values as words.
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Compare `got` with the f64 reference `want`: element `i` passes when
/// `|got - want| <= tol(i)`. Reports the first failures with their index.
pub fn check(label: &str, got: &[f32], want: &[f64], tol: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{label}: length");
    let mut bad = Vec::new();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (f64::from(g) - w).abs() <= tol(i);
        if !ok {
            bad.push(format!("[{i}] got {g:e}, want {w:e} (tol {:e})", tol(i)));
        }
    }
    assert!(
        bad.is_empty(),
        "{label}: {} of {} wrong, first: {:?}",
        bad.len(),
        got.len(),
        &bad[..bad.len().min(8)]
    );
}

/// A relative-plus-absolute tolerance.
pub fn rel(want: &[f64], rtol: f64, atol: f64) -> impl Fn(usize) -> f64 + '_ {
    move |i| atol + rtol * want[i].abs()
}

/// splitmix64: a small seeded PRNG (no crate needed).
pub struct Rng(u64);

impl Rng {
    /// A generator with a fixed seed (runs are reproducible).
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi), never exactly zero.
    pub fn f32_in(&mut self, lo: f32, hi: f32) -> f32 {
        loop {
            let x = (f64::from(lo) + self.unit() * f64::from(hi - lo)) as f32;
            if x != 0.0 {
                return x;
            }
        }
    }

    /// `n` values from `f32_in(lo, hi)`.
    pub fn f32s(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32_in(lo, hi)).collect()
    }
}

/// Index workload/scalar shorthand.
pub fn idx(v: usize) -> ScalarValue {
    ScalarValue::Index(v as u64)
}

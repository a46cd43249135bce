//! The public entry point: a [`Compiler`] for one target, parsed and
//! verified [`Module`]s, and cached compilation of kernels to [`Artifact`]s.
//!
//! Every stage is also callable on its own (for benchmarks and tools):
//! [`crate::front::parse`], [`crate::verify::verify`],
//! [`crate::specialize::specialize`], [`crate::lower::lower`],
//! [`crate::emit::validate`] and [`crate::emit::write_spirv`].

use crate::artifact::Artifact;
use crate::cache::{Cache, CacheHit, StableHasher};
use crate::specialize::Specialization;
use crate::{emit, ir, lower, specialize};
use hrx_core::{Result, Target};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Compiles loom for one [`Target`]. Cheap to clone; clones share the
/// compile cache. `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Compiler {
    inner: Arc<Inner>,
    max_source_bytes: usize,
}

/// The default of [`Compiler::with_max_source_bytes`]: 16 MiB, about
/// 400,000 ops, which verify in about two seconds (compile time is linear
/// in the source's size).
pub const DEFAULT_MAX_SOURCE_BYTES: usize = 16 << 20;

#[derive(Debug)]
struct Inner {
    target: Target,
    fingerprint: String,
    cache: Cache,
    stats: Stats,
}

#[derive(Debug, Default)]
struct Stats {
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    compiles: AtomicU64,
}

/// Counters of a compiler's cache, shared by its clones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Compiles answered from memory.
    pub memory_hits: u64,
    /// Compiles answered from the disk cache.
    pub disk_hits: u64,
    /// Compiles that ran the whole pipeline.
    pub compiles: u64,
}

impl Compiler {
    /// A compiler for `target`, caching in memory and, when `cache_dir` is
    /// given, on disk under that directory (created if missing).
    pub fn for_target(cache_dir: Option<&Path>, target: &Target) -> Result<Compiler> {
        Ok(Compiler {
            inner: Arc::new(Inner {
                target: target.clone(),
                fingerprint: target.fingerprint(),
                cache: Cache::new(cache_dir)?,
                stats: Stats::default(),
            }),
            max_source_bytes: DEFAULT_MAX_SOURCE_BYTES,
        })
    }

    /// Refuse sources longer than `bytes` with a compile error (code
    /// E0107) before any work; the default is [`DEFAULT_MAX_SOURCE_BYTES`].
    /// A server that compiles kernels from its users sets its own bound.
    ///
    /// ```
    /// use hrx_core::Target;
    /// let compiler = hrx_loom::Compiler::for_target(None, &Target::lavapipe())
    ///     .unwrap()
    ///     .with_max_source_bytes(16);
    /// let err = compiler.module("// a comment longer than sixteen bytes").unwrap_err();
    /// assert!(err.to_string().contains("E0107"));
    /// ```
    pub fn with_max_source_bytes(mut self, bytes: usize) -> Self {
        self.max_source_bytes = bytes;
        self
    }

    /// The longest source [`Compiler::module`] accepts, in bytes.
    pub fn max_source_bytes(&self) -> usize {
        self.max_source_bytes
    }

    /// The target this compiler generates code for.
    pub fn target(&self) -> &Target {
        &self.inner.target
    }

    /// Parse and verify `source`. Errors are [`hrx_core::Error::Compile`]
    /// with every diagnostic found.
    pub fn module(&self, source: &str) -> Result<Module> {
        if source.len() > self.max_source_bytes {
            let mut diags = crate::diag::Diagnostics::new();
            diags.error(
                crate::front::Span::new(0, 0),
                crate::diag::codes::SOURCE_TOO_LARGE,
                format!(
                    "the source is {} bytes, over this compiler's limit of {} bytes (see Compiler::with_max_source_bytes)",
                    source.len(),
                    self.max_source_bytes
                ),
            );
            return Err(diags.into_error(source));
        }
        let ast = crate::front::parse(source)?;
        let ir = crate::verify::verify(&ast, source)?;
        let mut h = StableHasher::default();
        h.field(source.as_bytes());
        Ok(Module {
            compiler: self.clone(),
            source: Arc::from(source),
            source_hash: h.finish(),
            ir: Arc::new(ir),
        })
    }

    /// Parse and verify a built module's printed text (see
    /// [`crate::build`]): the same checks and diagnostics as
    /// [`Compiler::module`] on that text.
    pub fn built(&self, module: &crate::build::Built) -> Result<Module> {
        self.module(module.text())
    }

    /// Cache counters so far.
    pub fn cache_stats(&self) -> CacheStats {
        let s = &self.inner.stats;
        CacheStats {
            memory_hits: s.memory_hits.load(Ordering::Relaxed),
            disk_hits: s.disk_hits.load(Ordering::Relaxed),
            compiles: s.compiles.load(Ordering::Relaxed),
        }
    }

    /// Where the disk cache would keep `module`'s artifact for `spec`
    /// (`None` without a cache directory). For tools and tests.
    pub fn cache_path(&self, module: &Module, spec: &Specialization) -> Option<std::path::PathBuf> {
        self.inner.cache.path(self.key(module, spec))
    }

    fn key(&self, module: &Module, spec: &Specialization) -> u128 {
        let mut h = StableHasher::default();
        h.bytes(&module.source_hash.to_le_bytes());
        h.field(spec.symbol().as_bytes());
        for (k, v) in spec.config() {
            h.field(k.as_bytes());
            h.field(v.key_text().as_bytes());
        }
        h.field(self.inner.fingerprint.as_bytes());
        h.finish()
    }
}

/// A parsed and verified loom module, bound to the compiler that made it.
#[derive(Clone, Debug)]
pub struct Module {
    compiler: Compiler,
    source: Arc<str>,
    source_hash: u128,
    ir: Arc<ir::Module>,
}

impl Module {
    /// Names of the kernels in the module (without `@`), in source order.
    pub fn kernels(&self) -> Vec<&str> {
        self.ir.kernels.iter().map(|k| k.name.as_str()).collect()
    }

    /// The verified IR.
    pub fn ir(&self) -> &ir::Module {
        &self.ir
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Compile one kernel, from the cache when the same (source, symbol,
    /// config, target) was compiled before.
    pub fn compile(&self, spec: &Specialization) -> Result<Artifact> {
        let inner = &self.compiler.inner;
        let key = self.compiler.key(self, spec);
        if let Some((artifact, hit)) = inner.cache.get(key) {
            let counter = match hit {
                CacheHit::Memory => &inner.stats.memory_hits,
                CacheHit::Disk => &inner.stats.disk_hits,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return Ok(artifact);
        }
        let artifact = self.compile_uncached(spec)?;
        inner.stats.compiles.fetch_add(1, Ordering::Relaxed);
        inner.cache.put(key, &artifact);
        Ok(artifact)
    }

    /// Run specialize, lower and emit, bypassing the cache.
    pub fn compile_uncached(&self, spec: &Specialization) -> Result<Artifact> {
        let target = &self.compiler.inner.target;
        let s = specialize::specialize(&self.ir, spec, target, &self.source)?;
        let lowered = lower::lower(&s.kernel, s.workgroup_size, target, &self.source)?;
        let spirv = emit::emit_source(&lowered.module, target, &lowered.entry_point, &self.source)?;
        Ok(Artifact {
            kernel: s.kernel.name.clone(),
            spirv,
            entry_point: lowered.entry_point,
            bindings: lowered.bindings,
            push_constants: lowered.push_constants,
            push_constant_bytes: lowered.push_constant_bytes,
            workgroup_size: s.workgroup_size,
            launch: s.launch,
        })
    }
}

//! Per-domain kernel cache: loom kernels (hand-written or built), compiled
//! for the device's [`Target`] at first use, and kept as
//! pipelines.

use hrx_core::{Error, Result, Target, cached_init};
use hrx_loom::{Artifact, Compiler, ScalarValue, Specialization, build::Built};
use hrx_runtime::{BufferView, GpuKernel, Graph, Runtime};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

/// A compiled kernel: its artifact (launch program, push-constant layout)
/// and the pipeline built from it.
#[derive(Clone)]
pub(crate) struct Kernel {
    pub(crate) artifact: Arc<Artifact>,
    pub(crate) gpu: GpuKernel,
}

impl Kernel {
    /// Record one dispatch: the grid from the launch program's `workload`,
    /// the push constants from `scalars` (in declaration order).
    pub(crate) fn record(
        &self,
        graph: &mut Graph,
        operation: &str,
        views: &[BufferView],
        scalars: &[ScalarValue],
        workload: &[u64],
    ) -> Result<()> {
        self.launch(operation, scalars, workload)?
            .record(graph, views)
    }

    /// The push constants and grid of one dispatch, checked without
    /// touching a graph, for operators that must take graph resources
    /// (scratch) only once nothing else can fail.
    pub(crate) fn launch<'a>(
        &'a self,
        operation: &'a str,
        scalars: &[ScalarValue],
        workload: &[u64],
    ) -> Result<Launch<'a>> {
        let context = |e: Error| Error::Message(format!("{operation}: {e}"));
        Ok(Launch {
            kernel: self,
            operation,
            constants: self
                .artifact
                .push_constants_from(scalars)
                .map_err(context)?,
            grid: self.artifact.launch(workload).map_err(context)?,
        })
    }
}

/// A dispatch of a [`Kernel`] whose push constants and grid are built.
pub(crate) struct Launch<'a> {
    kernel: &'a Kernel,
    operation: &'a str,
    constants: Vec<u8>,
    grid: [u32; 3],
}

impl Launch<'_> {
    /// Record the dispatch over `views`.
    pub(crate) fn record(&self, graph: &mut Graph, views: &[BufferView]) -> Result<()> {
        graph
            .dispatch(&self.kernel.gpu, views, &self.constants, self.grid)
            .map_err(|e| Error::Message(format!("{}: {e}", self.operation)))
    }
}

/// Instantiation of one kernel: its source, the kernel symbol and its
/// config values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KernelKey {
    pub(crate) source: KernelSource,
    pub(crate) symbol: &'static str,
    pub(crate) config: Vec<(&'static str, u64)>,
}

/// Where a kernel's loom text comes from: a kernel is hand-written text
/// or built, never text assembled by code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum KernelSource {
    /// A hand-written `.loom` file, compiled as it is.
    Text(&'static str),
    /// A kernel built with [`hrx_loom::build`], on first use only.
    Built(Generator),
}

/// A kernel generator and the parameters it was given: keys compare and
/// hash by the parameters, so a kernel is built once per registry, when
/// it is first compiled.
#[derive(Clone)]
pub(crate) struct Generator {
    /// The generator's name and every parameter the kernel depends on
    /// besides the registry's target, as text.
    params: String,
    build: Arc<dyn Fn() -> Built + Send + Sync>,
}

impl Generator {
    /// `build`, identified by `params` (see [`Generator::params`]).
    pub(crate) fn new(params: String, build: impl Fn() -> Built + Send + Sync + 'static) -> Self {
        Generator {
            params,
            build: Arc::new(build),
        }
    }
}

impl PartialEq for Generator {
    fn eq(&self, other: &Self) -> bool {
        self.params == other.params
    }
}

impl Eq for Generator {}

impl std::hash::Hash for Generator {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.params.hash(state);
    }
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Generator({})", self.params)
    }
}

impl KernelKey {
    /// The loom text.
    pub(crate) fn source(&self) -> String {
        match &self.source {
            KernelSource::Text(text) => (*text).to_string(),
            KernelSource::Built(generator) => (generator.build)().into_text(),
        }
    }
}

/// The kernel cache of one runtime domain.
pub(crate) struct Registry {
    runtime: Runtime,
    compiler: Mutex<Option<Compiler>>,
    zeros: Mutex<Option<BufferView>>,
    kernels: Mutex<HashMap<KernelKey, Kernel>>,
}

impl Registry {
    pub(crate) fn new(runtime: Runtime) -> Self {
        Registry {
            runtime,
            compiler: Mutex::new(None),
            zeros: Mutex::new(None),
            kernels: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The device's target facts (opens the device).
    pub(crate) fn target(&self) -> Result<Target> {
        Ok(self.compiler()?.target().clone())
    }

    fn compiler(&self) -> Result<Compiler> {
        cached_init(&self.compiler, || {
            Compiler::for_target(None, self.runtime.gpu()?.target())
        })
    }

    /// 16 bytes of zeros, bound where a kernel's operand is absent or empty
    /// (never written).
    pub(crate) fn zeros(&self) -> Result<BufferView> {
        cached_init(&self.zeros, || {
            Ok(self
                .runtime
                .allocate(16, hrx_runtime::MemoryPlacement::GpuLocal)?
                .view())
        })
    }

    /// Kernels compiled and built so far.
    pub(crate) fn kernel_count(&self) -> usize {
        self.kernels.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The kernel for `key`, compiled and built on first use.
    pub(crate) fn kernel(&self, key: KernelKey) -> Result<Kernel> {
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kernel) = kernels.get(&key) {
            return Ok(kernel.clone());
        }
        let compiler = self.compiler()?;
        let module = compiler.module(&key.source())?;
        let mut spec = Specialization::new(format!("@{}", key.symbol));
        for &(name, value) in &key.config {
            spec = spec.with_config(name, value);
        }
        let artifact = module.compile(&spec)?;
        let kernel = Kernel {
            // loom's artifact -> contract bridge, the runtime's contract ->
            // pipeline: the only path from a compiled kernel to a pipeline.
            gpu: GpuKernel::new(&self.runtime, artifact.spirv(), artifact.contract())?,
            artifact: Arc::new(artifact),
        };
        kernels.insert(key, kernel.clone());
        Ok(kernel)
    }
}

//! The runtime's side: the workloads as hrx graphs, prepared once.

use super::{
    contender::{CHAIN_LEN, CHAIN_WORDS, Contender, ONE_WORDS},
    kernel,
};
use hrx_runtime::{
    Access, BindingContract, Buffer, BufferView, Completion, ExecutableGraph, GpuKernel,
    KernelContract, MemoryPlacement, Runtime,
};

fn text(error: hrx_runtime::Error) -> String {
    format!("hrx: {error}")
}

/// The workloads on one runtime domain.
pub struct HrxSide {
    runtime: Runtime,
    one: ExecutableGraph,
    one_dst: Buffer,
    chain: ExecutableGraph,
    chain_a: Buffer,
    chain_replays: u32,
    copy: Option<Copy>,
}

struct Copy {
    graph: ExecutableGraph,
    dst: Buffer,
    _src: Buffer,
}

const FILL: u32 = 0x5a5a_a5a5;

impl HrxSide {
    /// Build the kernel from `spirv` and prepare the one-dispatch graph and
    /// the 64-dispatch chain.
    pub fn new(runtime: &Runtime, spirv: &[u32]) -> Result<HrxSide, String> {
        let binding = |access| BindingContract {
            min_bytes: 4,
            alignment: 4,
            access,
        };
        let contract = KernelContract {
            entry_point: "main".into(),
            bindings: vec![binding(Access::Read), binding(Access::Write)],
            push_constant_bytes: 0,
            workgroup_size: [kernel::WORKGROUP, 1, 1],
        };
        let add_one = GpuKernel::new(runtime, spirv, contract).map_err(text)?;
        let local = |words: usize| {
            runtime
                .allocate(words * 4, MemoryPlacement::GpuLocal)
                .map_err(text)
        };

        let (one_src, one_dst) = (local(ONE_WORDS)?, local(ONE_WORDS)?);
        let mut graph = runtime.graph();
        let groups = [kernel::groups(ONE_WORDS), 1, 1];
        graph
            .dispatch(&add_one, &[one_src.view(), one_dst.view()], &[], groups)
            .map_err(text)?;
        let one = graph.prepare().map_err(text)?;

        let (chain_a, chain_b) = (local(CHAIN_WORDS)?, local(CHAIN_WORDS)?);
        let mut graph = runtime.graph();
        let groups = [kernel::groups(CHAIN_WORDS), 1, 1];
        for step in 0..CHAIN_LEN {
            let (src, dst) = if step % 2 == 0 {
                (&chain_a, &chain_b)
            } else {
                (&chain_b, &chain_a)
            };
            graph
                .dispatch(&add_one, &[src.view(), dst.view()], &[], groups)
                .map_err(text)?;
        }
        let chain = graph.prepare().map_err(text)?;
        if chain.barriers().len() != CHAIN_LEN - 1 {
            return Err(format!(
                "hrx: the chain has {} barriers, expected {}",
                chain.barriers().len(),
                CHAIN_LEN - 1
            ));
        }
        Ok(HrxSide {
            runtime: runtime.clone(),
            one,
            one_dst,
            chain,
            chain_a,
            chain_replays: 0,
            copy: None,
        })
    }

    /// The first `words` words of a device-local view, through a host copy.
    fn read_back(&self, view: BufferView, words: usize) -> Result<Vec<u32>, String> {
        let host = self
            .runtime
            .allocate(words * 4, MemoryPlacement::HostVisible)
            .map_err(text)?;
        let mut graph = self.runtime.graph();
        graph
            .copy(host.view(), view.slice(0..words * 4).map_err(text)?)
            .map_err(text)?;
        graph
            .prepare()
            .map_err(text)?
            .submit()
            .map_err(text)?
            .wait()
            .map_err(text)?;
        let mapped = host.map_read().map_err(text)?;
        Ok(mapped
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect())
    }
}

fn run(graph: &ExecutableGraph) -> Result<Completion, String> {
    graph.submit().map_err(text)
}

impl Contender for HrxSide {
    fn round_trip(&mut self) -> Result<(), String> {
        run(&self.one)?.wait().map_err(text)
    }

    fn burst(&mut self, n: usize) -> Result<(), String> {
        let mut last = Completion::ready();
        for _ in 0..n {
            last = run(&self.one)?;
        }
        last.wait().map_err(text)
    }

    fn chain(&mut self, n: usize) -> Result<(), String> {
        let mut last = Completion::ready();
        for _ in 0..n {
            last = run(&self.chain)?;
            self.chain_replays = self.chain_replays.wrapping_add(1);
        }
        last.wait().map_err(text)
    }

    fn prepare_copy(&mut self, bytes: usize) -> Result<(), String> {
        let src = self
            .runtime
            .allocate(bytes, MemoryPlacement::GpuLocal)
            .map_err(text)?;
        let dst = self
            .runtime
            .allocate(bytes, MemoryPlacement::GpuLocal)
            .map_err(text)?;
        let mut fill = self.runtime.graph();
        fill.fill(src.view(), FILL).map_err(text)?;
        fill.prepare()
            .map_err(text)?
            .submit()
            .map_err(text)?
            .wait()
            .map_err(text)?;
        let mut graph = self.runtime.graph();
        graph.copy(dst.view(), src.view()).map_err(text)?;
        let graph = graph.prepare().map_err(text)?;
        self.copy = Some(Copy {
            graph,
            dst,
            _src: src,
        });
        Ok(())
    }

    fn copy(&mut self) -> Result<(), String> {
        let copy = self.copy.as_ref().ok_or("hrx: copy not prepared")?;
        run(&copy.graph)?.wait().map_err(text)
    }

    fn verify_and_release(&mut self) -> Result<(), String> {
        let one = self.read_back(self.one_dst.view(), ONE_WORDS)?;
        let chain = self.read_back(self.chain_a.view(), CHAIN_WORDS)?;
        let expected = self.chain_replays.wrapping_mul(CHAIN_LEN as u32);
        if one.iter().any(|&w| w != 1) {
            return Err("hrx: the one-dispatch graph computed wrong words".into());
        }
        if let Some(i) = chain.iter().position(|&w| w != expected) {
            return Err(format!(
                "hrx: chain word {i} is {}, expected {expected}",
                chain[i]
            ));
        }
        if let Some(copy) = self.copy.take() {
            let words = copy.dst.len().min(1 << 20) / 4;
            let head = self.read_back(copy.dst.view(), words)?;
            if head.iter().any(|&w| w != FILL) {
                return Err("hrx: the copy's destination differs from its source".into());
            }
        }
        Ok(())
    }
}

//! The fixed work of one MLP request, taken from hrx itself so that the
//! raw-ash baseline runs exactly the same kernels: a slot is built with
//! `Mlp::build_slot`, and `Graph::operations` lists its dispatches (SPIR-V,
//! contract, bound byte ranges, push constants, grid). The bound storage is
//! grouped into regions (overlapping views share one) and read back, so
//! the baseline starts from the same bytes (weights, zeroed scratch).

use hrx_inference::{ModelContext, SlotBuilder};
use hrx_models::toy::Mlp;
use hrx_runtime::{BufferView, KernelContract, MemoryPlacement, Operation};
use hrx_tensor::Ops;

/// A pipeline to build: the words and the contract of one distinct kernel.
pub struct KernelCode {
    pub spirv: Vec<u32>,
    pub contract: KernelContract,
    /// How many dispatches use it (descriptor sets to allocate).
    pub uses: u32,
}

/// A byte range inside a region.
#[derive(Clone, Copy, Debug)]
pub struct Range {
    pub region: usize,
    pub offset: usize,
    pub bytes: usize,
}

/// One dispatch, in terms of regions.
pub struct Dispatch {
    pub kernel: usize,
    pub bindings: Vec<Range>,
    pub constants: Vec<u8>,
    pub workgroups: [u32; 3],
}

/// Everything the raw baseline records.
pub struct Plan {
    pub kernels: Vec<KernelCode>,
    /// Initial contents of each region.
    pub regions: Vec<Vec<u8>>,
    pub dispatches: Vec<Dispatch>,
    pub input: Range,
    pub output: Range,
}

fn text(error: hrx_core::Error) -> String {
    format!("hrx: {error}")
}

/// Storage regions: unions of overlapping views, each with the views it
/// covers (to read its bytes back) and its extent in its allocation.
struct Regions {
    members: Vec<Vec<BufferView>>,
    extent: Vec<(usize, usize)>,
}

impl Regions {
    /// The region holding `view` (merging regions the view bridges).
    fn add(&mut self, view: &BufferView) -> usize {
        let touching: Vec<usize> = (0..self.members.len())
            .filter(|&r| self.members[r].iter().any(|m| m.overlaps(view)))
            .collect();
        let (mut start, mut end) = (view.offset(), view.offset() + view.len());
        let mut members = vec![view.clone()];
        for &r in touching.iter().rev() {
            let (s, e) = self.extent.remove(r);
            start = start.min(s);
            end = end.max(e);
            members.extend(self.members.remove(r));
        }
        self.members.push(members);
        self.extent.push((start, end));
        self.members.len() - 1
    }

    /// Where `view` lies, once every view has been added.
    fn locate(&self, view: &BufferView) -> Result<Range, String> {
        let region = (0..self.members.len())
            .find(|&r| self.members[r].iter().any(|m| m.overlaps(view)))
            .ok_or("plan: a view outside every region")?;
        Ok(Range {
            region,
            offset: view.offset() - self.extent[region].0,
            bytes: view.len(),
        })
    }
}

/// Read `view`'s bytes through a host-visible copy.
fn read_back(context: &ModelContext, view: &BufferView) -> Result<Vec<u8>, String> {
    let runtime = context.runtime();
    let host = runtime
        .allocate(view.len(), MemoryPlacement::HostVisible)
        .map_err(text)?;
    let mut graph = runtime.graph();
    graph.copy(host.view(), view.clone()).map_err(text)?;
    let done = graph.prepare().map_err(text)?.submit().map_err(text)?;
    done.wait().map_err(text)?;
    Ok(host.map_read().map_err(text)?.to_vec())
}

/// Build one slot of `mlp` and describe its work.
pub fn extract(context: &ModelContext, mlp: &Mlp) -> Result<Plan, String> {
    let ops = Ops::new(context.runtime());
    let mut slot = SlotBuilder::new(context, &ops);
    mlp.build_slot(&mut slot).map_err(text)?;
    let mut kernels: Vec<KernelCode> = Vec::new();
    let mut recorded = Vec::new();
    for operation in slot.graph().operations() {
        let Operation::Dispatch {
            kernel,
            views,
            constants,
            workgroups,
        } = operation
        else {
            return Err(format!(
                "plan: only dispatches are replayed, found {operation:?}"
            ));
        };
        let index = match kernels
            .iter()
            .position(|k| k.spirv == kernel.spirv() && &k.contract == kernel.contract())
        {
            Some(index) => index,
            None => {
                kernels.push(KernelCode {
                    spirv: kernel.spirv().to_vec(),
                    contract: kernel.contract().clone(),
                    uses: 0,
                });
                kernels.len() - 1
            }
        };
        kernels[index].uses += 1;
        recorded.push((index, views.to_vec(), constants.to_vec(), workgroups));
    }
    let built = slot.finish().map_err(text)?;
    let io = |tensors: &[hrx_tensor::DeviceTensor], what: &str| match tensors {
        [one] => one
            .binding()
            .ok_or_else(|| format!("plan: the {what} is empty")),
        _ => Err(format!(
            "plan: expected one {what}, found {}",
            tensors.len()
        )),
    };
    let (input, output) = (io(&built.inputs, "input")?, io(&built.outputs, "output")?);

    let mut regions = Regions {
        members: Vec::new(),
        extent: Vec::new(),
    };
    for view in recorded
        .iter()
        .flat_map(|(_, views, _, _)| views)
        .chain([&input, &output])
    {
        regions.add(view);
    }
    let mut dispatches = Vec::new();
    for (kernel, views, constants, workgroups) in &recorded {
        dispatches.push(Dispatch {
            kernel: *kernel,
            bindings: views
                .iter()
                .map(|v| regions.locate(v))
                .collect::<Result<_, _>>()?,
            constants: constants.clone(),
            workgroups: *workgroups,
        });
    }
    let mut contents = Vec::new();
    for (members, &(start, end)) in regions.members.iter().zip(&regions.extent) {
        let mut bytes = vec![0u8; end - start];
        for view in members {
            let at = view.offset() - start;
            bytes[at..at + view.len()].copy_from_slice(&read_back(context, view)?);
        }
        contents.push(bytes);
    }
    Ok(Plan {
        kernels,
        regions: contents,
        dispatches,
        input: regions.locate(&input)?,
        output: regions.locate(&output)?,
    })
}

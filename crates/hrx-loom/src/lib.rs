//! The loom compiler: loom text to verified IR to a `naga::Module` to SPIR-V.
//!
//! # Stages
//!
//! Each stage is its own module, in the way naga itself is organised:
//!
//! 1. **front** ([`front`]): a hand-written lexer and recursive-descent
//!    parser producing a syntax tree ([`front::ast`]) with a byte span on
//!    every piece, and a printer ([`front::print`]) whose output parses back
//!    to the same tree.
//! 2. **verify** ([`verify`]): names, SSA dominance and region scoping;
//!    types with no implicit casts and operand counts; the launch region
//!    (index arithmetic, workload arguments and config values only; exactly
//!    one `kernel.launch.config`; a workgroup size computed from constants
//!    and config values); config keys; symbol uniqueness; buffer access
//!    inference and the read-only rule (no store or atomic through a view
//!    of a buffer argument declared `%b: buffer {readonly}`); and the
//!    uniformity of barriers (workgroup-uniform control flow) and subgroup
//!    collectives and cooperative-matrix ops (subgroup-uniform control
//!    flow), which naga's analysis, knowing no subgroup level, cannot
//!    judge (emit runs naga's validator without it). Its output is the
//!    [`ir`], whose invariants later stages rely on.
//! 3. **specialize**: config values by key.
//! 4. **lower**: IR to `naga::Module` (buffer arguments become storage
//!    bindings in argument order, scalar arguments one push-constant block,
//!    workgroup allocations whole 16-byte granules so each stays aligned).
//! 5. **emit**: naga validation, then SPIR-V, with a few word-level fixes
//!    where naga's output and Vulkan disagree (capabilities naga declares
//!    wrongly or not at all, workgroup array strides, and, under the
//!    Vulkan memory model, non-private workgroup accesses and storage
//!    accesses around `kernel.barrier<storage>`, which barriers order).
//!
//! Kernels whose code depends on parameters are built in Rust with
//! [`build`]: a typed builder over the syntax tree, whose modules print as
//! canonical text and go through the same stages (and [`build::passes`]:
//! inlining with fresh names, vectorizing).
//!
//! # Contracts
//!
//! - **No input panics the compiler**, overflows the stack or hangs. The
//!   parser and verifier bound region nesting explicitly
//!   ([`front::parser::MAX_DEPTH`], [`verify::MAX_DEPTH`]); IR walks are
//!   iterative; every numeric literal goes through checked conversions.
//! - **Errors are diagnostics.** Every failure of the source is an
//!   [`hrx_core::Error::Compile`] holding [`hrx_core::Diagnostic`]s: a
//!   stable code ([`diag::codes`]: E01xx syntax, E02xx names and SSA, E03xx
//!   types and operand counts, E04xx access and uniformity, E05xx launch and
//!   config, E06xx lowering), a message, a 1-based line and column and a
//!   caret excerpt. Independent errors are reported together: the parser
//!   resumes at the next op after a syntax error, and the verifier gives a
//!   failed definition an unknown type so its uses do not cascade.
//! - **Host evaluation** of launch regions ([`ir::Kernel::launch_grid`],
//!   [`ir::Kernel::workgroup_size`]) refuses overflow and division by zero
//!   rather than wrapping.
//!
//! # Running kernels
//!
//! The compiler stands beside the runtime, not above it: both depend only
//! on hrx-core, whose kernel vocabulary ([`hrx_core::KernelContract`],
//! [`hrx_core::DispatchArgs`]) is what passes between them.
//! [`Artifact::contract`] and [`Artifact::dispatch_args`] produce it;
//! `hrx_runtime::GpuKernel::new(&runtime, artifact.spirv(),
//! artifact.contract())` builds the pipeline, and a graph dispatch takes the
//! arguments' push constants and workgroups. hrx-tensor's operator library
//! does exactly this for every kernel it compiles.

pub mod build;
pub mod diag;
pub mod front;
pub mod ir;
pub mod verify;

// Back half of the pipeline (L2): specialize, lower, emit, artifacts.
pub mod artifact;
mod cache;
pub mod compiler;
pub mod emit;
pub mod launch;
pub mod lower;
pub mod specialize;

pub use artifact::{Access, Artifact, Binding, PushConstant, ScalarType, ScalarValue};
pub use compiler::{CacheStats, Compiler, DEFAULT_MAX_SOURCE_BYTES, Module};
pub use specialize::{ConfigValue, Specialization};

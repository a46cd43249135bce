//! loom types to naga types, and the module-level declarations: storage
//! bindings, workgroup arrays and the push-constant block.

use super::builder::ty;
use super::plan::Layout;
use crate::ir::{Scalar, Type};
use naga::{
    AddressSpace, ArraySize, GlobalVariable, Handle, MemoryDecorations, ResourceBinding,
    StorageAccess, StructMember, TypeInner, UniqueArena, VectorSize,
};

/// The naga scalar of a loom element type.
pub(crate) fn scalar(s: Scalar) -> naga::Scalar {
    match s {
        Scalar::I32 => naga::Scalar::I32,
        Scalar::U32 => naga::Scalar::U32,
        Scalar::F32 => naga::Scalar::F32,
        Scalar::F16 => naga::Scalar::F16,
    }
}

/// The naga vector size of a lane count (2..=4, checked by the verifier).
pub(crate) fn vector_size(len: u8) -> Option<VectorSize> {
    match len {
        2 => Some(VectorSize::Bi),
        3 => Some(VectorSize::Tri),
        4 => Some(VectorSize::Quad),
        _ => None,
    }
}

/// The naga type of a loom value type; `None` for buffers and views, which
/// are not first-class values after lowering.
pub(crate) fn value_inner(t: &Type) -> Option<TypeInner> {
    Some(match t {
        Type::Index | Type::Offset | Type::U32 => TypeInner::Scalar(naga::Scalar::U32),
        Type::I1 => TypeInner::Scalar(naga::Scalar::BOOL),
        Type::I32 => TypeInner::Scalar(naga::Scalar::I32),
        Type::F32 => TypeInner::Scalar(naga::Scalar::F32),
        Type::F16 => TypeInner::Scalar(naga::Scalar::F16),
        Type::Vector { len, elem } => TypeInner::Vector {
            size: vector_size(*len)?,
            scalar: scalar(*elem),
        },
        Type::CoopMat(m) => return super::coop::coop_inner(m),
        Type::Buffer | Type::View(_) => return None,
    })
}

/// The naga scalar of a loom value type (lane type for vectors).
pub(crate) fn value_scalar(t: &Type) -> Option<naga::Scalar> {
    match value_inner(t)? {
        TypeInner::Scalar(s) | TypeInner::Vector { scalar: s, .. } => Some(s),
        _ => None,
    }
}

/// The declared element type of an array with `layout`.
pub(crate) fn element_type(
    types: &mut UniqueArena<naga::Type>,
    layout: Layout,
    atomic: bool,
) -> Handle<naga::Type> {
    let inner = match layout {
        Layout::Scalar(s) if atomic => TypeInner::Atomic(scalar(s)),
        Layout::Scalar(s) => TypeInner::Scalar(scalar(s)),
        Layout::Vec4(s) => TypeInner::Vector {
            size: VectorSize::Quad,
            scalar: scalar(s),
        },
        Layout::Words => TypeInner::Scalar(naga::Scalar::U32),
    };
    ty(types, inner)
}

/// A storage-buffer global: a runtime-sized array at (group 0, `binding`).
pub(crate) fn storage_global(
    module: &mut naga::Module,
    name: &str,
    binding: u32,
    layout: Layout,
    atomic: bool,
    writable: bool,
) -> Handle<GlobalVariable> {
    let base = element_type(&mut module.types, layout, atomic);
    let array = ty(
        &mut module.types,
        TypeInner::Array {
            base,
            size: ArraySize::Dynamic,
            stride: layout.element_bytes(),
        },
    );
    let access = if writable {
        StorageAccess::LOAD | StorageAccess::STORE
    } else {
        StorageAccess::LOAD
    };
    module.global_variables.append(
        GlobalVariable {
            name: Some(name.to_string()),
            space: AddressSpace::Storage { access },
            binding: Some(ResourceBinding { group: 0, binding }),
            ty: array,
            init: None,
            memory_decorations: MemoryDecorations::empty(),
        },
        naga::Span::UNDEFINED,
    )
}

/// A workgroup-memory global: a fixed array of `count` elements.
pub(crate) fn workgroup_global(
    module: &mut naga::Module,
    name: &str,
    layout: Layout,
    atomic: bool,
    count: std::num::NonZeroU32,
) -> Handle<GlobalVariable> {
    let base = element_type(&mut module.types, layout, atomic);
    let array = ty(
        &mut module.types,
        TypeInner::Array {
            base,
            size: ArraySize::Constant(count),
            stride: layout.element_bytes(),
        },
    );
    module.global_variables.append(
        GlobalVariable {
            name: Some(name.to_string()),
            space: AddressSpace::WorkGroup,
            binding: None,
            ty: array,
            init: None,
            memory_decorations: MemoryDecorations::empty(),
        },
        naga::Span::UNDEFINED,
    )
}

/// The push-constant block: one 4-byte member per scalar argument, at
/// offsets 0, 4, 8, ... (every member is 4 bytes, so std430 packs them
/// densely). `i1` travels as a `u32` 0 or 1 (bool is not host-shareable).
pub(crate) fn push_constant_global(
    module: &mut naga::Module,
    members: &[(String, naga::Scalar)],
) -> Handle<GlobalVariable> {
    let members: Vec<StructMember> = members
        .iter()
        .enumerate()
        .map(|(i, (name, s))| StructMember {
            name: Some(name.clone()),
            ty: ty(&mut module.types, TypeInner::Scalar(*s)),
            binding: None,
            offset: 4 * i as u32,
        })
        .collect();
    let span = 4 * members.len() as u32;
    let block = ty(&mut module.types, TypeInner::Struct { members, span });
    module.global_variables.append(
        GlobalVariable {
            name: Some("loom_scalars".into()),
            space: AddressSpace::Immediate,
            binding: None,
            ty: block,
            init: None,
            memory_decorations: MemoryDecorations::empty(),
        },
        naga::Span::UNDEFINED,
    )
}

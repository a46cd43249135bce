//! `VK_NV_cooperative_matrix2`'s workgroup-scope, flexible-dimension
//! cooperative matrices: discovery and the feature structure to enable.
//!
//! ash 0.38's headers predate the extension, so its three structures are
//! declared here, field for field as in the Vulkan registry. Only the two
//! features hrx uses are enabled (workgroup scope, flexible dimensions and
//! tensor addressing where present);
//! `Target::workgroup_matrices` is `Some` only where both are present.

use crate::instance::{Instance, component_kind};
use ash::vk;
use hrx_core::{WorkgroupMatrices, WorkgroupMatrixShape};
use std::ffi::{CStr, c_void};

/// The extension's name.
pub(crate) const NAME: &CStr = c"VK_NV_cooperative_matrix2";

const STRUCTURE_FEATURES: i32 = 1_000_593_000;
const STRUCTURE_FLEXIBLE_PROPERTIES: i32 = 1_000_593_001;
const STRUCTURE_PROPERTIES: i32 = 1_000_593_002;

/// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV`.
#[repr(C)]
pub(crate) struct Features {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    pub(crate) workgroup_scope: vk::Bool32,
    pub(crate) flexible_dimensions: vk::Bool32,
    reductions: vk::Bool32,
    conversions: vk::Bool32,
    per_element_operations: vk::Bool32,
    tensor_addressing: vk::Bool32,
    block_loads: vk::Bool32,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            s_type: vk::StructureType::from_raw(STRUCTURE_FEATURES),
            p_next: std::ptr::null_mut(),
            workgroup_scope: vk::FALSE,
            flexible_dimensions: vk::FALSE,
            reductions: vk::FALSE,
            conversions: vk::FALSE,
            per_element_operations: vk::FALSE,
            tensor_addressing: vk::FALSE,
            block_loads: vk::FALSE,
        }
    }
}

impl Features {
    /// The features hrx enables: workgroup scope, flexible dimensions and,
    /// where `facts` has it, tensor addressing.
    pub(crate) fn used(facts: &WorkgroupMatrices) -> Self {
        Features {
            workgroup_scope: vk::TRUE,
            flexible_dimensions: vk::TRUE,
            tensor_addressing: if facts.tensor_addressing {
                vk::TRUE
            } else {
                vk::FALSE
            },
            ..Features::default()
        }
    }
}

// SAFETY: `Features` is laid out as the registry's structure, starts with
// sType and pNext like every chainable structure, and the registry lists it
// as extending both.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Features {}

/// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`.
#[repr(C)]
struct Properties {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    workgroup_scope_max_workgroup_size: u32,
    flexible_dimensions_max_dimension: u32,
    workgroup_scope_reserved_shared_memory: u32,
}

// SAFETY: laid out as the registry's structure, which extends
// VkPhysicalDeviceProperties2.
unsafe impl vk::ExtendsPhysicalDeviceProperties2 for Properties {}

/// `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`.
#[repr(C)]
#[derive(Clone, Copy)]
struct FlexibleProperties {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    m_granularity: u32,
    n_granularity: u32,
    k_granularity: u32,
    a_type: vk::ComponentTypeKHR,
    b_type: vk::ComponentTypeKHR,
    c_type: vk::ComponentTypeKHR,
    result_type: vk::ComponentTypeKHR,
    saturating_accumulation: vk::Bool32,
    scope: vk::ScopeKHR,
    workgroup_invocations: u32,
}

type EnumerateFlexible =
    unsafe extern "system" fn(vk::PhysicalDevice, *mut u32, *mut FlexibleProperties) -> vk::Result;

/// The device's workgroup-scope matrices, when it advertises the extension
/// with both features hrx uses and at least one workgroup-scope shape.
pub(crate) fn query(instance: &Instance, device: vk::PhysicalDevice) -> Option<WorkgroupMatrices> {
    let mut features = Features::default();
    let mut chain = vk::PhysicalDeviceFeatures2::default().push_next(&mut features);
    let mut properties = Properties {
        s_type: vk::StructureType::from_raw(STRUCTURE_PROPERTIES),
        p_next: std::ptr::null_mut(),
        workgroup_scope_max_workgroup_size: 0,
        flexible_dimensions_max_dimension: 0,
        workgroup_scope_reserved_shared_memory: 0,
    };
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut properties);
    // SAFETY: the caller checked that the device advertises the extension;
    // the chained structures match the registry's and outlive the calls.
    unsafe {
        instance
            .raw
            .get_physical_device_features2(device, &mut chain);
        instance
            .raw
            .get_physical_device_properties2(device, &mut props);
    }
    if features.workgroup_scope != vk::TRUE || features.flexible_dimensions != vk::TRUE {
        return None;
    }
    let name = c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV";
    // SAFETY: a name lookup on a live instance.
    let raw = unsafe {
        instance
            .entry
            .get_instance_proc_addr(instance.raw.handle(), name.as_ptr())
    }?;
    // SAFETY: the registry gives the command this signature.
    let enumerate: EnumerateFlexible = unsafe { std::mem::transmute(raw) };
    let blank = FlexibleProperties {
        s_type: vk::StructureType::from_raw(STRUCTURE_FLEXIBLE_PROPERTIES),
        p_next: std::ptr::null_mut(),
        m_granularity: 0,
        n_granularity: 0,
        k_granularity: 0,
        a_type: vk::ComponentTypeKHR::default(),
        b_type: vk::ComponentTypeKHR::default(),
        c_type: vk::ComponentTypeKHR::default(),
        result_type: vk::ComponentTypeKHR::default(),
        saturating_accumulation: vk::FALSE,
        scope: vk::ScopeKHR::default(),
        workgroup_invocations: 0,
    };
    let mut count = 0u32;
    // SAFETY: the standard two-call enumeration; the buffer holds `count`
    // initialised structures with sType set.
    let listed = unsafe {
        if enumerate(device, &mut count, std::ptr::null_mut()) != vk::Result::SUCCESS {
            return None;
        }
        let mut listed = vec![blank; count as usize];
        let result = enumerate(device, &mut count, listed.as_mut_ptr());
        if result != vk::Result::SUCCESS && result != vk::Result::INCOMPLETE {
            return None;
        }
        listed.truncate(count as usize);
        listed
    };
    let mut shapes: Vec<WorkgroupMatrixShape> = listed
        .iter()
        .filter(|p| {
            p.scope == vk::ScopeKHR::WORKGROUP
                && p.a_type == p.b_type
                && p.c_type == p.result_type
                && p.saturating_accumulation == vk::FALSE
        })
        .filter_map(|p| {
            Some(WorkgroupMatrixShape {
                m_granularity: p.m_granularity,
                n_granularity: p.n_granularity,
                k_granularity: p.k_granularity,
                input: component_kind(p.a_type)?,
                accumulator: component_kind(p.c_type)?,
                workgroup_invocations: p.workgroup_invocations,
            })
        })
        .collect();
    shapes.dedup();
    (!shapes.is_empty()).then_some(WorkgroupMatrices {
        max_workgroup_invocations: properties.workgroup_scope_max_workgroup_size,
        max_dimension: properties.flexible_dimensions_max_dimension,
        reserved_workgroup_bytes: properties.workgroup_scope_reserved_shared_memory,
        tensor_addressing: features.tensor_addressing == vk::TRUE,
        shapes,
    })
}

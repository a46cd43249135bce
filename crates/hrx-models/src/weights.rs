//! Host-side named f32 tensors and the deterministic generator that fills
//! the toy models' seeded weights.

use hrx_core::{Error, Result};
use std::collections::BTreeMap;

/// Host-side named f32 tensors (row-major). Every tensor's value count
/// matches its shape; names are unique.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Weights {
    tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
}

/// The element count of `shape`, or `None` on overflow.
pub(crate) fn elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

impl Weights {
    /// No tensors.
    pub fn new() -> Weights {
        Weights::default()
    }

    /// Add a tensor. The value count must equal the shape's element count
    /// and the name must be new.
    pub fn insert(&mut self, name: &str, shape: Vec<usize>, values: Vec<f32>) -> Result<()> {
        if self.tensors.contains_key(name) {
            return Err(Error::Message(format!(
                "weight {name:?} is already present"
            )));
        }
        if elements(&shape) != Some(values.len()) {
            return Err(Error::Message(format!(
                "weight {name:?} of shape {shape:?} needs as many values as elements, got {}",
                values.len()
            )));
        }
        self.tensors.insert(name.to_owned(), (shape, values));
        Ok(())
    }

    /// The values of tensor `name`, which must have exactly `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<&[f32]> {
        let (found, values) = self
            .tensors
            .get(name)
            .ok_or_else(|| Error::Message(format!("weight {name:?} is missing")))?;
        if found != shape {
            return Err(Error::Message(format!(
                "weight {name:?} has shape {found:?}, expected {shape:?}"
            )));
        }
        Ok(values)
    }

    /// The shape of tensor `name`, if present.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|(shape, _)| shape.as_slice())
    }

    /// The tensor names, in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Every tensor with its shape and values, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[usize], &[f32])> {
        self.tensors
            .iter()
            .map(|(name, (shape, values))| (name.as_str(), shape.as_slice(), values.as_slice()))
    }

    /// The total number of values over all tensors.
    pub fn parameter_count(&self) -> usize {
        self.tensors.values().map(|(_, values)| values.len()).sum()
    }
}

/// A small deterministic generator (splitmix64): the same seed gives the
/// same weights on every platform.
pub(crate) struct Seeded(u64);

impl Seeded {
    pub(crate) fn new(seed: u64) -> Seeded {
        Seeded(seed ^ 0x5EED_0F44_C0DE)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `[-scale, -scale/20] ∪ [scale/20, scale]`: never zero, so
    /// a dropped term always shows in a comparison.
    pub(crate) fn nonzero(&mut self, scale: f32) -> f32 {
        let bits = self.next();
        let unit = (bits >> 40) as f32 / (1u64 << 24) as f32;
        let magnitude = scale * (0.05 + 0.95 * unit);
        if bits & 1 == 0 { magnitude } else { -magnitude }
    }

    /// `n` nonzero values around `center`, spread by `scale`.
    pub(crate) fn values(&mut self, n: usize, center: f32, scale: f32) -> Vec<f32> {
        (0..n).map(|_| center + self.nonzero(scale)).collect()
    }

    /// Insert a seeded tensor (the caller's shapes are valid by
    /// construction, so insertion cannot fail).
    pub(crate) fn fill(
        &mut self,
        weights: &mut Weights,
        name: &str,
        shape: &[usize],
        center: f32,
        scale: f32,
    ) {
        let n = elements(shape).unwrap_or(0);
        let values = self.values(n, center, scale);
        weights
            .tensors
            .insert(name.to_owned(), (shape.to_vec(), values));
    }
}

//! Shape arithmetic for operators: numpy broadcasting, and coalescing the
//! axes of several strided operands into the few a kernel addresses.

use hrx_core::{Error, Result};

/// The numpy broadcast of two shapes (aligned at the last axis; extents
/// must match or be 1).
///
/// ```
/// use hrx_tensor::ops::broadcast_shapes;
/// assert_eq!(broadcast_shapes(&[4, 1, 3], &[5, 1]).unwrap(), [4, 5, 3]);
/// assert!(broadcast_shapes(&[2, 3], &[4]).is_err());
/// ```
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], i: usize| (i + s.len()).checked_sub(rank).map_or(1, |j| s[j]);
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(Error::Message(format!(
                "shapes {a:?} and {b:?} do not broadcast"
            ))),
        })
        .collect()
}

/// The element strides an operand of `shape`/`strides` has when read at the
/// indices of `out` (0 on broadcast axes). `shape` must broadcast to `out`.
pub(crate) fn broadcast_strides(shape: &[usize], strides: &[usize], out: &[usize]) -> Vec<usize> {
    let pad = out.len() - shape.len();
    (0..out.len())
        .map(|i| match i.checked_sub(pad) {
            Some(j) if shape[j] != 1 => strides[j],
            _ => 0,
        })
        .collect()
}

/// Coalesce axes of `shape`, addressed by every stride vector in
/// `strides`, into at most `max_rank` axes (dropping extent-1 axes and
/// merging neighbours every operand steps through as one). Returns the
/// merged shape and strides, padded at the front to exactly `max_rank` with
/// extent 1, or `None` when more axes remain.
pub(crate) fn coalesce(
    shape: &[usize],
    strides: &[Vec<usize>],
    max_rank: usize,
) -> Option<(Vec<usize>, Vec<Vec<usize>>)> {
    let mut dims: Vec<usize> = Vec::new();
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); strides.len()];
    for (axis, &extent) in shape.iter().enumerate() {
        if extent == 1 {
            continue;
        }
        let mergeable = dims.last().is_some()
            && strides
                .iter()
                .zip(&out)
                .all(|(s, o)| o.last().copied() == Some(s[axis] * extent));
        if mergeable {
            *dims.last_mut()? *= extent;
            for (s, o) in strides.iter().zip(out.iter_mut()) {
                *o.last_mut()? = s[axis];
            }
        } else {
            dims.push(extent);
            for (s, o) in strides.iter().zip(out.iter_mut()) {
                o.push(s[axis]);
            }
        }
    }
    if dims.len() > max_rank {
        return None;
    }
    let pad = max_rank - dims.len();
    let dims = std::iter::repeat_n(1, pad).chain(dims).collect();
    let out = out
        .into_iter()
        .map(|o| std::iter::repeat_n(0, pad).chain(o).collect())
        .collect();
    Some((dims, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing_merges_what_every_operand_steps_through() {
        // Contiguous [2,3,4] with a broadcast row [4]: the first two axes merge.
        let (d, s) = coalesce(&[2, 3, 4], &[vec![12, 4, 1], vec![0, 0, 1]], 4).unwrap();
        assert_eq!(d, [1, 1, 6, 4]);
        assert_eq!(s, [vec![0, 0, 4, 1], vec![0, 0, 0, 1]]);
        // Fully contiguous collapses to one axis.
        let (d, _) = coalesce(&[2, 1, 3, 4, 5, 6], &[vec![360, 360, 120, 30, 6, 1]], 4).unwrap();
        assert_eq!(d, [1, 1, 1, 720]);
        // A transposed operand keeps axes apart.
        let (d, s) = coalesce(&[3, 2], &[vec![2, 1], vec![1, 3]], 4).unwrap();
        assert_eq!((d, s[1].clone()), (vec![1, 1, 3, 2], vec![0, 0, 1, 3]));
        assert!(coalesce(&[2, 2, 2, 2, 2], &[vec![1, 2, 4, 8, 16]], 4).is_none());
        assert_eq!(broadcast_strides(&[3, 1], &[1, 1], &[2, 3, 4]), [0, 1, 0]);
    }
}

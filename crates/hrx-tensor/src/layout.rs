//! Layout labels: what the axes of a tensor mean.

use hrx_core::{Error, Result};
use std::{fmt, str::FromStr};

/// A checked label saying what a tensor's axes mean. It never changes how
/// elements are addressed (strides do that). The operators of this crate
/// work on shapes and strides and do not read it; it is for models and
/// callers, to refuse mixing, say, NCHW and NHWC activations.
///
/// Each label fixes the rank it applies to, checked by
/// [`TensorDesc::with_layout`](crate::TensorDesc::with_layout).
///
/// ```
/// use hrx_tensor::Layout;
/// assert_eq!("nhwc".parse::<Layout>().unwrap(), Layout::Nhwc);
/// assert_eq!(Layout::Nchw.rank(), Some(4));
/// assert!("hwcn".parse::<Layout>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Layout {
    /// No particular meaning; any rank. The label of every new descriptor.
    #[default]
    Any,
    /// A matrix of rows (rank 2): `[rows, columns]`.
    Rows,
    /// Batch, channels, height, width (rank 4).
    Nchw,
    /// Batch, height, width, channels (rank 4).
    Nhwc,
}

impl Layout {
    /// The rank the label requires, or `None` when any rank fits.
    pub fn rank(self) -> Option<usize> {
        match self {
            Layout::Any => None,
            Layout::Rows => Some(2),
            Layout::Nchw | Layout::Nhwc => Some(4),
        }
    }

    /// The lower-case name (`any`, `rows`, `nchw`, `nhwc`).
    pub fn name(self) -> &'static str {
        match self {
            Layout::Any => "any",
            Layout::Rows => "rows",
            Layout::Nchw => "nchw",
            Layout::Nhwc => "nhwc",
        }
    }

    /// Fail unless the label fits a tensor of `rank` axes.
    pub fn check_rank(self, rank: usize) -> Result<()> {
        match self.rank() {
            Some(required) if required != rank => Err(Error::Message(format!(
                "layout {self} needs rank {required}, the shape has rank {rank}"
            ))),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Layout {
    type Err = Error;

    /// Parse a name, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self> {
        [Layout::Any, Layout::Rows, Layout::Nchw, Layout::Nhwc]
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::Message(format!(
                    "unknown layout `{s}` (expected any, rows, nchw or nhwc)"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_check_rank() {
        for l in [Layout::Any, Layout::Rows, Layout::Nchw, Layout::Nhwc] {
            assert_eq!(l.to_string().to_uppercase().parse::<Layout>().unwrap(), l);
        }
        assert!(Layout::Rows.check_rank(2).is_ok());
        assert!(Layout::Rows.check_rank(3).is_err());
        assert!(Layout::Any.check_rank(7).is_ok());
        assert!(Layout::Nhwc.check_rank(0).is_err());
    }
}

//! Views: a byte range of one allocation.

use crate::memory::{Allocation, MappedRead, MappedWrite, Wait};
use ash::vk;
use hrx_core::{Error, Result};
use std::{ops::Range, sync::Arc, time::Duration};

/// A byte range of a [`Buffer`](crate::Buffer). Cheap to clone; keeps its
/// allocation alive.
///
/// `offset()` counts from the allocation's start, so two views of one
/// allocation can be compared: [`overlaps`](Self::overlaps) is true when
/// their ranges intersect.
#[derive(Clone)]
pub struct BufferView {
    allocation: Arc<Allocation>,
    offset: usize,
    len: usize,
}

impl std::fmt::Debug for BufferView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BufferView(#{}[{}..{}])",
            self.allocation.id(),
            self.offset,
            self.offset + self.len
        )
    }
}

impl BufferView {
    pub(crate) fn whole(allocation: Arc<Allocation>) -> Self {
        let len = allocation.len();
        BufferView {
            allocation,
            offset: 0,
            len,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte offset from the start of the allocation.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The sub-range `range` of this view (relative to the view's start).
    /// Fails when the range is reversed or reaches past the view.
    pub fn slice(&self, range: Range<usize>) -> Result<BufferView> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::Message(format!(
                "slice {}..{} is outside a view of {} bytes",
                range.start, range.end, self.len
            )));
        }
        Ok(BufferView {
            allocation: self.allocation.clone(),
            offset: self.offset + range.start,
            len: range.end - range.start,
        })
    }

    /// Whether both views are of one allocation and share at least one byte.
    pub fn overlaps(&self, other: &BufferView) -> bool {
        Arc::ptr_eq(&self.allocation, &other.allocation)
            && self.offset < other.offset + other.len
            && other.offset < self.offset + self.len
    }

    /// Whether both views cover exactly the same bytes of one allocation.
    pub fn same_region(&self, other: &BufferView) -> bool {
        Arc::ptr_eq(&self.allocation, &other.allocation)
            && self.offset == other.offset
            && self.len == other.len
    }

    /// Whether the host can map this memory.
    pub fn is_host_visible(&self) -> bool {
        self.allocation.is_host_visible()
    }

    /// Read the bytes, waiting for device writes to the allocation to finish.
    pub fn map_read(&self) -> Result<MappedRead<'_>> {
        self.allocation
            .map_read(self.offset, self.len, Wait::Until(None))
    }

    /// Write the bytes, waiting until the device no longer uses the allocation.
    pub fn map_write(&self) -> Result<MappedWrite<'_>> {
        self.allocation
            .map_write(self.offset, self.len, Wait::Until(None))
    }

    /// Like [`map_read`](Self::map_read), or [`Error::Busy`] instead of waiting.
    pub fn try_map_read(&self) -> Result<MappedRead<'_>> {
        self.allocation.map_read(self.offset, self.len, Wait::No)
    }

    /// Like [`map_write`](Self::map_write), or [`Error::Busy`] instead of waiting.
    pub fn try_map_write(&self) -> Result<MappedWrite<'_>> {
        self.allocation.map_write(self.offset, self.len, Wait::No)
    }

    /// Like [`map_read`](Self::map_read), waiting at most `timeout`, then
    /// [`Error::Busy`]: a hung device surfaces as an error, not a hang.
    pub fn map_read_timeout(&self, timeout: Duration) -> Result<MappedRead<'_>> {
        self.allocation
            .map_read(self.offset, self.len, Wait::at_most(timeout))
    }

    /// Like [`map_write`](Self::map_write), waiting at most `timeout`, then
    /// [`Error::Busy`].
    pub fn map_write_timeout(&self, timeout: Duration) -> Result<MappedWrite<'_>> {
        self.allocation
            .map_write(self.offset, self.len, Wait::at_most(timeout))
    }

    /// Store `value` into the view's first 32-bit word, atomically, while
    /// work on the device may be reading it: how the host releases a
    /// kernel that polls a flag. No mapping is taken and the device is not
    /// waited for (a mapping for writing would wait for that very kernel,
    /// and submitting work that reads memory the host holds mapped for
    /// writing is `Busy`). The memory must be host-visible and the view's
    /// offset 4-byte aligned. Work that *writes* the word races with it.
    pub fn signal(&self, value: u32) -> Result<()> {
        self.allocation.signal(self.offset, value)
    }

    pub(crate) fn raw_buffer(&self) -> vk::Buffer {
        self.allocation.raw()
    }

    pub(crate) fn allocation(&self) -> &Arc<Allocation> {
        &self.allocation
    }

    pub(crate) fn domain(&self) -> u64 {
        self.allocation.domain()
    }
}

//! embed (in progress)

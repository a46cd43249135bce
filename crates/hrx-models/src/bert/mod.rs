//! bert (in progress)

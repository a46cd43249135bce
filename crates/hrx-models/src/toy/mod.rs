//! toy (in progress)

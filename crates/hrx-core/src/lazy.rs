//! Lazy, fallible, memoised initialisation.

use crate::Result;
use std::sync::Mutex;

/// Return the cached value in `cell`, or build it with `init` and cache it.
///
/// Only success is memoised: if `init` fails the error is returned, the cell
/// stays empty and the next call runs `init` again. The lock is held while
/// `init` runs, so concurrent callers build the value once. A poisoned lock
/// is recovered (the cell holds either nothing or a complete value).
///
/// ```
/// use hrx_core::{cached_init, Error};
/// use std::sync::Mutex;
/// let cell = Mutex::new(None);
/// assert!(cached_init(&cell, || Err::<u32, _>(Error::msg("not yet"))).is_err());
/// assert_eq!(cached_init(&cell, || Ok(7)).unwrap(), 7);
/// assert_eq!(cached_init(&cell, || Ok(8)).unwrap(), 7);
/// ```
pub fn cached_init<T: Clone>(
    cell: &Mutex<Option<T>>,
    init: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let mut guard = cell.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(value) = guard.as_ref() {
        return Ok(value.clone());
    }
    let value = init()?;
    *guard = Some(value.clone());
    Ok(value)
}

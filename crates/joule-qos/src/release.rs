//! `qos release`: undo only the records joule-qos wrote, leaving other mechanisms' records
//! (thermal, nap, ...) in the journal. `joule restore` replays everything instead; both are
//! safe after a crash because every change was recorded before it was made.

use joule_core::effects::Effects;
use joule_core::journal::{self, RestoreReport};
use std::path::Path;

/// Replays, newest first, the records of `owner` in the journal in `dir`; everything else
/// (and the records that failed, for a retry) stays.
pub fn release_owner(dir: &Path, owner: &str, fx: &dyn Effects) -> Result<RestoreReport, crate::QosError> {
    Ok(journal::restore_owner(dir, owner, fx)?)
}

//! `qos release`: undo only the records joule-qos wrote, leaving other mechanisms' records
//! (thermal, nap, ...) in the journal. `joule restore` replays everything instead; both are
//! safe after a crash because every change was recorded before it was made.

use crate::undo::{undo_one, Outcome};
use joule_core::effects::Effects;
use joule_core::journal::{entries, RestoreReport, JOURNAL_FILE};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Replays, newest first, the records of `owner` in the journal in `dir`, then rewrites the
/// journal with everything else (and the records that failed, for a retry). Holds the same
/// exclusive lock as `journal::restore`.
pub fn release_owner(dir: &Path, owner: &str, fx: &dyn Effects) -> Result<RestoreReport, crate::QosError> {
    let path = dir.join(JOURNAL_FILE);
    if !path.exists() {
        return Ok(RestoreReport::default());
    }
    let lock = OpenOptions::new().read(true).write(true).open(&path).map_err(|e| crate::QosError::io("open the undo journal", &path, e))?;
    // SAFETY: flock on an fd we own; released when `lock` is dropped.
    unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    let all = entries(dir)?;
    let mut report = RestoreReport::default();
    let mut failed_idx = std::collections::BTreeSet::new();
    for (i, e) in all.iter().enumerate().rev().filter(|(_, e)| e.owner == owner) {
        match undo_one(&e.undo, fx) {
            Ok(Outcome::Done) => report.undone += 1,
            Ok(Outcome::Gone) => report.already_gone += 1,
            Err(err) => {
                report.failed.push(format!("{:?}: {err}", e.undo));
                failed_idx.insert(i);
            }
        }
    }
    let mut body = String::new();
    for (i, e) in all.iter().enumerate() {
        if e.owner != owner || failed_idx.contains(&i) {
            body.push_str(&serde_json::to_string(e).expect("serialisable"));
            body.push('\n');
        }
    }
    let werr = |e| crate::QosError::io("rewrite the undo journal", &path, e);
    lock.set_len(0).map_err(werr)?;
    (&lock).write_all(body.as_bytes()).map_err(werr)?;
    lock.sync_data().map_err(werr)?;
    Ok(report)
}

//! Replaying undo records this crate made, with the journal's semantics (a vanished target is
//! not an error, a cgroup is evacuated before it is removed). Used to roll back a failed apply
//! and by `release`, which must not touch other mechanisms' records.

use joule_core::effects::Effects;
use joule_core::journal::Undo;
use std::io;
use std::path::Path;

pub(crate) enum Outcome {
    Done,
    Gone,
}

fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

fn gone_ok(r: io::Result<()>) -> io::Result<Outcome> {
    match r {
        Ok(()) => Ok(Outcome::Done),
        Err(e) if is_gone(&e) => Ok(Outcome::Gone),
        Err(e) => Err(e),
    }
}

pub(crate) fn undo_one(undo: &Undo, fx: &dyn Effects) -> io::Result<Outcome> {
    match undo {
        Undo::Write { path, old } => gone_ok(fx.write(path, old)),
        Undo::RemoveFile { path } => gone_ok(fx.remove_file(path)),
        Undo::MoveTask { pid, procs_file } => gone_ok(fx.write(procs_file, &pid.to_string())),
        Undo::Sched { tid, old } => gone_ok(fx.set_sched(*tid, *old)),
        Undo::RemoveDir { path, evacuate_to } => {
            if !fx.exists(path) {
                return Ok(Outcome::Gone);
            }
            if let Some(dest) = evacuate_to {
                evacuate(path, dest, fx)?;
            }
            gone_ok(fx.remove_dir(path))
        }
    }
}

fn evacuate(dir: &Path, dest: &Path, fx: &dyn Effects) -> io::Result<()> {
    for procs in ["cgroup.procs", "tasks"] {
        let Ok(list) = fx.read(&dir.join(procs)) else { continue };
        for pid in list.split_whitespace() {
            match fx.write(dest, pid) {
                Err(e) if !is_gone(&e) => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Undoes `records` newest first; returns (undone, gone, failures).
pub(crate) fn replay(records: &[Undo], fx: &dyn Effects) -> (usize, usize, Vec<String>) {
    let (mut done, mut gone, mut failed) = (0, 0, Vec::new());
    for r in records.iter().rev() {
        match undo_one(r, fx) {
            Ok(Outcome::Done) => done += 1,
            Ok(Outcome::Gone) => gone += 1,
            Err(e) => failed.push(format!("{r:?}: {e}")),
        }
    }
    (done, gone, failed)
}

//! What earlier joule versions left on a host whose cgroup tree systemd owns (issue 20). Before
//! joule acted on such hosts through systemd, it made `joule/<class>` at the root of the
//! unified hierarchy and moved matched processes there; a restore put recorded processes back,
//! but processes forked inside meanwhile had no record. `joule restore` now empties such a
//! tree: each process goes back to the cgroup of its nearest ancestor (by parent pid) that
//! lives in a unit, else to the root (reported, so the operator can decide), and the empty
//! cgroups are removed. The current version never makes this tree on such a host.

use crate::effects::Effects;
use crate::procfs::{Stat, TaskCgroups};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How far up the parent chain a process's home is looked for.
const MAX_ANCESTORS: usize = 64;

/// What emptying a leftover tree did.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct LeftoverReport {
    /// (pid, the cgroup it went to, relative to the hierarchy's root).
    pub moved: Vec<(i32, String)>,
    pub removed: Vec<PathBuf>,
    pub failed: Vec<String>,
}

impl LeftoverReport {
    pub fn is_empty(&self) -> bool {
        self.moved.is_empty() && self.removed.is_empty() && self.failed.is_empty()
    }
}

/// Every cgroup under `dir` (itself included), deepest first.
fn cgroups_under(dir: &Path, fx: &dyn Effects) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for name in fx.list_dir(&d).unwrap_or_default() {
            let child = d.join(&name);
            if fx.exists(&child.join("cgroup.procs")) {
                stack.push(child);
            }
        }
        out.push(d);
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// The v2 cgroup of the nearest ancestor of `pid` outside joule's tree and the root, whose
/// `cgroup.procs` exists: the unit the process was forked from. Each ancestor is pinned by
/// its start time: a parent starts no later than its child, so a pid that names a task
/// started later (reused after the parent exited), or another task by the time its cgroup
/// was read, ends the walk (the process then goes to the root, and the report says so).
/// The cgroup is returned byte for byte (its name is whoever made it's), relative to the root.
fn home(pid: i32, procfs: &Path, cgroup_root: &Path, fx: &dyn Effects) -> Option<Vec<u8>> {
    let me = Stat::read(fx, procfs, pid)?;
    let (mut p, mut child_start) = (me.ppid, me.start_time_ticks);
    for _ in 0..MAX_ANCESTORS {
        if p <= 1 {
            return None;
        }
        let st = Stat::read(fx, procfs, p)?;
        if let (Some(parent), Some(child)) = (st.start_time_ticks, child_start) {
            if parent > child {
                return None;
            }
        }
        let cg = TaskCgroups::read(fx, procfs, p)?.raw_path(None)?.to_vec();
        if Stat::read(fx, procfs, p)?.start_time_ticks != st.start_time_ticks {
            return None;
        }
        let ours = cg == b"/joule" || cg.starts_with(b"/joule/");
        if !ours && cg != b"/" && fx.exists(&under(cgroup_root, &cg).join("cgroup.procs")) {
            return Some(cg);
        }
        (p, child_start) = (st.ppid, st.start_time_ticks);
    }
    None
}

/// `rel` (a cgroup path as /proc/PID/cgroup spells it) under `root`, exactly.
fn under(root: &Path, rel: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    root.join(std::ffi::OsStr::from_bytes(&rel[rel.iter().take_while(|b| **b == b'/').count()..]))
}

/// Empties and removes `<cgroup_root>/joule` (see the module doc). Nothing when there is none.
pub fn undo_leftover_tree(cgroup_root: &Path, procfs: &Path, fx: &dyn Effects) -> LeftoverReport {
    let mut r = LeftoverReport::default();
    let top = cgroup_root.join("joule");
    if !fx.exists(&top.join("cgroup.procs")) {
        return r;
    }
    let dirs = cgroups_under(&top, fx);
    for d in &dirs {
        let pids: Vec<i32> = fx.read(&d.join("cgroup.procs")).unwrap_or_default().split_whitespace().filter_map(|s| s.parse().ok()).collect();
        for pid in pids {
            let to = home(pid, procfs, cgroup_root, fx);
            let moved = to
                .as_deref()
                .and_then(|cg| fx.write(&under(cgroup_root, cg).join("cgroup.procs"), &pid.to_string()).ok().map(|()| String::from_utf8_lossy(cg).into_owned()))
                .or_else(|| fx.write(&cgroup_root.join("cgroup.procs"), &pid.to_string()).ok().map(|()| "/".to_string()));
            match moved {
                Some(cg) => r.moved.push((pid, cg)),
                None if fx.exists(&procfs.join(pid.to_string())) => r.failed.push(format!("could not move pid {pid} out of {}", d.display())),
                None => {}
            }
        }
    }
    for d in dirs {
        match fx.remove_dir(&d) {
            Ok(()) => r.removed.push(d),
            Err(e) => r.failed.push(format!("rmdir {}: {e}", d.display())),
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::{FakeEffects, Files};

    /// Process `pid`, child of `ppid`, in cgroup `cg`, started `pid` ticks after boot (a
    /// higher pid started later).
    fn proc(fx: FakeEffects, pid: i32, ppid: i32, cg: &str) -> FakeEffects {
        fx.with_file(format!("/proc/{pid}/stat"), &format!("{pid} (nginx) S {ppid} {pid} {pid} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 {pid}"))
            .with_file(format!("/proc/{pid}/cgroup"), &format!("0::{cg}\n"))
    }

    #[test]
    fn a_leftover_tree_goes_back_to_the_units_its_processes_were_forked_from() {
        let mut fx = FakeEffects::default()
            .with_file("/cg/cgroup.procs", "")
            .with_file("/cg/system.slice/nginx.service/cgroup.procs", "")
            .with_file("/cg/joule/cgroup.procs", "")
            .with_file("/cg/joule/web/cgroup.procs", "20 21 30 40\n")
            .with_file("/cg/joule/web/cpu.max", "max 100000");
        // 10: nginx's master, moved back by the old restore; 20: a worker forked inside joule/web;
        // 21: a worker's child; 30: a daemon whose parent is PID 1 (nowhere to go but the root).
        fx = proc(fx, 10, 1, "/system.slice/nginx.service");
        fx = proc(fx, 20, 10, "/joule/web");
        fx = proc(fx, 21, 20, "/joule/web");
        fx = proc(fx, 30, 1, "/joule/web");
        // 40: its parent's pid 50 now names a task that started after it (reused): not its
        // parent, so not its unit.
        fx = proc(fx, 40, 50, "/joule/web");
        fx = proc(fx, 50, 1, "/system.slice/nginx.service");
        fx = fx.with_dir("/cg/joule").with_dir("/cg/joule/web");
        let r = undo_leftover_tree(Path::new("/cg"), Path::new("/proc"), &fx);
        assert_eq!(r.moved, [(20, "/system.slice/nginx.service".into()), (21, "/system.slice/nginx.service".into()), (30, "/".into()), (40, "/".into())]);
        assert_eq!(r.removed, [PathBuf::from("/cg/joule/web"), PathBuf::from("/cg/joule")]);
        assert!(r.failed.is_empty(), "{r:?}");
        assert!(!fx.exists(Path::new("/cg/joule")));
        // Nothing left: a second run does nothing.
        assert!(undo_leftover_tree(Path::new("/cg"), Path::new("/proc"), &fx).is_empty());
    }
}

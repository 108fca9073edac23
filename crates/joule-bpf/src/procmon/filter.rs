//! The process monitor's filter, user-space half: the compiled rules written into the maps
//! before the programs attach, the cgroup directories that meet a cgroup, unit or slice rule
//! now (the kernel marks those made later itself), and the settlements user space sends back
//! about the processes it follows. docs/bpf.md says why each event may stay in the kernel.

use crate::intf;
use joule_core::membership::prefilter::{Prefilter, CG_NAME_LEN};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What the filter is told before load: the classes' rules, where each cgroup hierarchy is
/// mounted (its cgroup, unit and slice rules are looked up there), and the agent's own pid,
/// whose children are sent whatever they match (they are no member as long as they are joule,
/// and as soon as they are something else their class is decided like anyone's).
#[derive(Debug, Clone, Default)]
pub struct ProcFilter {
    pub rules: Prefilter,
    pub cgroup_mounts: Vec<PathBuf>,
    pub own_pid: u32,
}

/// A directory that meets the cgroup-kind rules of `bits` (it and all below it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    /// Its kernfs id: the directory's inode number.
    pub id: u64,
    /// Levels below its hierarchy's root (the root is 0).
    pub level: u32,
    pub bits: u64,
}

/// Directories at most this many below the slices the unit walk reads, and in all.
const MAX_WALK_DIRS: usize = 20_000;

/// Every directory under `mounts` that meets a cgroup rule (the rule's path) or a unit or slice
/// rule (where systemd puts it: below a chain of slices from the root), as it is now.
pub(crate) fn marks(f: &Prefilter, mounts: &[PathBuf]) -> Vec<Mark> {
    let mut out: Vec<Mark> = Vec::new();
    let mut add = |dir: &Path, level: u32, bits: u64| {
        if let Some(md) = std::fs::metadata(dir).ok().filter(|m| m.is_dir()) {
            match out.iter_mut().find(|m| m.id == md.ino()) {
                Some(m) => m.bits |= bits,
                None => out.push(Mark { id: md.ino(), level, bits }),
            }
        }
    };
    for mount in mounts {
        for (path, bits) in &f.cgroup_paths {
            let rel = path.trim_start_matches('/');
            add(&mount.join(rel), rel.split('/').filter(|s| !s.is_empty()).count() as u32, *bits);
        }
        if f.units.is_empty() {
            continue;
        }
        // Breadth first through the slices only: a unit lies right below a chain of slices.
        let mut todo = vec![(String::new(), 0u32)];
        let mut seen = 0;
        while let Some((rel, level)) = todo.pop() {
            let Ok(rd) = std::fs::read_dir(mount.join(rel.trim_start_matches('/'))) else { continue };
            for e in rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
                seen += 1;
                if seen > MAX_WALK_DIRS {
                    tracing::warn!("more than {MAX_WALK_DIRS} slices and units under {}: the rest is marked when made", mount.display());
                    break;
                }
                let name = e.file_name().to_string_lossy().into_owned();
                let child = format!("{rel}/{name}");
                for (unit, bits) in f.units.iter().filter(|(u, _)| **u == name) {
                    if joule_core::config::systemd_unit_at(&child, unit) {
                        add(&e.path(), level + 1, *bits);
                    }
                }
                if name.ends_with(".slice") && joule_core::config::systemd_unit_at(&child, &name) {
                    todo.push((child, level + 1));
                }
            }
        }
    }
    out
}

/// `name` as the kernel's key of rule_cg_names: NUL-padded to `CG_NAME_LEN`.
pub(crate) fn cg_name(name: &[u8]) -> intf::joule_proc_cg_name {
    let mut k = intf::joule_proc_cg_name::default();
    for (d, s) in k.name.iter_mut().zip(name.iter().take(CG_NAME_LEN - 1)) {
        *d = *s as std::os::raw::c_char;
    }
    k
}

/// What user space decided about a process it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// In a class: its renames stay in the kernel.
    Member,
    /// Undecided (in a pod whose runtime has not named it yet): everything it does is sent.
    Pending,
    /// In no class, followed for its parent's sake: its forks stay in the kernel.
    NoFollow,
    /// In no class and not followed: its events pass the rules like anyone else's.
    Pruned,
}

impl Follow {
    pub(crate) fn flags(self) -> u8 {
        (match self {
            Follow::Member => intf::JOULE_TRACK_MEMBER,
            Follow::Pending => 0,
            Follow::NoFollow => intf::JOULE_TRACK_NOFOLLOW,
            Follow::Pruned => intf::JOULE_TRACK_PRUNED,
        }) as u8
    }
}

/// One settlement: process `pid` started at `started` (clock ticks) is `follow` as of the
/// event numbered `seq` (0: as a walk of /proc found it, with no event read since; the kernel
/// then adds it if it has no entry). `Forget` drops the entry (a process gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settlement {
    pub pid: i32,
    pub started: u64,
    pub seq: u64,
    pub follow: Option<Follow>,
}

impl Settlement {
    pub(crate) fn raw(&self) -> intf::joule_proc_settle {
        let (op, flags) = match self.follow {
            Some(f) => (intf::JOULE_SETTLE_FLAGS, f.flags()),
            None => (intf::JOULE_SETTLE_FORGET, 0),
        };
        intf::joule_proc_settle { pid: self.pid as u32, op: op as u8, flags, _pad: 0, start_ticks: self.started, seq: self.seq }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::config::{ClassConfig, MatchRules};

    fn class(m: MatchRules) -> ClassConfig {
        ClassConfig { name: "c".into(), matches: m, ..Default::default() }
    }

    #[test]
    fn cgroup_rules_mark_their_directory_and_units_only_where_systemd_puts_them() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("cpu");
        for d in [
            "batch/jobs",
            "system.slice/web.service/sub",
            "system.slice/system-getty.slice/web.service",
            "user.slice/user-1001.slice/user@1001.service/web.service",
            "other/web.service",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let classes = vec![
            class(MatchRules { cgroup: vec!["/batch/jobs/".into(), "/nowhere".into()], ..Default::default() }),
            class(MatchRules { unit: vec!["web.service".into()], ..Default::default() }),
        ];
        let f = Prefilter::compile(&classes).unwrap();
        let ino = |d: &str| std::fs::metadata(root.join(d)).unwrap().ino();
        let mut got = marks(&f, std::slice::from_ref(&root));
        got.sort_by_key(|m| m.id);
        let mut want = vec![
            Mark { id: ino("batch/jobs"), level: 2, bits: 0b01 },
            Mark { id: ino("system.slice/web.service"), level: 2, bits: 0b10 },
            Mark { id: ino("system.slice/system-getty.slice/web.service"), level: 3, bits: 0b10 },
            // A user manager's unit of that name is below user@1001.service, not a slice: the
            // matcher refuses it (delegated), the marks never reach it.
        ];
        want.sort_by_key(|m| m.id);
        assert_eq!(got, want);
    }

    #[test]
    fn a_settlement_is_what_the_settle_program_reads() {
        let s = Settlement { pid: 42, started: 7, seq: 3, follow: Some(Follow::NoFollow) }.raw();
        assert_eq!((s.pid, s.op as u32, s.flags as u32, s.start_ticks, s.seq), (42, intf::JOULE_SETTLE_FLAGS, intf::JOULE_TRACK_NOFOLLOW, 7, 3));
        assert_eq!(Settlement { pid: 42, started: 7, seq: 0, follow: None }.raw().op as u32, intf::JOULE_SETTLE_FORGET);
        assert_eq!(cg_name(b"web.service").name[..12].iter().map(|c| *c as u8).collect::<Vec<_>>(), b"web.service\0");
    }
}

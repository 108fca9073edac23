//! The rule compiler: the classes' rules the kernel can decide (comm, uid, pid, cgroup, unit
//! and slice as marks on cgroup directories, exe by the executable's basename at an exec), as
//! the process monitor's maps, so that a
//! process event that cannot change any class stays in the kernel (joule-bpf's procmon,
//! docs/bpf.md). One bit per class, in config order; a kind's mask has the bits of the classes
//! with rules of that kind, and a value maps to the classes whose rule of that kind it meets.
//!
//! The kernel may only let too much through: every value here is a superset of what the
//! matcher (`MatchRules::matches`) accepts (a comm rule longer than a comm is cut to one, a
//! cgroup rule also marks any directory of its basename made later, an exe rule holds wherever
//! its basename does), and pod rules, which the kernel cannot decide, never narrow. [`Prefilter::candidates`] is the kernel's
//! decision in Rust, for the tests that hold it to the matcher.

use crate::config::ClassConfig;
use std::collections::BTreeMap;

/// Classes one filter tells apart (`JOULE_PROC_MAX_CLASSES`).
pub const MAX_CLASSES: usize = 64;
/// Bytes of a comm as the kernel keeps it, NUL included (`TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;
/// Bytes of a cgroup basename the kernel compares, NUL included (`JOULE_PROC_CG_NAME_LEN`).
pub const CG_NAME_LEN: usize = 64;
/// Values of one kind of rule the kernel's maps hold (`JOULE_PROC_MAX_RULES`).
pub const MAX_RULES: usize = 1024;

/// What a class's rules ask of a process, compiled: the masks (a bit per class) and, per kind,
/// each value with the classes that name it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prefilter {
    /// Classes that can match anything (a class without rules matches nothing).
    pub classes: u64,
    pub comm: u64,
    pub uid: u64,
    pub pid: u64,
    /// cgroup, unit and slice rules: met where a marked directory is the task's cgroup or above it.
    pub cgroup: u64,
    /// exe rules: the kernel cannot read the exe's path; at an exec it knows the file's name.
    pub exe: u64,
    pub comms: BTreeMap<[u8; COMM_LEN], u64>,
    pub uids: BTreeMap<u32, u64>,
    pub pids: BTreeMap<u32, u64>,
    /// Basenames of the executables exe rules name (cut like cgroup names).
    pub exes: BTreeMap<Vec<u8>, u64>,
    /// Basenames (at most `CG_NAME_LEN - 1` bytes) whose new directories the kernel marks.
    pub cgroup_names: BTreeMap<Vec<u8>, u64>,
    /// `cgroup` rules as paths, in every hierarchy ("" for the root).
    pub cgroup_paths: BTreeMap<String, u64>,
    /// `unit` and `slice` names, marked where systemd puts them (`systemd_unit_at`).
    pub units: BTreeMap<String, u64>,
}

/// Which classes an event of each kind can newly bring a process into (one it is not in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new name and exe: classes with a comm or exe rule.
    Exec,
    /// A new name: classes with a comm rule.
    Rename,
    /// New cgroups: any class (they decide cgroup, unit, slice and pod rules, and whether a
    /// process is in a pod at all).
    Cgroup,
    /// A new real uid: classes with a uid rule.
    Creds,
    /// A new process whose parent is in no class: only a pid rule tells it from its parent.
    Fork,
}

/// `comm` as the kernel's map key: its bytes cut to 15, NUL-padded.
pub fn comm_key(comm: &[u8]) -> [u8; COMM_LEN] {
    let mut k = [0u8; COMM_LEN];
    let n = comm.len().min(COMM_LEN - 1);
    k[..n].copy_from_slice(&comm[..n]);
    k
}

/// A cgroup directory's basename as the kernel's map key: cut to 63 bytes.
pub fn cg_name_key(name: &str) -> Vec<u8> {
    name.as_bytes()[..name.len().min(CG_NAME_LEN - 1)].to_vec()
}

impl Prefilter {
    /// The filter for `classes`, or None when they are more than one filter tells apart, or
    /// name more values of one kind than its map holds (the monitor then sends everything).
    pub fn compile(classes: &[ClassConfig]) -> Option<Prefilter> {
        if classes.len() > MAX_CLASSES {
            return None;
        }
        let mut f = Prefilter::default();
        for (i, c) in classes.iter().enumerate() {
            let bit = 1u64 << i;
            let m = &c.matches;
            if m.is_empty() {
                continue;
            }
            f.classes |= bit;
            let or = |map_bits: &mut u64, cond: bool| {
                if cond {
                    *map_bits |= bit
                }
            };
            or(&mut f.comm, !m.comm.is_empty());
            or(&mut f.uid, !m.uid.is_empty());
            or(&mut f.pid, !m.pid.is_empty());
            or(&mut f.cgroup, !m.cgroup.is_empty() || !m.unit.is_empty() || !m.slice.is_empty());
            or(&mut f.exe, !m.exe.is_empty());
            for comm in &m.comm {
                *f.comms.entry(comm_key(comm.as_bytes())).or_default() |= bit;
            }
            for uid in &m.uid {
                *f.uids.entry(*uid).or_default() |= bit;
            }
            for pid in &m.pid {
                *f.pids.entry(*pid as u32).or_default() |= bit;
            }
            for exe in &m.exe {
                let base = exe.rsplit('/').next().unwrap_or_default();
                *f.exes.entry(cg_name_key(base)).or_default() |= bit;
            }
            for rule in &m.cgroup {
                let path = rule.trim_end_matches('/');
                *f.cgroup_paths.entry(path.to_string()).or_default() |= bit;
                let base = path.rsplit('/').next().unwrap_or_default();
                if !base.is_empty() {
                    *f.cgroup_names.entry(cg_name_key(base)).or_default() |= bit;
                }
            }
            for name in m.unit.iter().chain(&m.slice) {
                *f.units.entry(name.clone()).or_default() |= bit;
                *f.cgroup_names.entry(cg_name_key(name)).or_default() |= bit;
            }
        }
        let too_many = [f.comms.len(), f.uids.len(), f.pids.len(), f.exes.len(), f.cgroup_names.len()].into_iter().any(|n| n > MAX_RULES);
        (!too_many).then_some(f)
    }

    /// The classes an event of kind `change` may bring a process into.
    pub fn relevant(&self, change: Change) -> u64 {
        match change {
            Change::Exec => self.comm | self.exe,
            Change::Rename => self.comm,
            Change::Cgroup => self.classes,
            Change::Creds => self.uid,
            Change::Fork => self.pid,
        }
    }

    /// The kernel's decision: the classes among `relevant` whose decidable rules a process
    /// with this name, uid and pid meets (and, at an exec, this executable), its cgroups
    /// meeting the cgroup-kind rules of the classes in `cgroup_bits`. Empty: the event stays in
    /// the kernel.
    pub fn candidates(&self, relevant: u64, comm: &[u8], exe: Option<&str>, uid: u32, pid: u32, cgroup_bits: u64) -> u64 {
        let mut ok = self.classes & relevant;
        let lookup = |v: Option<&u64>| v.copied().unwrap_or(0);
        if let Some(exe) = exe {
            ok &= !self.exe | lookup(self.exes.get(&cg_name_key(exe.rsplit('/').next().unwrap_or_default())));
        }
        ok &= !self.comm | lookup(self.comms.get(&comm_key(comm)));
        ok &= !self.uid | lookup(self.uids.get(&uid));
        ok &= !self.pid | lookup(self.pids.get(&pid));
        ok & (!self.cgroup | cgroup_bits)
    }

    /// The classes whose cgroup-kind rules the cgroup `path` meets as the marks make it: a
    /// `cgroup` rule at the path or above it, a unit or slice where systemd puts it, at the
    /// path or above it (the model of what the loader marks, for tests).
    pub fn cgroup_bits(&self, path: &str) -> u64 {
        let mut bits = 0;
        for (rule, b) in &self.cgroup_paths {
            if rule.is_empty() || path == rule || path.strip_prefix(rule.as_str()).is_some_and(|r| r.starts_with('/')) {
                bits |= b;
            }
        }
        for (name, b) in &self.units {
            if crate::config::systemd_unit_at(path, name) {
                bits |= b;
            }
        }
        bits
    }
}

#[cfg(test)]
#[path = "prefilter_tests.rs"]
mod tests;

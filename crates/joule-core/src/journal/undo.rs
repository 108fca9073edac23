//! How each kind of record is undone, and what counts as done, already gone or failed. A cgroup
//! is emptied pass after pass and its removal retried while the kernel calls it busy.

use super::{same_task, RestoreReport, Undo};
use crate::effects::{
    valid_unit_name, Effects, Freezer, PseudoFs, BPF_FS_MAGIC, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC, FREEZE_SETTLE, PROC_SUPER_MAGIC, SYSFS_MAGIC,
    TRACEFS_MAGIC, UNIT_PROPERTIES,
};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Counts one outcome; true when it is settled (done or gone), false when it failed.
pub(super) fn tally(report: &mut RestoreReport, undo: &Undo, outcome: io::Result<Outcome>) -> bool {
    match outcome {
        Ok(Outcome::Done) => report.undone += 1,
        Ok(Outcome::Gone) => report.already_gone += 1,
        Err(e) => {
            report.failed.push(format!("{undo:?}: {e}"));
            return false;
        }
    }
    true
}

/// Replays one record read from the journal file: refused records (see [`refusal`]) are
/// reported in `skipped` and not acted on. True when settled (done, gone, refused), false
/// when it failed and should stay for a retry.
pub(super) fn replay_checked(report: &mut RestoreReport, undo: &Undo, fx: &dyn Effects, origins: &Origins) -> bool {
    match refusal(undo, fx) {
        Ok(None) => tally(report, undo, undo_one(undo, fx, origins)),
        Ok(Some(why)) => {
            tracing::warn!("undo journal: skipping {undo:?}: joule cannot have written it ({why})");
            report.skipped.push(format!("{undo:?}: joule cannot have written it: {why}"));
            true
        }
        Err(e) => tally(report, undo, gone_ok(Err(e))),
    }
}

pub(super) enum Outcome {
    Done,
    Gone,
}

/// Why joule cannot have written `undo`, if it cannot: the journal is root's alone (see
/// `private_fs`), and this is the second wall. joule only ever records the undo of its own
/// changes, so a replay acts only on what those can be:
/// - file writes to cgroup knobs, sysfs CPU and runtime-PM knobs under `/sys/devices`
///   (`scaling_max_freq`, `online`, `power/control`) and the `/proc/sys/kernel/sched_*`
///   sysctls, judged by the filesystem and the real path the write would reach;
/// - task moves into a `cgroup.procs`/`tasks` file on a cgroup filesystem, cgroups and bpffs
///   pins removed, cgroups thawed, ifb devices deleted;
/// - scheduling put back only to a policy no stronger than the one the task has now (joule
///   raised it: undoing never raises), a fair thread's slice (no privilege), and every task
///   record pinned to a start time.
///
/// `Ok(None)`: fine; `Ok(Some(why))`: refused; Err: the target could not be looked at
/// (`NotFound`: gone).
/// The qdisc kinds joule puts (`netlimit`: an HTB root and a clsact for its classifier).
const QDISC_KINDS: &[&str] = &["htb", "clsact"];

/// CPUs an affinity may name (the kernel's `NR_CPUS` limit on the distributions' kernels).
const MAX_CPUS: usize = 8192;

/// The cgroup files joule writes (the `Write` records a replay may act on there).
const CGROUP_KNOBS: &[&str] = &[
    "cpu.max",
    "cpu.max.burst",
    "cpu.weight",
    "cpu.idle",
    "cpu.shares",
    "cpu.cfs_quota_us",
    "cpu.cfs_period_us",
    "cpu.cfs_burst_us",
    "cpu.rt_runtime_us",
    "cpu.rt_period_us",
    "cpuset.cpus",
    "cpuset.mems",
    "cgroup.subtree_control",
    "cgroup.freeze",
    "freezer.state",
];

pub(super) fn refusal(undo: &Undo, fx: &dyn Effects) -> io::Result<Option<String>> {
    let on = |path: &Path| -> io::Result<(PathBuf, i64)> { Ok((fx.resolve(path)?, fx.fs_magic(path)?)) };
    let cgroup = |m: i64| m == CGROUP_SUPER_MAGIC || m == CGROUP2_SUPER_MAGIC;
    let why = match undo {
        Undo::Write { path, .. } => {
            let (real, m) = on(path)?;
            let sysfs_knob = m == SYSFS_MAGIC
                && real.starts_with("/sys/devices")
                && (real.ends_with("cpufreq/scaling_max_freq") || real.ends_with("online") || real.ends_with("power/control"));
            let sysctl = m == PROC_SUPER_MAGIC
                && real.starts_with("/proc/sys/kernel")
                && real.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("sched_"));
            // On a cgroup filesystem only the knobs joule sets: not `release_agent` (a program
            // the kernel runs as root), `devices.allow`, `cgroup.procs` (moves have their own
            // record, pinned by start time) or any other file there (issue 33).
            let cgroup_knob = cgroup(m) && real.file_name().and_then(|n| n.to_str()).is_some_and(|n| CGROUP_KNOBS.contains(&n));
            (!(cgroup_knob || sysfs_knob || sysctl)).then(|| format!("{} is no cgroup, CPU or sched knob joule writes", real.display()))
        }
        Undo::MoveTask { procs_file, started, .. } => {
            let (real, m) = on(procs_file)?;
            let name_ok = real.file_name().is_some_and(|n| n == "cgroup.procs" || n == "tasks");
            if started.is_none() {
                Some("a task record without a start time".to_string())
            } else {
                (!(cgroup(m) && name_ok)).then(|| format!("{} is no cgroup.procs or tasks file of a cgroup", real.display()))
            }
        }
        Undo::RemoveDir { path, evacuate_to } => {
            let (real, m) = on(path)?;
            let dest_ok = match evacuate_to {
                Some(d) => fx.resolve(d).is_ok_and(|r| r.file_name().is_some_and(|n| n == "cgroup.procs" || n == "tasks")) && fx.fs_magic(d).is_ok_and(cgroup),
                None => true,
            };
            (!((cgroup(m) || m == BPF_FS_MAGIC) && dest_ok))
                .then(|| format!("{} is no cgroup or bpffs directory (or its tasks would go elsewhere)", real.display()))
        }
        Undo::RemoveFile { path } => {
            let (real, m) = on(path)?;
            (m != BPF_FS_MAGIC).then(|| format!("{} is not on bpffs", real.display()))
        }
        Undo::Thaw { cgroup: dir } => {
            let (real, m) = on(dir)?;
            (!cgroup(m)).then(|| format!("{} is not a cgroup", real.display()))
        }
        Undo::Sched { started: None, .. } | Undo::Affinity { started: None, .. } | Undo::Slice { started: None, .. } => {
            Some("a task record without a start time".to_string())
        }
        Undo::Sched { tid, old, .. } => {
            let now = fx.get_sched(*tid)?;
            // SCHED_DEADLINE ranks above every RT priority: putting a reserved thread back to
            // the SCHED_FIFO it had lowers it.
            let raises = old.rank() > now.rank();
            raises.then(|| {
                format!("it would raise task {tid} from policy {} priority {} to policy {} priority {}", now.policy, now.priority, old.policy, old.priority)
            })
        }
        Undo::LinkDelete { kind, .. } => (kind != "ifb").then(|| format!("joule only creates ifb devices, not {kind:?}")),
        // systemd checks the value itself; joule only sets the properties it sets, on units.
        Undo::UnitProperty { unit, property, .. } => (!valid_unit_name(unit) || !UNIT_PROPERTIES.contains(&property.as_str()))
            .then(|| format!("joule sets only {} of services, slices and scopes, not {property:?} of {unit:?}", UNIT_PROPERTIES.join(", "))),
        Undo::ThawUnit { unit } => (!valid_unit_name(unit)).then(|| format!("joule freezes only services, slices and scopes, not {unit:?}")),
        // A slice is no privilege: any user may set their own threads' (sched_setattr(2)).
        // Only units named joule-gate-*, which only root can start (system manager).
        // What joule mounts, the qdiscs it puts, an affinity a thread can run with (issue 33:
        // these were replayed unchecked).
        Undo::Unmount { magic, .. } => {
            (*magic != BPF_FS_MAGIC && *magic != TRACEFS_MAGIC).then(|| format!("joule mounts only bpffs and tracefs, not filesystem magic {magic:#x}"))
        }
        Undo::QdiscDelete { kind, .. } => {
            (!QDISC_KINDS.contains(&kind.as_str())).then(|| format!("joule puts only {} qdiscs, not {kind:?}", QDISC_KINDS.join(" and ")))
        }
        Undo::Affinity { old_cpus, .. } if old_cpus.is_empty() || old_cpus.iter().any(|&c| c >= MAX_CPUS) => {
            Some(format!("{old_cpus:?} is no CPU set a thread can run on"))
        }
        Undo::Affinity { .. } | Undo::Slice { .. } | Undo::StopGates => None,
    };
    Ok(why)
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

/// Where the processes a replay moves back came from (pid → the `cgroup.procs` of each of its
/// MoveTask records): a process forked inside a class cgroup after its ancestor was moved there
/// (a reload's new workers) has no record of its own, and goes back where that ancestor came
/// from when the class cgroup is emptied, not to the hierarchy's root (outside every systemd
/// unit). Each record keeps its process's start time: an ancestor counts only while its pid is
/// still the process the record was made for, so a pid another user got meanwhile sends
/// nobody where the earlier process came from (issue 33).
#[derive(Debug, Default)]
pub(super) struct Origins(std::collections::HashMap<i32, Vec<(Option<u64>, PathBuf)>>);

/// How far up a task's parents `Origins` looks for a moved ancestor.
const MAX_HOPS: usize = 64;

impl Origins {
    pub(super) fn of<'a>(undos: impl IntoIterator<Item = &'a Undo>) -> Origins {
        let mut m: std::collections::HashMap<i32, Vec<(Option<u64>, PathBuf)>> = std::collections::HashMap::new();
        for u in undos {
            if let Undo::MoveTask { pid, procs_file, started } = u {
                m.entry(*pid).or_default().push((*started, procs_file.clone()));
            }
        }
        Origins(m)
    }

    /// The `cgroup.procs` that task `id`, its process or its nearest ancestor came from, in the
    /// hierarchy whose root's `cgroup.procs` is `root_procs` (the class cgroup's `dir` is in
    /// it); None when no ancestor was moved.
    fn dest_for(&self, id: i32, dir: &Path, root_procs: &Path, fx: &dyn Effects) -> Option<PathBuf> {
        if self.0.is_empty() {
            return None;
        }
        let root = root_procs.parent()?;
        let magic = fx.fs_magic(dir).ok();
        let pick = |pid: i32| -> Option<PathBuf> {
            let records = self.0.get(&pid)?;
            let now = super::start_time(fx, pid);
            records
                .iter()
                .filter(|(started, _)| started.is_some() && *started == now)
                .map(|(_, f)| f)
                .find(|f| f.starts_with(root) && f.parent().and_then(|d| fx.fs_magic(d).ok()) == magic && fx.exists(f))
                .cloned()
        };
        let proc_root = Path::new("/proc");
        let tgid = crate::procfs::Status::read(fx, proc_root, id).and_then(|s| s.tgid()).unwrap_or(id);
        let mut pid = tgid;
        if let Some(f) = pick(id) {
            return Some(f);
        }
        for _ in 0..MAX_HOPS {
            if let Some(f) = pick(pid) {
                return Some(f);
            }
            pid = crate::procfs::Stat::read(fx, proc_root, pid)?.ppid;
            if pid <= 1 {
                return None;
            }
        }
        None
    }
}

pub(super) fn undo_one(undo: &Undo, fx: &dyn Effects, origins: &Origins) -> io::Result<Outcome> {
    match undo {
        Undo::Write { path, old } if path.file_name().is_some_and(|n| n == "cpu.rt_runtime_us") => gone_ok(write_rt_runtime(path, old, fx)),
        // A controller joule enabled that other cgroups now use (systemd's, a container
        // runtime's) cannot be disabled without breaking them: EBUSY. It is theirs now.
        Undo::Write { path, old } if old.starts_with('-') && path.file_name().is_some_and(|n| n == "cgroup.subtree_control") => match fx.write(path, old) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(Outcome::Gone),
            r => gone_ok(r),
        },
        Undo::Write { path, old } => gone_ok(fx.write(path, old)),
        Undo::RemoveFile { path } => gone_ok(fx.remove_file(path)),
        Undo::Unmount { path, magic } => Ok(if undo_mount(path, *magic, fx)? { Outcome::Done } else { Outcome::Gone }),
        Undo::MoveTask { pid, started, .. }
        | Undo::Sched { tid: pid, started, .. }
        | Undo::Affinity { tid: pid, started, .. }
        | Undo::Slice { tid: pid, started, .. }
            if !same_task(fx, *pid, *started)? =>
        {
            Ok(Outcome::Gone)
        }
        Undo::MoveTask { pid, procs_file, .. } => gone_ok(fx.write(procs_file, &pid.to_string())),
        Undo::Sched { tid, old, .. } => gone_ok(fx.set_sched(*tid, *old)),
        Undo::Affinity { tid, old_cpus, .. } => gone_ok(fx.set_affinity(*tid, old_cpus)),
        // A thread that left the fair policies since (made real-time by its app) has no
        // fair slice to put back: nothing of joule's is left on it.
        Undo::Slice { tid, old_ns, .. } => match fx.set_slice_ns(*tid, *old_ns) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(Outcome::Gone),
            r => gone_ok(r),
        },
        Undo::Thaw { cgroup } => gone_ok(fx.thaw(cgroup, FREEZE_SETTLE)),
        Undo::UnitProperty { unit, property, old, set } => match fx.unit_property(unit, property) {
            Ok(now) if now.same(set) => gone_ok(fx.set_unit_property(unit, property, old)),
            Ok(_) => Ok(Outcome::Gone),
            Err(e) => gone_ok(Err(e)),
        },
        Undo::ThawUnit { unit } => match fx.unit_freezer_state(unit) {
            Ok(state) if state.starts_with("frozen") || state == "freezing" => gone_ok(fx.thaw_unit(unit)),
            Ok(_) => Ok(Outcome::Gone),
            Err(e) => gone_ok(Err(e)),
        },
        Undo::StopGates => match fx.stop_gates() {
            Ok(0) => Ok(Outcome::Gone),
            Ok(_) => Ok(Outcome::Done),
            Err(e) => gone_ok(Err(e)),
        },
        Undo::QdiscDelete { netns, ifname, ifindex, parent, handle, kind } => {
            let deleted = undo_replace(fx, netns.as_deref(), ifname, *ifindex, *parent, *handle, kind)?;
            Ok(if deleted { Outcome::Done } else { Outcome::Gone })
        }
        Undo::LinkDelete { netns, ifname, kind } => match fx.link_kind(netns.as_deref(), ifname) {
            Ok(k) if &k == kind => gone_ok(fx.delete_link(netns.as_deref(), ifname)),
            Ok(_) => Ok(Outcome::Gone),
            Err(e) if is_gone(&e) => Ok(Outcome::Gone),
            Err(e) => Err(e),
        },
        Undo::RemoveDir { path, .. } if !fx.exists(path) => Ok(Outcome::Gone),
        Undo::RemoveDir { path, evacuate_to: None } => gone_ok(fx.remove_dir(path)),
        Undo::RemoveDir { path, evacuate_to: Some(dest) } => gone_ok(remove_cgroup(path, dest, fx, origins)),
    }
}

/// Puts an RT runtime back, retrying EINVAL for up to [`CGROUP_BUSY_PATIENCE`]: a child
/// group removed just before still holds its budget until the kernel returns it to the parent
/// (after an RCU grace period), and until then lowering the parent's runtime below the sum of
/// its children's is refused (issue 17: the RT class undo failed at shutdown, 3 of 3 runs).
fn write_rt_runtime(path: &Path, value: &str, fx: &dyn Effects) -> io::Result<()> {
    let deadline = Instant::now() + CGROUP_BUSY_PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        match fx.write(path, value) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// How long `remove_cgroup` keeps retrying a cgroup the kernel still calls busy: a task that
/// was exiting when it was moved stays counted until it is through `cgroup_exit`, which
/// comes after its memory is torn down (long for a large process).
pub(super) const CGROUP_BUSY_PATIENCE: Duration = Duration::from_secs(2);
/// Bound on read-and-move passes per removal attempt (a fork bomb inside never ends them).
const EVACUATE_PASSES: usize = 64;

/// Empties the cgroup at `dir` into `dest_procs` and removes it. A single pass over
/// `cgroup.procs` is not enough (issue 6): a task inside may fork between the read and its
/// own move, and the kernel silently skips a task that is already exiting (the write
/// succeeds, the group stays populated a moment longer). So, as systemd does, passes repeat
/// until one finds no task it has not moved yet, and rmdir is retried on EBUSY, both bounded.
fn remove_cgroup(dir: &Path, dest_procs: &Path, fx: &dyn Effects, origins: &Origins) -> io::Result<()> {
    let deadline = Instant::now() + CGROUP_BUSY_PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        evacuate(dir, dest_procs, fx, origins)?;
        match fx.remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                if Instant::now() >= deadline {
                    let (list, _) = task_lists(dir, dest_procs, fx);
                    let left = fx.read(&list).unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ");
                    let msg =
                        format!("{e}, still after {CGROUP_BUSY_PATIENCE:?}; {} lists [{left}] (none: a child cgroup, or a task slow to exit)", list.display());
                    return Err(io::Error::new(e.kind(), msg));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// Moves every task of the cgroup at `dir` into `dest_procs`, pass after pass until a pass
/// finds no task it has not already moved. On v1 it goes thread by thread through `tasks`
/// (into the `tasks` file next to `dest_procs`): v1's `cgroup.procs` lists the process of any
/// thread inside, and moving that process would also take its threads that live in other
/// cgroups. v2 has no `tasks`: whole processes go through `cgroup.procs`. A task moved once is
/// not moved again, because v2 keeps listing a zombie leader whose threads live on. A task whose
/// ancestor the replay moved back goes where that ancestor came from (`Origins`).
fn evacuate(dir: &Path, dest_procs: &Path, fx: &dyn Effects, origins: &Origins) -> io::Result<()> {
    let (list, default_dest) = task_lists(dir, dest_procs, fx);
    let mut moved = BTreeSet::new();
    for _ in 0..EVACUATE_PASSES {
        let Ok(ids) = fx.read(&list) else { return Ok(()) };
        let mut found = false;
        for id in ids.split_whitespace().filter(|id| moved.insert(id.to_string())) {
            found = true;
            let origin =
                id.parse().ok().and_then(|n| origins.dest_for(n, dir, dest_procs, fx)).map(|f| f.with_file_name(default_dest.file_name().unwrap_or_default()));
            let dest = origin.as_deref().unwrap_or(&default_dest);
            match fx.write(dest, id) {
                Ok(()) => {}
                Err(e) if is_gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if !found {
            break;
        }
    }
    Ok(())
}

/// (the list of tasks in `dir`, the file to write them to): `tasks` on v1, else `cgroup.procs`.
fn task_lists(dir: &Path, dest_procs: &Path, fx: &dyn Effects) -> (PathBuf, PathBuf) {
    if fx.exists(&dir.join("tasks")) {
        (dir.join("tasks"), dest_procs.with_file_name("tasks"))
    } else {
        (dir.join("cgroup.procs"), dest_procs.to_path_buf())
    }
}

/// How the journal undoes a mount: unmount `path` if `magic` is still mounted there and it is
/// empty. Ok(false) when there was nothing to do (already unmounted, or someone else's objects
/// live there now, which keeps it mounted).
fn undo_mount(path: &Path, magic: i64, fx: &dyn Effects) -> io::Result<bool> {
    if !fx.exists(path) || fx.fs_magic(path)? != magic {
        return Ok(false);
    }
    let Some(fs) = PseudoFs::from_magic(magic) else { return Ok(false) };
    if !fs.is_empty(path, fx)? {
        tracing::info!("leaving the {} joule mounted at {} in place: something else was put there since", fs.fstype(), path.display());
        return Ok(false);
    }
    fx.unmount(path)?;
    Ok(true)
}

/// How the journal undoes `replace_root`: deletes the qdisc if interface `ifindex` is still
/// `ifname` and still has that qdisc (`kind`, `handle`) at `parent`. Ok(false) when there was
/// nothing to do: the namespace, the interface or the qdisc has gone, or someone put another.
fn undo_replace(fx: &dyn Effects, netns: Option<&Path>, ifname: &str, ifindex: u32, parent: u32, handle: u32, kind: &str) -> io::Result<bool> {
    match fx.link_index(netns, ifname) {
        Ok(i) if i == ifindex => {}
        Ok(_) => return Ok(false), // re-created: our qdisc went with the old interface
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    if !fx.qdiscs(netns, ifindex)?.iter().any(|o| o.parent == parent && o.handle == handle && o.kind == kind) {
        tracing::info!("leaving the qdisc at {parent:x} of {ifname} alone: it is no longer the {kind} {handle:x}: joule put there");
        return Ok(false);
    }
    fx.delete_qdisc(netns, ifindex, parent, handle)?;
    Ok(true)
}

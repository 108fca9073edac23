//! What scx.bpf.c reports: per-CPU counters (`scx_stats`: dispatches per queue, aged
//! dispatches, the stage each CPU last read) summed over CPUs, and how it ended (`scx_exit`,
//! the kernel's scx_exit_info copied in ops.exit), decoded from map bytes.

use crate::intf::{joule_scx_exit, joule_scx_stats, JOULE_SCX_NR_DSQS};
use crate::pod::from_bytes;

/// The counters of all CPUs, summed; `stage` is the one read most recently by any CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScxStats {
    /// Tasks moved to a CPU from each queue: score queues 0..=3 (0 best), the labelled one, the
    /// best-effort one.
    pub dispatched: [u64; JOULE_SCX_NR_DSQS as usize],
    /// Woken straight onto an idle CPU's local queue.
    pub direct: u64,
    /// Of `dispatched`, served only because their queue had waited past the aging bound.
    pub aged: u64,
    pub enqueued: u64,
    /// CPU time tasks of best-effort cgroups ran, in ns.
    pub best_effort_run_ns: u64,
    /// Dispatch rounds that left best-effort hogs waiting because the stage's budget was spent
    /// (the CPU may have gone idle: idle injected).
    pub best_effort_held: u64,
    /// The thermal stage the scheduler last read (None: no CPU has dispatched yet).
    pub stage: Option<u64>,
}

impl ScxStats {
    /// Sums one value per CPU (a per-CPU map lookup); values of another layout are skipped.
    pub fn from_per_cpu(values: &[Vec<u8>]) -> ScxStats {
        let mut out = ScxStats::default();
        let mut newest = 0u64;
        for s in values.iter().filter_map(|v| from_bytes::<joule_scx_stats>(v)) {
            for (o, d) in out.dispatched.iter_mut().zip(s.dispatched) {
                *o += d;
            }
            out.direct += s.direct;
            out.aged += s.aged;
            out.enqueued += s.enqueued;
            out.best_effort_run_ns += s.best_effort_run_ns;
            out.best_effort_held += s.best_effort_held;
            if s.stage_seen_ns > newest {
                newest = s.stage_seen_ns;
                out.stage = Some(s.stage);
            }
        }
        out
    }

    /// What happened since `prev` (counters only; the stage is this reading's).
    pub fn since(&self, prev: &ScxStats) -> ScxStats {
        let mut d = *self;
        for (o, p) in d.dispatched.iter_mut().zip(prev.dispatched) {
            *o = o.saturating_sub(p);
        }
        d.direct = d.direct.saturating_sub(prev.direct);
        d.aged = d.aged.saturating_sub(prev.aged);
        d.enqueued = d.enqueued.saturating_sub(prev.enqueued);
        d.best_effort_run_ns = d.best_effort_run_ns.saturating_sub(prev.best_effort_run_ns);
        d.best_effort_held = d.best_effort_held.saturating_sub(prev.best_effort_held);
        d
    }
}

/// `SCX_EXIT_ERROR` in the kernel's `enum scx_exit_kind`: this and above, the kernel ejected
/// the scheduler; below, it was unregistered (by us, sysrq, ...).
pub const SCX_EXIT_ERROR: u32 = 1024;

/// How the scheduler ended, as the kernel told ops.exit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExitInfo {
    /// `enum scx_exit_kind`'s value.
    pub kind: u32,
    pub kind_name: &'static str,
    pub exit_code: i64,
    pub reason: String,
    pub msg: String,
    /// The kernel threw it out (an error kind), as opposed to an orderly unregistration.
    pub ejected: bool,
}

impl ExitInfo {
    /// Decodes `scx_exit[0]`; `None` while the scheduler has not exited (kind 0).
    pub fn from_map_value(bytes: &[u8]) -> Option<ExitInfo> {
        let e: joule_scx_exit = from_bytes(bytes)?;
        if e.kind == 0 {
            return None;
        }
        Some(ExitInfo {
            kind: e.kind,
            kind_name: kind_name(e.kind),
            exit_code: e.exit_code,
            reason: crate::pod::c_string(&e.reason),
            msg: crate::pod::c_string(&e.msg),
            ejected: e.kind >= SCX_EXIT_ERROR,
        })
    }
}

/// Names of the 7.3 kernel's `enum scx_exit_kind` (kernel/sched/ext_internal.h).
pub fn kind_name(kind: u32) -> &'static str {
    match kind {
        0 => "NONE",
        1 => "DONE",
        64 => "UNREG",
        65 => "UNREG_BPF",
        66 => "UNREG_KERN",
        67 => "SYSRQ",
        68 => "PARENT",
        69 => "PARENT_KILL",
        1024 => "ERROR",
        1025 => "ERROR_BPF",
        1026 => "ERROR_STALL",
        1027 => "ERROR_REENQ",
        1028 => "ERROR_RESCUE",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::as_bytes;

    fn cpu(dispatched: [u64; 6], aged: u64, stage: u64, seen: u64) -> Vec<u8> {
        let s = joule_scx_stats { dispatched, direct: 1, aged, enqueued: 10, stage, stage_seen_ns: seen, best_effort_run_ns: 5, best_effort_held: 2 };
        as_bytes(&s).to_vec()
    }

    #[test]
    fn per_cpu_counters_sum_and_the_newest_stage_wins() {
        let s = ScxStats::from_per_cpu(&[cpu([1, 2, 3, 4, 5, 6], 1, 2, 900), cpu([10, 0, 0, 1, 0, 1], 2, 1, 500), vec![0u8; 3]]);
        assert_eq!(s.dispatched, [11, 2, 3, 5, 5, 7]);
        assert_eq!((s.direct, s.aged, s.enqueued, s.stage), (2, 3, 20, Some(2)));
        assert_eq!((s.best_effort_run_ns, s.best_effort_held), (10, 4));
        let d = s.since(&ScxStats::from_per_cpu(&[cpu([1, 2, 3, 4, 5, 6], 1, 0, 1)]));
        assert_eq!((d.dispatched, d.aged, d.enqueued, d.stage), ([10, 0, 0, 1, 0, 1], 2, 10, Some(2)));
        assert_eq!((d.best_effort_run_ns, d.best_effort_held), (5, 2));
        assert_eq!(ScxStats::from_per_cpu(&[cpu([0; 6], 0, 3, 0)]).stage, None, "no CPU has read a stage yet");
    }

    #[test]
    fn exit_info_decodes_kind_reason_and_message() {
        let mut e = joule_scx_exit { exit_code: 0, kind: 1026, ..Default::default() };
        for (d, s) in e.reason.iter_mut().zip(b"runnable task stall") {
            *d = *s as _;
        }
        for (d, s) in e.msg.iter_mut().zip(b"kworker/0:1[42] failed to run for 30.1s") {
            *d = *s as _;
        }
        let x = ExitInfo::from_map_value(as_bytes(&e)).unwrap();
        assert_eq!((x.kind_name, x.ejected, x.reason.as_str()), ("ERROR_STALL", true, "runnable task stall"));
        assert_eq!(x.msg, "kworker/0:1[42] failed to run for 30.1s");
        e.kind = 64;
        let x = ExitInfo::from_map_value(as_bytes(&e)).unwrap();
        assert_eq!((x.kind_name, x.ejected), ("UNREG", false));
        assert_eq!(ExitInfo::from_map_value(as_bytes(&joule_scx_exit::default())), None, "still running");
    }
}

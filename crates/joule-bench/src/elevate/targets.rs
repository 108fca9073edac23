//! The bench's targets: busy loops that record their own runs (or count work), as threads of
//! the bench or as child processes (`joule-bench elevate-target`, hidden), and one engine run
//! over them.

use anyhow::Context;
use joule_core::effects::{RealEffects, Sched, SchedAttr};
use joule_elevate::probe::{self, Record};
use joule_elevate::timing::now_ns;
use joule_elevate::{ElevateOpts, Elevator, RunReport, Target};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::thread::JoinHandle;
use std::time::Duration;

/// Arguments of the hidden `joule-bench elevate-target`.
#[derive(clap::Args, Debug)]
pub struct TargetArgs {
    /// Spin until this CLOCK_MONOTONIC time (ns).
    #[arg(long)]
    pub until_ns: u64,
    /// Count work instead of recording runs.
    #[arg(long)]
    pub work: bool,
    /// Where to write the record (JSON).
    #[arg(long)]
    pub out: PathBuf,
}

pub fn target_main(a: &TargetArgs) -> anyhow::Result<()> {
    let r = if a.work { probe::count_work(a.until_ns) } else { probe::record_runs(a.until_ns, 1 << 20) };
    std::fs::write(&a.out, serde_json::to_vec(&r)?).with_context(|| format!("while writing {}", a.out.display()))
}

/// Which kind of target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Process,
    Thread,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Process => "process",
            Kind::Thread => "thread",
        }
    }
}

/// Running targets.
pub enum Running {
    Threads(Vec<(i32, JoinHandle<Record>)>),
    Procs(Vec<(Child, PathBuf)>, tempfile::TempDir),
}

impl Running {
    /// Starts one target per entry of `work` (true: counts work) that spin until `until_ns`.
    pub fn start(kind: Kind, work: &[bool], until_ns: u64) -> anyhow::Result<Running> {
        match kind {
            Kind::Thread => {
                let mut v = Vec::new();
                for &w in work {
                    let (tx, rx) = std::sync::mpsc::channel();
                    let h = std::thread::spawn(move || {
                        let _ = tx.send(joule_elevate::gettid());
                        if w {
                            probe::count_work(until_ns)
                        } else {
                            probe::record_runs(until_ns, 1 << 20)
                        }
                    });
                    v.push((rx.recv().context("target thread")?, h));
                }
                Ok(Running::Threads(v))
            }
            Kind::Process => {
                let dir = tempfile::tempdir()?;
                let exe = std::env::current_exe()?;
                let mut v = Vec::new();
                for (i, &w) in work.iter().enumerate() {
                    let out = dir.path().join(format!("t{i}.json"));
                    let mut c = Command::new(&exe);
                    c.args(["elevate-target", "--until-ns", &until_ns.to_string(), "--out"]).arg(&out);
                    if w {
                        c.arg("--work");
                    }
                    v.push((c.spawn().context("while starting a target process")?, out));
                }
                Ok(Running::Procs(v, dir))
            }
        }
    }

    pub fn tids(&self) -> Vec<i32> {
        match self {
            Running::Threads(v) => v.iter().map(|(t, _)| *t).collect(),
            Running::Procs(v, _) => v.iter().map(|(c, _)| c.id() as i32).collect(),
        }
    }

    /// Waits for every target and returns what each recorded.
    pub fn finish(self) -> anyhow::Result<Vec<Record>> {
        match self {
            Running::Threads(v) => Ok(v.into_iter().map(|(_, h)| h.join().unwrap_or_default()).collect()),
            Running::Procs(v, _dir) => v
                .into_iter()
                .map(|(mut c, out)| {
                    c.wait()?;
                    Ok(serde_json::from_slice(&std::fs::read(&out).with_context(|| format!("target record {}", out.display()))?)?)
                })
                .collect(),
        }
    }
}

/// One engine run over `tids` (one slot each) for `run_s` on the calling thread.
pub fn elevate(tids: &[i32], opts: ElevateOpts, run_s: f64) -> anyhow::Result<RunReport> {
    let slots = tids.iter().map(|&t| vec![Target { tid: t, label: t.to_string() }]).collect();
    let fx = RealEffects;
    let mut el = Elevator::setup(&fx, slots, opts).context("while taking the targets")?;
    let r = el.run(&std::sync::atomic::AtomicBool::new(false), Some(Duration::from_secs_f64(run_s)));
    let rest = el.teardown();
    anyhow::ensure!(rest.failed.is_empty(), "restore failed: {:?}", rest.failed);
    Ok(r?)
}

/// Runs `f` with the calling thread at SCHED_FIFO `prio` on `cpu`, then puts it back.
pub fn as_fifo_on<T>(cpu: usize, prio: i32, f: impl FnOnce() -> T) -> anyhow::Result<T> {
    let me = joule_elevate::gettid();
    let fx = RealEffects;
    let (old, old_cpus) = (fx.get_sched(me)?, fx.get_affinity(me)?);
    fx.set_affinity(me, &[cpu])?;
    fx.set_sched(me, SchedAttr { policy: libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, priority: prio })?;
    let out = f();
    fx.set_sched(me, old)?;
    fx.set_affinity(me, &old_cpus)?;
    Ok(out)
}

/// Sleeps long enough after an RT run that the next one never meets RT throttling (see mod.rs).
pub fn rest() {
    std::thread::sleep(Duration::from_millis(250));
}

/// A deadline `s` seconds from now on CLOCK_MONOTONIC.
pub fn in_s(s: f64) -> u64 {
    now_ns() + (s * 1e9) as u64
}

/// Time the hypervisor took CPUs 0 and 1 away from this VM so far (steal, /proc/stat, ms at
/// the kernel's USER_HZ resolution): a run with a stall and steal in it lost the time to the
/// host, not to anything on this machine.
pub fn steal_ms() -> [f64; 2] {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    parse_steal_ms(&text, crate::ticks_per_s())
}

fn parse_steal_ms(stat: &str, user_hz: f64) -> [f64; 2] {
    let mut out = [0.0; 2];
    for (i, name) in ["cpu0 ", "cpu1 "].iter().enumerate() {
        if let Some(l) = stat.lines().find(|l| l.starts_with(name)) {
            // cpuN user nice system idle iowait irq softirq steal ...
            let ticks: f64 = l.split_ascii_whitespace().nth(8).and_then(|f| f.parse().ok()).unwrap_or(0.0);
            out[i] = ticks * 1000.0 / user_hz.max(1.0);
        }
    }
    out
}

/// Steal between two readings, ms per CPU.
pub fn steal_since(before: [f64; 2]) -> [f64; 2] {
    let now = steal_ms();
    [now[0] - before[0], now[1] - before[1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_counter_of_each_cpu_line_in_ms() {
        let stat = "cpu  1 2 3 4 5 6 7 99 0 0\ncpu0 1 2 3 4 5 6 7 12 0 0\ncpu1 1 2 3 4 5 6 7 3 0 0\n";
        assert_eq!(parse_steal_ms(stat, 100.0), [120.0, 30.0]);
        assert_eq!(parse_steal_ms("", 100.0), [0.0, 0.0]);
    }
}

//! `joule elevate`: runs the user-space scheduler of joule-elevate on chosen threads — pids,
//! every thread of a process, a QEMU guest's vCPUs, or a command it starts — round-robin with
//! µs slices or from a table, until a duration, a signal, or the targets' exit; then puts every
//! thread back. A guardian process and the undo journal put them back if it dies.

use crate::UsageError;
use anyhow::{bail, Context};
use joule_core::effects::RealEffects;
use joule_core::journal::Journal;
use joule_elevate::rt_throttle::{self, Throttle};
use joule_elevate::target::{self, TargetSpec};
use joule_elevate::timing::WaitMethod;
use joule_elevate::{ElevateOpts, Elevator, Pattern, Schedule, Target};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Run chosen threads in turn on one core, in µs slices scheduled from user space.
///
/// The priority elevation trick: a scheduler thread at SCHED_FIFO 3 raises the chosen target to
/// 2 and lowers the previous one to 1; sched_setaffinity binds every target to --cpu.
///
/// Examples:
///   joule elevate --cpu 0 --slice-us 50 --pattern dedicated --pids 1234,1240
///   joule elevate --cpu 0 --slice-us 50 --table A,B,A,C --map A=1234,B=1240,C=1250
///   joule elevate --cpu 0 --slice-us 100 --vcpus $(pidof qemu-system-x86_64)
///   joule elevate --cpu 0 --threads --pids 1234 --duration-s 10
///   joule elevate --cpu 0 --duration-s 5 -- stress-ng --cpu 2
///
/// The targets own --cpu while it runs: ordinary tasks bound to it get only what RT throttling
/// leaves (5 % by default). Every change is journalled first; if joule elevate dies (even
/// SIGKILL) its guardian puts every thread back, and `joule restore` does too. Needs root
/// (CAP_SYS_NICE). Kernel threads are refused.
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ElevateArgs {
    /// The core the targets run on.
    #[arg(long, default_value_t = 0, value_name = "N")]
    cpu: usize,
    /// Length of each slice, µs (1..=1000000). Short slices cut the latency of a target that
    /// waits for its turn but cost more switches.
    #[arg(long, default_value_t = 50, value_name = "US")]
    slice_us: u64,
    /// shared: the scheduler sleeps on the targets' core (no extra core, switches late by the
    /// timer's wake-up error); dedicated: it spins on a core of its own (--sched-cpu; default
    /// the lowest other online core) and switches on time, at the cost of that core.
    #[arg(long, default_value = "shared", value_parser = ["shared", "dedicated"])]
    pattern: String,
    /// The scheduler's core (dedicated pattern; must differ from --cpu).
    #[arg(long, value_name = "N")]
    sched_cpu: Option<usize>,
    /// How the scheduler waits out a slice: clock_nanosleep, timerfd (shared default), spin
    /// (dedicated default), hybrid (sleep, then spin the last 20 µs).
    #[arg(long, value_parser = ["clock_nanosleep", "timerfd", "spin", "hybrid"])]
    wait: Option<String>,
    /// Targets, in round-robin order (each pid's main thread, or every thread with --threads).
    #[arg(long, value_delimiter = ',', value_name = "PID,...")]
    pids: Vec<String>,
    /// Take every thread of each --pids process (each thread gets its own slice), or every
    /// thread of the command started after `--`.
    #[arg(long)]
    threads: bool,
    /// Take the vCPU threads (named `CPU n/KVM`) of this QEMU process, in vCPU order.
    #[arg(long, value_name = "QEMU_PID")]
    vcpus: Option<String>,
    /// A table of slot names run one slice each, repeated (`A,A,B,C` or `A,B,A,C`); needs --map.
    #[arg(long, value_delimiter = ',', value_name = "SLOT,...")]
    table: Vec<String>,
    /// What each table slot is: `A=1234,B=1240` (with --threads, every thread of the pid).
    #[arg(long, value_delimiter = ',', value_name = "SLOT=PID,...")]
    map: Vec<String>,
    /// Stop after this many seconds; without it, run until SIGINT/SIGTERM or the targets exit.
    #[arg(long, value_name = "S")]
    duration_s: Option<f64>,
    /// Lift RT throttling (kernel.sched_rt_runtime_us = -1) for the run, restored on exit:
    /// the targets get their whole core, and ordinary tasks bound to it starve meanwhile.
    #[arg(long)]
    no_rt_throttle: bool,
    /// Undo journal directory (`joule restore --journal-dir` reads it).
    #[arg(long, default_value = "/run/joule", value_name = "DIR")]
    journal_dir: PathBuf,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
    /// A command to start and schedule (its main thread; every thread with --threads). It is
    /// stopped (SIGTERM) when the run ends before it does.
    #[arg(last = true, value_name = "CMD")]
    cmd: Vec<String>,
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

fn parse_pid(flag: &str, s: &str) -> anyhow::Result<i32> {
    match s.trim().parse::<i32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(usage(format!("{flag} {s:?}: not a pid (a positive integer)"))),
    }
}

/// The slots and the schedule the arguments name (the command's pid, when there is one).
fn plan(a: &ElevateArgs, cmd_pid: Option<i32>) -> anyhow::Result<(Vec<Vec<Target>>, Schedule)> {
    let fx = RealEffects;
    let procfs = Path::new("/proc");
    let sources = [!a.pids.is_empty(), a.vcpus.is_some(), !a.map.is_empty(), cmd_pid.is_some()].iter().filter(|b| **b).count();
    if sources != 1 {
        bail!(usage("name the targets one way: --pids, --vcpus, --table with --map, or `-- CMD`".into()));
    }
    if a.table.is_empty() != a.map.is_empty() {
        bail!(usage("--table and --map go together (`--table A,B,A,C --map A=1234,B=1240,C=1250`)".into()));
    }
    let one = |pid: i32| if a.threads { TargetSpec::Threads(pid) } else { TargetSpec::Pid(pid) };
    let resolve = |spec: TargetSpec| target::resolve(&fx, procfs, &spec).map_err(|e| usage(e.to_string()));
    if !a.map.is_empty() {
        let mut names: Vec<String> = Vec::new();
        let mut slots = Vec::new();
        for m in &a.map {
            let Some((name, pid)) = m.split_once('=') else { bail!(usage(format!("--map {m:?}: expected SLOT=PID, e.g. A=1234"))) };
            if names.iter().any(|n| n == name.trim()) {
                bail!(usage(format!("--map {m:?}: slot {} is mapped twice", name.trim())));
            }
            names.push(name.trim().to_string());
            slots.push(resolve(one(parse_pid("--map", pid)?))?);
        }
        let mut order = Vec::new();
        for t in &a.table {
            match names.iter().position(|n| n == t.trim()) {
                Some(i) => order.push(i),
                None => bail!(usage(format!("--table entry {t:?} has no --map (mapped: {})", names.join(", ")))),
            }
        }
        return Ok((slots, Schedule::Table(order)));
    }
    let slots: Vec<Vec<Target>> = if let Some(v) = &a.vcpus {
        resolve(TargetSpec::Vcpus(parse_pid("--vcpus", v)?))?.into_iter().map(|t| vec![t]).collect()
    } else {
        let pids: Vec<i32> = match cmd_pid {
            Some(p) => vec![p],
            None => a.pids.iter().map(|p| parse_pid("--pids", p)).collect::<anyhow::Result<_>>()?,
        };
        let mut v = Vec::new();
        for p in pids {
            v.extend(resolve(one(p))?.into_iter().map(|t| vec![t]));
        }
        v
    };
    Ok((slots, Schedule::RoundRobin))
}

pub fn run(a: ElevateArgs) -> anyhow::Result<()> {
    if let Some(d) = a.duration_s {
        if !(d.is_finite() && d > 0.0) {
            bail!(usage(format!("--duration-s {d}: must be a positive number of seconds")));
        }
    }
    if a.slice_us == 0 || a.slice_us > 1_000_000 {
        bail!(usage(format!("--slice-us {}: must be 1..=1000000", a.slice_us)));
    }
    let pattern = if a.pattern == "dedicated" { Pattern::Dedicated } else { Pattern::Shared };
    let wait = a.wait.as_deref().map(|w| WaitMethod::ALL.into_iter().find(|m| m.name() == w).expect("clap checked"));
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("while installing signal handlers")?;
    }
    let mut child = None;
    if !a.cmd.is_empty() {
        let c = std::process::Command::new(&a.cmd[0]).args(&a.cmd[1..]).spawn().map_err(|e| usage(format!("cannot start {:?}: {e}", a.cmd[0])))?;
        child = Some(c);
    }
    let cmd_pid = child.as_ref().map(|c| c.id() as i32);
    let planned = plan(&a, cmd_pid);
    let (slots, schedule) = match planned {
        Ok(p) => p,
        Err(e) => {
            if let Some(mut c) = child {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Err(e);
        }
    };
    // The command's exit ends the run (a zombie still takes priority changes). Started
    // before setup: a thread started by the scheduler would inherit its core and starve there.
    let child_done = Arc::new(AtomicBool::new(false));
    let watcher = child.take().map(|mut c| {
        let (stop, done) = (stop.clone(), child_done.clone());
        std::thread::spawn(move || {
            let st = c.wait();
            done.store(true, Ordering::SeqCst);
            stop.store(true, Ordering::SeqCst);
            st.ok()
        })
    });
    let opts = ElevateOpts {
        cpu: a.cpu,
        sched_cpu: a.sched_cpu,
        slice_us: a.slice_us,
        pattern,
        wait,
        schedule,
        journal: Some(Journal::open(&a.journal_dir).with_context(|| format!("while opening the undo journal in {}", a.journal_dir.display()))?),
        guardian: true,
        confirm_landing: true,
    };
    let fx = RealEffects;
    let mut el = Elevator::setup(&fx, slots, opts.clone()).map_err(|e| {
        if let Some(p) = cmd_pid {
            // SAFETY: signalling the child we started (the watcher reaps it).
            unsafe { libc::kill(p, libc::SIGTERM) };
        }
        match e {
            joule_elevate::ElevateError::Invalid(_) | joule_elevate::ElevateError::CpuOffline { .. } => usage(e.to_string()),
            e => anyhow::Error::new(e).context("while taking the targets"),
        }
    })?;
    let throttle = if a.no_rt_throttle { Some(rt_throttle::lift(&mut el, &fx)?) } else { Throttle::read(&fx) };
    let throttling = throttle.map(|t| t.describe()).unwrap_or_else(|| "RT throttling: unknown (sched_rt_* unreadable)".into());
    if !a.json {
        eprintln!(
            "joule elevate: {} slot(s) on CPU {}, scheduler on CPU {} ({}), {} µs slices; {throttling}",
            el.slot_tids().len(),
            a.cpu,
            el.sched_cpu(),
            pattern.name(),
            a.slice_us
        );
    }
    let slots_tids = el.slot_tids();
    let sched_cpu = el.sched_cpu();
    let owner = el.owner().to_string();
    let report = el.run(&stop, a.duration_s.map(Duration::from_secs_f64));
    let command_ended_it = child_done.load(Ordering::SeqCst);
    let restored = el.teardown();
    let mut status = None;
    if let Some(w) = watcher {
        if !command_ended_it {
            if let Some(p) = cmd_pid {
                // SAFETY: signalling the child we started (not yet reaped: the watcher waits).
                unsafe { libc::kill(p, libc::SIGTERM) };
            }
        }
        status = w.join().ok().flatten().map(|s| s.to_string());
    }
    let report = report.context("while scheduling")?;
    let ended_by = if command_ended_it { "command_exited" } else { report.ended_by };
    if a.json {
        let v = serde_json::json!({
            "cpu": a.cpu, "sched_cpu": sched_cpu,
            "pattern": pattern.name(), "slice_us": a.slice_us, "wait": wait.unwrap_or(pattern.default_wait()).name(),
            "slots": slots_tids, "journal_owner": owner, "rt_throttle": throttle, "throttling": throttling,
            "run": report, "ended_by": ended_by, "command_status": status, "restore": restored,
        });
        println!("{v}");
    } else {
        let secs = (report.end_ns - report.start_ns) as f64 / 1e9;
        println!(
            "joule elevate: ended by {ended_by} after {secs:.3} s: {} slices, {} switches, {} late slices, {} thread(s) exited; restored {} change(s), {} already gone, {} failed",
            report.slices,
            report.switches,
            report.late_slices,
            report.exited.len(),
            restored.undone,
            restored.already_gone,
            restored.failed.len()
        );
        if let Some(s) = status {
            println!("command: {s}");
        }
    }
    anyhow::ensure!(
        restored.failed.is_empty(),
        "{} change(s) could not be undone (they stay in {}; run `joule restore`)",
        restored.failed.len(),
        a.journal_dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> ElevateArgs {
        crate::test_args::parse_args::<ElevateArgs>("elevate", extra)
    }

    #[test]
    fn bad_input_names_the_value() {
        let me = std::process::id().to_string();
        let e = plan(&args(&["--pids", "12x"]), None).unwrap_err().to_string();
        assert!(e.contains("\"12x\""), "{e}");
        let e = plan(&args(&["--pids", &me, "--vcpus", &me]), None).unwrap_err().to_string();
        assert!(e.contains("one way"), "{e}");
        let e = plan(&args(&["--table", "A,B", "--map", &format!("A={me}")]), None).unwrap_err().to_string();
        assert!(e.contains("\"B\" has no --map"), "{e}");
        let e = plan(&args(&["--table", "A", "--map", "A"]), None).unwrap_err().to_string();
        assert!(e.contains("SLOT=PID"), "{e}");
        let e = plan(&args(&["--pids", "2"]), None).unwrap_err().to_string();
        assert!(e.contains("kernel thread") && e.contains("pid 2"), "{e}");
    }

    #[test]
    fn a_table_maps_names_to_slots_in_order() {
        let me = std::process::id();
        let (slots, sched) = plan(&args(&["--table", "A,B,A,C", "--map", &format!("A={me},B={me},C={me}")]), None).unwrap();
        assert_eq!(slots.len(), 3);
        assert_eq!(sched, Schedule::Table(vec![0, 1, 0, 2]));
    }
}

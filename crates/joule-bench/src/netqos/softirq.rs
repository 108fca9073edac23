//! Section 2 of `joule-bench net-qos`: softirq starvation of a real-time task. A SCHED_FIFO
//! thread of this process wakes every 1 ms (absolute deadlines), records how late it woke, and
//! spins `work_us` as its job; a job that ends after its period is a deadline miss. It runs on
//! `rt_cpu`, and RPS on the receiving veth sends that CPU the NET_RX work of a small-packet
//! flood (iperf3 UDP, 64-byte datagrams, unpaced, sender and receiver pinned to CPU 0): veth
//! hands each packet to the backlog of the CPU RPS picks, and that CPU runs NET_RX in softirq
//! context above every thread. Modes: idle, flood, flood with joule's limiter on the sender.
//! softirq_cpu_pct is NET_RX + NET_TX time on the RT CPU (the limiter's qdisc can be run there).

use super::limiter::round2;
use super::{Limit, Monitor, NetQosArgs};
use crate::netqos::topo::Topo;
use joule_core::effects::{RealEffects, Sched, SchedAttr};
use std::time::{Duration, Instant};

struct RtResult {
    lat_us: Vec<f64>,
    misses: u64,
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The periodic task, bounded by `seconds`; its thread ends (and its RT priority with it).
fn rt_task(cpu: usize, seconds: f64, work_us: u64) -> anyhow::Result<RtResult> {
    std::thread::spawn(move || -> anyhow::Result<RtResult> {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        RealEffects.set_affinity(tid, &[cpu])?;
        RealEffects.set_sched(tid, SchedAttr { policy: libc::SCHED_FIFO, priority: 50 })?;
        let period = 1_000_000u64;
        let jobs = (seconds * 1000.0) as u64;
        let mut next = now_ns() + period;
        let mut r = RtResult { lat_us: Vec::with_capacity(jobs as usize), misses: 0 };
        for _ in 0..jobs {
            let ts = libc::timespec { tv_sec: (next / 1_000_000_000) as i64, tv_nsec: (next % 1_000_000_000) as i64 };
            // SAFETY: absolute sleep on CLOCK_MONOTONIC with a valid timespec.
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
            let woke = now_ns();
            r.lat_us.push(woke.saturating_sub(next) as f64 / 1000.0);
            while now_ns() < woke + work_us * 1000 {
                std::hint::spin_loop();
            }
            if now_ns() > next + period {
                r.misses += 1;
            }
            next += period;
            // A job that overran skips the periods it lost (they count as misses above).
            let now = now_ns();
            while next < now {
                next += period;
            }
        }
        Ok(r)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the RT task panicked"))?
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0)
}

pub fn run(args: &NetQosArgs, topo: &Topo, mon: &Monitor) -> anyhow::Result<Vec<serde_json::Value>> {
    let rt_cpu = args.rt_cpu;
    topo.rps_to(rt_cpu)?;
    let mut rows = Vec::new();
    for mode in ["idle", "flood", "flood+limiter"] {
        let limit = if mode == "flood+limiter" { Some(Limit::install(topo, args.flood_limit_mbit)?) } else { None };
        let mut flood = None;
        if mode != "idle" {
            let mut c = Topo::exec(&topo.ns_a, "iperf3");
            c.args(["-c", &topo.addr_b, "-u", "-l", "64", "-b", "0", "-A", "0", "-t", &format!("{}", args.rt_seconds.ceil() as u64 + 2)]);
            flood = Some(c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn()?);
            std::thread::sleep(Duration::from_millis(500));
        }
        let before = mon.read();
        let t0 = Instant::now();
        let r = rt_task(rt_cpu, args.rt_seconds, args.work_us);
        let wall_s = t0.elapsed().as_secs_f64();
        let after = mon.read();
        if let Some(mut f) = flood {
            let _ = f.kill();
            let _ = f.wait();
        }
        drop(limit);
        let mut r = r?;
        let rx_ns = after.net_rx_ns_on(rt_cpu).saturating_sub(before.net_rx_ns_on(rt_cpu));
        let tx_ns = after.net_tx_ns_on(rt_cpu).saturating_sub(before.net_tx_ns_on(rt_cpu));
        let share = |ns: u64| round2(ns as f64 / (wall_s * 1e9) * 100.0);
        let max = r.lat_us.iter().copied().fold(0.0, f64::max);
        rows.push(serde_json::json!({
            "mode": mode,
            "p99_us": round2(pct(&mut r.lat_us, 0.99)),
            "max_us": round2(max),
            "misses": r.misses,
            "jobs": r.lat_us.len(),
            "softirq_cpu_pct": share(rx_ns + tx_ns),
            "net_rx_pct": share(rx_ns),
            "net_tx_pct": share(tx_ns),
            "rt_cpu": rt_cpu,
            "limit_mbit": if mode == "flood+limiter" { Some(args.flood_limit_mbit) } else { None },
            "source": "ebpf",
        }));
        std::thread::sleep(Duration::from_millis(300));
    }
    Ok(rows)
}

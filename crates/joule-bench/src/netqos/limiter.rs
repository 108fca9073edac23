//! Section 1 of `joule-bench net-qos`: the limiter's accuracy. For each protocol and target,
//! joule's limiter (HTB through netlink, as the agent puts it) shapes the sender's veth and
//! iperf3 sends as fast as it can through it (UDP: at 1.5× the target); the achieved rate is
//! the IP bytes the flow monitor counted at the receiving socket over iperf3's interval, and
//! `cpu_pct` the NET_TX softirq time of all CPUs (where HTB's dequeue runs once it holds packets
//! back) over that interval: an upper bound of the limiter's own CPU cost, since any other
//! traffic's NET_TX work of the interval counts too.

use super::{Limit, Monitor, NetQosArgs};
use crate::netqos::topo::Topo;
use anyhow::Context;

pub fn run(args: &NetQosArgs, topo: &Topo, mon: &Monitor) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut rows = Vec::new();
    for proto in ["tcp", "udp"] {
        for &target in &args.targets_mbit {
            let limit = Limit::install(topo, target)?;
            let before = mon.read();
            let t0 = std::time::Instant::now();
            let mut c = Topo::exec(&topo.ns_a, "iperf3");
            c.args(["-c", &topo.addr_b, "-t", &args.seconds.to_string(), "-J", "-A", "0"]);
            if proto == "udp" {
                c.args(["-u", "-l", "1400", "-b", &format!("{}M", (target * 1.5).ceil())]);
            }
            let out = c.output().context("while running iperf3")?;
            let wall_s = t0.elapsed().as_secs_f64();
            let after = mon.read();
            drop(limit);
            let j: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| format!("iperf3 said: {}", String::from_utf8_lossy(&out.stderr)))?;
            if let Some(e) = j.get("error") {
                anyhow::bail!("iperf3 {proto} at {target} Mbit/s: {e}");
            }
            let secs = j["end"]["sum_received"]["seconds"].as_f64().filter(|s| *s > 0.0).unwrap_or(args.seconds as f64);
            let iperf_mbit = j["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6;
            let ip_bytes = after.ingress_bytes(proto, &topo.addr_b).saturating_sub(before.ingress_bytes(proto, &topo.addr_b));
            let achieved_mbit = ip_bytes as f64 * 8.0 / 1e6 / secs;
            let net_tx_ns = after.net_tx_ns().saturating_sub(before.net_tx_ns());
            let cpu_pct = net_tx_ns as f64 / (wall_s * 1e9) * 100.0;
            rows.push(serde_json::json!({
                "proto": proto,
                "target_mbit": target,
                "achieved_mbit": round2(achieved_mbit),
                "ratio": round3(achieved_mbit / target),
                "iperf3_goodput_mbit": round2(iperf_mbit),
                "cpu_pct": round2(cpu_pct),
                "seconds": round2(secs),
                "source": "ebpf",
            }));
        }
    }
    Ok(rows)
}

pub fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

//! The flow monitor as a source (issue 11): flow.bpf.c's cumulative per-flow counters and
//! per-CPU softirq time become, per interval, the top-N flows by bytes plus one `other` entry
//! (bounded label cardinality whatever the traffic), per-cgroup totals and rates, and each
//! CPU's NET_RX/NET_TX share. Counters kept here only grow, also when the kernel's LRU map
//! evicts a quiet flow.

use joule_bpf::{FlowCounters, FlowKey, FlowMonitor, SoftirqTime};
use joule_core::snapshot::{CgroupNet, CpuSoftirq, FlowSample, NetFlows};
use joule_core::{Origin, Snapshot};
use joule_telemetry::{Source, SourceError};
use std::collections::{BTreeMap, HashMap};

pub struct FlowSource {
    mon: FlowMonitor,
    state: FlowState,
}

impl FlowSource {
    pub fn new(mon: FlowMonitor, top_n: usize) -> FlowSource {
        FlowSource { mon, state: FlowState { top_n, ..Default::default() } }
    }
}

/// What two reads are differenced against, and the per-cgroup totals.
#[derive(Default)]
pub struct FlowState {
    top_n: usize,
    prev: HashMap<FlowKey, FlowCounters>,
    prev_softirq: Vec<SoftirqTime>,
    /// (cgroup id, egress) → (bytes, packets, retransmits) since load.
    cgroup_totals: BTreeMap<(u64, bool), (u64, u64, u64)>,
}

fn flow_name(k: &FlowKey) -> String {
    let end = |a: &std::net::IpAddr, p: u16| match a {
        std::net::IpAddr::V6(v6) => format!("[{v6}]:{p}"),
        v4 => format!("{v4}:{p}"),
    };
    format!("{} {}>{}", k.proto, end(&k.local, k.local_port), end(&k.remote, k.remote_port))
}

fn dir(egress: bool) -> &'static str {
    if egress {
        "egress"
    } else {
        "ingress"
    }
}

impl FlowState {
    /// One interval from the cumulative `flows` and `softirq`, `interval_s` long (0 on the
    /// first sample: no rates yet), cgroup ids named by `names`.
    pub fn step(&mut self, flows: Vec<(FlowKey, FlowCounters)>, softirq: Vec<SoftirqTime>, interval_s: f64, names: &HashMap<u64, String>) -> NetFlows {
        let per_s = |v: u64| if interval_s > 0.0 { v as f64 / interval_s } else { 0.0 };
        let mut deltas: Vec<(FlowKey, u64, u64, u64)> = Vec::with_capacity(flows.len());
        for (k, c) in &flows {
            let p = self.prev.get(k).copied().unwrap_or_default();
            // A flow evicted and seen again restarts from 0: then its whole count is new.
            let (b, n, r) = if c.bytes >= p.bytes && c.packets >= p.packets {
                (c.bytes - p.bytes, c.packets - p.packets, c.retransmits.saturating_sub(p.retransmits))
            } else {
                (c.bytes, c.packets, c.retransmits)
            };
            let t = self.cgroup_totals.entry((k.cgroup_id, k.egress)).or_default();
            t.0 += b;
            t.1 += n;
            t.2 += r;
            deltas.push((k.clone(), b, n, r));
        }
        deltas.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let name = |id: u64| names.get(&id).cloned().unwrap_or_else(|| format!("id:{id}"));
        let sample = |flow: String, proto: &str, direction: &str, cgroup: String, b: u64, n: u64, r: u64| FlowSample {
            flow,
            proto: proto.into(),
            direction: direction.into(),
            cgroup,
            bytes: b,
            packets: n,
            mean_packet_bytes: if n > 0 { b as f64 / n as f64 } else { 0.0 },
            rate_bytes_per_second: per_s(b),
            retransmits: r,
            source: Origin::Ebpf,
        };
        let mut out: Vec<FlowSample> =
            deltas.iter().take(self.top_n).map(|(k, b, n, r)| sample(flow_name(k), k.proto, dir(k.egress), name(k.cgroup_id), *b, *n, *r)).collect();
        let rest = deltas.iter().skip(self.top_n).fold((0, 0, 0), |acc, (_, b, n, r)| (acc.0 + b, acc.1 + n, acc.2 + r));
        out.push(sample("other".into(), "mixed", "mixed", "mixed".into(), rest.0, rest.1, rest.2));
        // Rates per cgroup over the interval, from the deltas.
        let mut cg_rate: HashMap<(u64, bool), u64> = HashMap::new();
        for (k, b, _, _) in &deltas {
            *cg_rate.entry((k.cgroup_id, k.egress)).or_default() += b;
        }
        let cgroups = self
            .cgroup_totals
            .iter()
            .map(|(&(id, eg), &(b, n, r))| CgroupNet {
                cgroup: name(id),
                direction: dir(eg).into(),
                bytes_total: b,
                packets_total: n,
                retransmits_total: r,
                rate_bytes_per_second: per_s(cg_rate.get(&(id, eg)).copied().unwrap_or(0)),
                source: Origin::Ebpf,
            })
            .collect();
        let share = |now: u64, before: u64| if interval_s > 0.0 { now.saturating_sub(before) as f64 / 1e9 / interval_s } else { 0.0 };
        let cpus = softirq
            .iter()
            .map(|s| {
                let p = self.prev_softirq.iter().find(|p| p.cpu == s.cpu).copied().unwrap_or(*s);
                CpuSoftirq {
                    cpu: s.cpu,
                    net_rx_seconds_total: s.net_rx_ns as f64 / 1e9,
                    net_tx_seconds_total: s.net_tx_ns as f64 / 1e9,
                    net_rx_ratio: share(s.net_rx_ns, p.net_rx_ns),
                    net_tx_ratio: share(s.net_tx_ns, p.net_tx_ns),
                    source: Origin::Ebpf,
                }
            })
            .collect();
        let tracked = flows.len();
        self.prev = flows.into_iter().collect();
        self.prev_softirq = softirq;
        NetFlows { flows: out, cgroups, softirq: cpus, flows_tracked: tracked, source: Origin::Ebpf }
    }
}

impl Source for FlowSource {
    fn name(&self) -> &'static str {
        "net_flows"
    }
    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let flows = self.mon.flows();
        let mut ids: Vec<u64> = flows.iter().map(|(k, _)| k.cgroup_id).collect();
        ids.extend(self.state.cgroup_totals.keys().map(|k| k.0));
        ids.sort_unstable();
        ids.dedup();
        let names = self.mon.cgroup_paths(&ids);
        let softirq = self.mon.softirq();
        snap.net = Some(self.state.step(flows, softirq, snap.interval_ms as f64 / 1000.0, &names));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn key(port: u16, cg: u64) -> FlowKey {
        FlowKey {
            proto: "udp",
            egress: true,
            local: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            local_port: port,
            remote: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            remote_port: 9,
            cgroup_id: cg,
        }
    }
    fn c(bytes: u64, packets: u64) -> FlowCounters {
        FlowCounters { bytes, packets, ..Default::default() }
    }

    #[test]
    fn top_n_by_interval_bytes_and_the_rest_in_other() {
        let mut st = FlowState { top_n: 2, ..Default::default() };
        let names = HashMap::from([(1, "/".to_string())]);
        st.step(vec![(key(1, 1), c(100, 1)), (key(2, 1), c(100, 1)), (key(3, 1), c(100, 1))], vec![], 0.0, &names);
        let n = st.step(vec![(key(1, 1), c(1100, 11)), (key(2, 1), c(300, 3)), (key(3, 1), c(5100, 51)), (key(4, 7), c(10, 1))], vec![], 1.0, &names);
        assert_eq!(n.flows.len(), 3, "2 named + other");
        assert_eq!(n.flows[0].flow, "udp 10.0.0.1:3>10.0.0.2:9");
        assert_eq!((n.flows[0].bytes, n.flows[0].rate_bytes_per_second, n.flows[0].mean_packet_bytes), (5000, 5000.0, 100.0));
        assert_eq!(n.flows[1].bytes, 1000);
        assert_eq!((n.flows[2].flow.as_str(), n.flows[2].bytes, n.flows[2].packets), ("other", 210, 3));
        assert_eq!(n.flows_tracked, 4);
        let root = n.cgroups.iter().find(|g| g.cgroup == "/").unwrap();
        assert_eq!((root.bytes_total, root.rate_bytes_per_second), (6500, 6200.0));
        assert!(n.cgroups.iter().any(|g| g.cgroup == "id:7"));
    }

    #[test]
    fn cgroup_totals_never_go_back_when_a_flow_is_evicted_and_softirq_shares_are_per_interval() {
        let mut st = FlowState { top_n: 5, ..Default::default() };
        let names = HashMap::new();
        let si = |rx: u64| vec![SoftirqTime { cpu: 1, net_rx_ns: rx, ..Default::default() }];
        st.step(vec![(key(1, 3), c(1000, 10))], si(0), 0.0, &names);
        let n = st.step(vec![], si(250_000_000), 1.0, &names);
        assert_eq!(n.cgroups[0].bytes_total, 1000, "evicted: the total stays");
        assert_eq!(n.softirq[0].net_rx_ratio, 0.25);
        let n = st.step(vec![(key(1, 3), c(40, 1))], si(250_000_000), 1.0, &names);
        assert_eq!(n.cgroups[0].bytes_total, 1040, "seen again from 0: counted as new");
        assert_eq!(n.softirq[0].net_rx_seconds_total, 0.25);
    }
}

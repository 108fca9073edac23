//! The flow monitor as a source (issue 11): flow.bpf.c's cumulative counters become, per
//! control period, per-cgroup totals and rates and each CPU's NET_RX/NET_TX share, and per
//! flow period the top-N flows by bytes plus one `other` entry (bounded label cardinality
//! whatever the traffic). Counters kept here only grow, also when the kernel's LRU maps evict
//! a quiet flow or cgroup.
//!
//! Two cadences, because the costs differ (issue 16): the kernel sums every flow into its
//! cgroup (`cgroup_net`, at most 1,024 entries), read each period, which is what placement
//! and the bandwidth rules use; the flow table, whose read costs in proportion to the flows it
//! holds (10,000 flows: ~15 ms of CPU per read with the differencing), is read every `[net]
//! flow_period_ms` (10 s by default, a Prometheus scrape's order), and the periods in between
//! carry its last top N, whose `flows_interval_ms` says what it covers.

use joule_bpf::{CgroupCounters, FlowCounters, FlowKey, FlowMonitor, SoftirqTime};
use joule_core::snapshot::{CgroupNet, CpuSoftirq, FlowSample, NetFlows};
use joule_core::{Origin, Snapshot};
use joule_telemetry::{Source, SourceError};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

pub struct FlowSource {
    mon: FlowMonitor,
    state: FlowState,
    period: Duration,
    /// When the flow table was last read.
    flows_read_at: Option<Instant>,
}

impl FlowSource {
    pub fn new(mon: FlowMonitor, top_n: usize, period: Duration) -> FlowSource {
        FlowSource { mon, state: FlowState { top_n, ..Default::default() }, period, flows_read_at: None }
    }
}

/// (cgroup id, egress) → (bytes, packets, retransmits).
type PerCgroup = BTreeMap<(u64, bool), (u64, u64, u64)>;

/// What two reads are differenced against, and the per-cgroup totals.
#[derive(Default)]
pub struct FlowState {
    top_n: usize,
    /// The flow table's last read. std's keyed SipHash, not a faster unkeyed hash: a peer
    /// picks its address and port, so it could aim at collisions.
    prev_flows: HashMap<FlowKey, FlowCounters>,
    /// The last top N, its flow count and the interval it covers (ms).
    top: (Vec<FlowTop>, usize, u64),
    /// cgroup_net's last read.
    prev_cgroups: PerCgroup,
    prev_softirq: Vec<SoftirqTime>,
    /// Since load, never back.
    cgroup_totals: PerCgroup,
}

/// One named flow (or `other`, with `key` None) of the last flow interval.
#[derive(Debug, Clone)]
struct FlowTop {
    key: Option<FlowKey>,
    bytes: u64,
    packets: u64,
    retransmits: u64,
    rate_bytes_per_second: f64,
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

/// `now - before`, or all of `now` when the counter restarted (an entry evicted and seen again
/// starts from 0: then its whole count is new).
fn delta(now: (u64, u64, u64), before: (u64, u64, u64)) -> (u64, u64, u64) {
    if now.0 >= before.0 && now.1 >= before.1 {
        (now.0 - before.0, now.1 - before.1, now.2.saturating_sub(before.2))
    } else {
        now
    }
}

fn per_s(v: u64, interval_s: f64) -> f64 {
    if interval_s > 0.0 {
        v as f64 / interval_s
    } else {
        0.0
    }
}

impl FlowState {
    /// One flow interval from the flow table's cumulative `flows`, `interval_s` long (0 on
    /// the first read: no rates yet): the top N by bytes, the rest summed.
    pub fn flows_step(&mut self, flows: Vec<(FlowKey, FlowCounters)>, interval_s: f64) {
        let mut deltas: Vec<(FlowKey, u64, u64, u64)> = Vec::with_capacity(flows.len());
        for (k, c) in &flows {
            let p = self.prev_flows.get(k).map_or((0, 0, 0), |p| (p.bytes, p.packets, p.retransmits));
            let (b, n, r) = delta((c.bytes, c.packets, c.retransmits), p);
            deltas.push((k.clone(), b, n, r));
        }
        // The top N first, in order; the rest only summed (no sort of the whole table).
        let by_bytes = |a: &(FlowKey, u64, u64, u64), b: &(FlowKey, u64, u64, u64)| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0));
        if deltas.len() > self.top_n {
            deltas.select_nth_unstable_by(self.top_n, by_bytes);
        }
        let top = deltas.len().min(self.top_n);
        deltas[..top].sort_unstable_by(by_bytes);
        let entry = |key, b, n, r| FlowTop { key, bytes: b, packets: n, retransmits: r, rate_bytes_per_second: per_s(b, interval_s) };
        let mut out: Vec<FlowTop> = deltas[..top].iter().map(|(k, b, n, r)| entry(Some(k.clone()), *b, *n, *r)).collect();
        let rest = deltas[top..].iter().fold((0, 0, 0), |acc, (_, b, n, r)| (acc.0 + b, acc.1 + n, acc.2 + r));
        out.push(entry(None, rest.0, rest.1, rest.2));
        self.top = (out, flows.len(), (interval_s * 1000.0).round() as u64);
        self.prev_flows = flows.into_iter().collect();
    }

    /// The cgroup ids the next [`Self::net`] names: every cgroup counted so far and the top
    /// flows' ones.
    pub fn cgroup_ids(&self, cgroups: &[CgroupCounters]) -> Vec<u64> {
        let mut ids: Vec<u64> = cgroups.iter().map(|c| c.cgroup_id).collect();
        ids.extend(self.cgroup_totals.keys().map(|k| k.0));
        ids.extend(self.top.0.iter().filter_map(|t| t.key.as_ref().map(|k| k.cgroup_id)));
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// One control period from cgroup_net's cumulative `cgroups` and `softirq`, `interval_s`
    /// long, with the last flow interval's top N; cgroup ids named by `names`.
    pub fn net(&mut self, cgroups: Vec<CgroupCounters>, softirq: Vec<SoftirqTime>, interval_s: f64, names: &HashMap<u64, String>) -> NetFlows {
        let name = |id: u64| names.get(&id).cloned().unwrap_or_else(|| format!("id:{id}"));
        let now: PerCgroup = cgroups.iter().map(|c| ((c.cgroup_id, c.egress), (c.bytes, c.packets, c.retransmits))).collect();
        let mut interval: HashMap<(u64, bool), (u64, u64)> = HashMap::new();
        for (&k, &c) in &now {
            // A cgroup seen for the first time counts from 0, as the kernel did since load.
            let before = self.prev_cgroups.get(&k).copied().unwrap_or_default();
            let (b, n, r) = delta(c, before);
            let t = self.cgroup_totals.entry(k).or_default();
            (t.0, t.1, t.2) = (t.0 + b, t.1 + n, t.2 + r);
            interval.insert(k, (b, n));
        }
        self.prev_cgroups = now;
        let cgroups = self
            .cgroup_totals
            .iter()
            .map(|(&(id, eg), &(b, n, r))| {
                let (bytes, packets) = interval.get(&(id, eg)).copied().unwrap_or_default();
                CgroupNet {
                    cgroup: name(id),
                    direction: dir(eg).into(),
                    bytes_total: b,
                    packets_total: n,
                    retransmits_total: r,
                    bytes,
                    packets,
                    rate_bytes_per_second: per_s(bytes, interval_s),
                    source: Origin::Ebpf,
                }
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
        self.prev_softirq = softirq;
        let flows = self.top.0.iter().map(|t| flow_sample(t, &name)).collect();
        NetFlows { flows, cgroups, softirq: cpus, flows_tracked: self.top.1, flows_interval_ms: self.top.2, source: Origin::Ebpf }
    }
}

fn flow_sample(t: &FlowTop, name: &dyn Fn(u64) -> String) -> FlowSample {
    let (flow, proto, direction, cgroup) = match &t.key {
        Some(k) => (flow_name(k), k.proto.to_string(), dir(k.egress).to_string(), name(k.cgroup_id)),
        None => ("other".into(), "mixed".into(), "mixed".into(), "mixed".into()),
    };
    FlowSample {
        flow,
        proto,
        direction,
        cgroup,
        bytes: t.bytes,
        packets: t.packets,
        mean_packet_bytes: if t.packets > 0 { t.bytes as f64 / t.packets as f64 } else { 0.0 },
        rate_bytes_per_second: t.rate_bytes_per_second,
        retransmits: t.retransmits,
        source: Origin::Ebpf,
    }
}

impl Source for FlowSource {
    fn name(&self) -> &'static str {
        "net_flows"
    }
    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let now = Instant::now();
        // A tick a little early still reads (periods jitter), so a 10 s period is ~10 s.
        let due = self.flows_read_at.is_none_or(|at| now.duration_since(at) >= self.period - self.period / 20);
        if due {
            // The real time since the last read (0 on the first: no rates yet).
            let interval_s = self.flows_read_at.map_or(0.0, |at| now.duration_since(at).as_secs_f64());
            self.state.flows_step(self.mon.flows(), interval_s);
            self.flows_read_at = Some(now);
        }
        let cgroups = self.mon.cgroups();
        let names = self.mon.cgroup_paths(&self.state.cgroup_ids(&cgroups));
        let softirq = self.mon.softirq();
        snap.net = Some(self.state.net(cgroups, softirq, snap.interval_ms as f64 / 1000.0, &names));
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

    fn cg(id: u64, bytes: u64, packets: u64) -> CgroupCounters {
        CgroupCounters { cgroup_id: id, egress: true, bytes, packets, retransmits: 0 }
    }

    #[test]
    fn top_n_by_interval_bytes_and_the_rest_in_other_carried_between_flow_reads() {
        let mut st = FlowState { top_n: 2, ..Default::default() };
        let names = HashMap::from([(1, "/".to_string())]);
        st.flows_step(vec![(key(1, 1), c(100, 1)), (key(2, 1), c(100, 1)), (key(3, 1), c(100, 1))], 0.0);
        st.flows_step(vec![(key(1, 1), c(1100, 11)), (key(2, 1), c(300, 3)), (key(3, 1), c(5100, 51)), (key(4, 7), c(10, 1))], 10.0);
        let n = st.net(vec![cg(1, 6500, 65), cg(7, 10, 1)], vec![], 0.1, &names);
        assert_eq!(n.flows.len(), 3, "2 named + other");
        assert_eq!(n.flows[0].flow, "udp 10.0.0.1:3>10.0.0.2:9");
        assert_eq!((n.flows[0].bytes, n.flows[0].rate_bytes_per_second, n.flows[0].mean_packet_bytes), (5000, 500.0, 100.0));
        assert_eq!(n.flows[1].bytes, 1000);
        assert_eq!((n.flows[2].flow.as_str(), n.flows[2].bytes, n.flows[2].packets), ("other", 210, 3));
        assert_eq!((n.flows_tracked, n.flows_interval_ms), (4, 10_000));
        assert!(n.cgroups.iter().any(|g| g.cgroup == "id:7"), "unnamed ids are named by their number");
        // The next control period, no flow read: the same top N, the cgroups' own interval.
        let n = st.net(vec![cg(1, 6600, 66), cg(7, 10, 1)], vec![], 0.1, &names);
        assert_eq!(n.flows[0].bytes, 5000);
        let root = n.cgroups.iter().find(|g| g.cgroup == "/").unwrap();
        assert_eq!((root.bytes_total, root.bytes, root.packets), (6600, 100, 1));
        assert!((root.rate_bytes_per_second - 1000.0).abs() < 1e-9, "{}", root.rate_bytes_per_second);
    }

    #[test]
    fn the_top_n_of_many_flows_are_the_largest_in_order() {
        let mut st = FlowState { top_n: 5, ..Default::default() };
        // 200 flows, bytes 1..=200 in a shuffled order (a fixed stride over a prime).
        let flows = |scale: u64| (0..200u64).map(|i| (key((i * 37 % 200) as u16 + 1, 2), c(scale * ((i * 37 % 200) + 1), scale))).collect::<Vec<_>>();
        st.flows_step(flows(0), 0.0);
        st.flows_step(flows(10), 2.0);
        let n = st.net(vec![], vec![], 0.1, &HashMap::new());
        let top: Vec<u64> = n.flows.iter().map(|f| f.bytes).collect();
        assert_eq!(top, [2000, 1990, 1980, 1970, 1960, 10 * (1..=195).sum::<u64>()], "5 largest in order, then other");
        assert_eq!(n.flows_interval_ms, 2000);
    }

    #[test]
    fn cgroup_totals_never_go_back_when_an_entry_is_evicted_and_softirq_shares_are_per_interval() {
        let mut st = FlowState { top_n: 5, ..Default::default() };
        let names = HashMap::new();
        let si = |rx: u64| vec![SoftirqTime { cpu: 1, net_rx_ns: rx, ..Default::default() }];
        let n = st.net(vec![cg(3, 1000, 10)], si(0), 0.0, &names);
        assert_eq!((n.cgroups[0].bytes_total, n.cgroups[0].rate_bytes_per_second), (1000, 0.0), "since load; no rate yet");
        let n = st.net(vec![], si(250_000_000), 1.0, &names);
        assert_eq!(n.cgroups[0].bytes_total, 1000, "evicted: the total stays");
        assert_eq!(n.softirq[0].net_rx_ratio, 0.25);
        let n = st.net(vec![cg(3, 40, 1)], si(250_000_000), 1.0, &names);
        assert_eq!((n.cgroups[0].bytes_total, n.cgroups[0].bytes), (1040, 40), "seen again from 0: counted as new");
        assert_eq!(n.softirq[0].net_rx_seconds_total, 0.25);
        // A flow evicted from the flow table and seen again also restarts from 0.
        st.flows_step(vec![(key(1, 3), c(1000, 10))], 0.0);
        st.flows_step(vec![(key(1, 3), c(40, 1))], 1.0);
        assert_eq!(st.net(vec![], vec![], 1.0, &names).flows[0].bytes, 40);
    }
}

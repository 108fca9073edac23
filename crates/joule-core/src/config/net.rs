//! `[net]`: the network half of mechanism 2 (issue 11) — the flow monitor (eBPF) and the
//! bandwidth limiter (`[[net.limit]]`, one entry per interface and class or flow). Off unless
//! configured: no flow monitor, no limit.

use super::validate::Found;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetConfig {
    /// Load the flow monitor (flow.bpf.c: per-flow and per-cgroup bytes, packets, rate,
    /// retransmits; per-CPU NET_RX/NET_TX softirq time). Needs root and eBPF.
    pub flow_monitor: bool,
    /// Flows reported by name in snapshots and metrics; the rest are summed into one `other`
    /// series, so label cardinality stays bounded whatever the traffic.
    pub top_n: usize,
    /// How often the flow table is read (ms) for the top-N flows, which are over this
    /// interval; each period in between carries the last top N. A read costs in proportion
    /// to the flows in the table, so it is not done every control period; per-cgroup rates
    /// and softirq shares, summed in the kernel, are read every period.
    pub flow_period_ms: u64,
    /// The network namespace the limits' interfaces are in (a path such as
    /// `/run/netns/NAME`); empty: the agent's own.
    pub netns: PathBuf,
    /// Bandwidth limits.
    #[serde(rename = "limit")]
    pub limits: Vec<NetLimit>,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self { flow_monitor: false, top_n: 10, flow_period_ms: 10_000, netns: PathBuf::new(), limits: Vec::new() }
    }
}

impl NetConfig {
    /// The limits' namespace, `None` for the agent's own.
    pub fn netns(&self) -> Option<&std::path::Path> {
        (!self.netns.as_os_str().is_empty()).then_some(self.netns.as_path())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Traffic leaving through the interface (shaped by the qdisc on it).
    #[default]
    Egress,
    /// Traffic arriving: redirected at the interface's clsact ingress to an ifb device joule
    /// creates, whose egress HTB shapes it (whole interface or flow limits; a class is egress only).
    Ingress,
}

/// One `[[net.limit]]`: traffic of `interface` (all of it, or one class's, or one flow's) is
/// paced to `rate_mbit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct NetLimit {
    pub interface: String,
    /// Megabits per second (10^6 bit/s) of IP traffic.
    pub rate_mbit: f64,
    pub direction: Direction,
    /// Only the sockets of this `[[class]]` (by the class's cgroup2 directory).
    pub class: Option<String>,
    /// Only this flow: any of the fields given (absent: any).
    pub flow: Option<FlowMatch>,
}

/// A 5-tuple match: protocol, ports and IPv4 destination; an absent field matches anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FlowMatch {
    /// "tcp" or "udp".
    pub proto: Option<String>,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    pub dst: Option<std::net::Ipv4Addr>,
}

impl FlowMatch {
    /// IP protocol number of `proto`.
    pub fn proto_number(&self) -> Option<u8> {
        match self.proto.as_deref() {
            Some("tcp") => Some(6),
            Some("udp") => Some(17),
            _ => None,
        }
    }
}

/// The most limits the limiter puts on one interface (HTB classes 1..=N; the classifier takes
/// 16 flow rules).
pub const MAX_LIMITS_PER_INTERFACE: usize = 16;

pub(super) fn validate(net: &NetConfig, classes: &[super::ClassConfig], out: &mut Vec<Found>) {
    let mut bad = |key: &str, msg: String, hint: &str| out.push((key.to_string(), msg, hint.to_string()));
    if !(1..=1000).contains(&net.top_n) {
        bad("net.top_n", format!("top_n = {} is outside 1..=1000", net.top_n), "10: the rest are summed into `other`");
    }
    if !(100..=60_000).contains(&net.flow_period_ms) {
        bad("net.flow_period_ms", format!("flow_period_ms = {} is outside 100..=60000", net.flow_period_ms), "10000: the flow table read every 10 s");
    }
    for (i, l) in net.limits.iter().enumerate() {
        let key = format!("net.limit[{i}]");
        if l.interface.is_empty() || l.interface.len() > 15 {
            bad(&key, format!("interface {:?} is not an interface name (1 to 15 bytes)", l.interface), "e.g. \"eth0\"");
        }
        if !(l.rate_mbit.is_finite() && l.rate_mbit >= 0.01 && l.rate_mbit <= 100_000.0) {
            bad(&key, format!("rate_mbit = {} is outside 0.01..=100000", l.rate_mbit), "megabits per second");
        }
        if l.direction == Direction::Ingress && l.class.is_some() {
            bad(&key, "an ingress limit cannot be for a class (an arriving packet's socket is not known yet)".into(), "a flow match, or the whole interface");
        }
        if let Some(c) = &l.class {
            if !classes.iter().any(|k| &k.name == c) {
                bad(&key, format!("class {c:?} is not a [[class]] of this config"), "name one of the [[class]] entries");
            }
        }
        if let Some(f) = &l.flow {
            if f.proto.is_some() && f.proto_number().is_none() {
                bad(&key, format!("flow.proto = {:?} is neither \"tcp\" nor \"udp\"", f.proto), "\"tcp\" or \"udp\"");
            }
            if l.class.is_some() {
                bad(&key, "a limit is either for a class or for a flow, not both".into(), "two [[net.limit]] entries");
            }
        }
    }
    let mut per_if = std::collections::BTreeMap::<(&str, bool), usize>::new();
    for l in &net.limits {
        *per_if.entry((l.interface.as_str(), l.direction == Direction::Ingress)).or_default() += 1;
    }
    for ((ifname, ingress), n) in per_if {
        if n > MAX_LIMITS_PER_INTERFACE {
            bad("net.limit", format!("{n} limits on {ifname}; at most {MAX_LIMITS_PER_INTERFACE} per direction"), "merge flows into a class");
        }
        let whole = net
            .limits
            .iter()
            .filter(|l| l.interface == ifname && (l.direction == Direction::Ingress) == ingress && l.class.is_none() && l.flow.is_none())
            .count();
        if whole > 1 {
            bad("net.limit", format!("{whole} limits for the whole of {ifname} in one direction"), "one per interface and direction");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn off_by_default_and_a_full_section_parses() {
        assert_eq!(Config::default().net, NetConfig::default());
        assert!(!NetConfig::default().flow_monitor && NetConfig::default().limits.is_empty());
        let cfg: Config = toml::from_str(
            r#"
            [[class]]
            name = "batch"
            [net]
            flow_monitor = true
            top_n = 5
            netns = "/run/netns/x"
            [[net.limit]]
            interface = "veth0"
            rate_mbit = 50.0
            [[net.limit]]
            interface = "veth0"
            rate_mbit = 5.0
            class = "batch"
            [[net.limit]]
            interface = "veth0"
            rate_mbit = 1.0
            flow = { proto = "udp", dst_port = 5201 }
            "#,
        )
        .unwrap();
        assert_eq!(cfg.net.limits.len(), 3);
        assert_eq!(cfg.net.limits[2].flow.as_ref().unwrap().proto_number(), Some(17));
        assert_eq!(cfg.net.netns().unwrap(), std::path::Path::new("/run/netns/x"));
        let mut out = Vec::new();
        validate(&cfg.net, &cfg.classes, &mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let net = NetConfig {
            top_n: 0,
            flow_period_ms: 50,
            limits: vec![
                NetLimit { interface: "veth0".into(), rate_mbit: 0.0, ..Default::default() },
                NetLimit { interface: "veth0".into(), rate_mbit: 1.0, direction: Direction::Ingress, class: Some("nope".into()), ..Default::default() },
                NetLimit {
                    interface: "veth0".into(),
                    rate_mbit: 1.0,
                    flow: Some(FlowMatch { proto: Some("icmp".into()), ..Default::default() }),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut out = Vec::new();
        validate(&net, &[], &mut out);
        let msgs: Vec<&str> = out.iter().map(|f| f.1.as_str()).collect();
        for want in ["top_n = 0", "flow_period_ms = 50", "rate_mbit = 0", "ingress limit cannot be for a class", "class \"nope\"", "icmp"] {
            assert!(msgs.iter().any(|m| m.contains(want)), "{want}: {msgs:?}");
        }
    }
}

//! The traffic-control actuator: the only writer of qdiscs, classes, classifiers and ifb
//! devices. It holds the Plan's merged `RateLimit` knobs — the lowest rate any policy asked for
//! per interface, direction and target (`[[net.limit]]`s, and the bandwidth energy-aware
//! placement counted on for a class) — as an HTB tree per interface (`joule_core::netlimit`,
//! netlink through the effects seam, the root's deletion journalled first) and, when a limit
//! is for a class or a flow, the classifier (netlimit.bpf.c) at a clsact egress hook
//! (journalled too); a class is known by its cgroup v2 id from the membership reading. Ingress
//! limits go through an ifb device (`netlimit::install_ingress`) and a redirect program at the
//! interface's clsact ingress. When the limited targets change (or a class's cgroup id does),
//! the interface's tree is put again from scratch. Shutdown and `joule restore` delete the
//! root: classes, filter and program go with it.

use joule_bpf::{NetlimitClassifier, NetlimitRule};
use joule_core::config::{Direction, FlowMatch};
use joule_core::control::{owner, ActCx, ActError, Actuator, ActuatorState, Knob, Plan, Setting};
use joule_core::effects::tc_handle;
use joule_core::membership::Membership;
use joule_core::metric::{l, Family, MetricDef};
use joule_core::netlimit::{self, HtbClass, HTB_MAJOR};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The metric families this actuator reports.
pub const METRICS: &[MetricDef] = &[MetricDef::gauge(
    "joule_tc_limit_bytes_per_second",
    "The rate joule's HTB holds per interface, direction and target (whole interface, class:NAME or flow), the lowest any mechanism asked for.",
)];

/// What one limit applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Whole,
    Class(String),
    Flow(FlowMatch),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Whole => write!(f, "all"),
            Target::Class(c) => write!(f, "class:{c}"),
            Target::Flow(fl) => write!(f, "flow:{fl:?}"),
        }
    }
}

/// The limits of one interface, in the order of the plan: limit i is HTB class i+1.
#[derive(Debug, Clone, PartialEq)]
pub struct InterfaceLimits {
    pub targets: Vec<(Target, f64)>,
    /// The cgroup v2 id of each class target when it was put (a recreated class has another).
    pub class_ids: Vec<(String, Option<u64>)>,
}

impl InterfaceLimits {
    /// HTB's default class: the whole-interface limit's, else 0 (unclassified passes).
    pub fn defcls(&self) -> u16 {
        self.targets.iter().position(|(t, _)| *t == Target::Whole).map_or(0, |i| i as u16 + 1)
    }
    pub fn classes(&self) -> Vec<HtbClass> {
        self.targets.iter().enumerate().map(|(i, (_, r))| HtbClass { minor: i as u16 + 1, rate_mbit: *r }).collect()
    }
    fn same_targets(&self, other: &InterfaceLimits) -> bool {
        self.targets.iter().map(|t| &t.0).eq(other.targets.iter().map(|t| &t.0)) && self.class_ids == other.class_ids
    }
    /// The classifier's flow rules and cgroup entries; empty when no limit needs one.
    fn rules(&self) -> (Vec<NetlimitRule>, Vec<(u64, u32)>) {
        let class_cgroup = |c: &str| self.class_ids.iter().find(|(n, _)| n == c).and_then(|(_, id)| *id);
        let (mut rules, mut cgroups) = (Vec::new(), Vec::new());
        for (i, (t, _)) in self.targets.iter().enumerate() {
            let classid = tc_handle(HTB_MAJOR, i as u16 + 1);
            match t {
                Target::Whole => {}
                Target::Flow(f) => rules.push(NetlimitRule { classid, proto: f.proto_number(), sport: f.src_port, dport: f.dst_port, daddr: f.dst }),
                Target::Class(c) => match class_cgroup(c) {
                    Some(id) => cgroups.push((id, classid)),
                    None => tracing::warn!("class {c} has no cgroup2 directory yet: its limit does not apply"),
                },
            }
        }
        (rules, cgroups)
    }
}

/// An interface and a direction: each has its own HTB tree (egress: on the interface;
/// ingress: on its ifb).
pub type Side = (String, Direction);

/// The limits the plan's merged knobs hold, per interface and direction, with each class
/// target's cgroup v2 id from `members`.
pub fn wanted(plan: &Plan, members: &Membership) -> BTreeMap<Side, InterfaceLimits> {
    let mut out: BTreeMap<Side, InterfaceLimits> = BTreeMap::new();
    for h in plan.knobs_of(owner::TC) {
        let (Knob::RateLimit { interface, direction, class, flow }, Setting::Mbit(rate_mbit)) = (&h.knob, &h.setting) else { continue };
        let target = match (class, flow) {
            (Some(c), _) => Target::Class(c.clone()),
            (None, Some(f)) => Target::Flow(f.clone()),
            (None, None) => Target::Whole,
        };
        let e = out.entry((interface.clone(), *direction)).or_insert(InterfaceLimits { targets: Vec::new(), class_ids: Vec::new() });
        if let Some(c) = class {
            e.class_ids.push((c.clone(), members.cgroup2_id(c)));
        }
        e.targets.push((target, *rate_mbit));
    }
    out
}

/// One interface side as held.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideState {
    pub interface: String,
    pub direction: Direction,
    /// (target, Mbit/s): `all`, `class:NAME`, `flow:...`.
    pub limits: Vec<(String, f64)>,
}

/// The actuator's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TcState {
    pub interfaces: Vec<SideState>,
    pub shaper: &'static str,
    pub notes: Vec<String>,
}

impl ActuatorState for TcState {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
    fn families(&self) -> Vec<Family> {
        let samples = self
            .interfaces
            .iter()
            .flat_map(|s| {
                let dir = if s.direction == Direction::Ingress { "ingress" } else { "egress" };
                s.limits.iter().map(move |(t, m)| (l(&[("interface", &s.interface), ("direction", dir), ("target", t)]), m * 1e6 / 8.0))
            })
            .collect();
        vec![METRICS[0].with(samples)]
    }
}

struct Held {
    limits: InterfaceLimits,
    /// The classifier at clsact egress, or for ingress the redirect to the ifb.
    _programs: Vec<NetlimitClassifier>,
}

pub struct TcActuator {
    netns: Option<PathBuf>,
    held: BTreeMap<Side, Held>,
    notes: Vec<String>,
}

impl TcActuator {
    pub fn new(netns: Option<PathBuf>) -> Self {
        Self { netns, held: BTreeMap::new(), notes: Vec::new() }
    }

    /// Puts the HTB tree of one side (or changes its rates).
    fn install(&self, side: &Side, want: &InterfaceLimits, cx: &mut ActCx<'_>) -> Result<(u32, Option<u32>), ActError> {
        let ns = self.netns.as_deref();
        let (ifname, direction) = side;
        Ok(match direction {
            Direction::Egress => (netlimit::install_htb(cx.fx, cx.journal, owner::TC, ns, ifname, want.defcls(), &want.classes())?, None),
            Direction::Ingress => {
                let p = netlimit::install_ingress(cx.fx, cx.journal, owner::TC, ns, ifname, want.defcls(), &want.classes())?;
                (p.ifb_ifindex, Some(p.ifindex))
            }
        })
    }

    fn hold(&mut self, side: Side, want: InterfaceLimits, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let ns = self.netns.as_deref();
        let ifname = side.0.clone();
        if let Some(h) = self.held.get(&side) {
            if h.limits == want {
                return Ok(());
            }
            if !h.limits.same_targets(&want) {
                // Other targets (or a class's cgroup recreated): put the whole tree again.
                (cx.events)("tc_rebuilt", serde_json::json!({ "interface": ifname, "direction": side.1 }));
                self.held.clear();
                let r = cx.journal.restore_owner(owner::TC, cx.fx)?;
                if !r.failed.is_empty() {
                    return Err(format!("{ifname}: could not remove the old tree to put the new one: {:?}", r.failed).into());
                }
                return Ok(());
            }
            self.install(&side, &want, cx)?;
            (cx.events)(
                "netlimit",
                serde_json::json!({ "interface": ifname, "direction": side.1, "rates_mbit": want.targets.iter().map(|t| t.1).collect::<Vec<_>>() }),
            );
            self.held.get_mut(&side).expect("held").limits = want;
            return Ok(());
        }
        netlimit::check_guard(cx.fx, ns, &ifname)?;
        let (htb_ifindex, redirect_from) = self.install(&side, &want, cx)?;
        let mut programs = Vec::new();
        let (rules, cgroups) = want.rules();
        for (c, id) in &want.class_ids {
            if id.is_none() {
                self.notes.push(format!("class {c} has no cgroup v2 directory: its limit on {ifname} does not apply"));
            }
        }
        match redirect_from {
            // Ingress: the redirect program classifies by the flow rules on its way to the ifb.
            Some(ifindex) => programs.push(NetlimitClassifier::attach_ingress_redirect(ns, ifindex, htb_ifindex, &rules)?),
            None if !rules.is_empty() || !cgroups.is_empty() => {
                let c = NetlimitClassifier::load(&rules, &cgroups)?;
                let ifindex = netlimit::put_clsact(cx.fx, cx.journal, owner::TC, ns, &ifname)?;
                c.attach_egress(ns, ifindex)?;
                programs.push(c);
            }
            None => {}
        }
        (cx.events)("netlimit", serde_json::json!({ "interface": ifname, "direction": side.1, "installed": true, "programs": programs.len() }));
        self.held.insert(side, Held { limits: want, _programs: programs });
        Ok(())
    }
}

impl Actuator for TcActuator {
    fn name(&self) -> &'static str {
        owner::TC
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        self.notes.clear();
        let wanted = wanted(plan, &plan.members);
        // A tree another period put, for a side no knob names any more, goes too.
        if self.held.keys().any(|k| !wanted.contains_key(k)) {
            self.held.clear();
            cx.journal.restore_owner(owner::TC, cx.fx)?;
        }
        for (side, want) in wanted.clone() {
            self.hold(side, want, cx)?;
        }
        // A side torn down to be rebuilt is put again in the same period.
        for (side, want) in wanted {
            if !self.held.contains_key(&side) {
                self.hold(side, want, cx)?;
            }
        }
        Ok(())
    }

    fn state(&self) -> Arc<dyn ActuatorState> {
        let interfaces = self
            .held
            .iter()
            .map(|((i, d), h)| SideState { interface: i.clone(), direction: *d, limits: h.limits.targets.iter().map(|(t, r)| (t.to_string(), *r)).collect() })
            .collect();
        Arc::new(TcState { interfaces, shaper: "htb", notes: self.notes.clone() })
    }

    fn shutdown(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let r = cx.journal.restore_owner(owner::TC, cx.fx)?;
        self.held.clear();
        if !r.failed.is_empty() {
            return Err(format!("could not remove {} limiter qdisc(s): {:?}", r.failed.len(), r.failed).into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::control::{merge, Facts, Want};
    use joule_core::effects::{FakeEffects, Net};
    use joule_core::journal::{self, Journal};

    fn plan(rate: f64) -> Plan {
        let mut p = Plan::default();
        p.push(
            "net",
            Some(owner::TC),
            Want::LimitRate { interface: "veth-a".into(), direction: Direction::Egress, class: None, flow: None, rate_mbit: rate },
            "t",
        );
        merge(&mut p, &Facts::default());
        p
    }

    #[test]
    fn wanted_groups_by_interface_and_the_lowest_rate_holds() {
        let mut p = plan(5.0);
        let f = FlowMatch { proto: Some("udp".into()), dst_port: Some(9), ..Default::default() };
        p.push(
            "net",
            Some(owner::TC),
            Want::LimitRate { interface: "veth-a".into(), direction: Direction::Egress, class: None, flow: Some(f.clone()), rate_mbit: 1.0 },
            "t",
        );
        p.push(
            "energy",
            Some(owner::TC),
            Want::LimitRate { interface: "veth-a".into(), direction: Direction::Egress, class: None, flow: None, rate_mbit: 7.0 },
            "t",
        );
        merge(&mut p, &Facts::default());
        let w = wanted(&p, &Membership::default());
        let l = &w[&("veth-a".to_string(), Direction::Egress)];
        assert_eq!(l.targets, vec![(Target::Whole, 5.0), (Target::Flow(f), 1.0)], "energy's 7 Mbit/s would lift net's 5");
        assert_eq!(l.defcls(), 1);
        let (rules, cgroups) = l.rules();
        assert_eq!((rules.len(), cgroups.len()), (1, 0));
        assert_eq!((rules[0].classid, rules[0].proto, rules[0].dport), (0x6a6c_0002, Some(17), Some(9)));
    }

    #[test]
    fn holds_a_whole_interface_limit_changes_its_rate_and_shutdown_removes_it() {
        let jd = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default();
        fx.add_link(None, 3, "veth-a", "noqueue");
        let journal = Journal::open(jd.path()).unwrap();
        let mut sink = |_: &str, _: serde_json::Value| {};
        let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
        let mut a = TcActuator::new(None);
        a.reconcile(&plan(5.0), &mut cx).unwrap();
        assert_eq!(fx.qdiscs(None, 3).unwrap()[0].kind, "htb");
        assert_eq!(fx.classes(None, 3).len(), 1);
        a.reconcile(&plan(8.0), &mut cx).unwrap();
        let c = &fx.classes(None, 3)[0];
        assert_eq!(netlimit::class_rate_bytes_per_s(c), Some(1_000_000));
        assert_eq!(a.state().to_json()["interfaces"][0]["limits"], serde_json::json!([["all", 8.0]]));
        // Another target appears (a class's limit from placement): the tree is put again.
        let mut p = plan(8.0);
        p.push(
            "placement",
            Some(owner::TC),
            Want::LimitRate { interface: "veth-a".into(), direction: Direction::Egress, class: Some("ftp".into()), flow: None, rate_mbit: 3.0 },
            "t",
        );
        merge(&mut p, &Facts::default());
        a.reconcile(&p, &mut cx).unwrap();
        assert_eq!(fx.classes(None, 3).len(), 2, "{:?}", fx.classes(None, 3));
        assert!(a.state().to_json()["notes"][0].as_str().unwrap().contains("class ftp has no cgroup v2 directory"));
        a.shutdown(&mut cx).unwrap();
        assert_eq!(fx.qdiscs(None, 3).unwrap()[0].kind, "noqueue");
        assert!(journal::entries(jd.path()).unwrap().is_empty(), "shutdown leaves no record behind");
    }
}

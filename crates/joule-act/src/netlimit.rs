//! The "netlimit" actuator (issue 11): holds the `Want::LimitRate` decisions of the plan as an
//! HTB tree per interface (`joule_core::netlimit`, netlink through the effects seam, the root's
//! deletion journalled first) and, when a limit is for a class or a flow, the classifier
//! (netlimit.bpf.c) at a clsact egress hook (journalled too) with libbpf's tc support. Ingress limits go
//! through an ifb device (`netlimit::install_ingress`) and a redirect program at the
//! interface's clsact ingress. Shutdown and
//! `joule restore` delete the root: classes, filter and program go with it.

use joule_bpf::{NetlimitClassifier, NetlimitRule};
use joule_core::config::{Direction, FlowMatch};
use joule_core::control::{ActCx, ActError, Actuator, Plan, Want};
use joule_core::effects::tc_handle;
use joule_core::netlimit::{self, HtbClass, HTB_MAJOR};
use joule_core::control::owner;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What one limit applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Whole,
    Class(String),
    Flow(FlowMatch),
}

/// The limits of one interface, in the order of the plan: limit i is HTB class i+1.
#[derive(Debug, Clone, PartialEq)]
pub struct InterfaceLimits {
    pub targets: Vec<(Target, f64)>,
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
        self.targets.iter().map(|t| &t.0).eq(other.targets.iter().map(|t| &t.0))
    }
    /// The classifier's flow rules and cgroup entries; empty when no limit needs one.
    fn rules(&self, class_cgroup: &dyn Fn(&str) -> Option<u64>) -> (Vec<NetlimitRule>, Vec<(u64, u32)>) {
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

/// The limits the plan asks for, per interface and direction.
pub fn wanted(plan: &Plan) -> BTreeMap<Side, InterfaceLimits> {
    let mut out: BTreeMap<Side, InterfaceLimits> = BTreeMap::new();
    for d in plan.for_actuator(owner::TC) {
        if let Want::LimitRate { interface, direction, class, flow, rate_mbit } = &d.want {
            let target = match (class, flow) {
                (Some(c), _) => Target::Class(c.clone()),
                (None, Some(f)) => Target::Flow(f.clone()),
                (None, None) => Target::Whole,
            };
            let e = out.entry((interface.clone(), *direction)).or_insert(InterfaceLimits { targets: Vec::new() });
            match e.targets.iter_mut().find(|(t, _)| *t == target) {
                Some(slot) => slot.1 = *rate_mbit, // the last decision wins
                None => e.targets.push((target, *rate_mbit)),
            }
        }
    }
    out
}

struct Held {
    limits: InterfaceLimits,
    /// The classifier at clsact egress, or for ingress the redirect to the ifb.
    _programs: Vec<NetlimitClassifier>,
}

pub struct NetlimitActuator {
    netns: Option<PathBuf>,
    /// Class name → its cgroup2 directory (where the class actuator puts its tasks).
    class_dirs: Vec<(String, PathBuf)>,
    held: BTreeMap<Side, Held>,
}

impl NetlimitActuator {
    pub fn new(netns: Option<PathBuf>, class_dirs: Vec<(String, PathBuf)>) -> Self {
        Self { netns, class_dirs, held: BTreeMap::new() }
    }

    fn class_cgroup(&self, class: &str) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let dir = &self.class_dirs.iter().find(|(n, _)| n == class)?.1;
        std::fs::metadata(dir).ok().map(|m| m.ino()) // a cgroup2 directory's inode is its id
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
                return Err(format!("{ifname}: the limited classes/flows changed while running; restart the agent to apply").into());
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
        let (rules, cgroups) = want.rules(&|c| self.class_cgroup(c));
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

impl Actuator for NetlimitActuator {
    fn name(&self) -> &'static str {
        owner::TC
    }

    fn init(&mut self, _cx: &mut ActCx<'_>) -> Result<(), ActError> {
        Ok(())
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<serde_json::Value, ActError> {
        for (side, want) in wanted(plan) {
            self.hold(side, want, cx)?;
        }
        Ok(serde_json::json!({
            "interfaces": self.held.iter().map(|((i, d), h)| serde_json::json!({
                "interface": i,
                "direction": d,
                "limits": h.limits.targets.iter().map(|(t, r)| serde_json::json!({ "target": format!("{t:?}"), "rate_mbit": r })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "shaper": "htb",
        }))
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
        p
    }

    #[test]
    fn wanted_groups_by_interface_and_the_last_rate_wins() {
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
        let w = wanted(&p);
        let l = &w[&("veth-a".to_string(), Direction::Egress)];
        assert_eq!(l.targets, vec![(Target::Whole, 7.0), (Target::Flow(f), 1.0)]);
        assert_eq!(l.defcls(), 1);
        let (rules, cgroups) = l.rules(&|_| None);
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
        let mut a = NetlimitActuator::new(None, vec![]);
        a.reconcile(&plan(5.0), &mut cx).unwrap();
        assert_eq!(fx.qdiscs(None, 3).unwrap()[0].kind, "htb");
        assert_eq!(fx.classes(None, 3).len(), 1);
        a.reconcile(&plan(8.0), &mut cx).unwrap();
        let c = &fx.classes(None, 3)[0];
        assert_eq!(netlimit::class_rate_bytes_per_s(c), Some(1_000_000));
        a.shutdown(&mut cx).unwrap();
        assert_eq!(fx.qdiscs(None, 3).unwrap()[0].kind, "noqueue");
        assert!(journal::entries(jd.path()).unwrap().is_empty(), "shutdown leaves no record behind");
    }
}

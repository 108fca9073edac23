//! The bandwidth limiter's qdisc side: an HTB root qdisc with one class per limit, put on an
//! interface through the [`Net`] seam (netlink), its deletion journalled first
//! ([`crate::qdisc::replace_root`] → `Undo::QdiscDelete`). Deleting the root takes the classes
//! with it. Classification (per class or flow) is a BPF program at a clsact qdisc the limiter
//! puts too ([`put_clsact`], journalled); ingress goes through an ifb ([`install_ingress`]).
//!
//! Why HTB and not EDT: EDT pacing (a BPF program setting `skb->tstamp`) needs the fq qdisc to
//! honour departure times, and this machine's kernel is built without CONFIG_NET_SCH_FQ (the
//! netlink request for fq fails with ENOENT, measured); EDT is not implemented, HTB shapes
//! everywhere.
//!
//! The guard: when `JOULE_NET_TEST_GUARD` is set (the root tests and `joule-bench net-qos`
//! set it), the limiter refuses any interface that is not a veth or ifb inside a network
//! namespace other than the caller's own, so a test can never shape a real NIC.

use crate::effects::{tc_handle, Effects, Net, Qdisc, QdiscOption, TC_H_ROOT};
use crate::journal::{Journal, Undo};
use crate::qdisc::{replace_root, QdiscError};
use std::io;
use std::path::Path;

/// The major of joule's HTB root (`6a6c:` = "jl").
pub const HTB_MAJOR: u16 = 0x6a6c;
/// The environment variable that turns the test guard on.
pub const TEST_GUARD_ENV: &str = "JOULE_NET_TEST_GUARD";

const TCA_HTB_PARMS: u16 = 1;
const TCA_HTB_INIT: u16 = 2;
const TC_HTB_PROTOVER: u32 = 3;
const TC_LINKLAYER_ETHERNET: u8 = 1;
/// PSCHED ticks are 64 ns (PSCHED_SHIFT = 6).
const PSCHED_TICK_NS: u64 = 64;

#[derive(Debug, thiserror::Error)]
pub enum NetlimitError {
    #[error(transparent)]
    Qdisc(#[from] QdiscError),
    #[error("{ifname}: {source}")]
    Io { ifname: String, source: io::Error },
    #[error("refusing to shape {ifname}: {why} ({TEST_GUARD_ENV} is set, so only a veth or ifb in a test network namespace may be shaped)")]
    Guarded { ifname: String, why: String },
}

/// One class of the HTB tree: minor `minor` (1..), `rate_mbit` = ceil.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HtbClass {
    pub minor: u16,
    pub rate_mbit: f64,
}

/// Bytes per second of `mbit` megabits per second.
pub fn bytes_per_s(mbit: f64) -> u64 {
    (mbit * 1e6 / 8.0).round() as u64
}

/// The HTB root: `defcls` is the class unclassified packets take (0: none, they pass unshaped).
pub fn htb_root(defcls: u16) -> Qdisc {
    // struct tc_htb_glob { version, rate2quantum, defcls, debug, direct_pkts }
    let mut glob = Vec::with_capacity(20);
    for v in [TC_HTB_PROTOVER, 10, defcls as u32, 0, 0] {
        glob.extend_from_slice(&v.to_ne_bytes());
    }
    Qdisc::new("htb", tc_handle(HTB_MAJOR, 0), TC_H_ROOT).with_option(QdiscOption { kind: TCA_HTB_INIT, value: glob })
}

/// The burst a class may send at line rate: 1 ms of its rate, at least two full-size frames.
/// Small on purpose: a burst of small packets is a burst of softirq work on the receiving CPU
/// (with 68 KiB, 64-byte packets arrived ~650 at a time and the RT task of `bench net-qos`
/// missed deadlines under the limiter). A GSO packet larger than the burst still goes: HTB lets
/// the class's tokens go negative and holds it back until they recover, so the rate holds.
pub fn burst_bytes(rate_bytes_per_s: u64) -> u64 {
    (rate_bytes_per_s / 1000).max(2 * 1514)
}

/// An HTB leaf class under the root, rate = ceil.
pub fn htb_class(c: HtbClass) -> Qdisc {
    let rate = bytes_per_s(c.rate_mbit).min(u32::MAX as u64);
    let burst = burst_bytes(rate);
    // buffer: the time `burst` bytes take at `rate`, in PSCHED ticks.
    let buffer_ticks = (burst as u128 * 1_000_000_000 / rate.max(1) as u128 / PSCHED_TICK_NS as u128).min(u32::MAX as u128) as u32;
    // struct tc_ratespec { u8 cell_log; u8 linklayer; u16 overhead; i16 cell_align; u16 mpu; u32 rate; }
    let ratespec = |v: &mut Vec<u8>| {
        v.extend_from_slice(&[0, TC_LINKLAYER_ETHERNET]);
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&0i16.to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&(rate as u32).to_ne_bytes());
    };
    // struct tc_htb_opt { rate, ceil, buffer, cbuffer, quantum, level, prio }
    let mut opt = Vec::with_capacity(44);
    ratespec(&mut opt);
    ratespec(&mut opt);
    for v in [buffer_ticks, buffer_ticks, 0, 0, 0] {
        opt.extend_from_slice(&v.to_ne_bytes());
    }
    Qdisc::new("htb", tc_handle(HTB_MAJOR, c.minor), tc_handle(HTB_MAJOR, 0)).with_option(QdiscOption { kind: TCA_HTB_PARMS, value: opt })
}

/// The rate an HTB class option encodes, in bytes per second (for checks and tests).
pub fn class_rate_bytes_per_s(class: &Qdisc) -> Option<u32> {
    let v = &class.option(TCA_HTB_PARMS)?.value;
    Some(u32::from_ne_bytes(v.get(8..12)?.try_into().ok()?))
}

/// The test guard: with [`TEST_GUARD_ENV`] set, only a veth or ifb in a network namespace
/// other than the caller's may be shaped.
pub fn check_guard(fx: &dyn Net, netns: Option<&Path>, ifname: &str) -> Result<(), NetlimitError> {
    if std::env::var_os(TEST_GUARD_ENV).is_none() {
        return Ok(());
    }
    guard(fx, netns, ifname, own_netns_id().as_deref())
}

fn own_netns_id() -> Option<String> {
    std::fs::read_link("/proc/self/ns/net").ok().map(|p| p.display().to_string())
}

fn guard(fx: &dyn Net, netns: Option<&Path>, ifname: &str, own: Option<&str>) -> Result<(), NetlimitError> {
    let refuse = |why: String| Err(NetlimitError::Guarded { ifname: ifname.to_string(), why });
    let Some(ns) = netns else { return refuse("it is in the caller's own network namespace".into()) };
    let target = std::fs::read_link(ns).ok().map(|p| p.display().to_string());
    // A bind-mounted namespace (/run/netns/NAME) is not a symlink: ask the kernel through its inode.
    let target = target.or_else(|| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(ns).ok().map(|m| format!("net:[{}]", m.ino()))
    });
    if target.is_some() && target.as_deref() == own {
        return refuse(format!("{} is the caller's own network namespace", ns.display()));
    }
    match fx.link_kind(netns, ifname) {
        Ok(k) if k == "veth" || k == "ifb" => Ok(()),
        Ok(k) => refuse(format!("it is a {} device, not a veth or ifb", if k.is_empty() { "physical (no kind)" } else { &k })),
        Err(e) => Err(NetlimitError::Io { ifname: ifname.to_string(), source: e }),
    }
}

/// Puts joule's HTB root (default class `defcls`) and `classes` on `ifname`, the root's
/// deletion journalled first; putting it again updates the classes' rates. Returns the ifindex.
pub fn install_htb(
    fx: &dyn Effects,
    journal: &Journal,
    owner: &str,
    netns: Option<&Path>,
    ifname: &str,
    defcls: u16,
    classes: &[HtbClass],
) -> Result<u32, NetlimitError> {
    check_guard(fx, netns, ifname)?;
    let io = |source| NetlimitError::Io { ifname: ifname.to_string(), source };
    let ifindex = fx.link_index(netns, ifname).map_err(io)?;
    let ours = fx.qdiscs(netns, ifindex).map_err(io)?.iter().any(|q| q.parent == TC_H_ROOT && q.handle == tc_handle(HTB_MAJOR, 0) && q.kind == "htb");
    if !ours {
        replace_root(fx, journal, owner, netns, ifname, &htb_root(defcls))?;
    }
    for c in classes {
        fx.replace_class(netns, ifindex, &htb_class(*c)).map_err(io)?;
    }
    Ok(ifindex)
}

/// The clsact qdisc's parent (`TC_H_CLSACT` = `TC_H_INGRESS`) and handle (`ffff:`).
pub const TC_H_CLSACT: u32 = 0xFFFF_FFF1;
pub const CLSACT_HANDLE: u32 = 0xFFFF_0000;

/// The ifb device joule creates for the ingress limits of interface index `ifindex`.
pub fn ifb_name(ifindex: u32) -> String {
    format!("jifb{ifindex}")
}

fn foreign_clsact(ifname: &str) -> NetlimitError {
    NetlimitError::Io {
        ifname: ifname.into(),
        source: io::Error::new(io::ErrorKind::AlreadyExists, "it has a clsact qdisc joule did not put: refusing to hang a program on it"),
    }
}

/// Puts a clsact qdisc on `ifname` for joule's classifier or redirect, its deletion (which
/// removes the programs attached to it) journalled first. Refuses an interface that already
/// has one: someone's programs hang on it.
pub fn put_clsact(fx: &dyn Effects, journal: &Journal, owner: &str, netns: Option<&Path>, ifname: &str) -> Result<u32, NetlimitError> {
    check_guard(fx, netns, ifname)?;
    let io = |source| NetlimitError::Io { ifname: ifname.to_string(), source };
    let ifindex = fx.link_index(netns, ifname).map_err(io)?;
    if fx.qdiscs(netns, ifindex).map_err(io)?.iter().any(|q| q.parent == TC_H_CLSACT) {
        return Err(foreign_clsact(ifname));
    }
    add_clsact(fx, journal, owner, netns, ifname, ifindex)?;
    Ok(ifindex)
}

/// Puts a clsact qdisc on `ifname` (index `ifindex`), its deletion journalled first.
fn add_clsact(fx: &dyn Effects, journal: &Journal, owner: &str, netns: Option<&Path>, ifname: &str, ifindex: u32) -> Result<(), NetlimitError> {
    let undo = Undo::QdiscDelete {
        netns: netns.map(Path::to_path_buf),
        ifname: ifname.into(),
        ifindex,
        parent: TC_H_CLSACT,
        handle: CLSACT_HANDLE,
        kind: "clsact".into(),
    };
    journal.record(owner, undo).map_err(QdiscError::from)?;
    let clsact = Qdisc::new("clsact", CLSACT_HANDLE, TC_H_CLSACT);
    fx.replace_qdisc(netns, ifindex, &clsact).map_err(|source| NetlimitError::Io { ifname: ifname.to_string(), source })
}

/// Where the ingress limits of an interface are shaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngressPath {
    /// The limited interface, which gets a clsact qdisc (its ingress program redirects to the ifb).
    pub ifindex: u32,
    /// The ifb device whose egress HTB shapes the redirected packets.
    pub ifb: String,
    pub ifb_ifindex: u32,
}

/// Prepares ingress shaping of `ifname`: an ifb device (created, up) with joule's HTB root and
/// `classes`, and a clsact qdisc on `ifname` for the redirect program the caller attaches.
/// Each undo is journalled before its change: the ifb's deletion, then the clsact's, then the
/// HTB's (replayed newest first). Refuses an interface that already has a clsact (someone's
/// programs hang on it).
pub fn install_ingress(
    fx: &dyn Effects,
    journal: &Journal,
    owner: &str,
    netns: Option<&Path>,
    ifname: &str,
    defcls: u16,
    classes: &[HtbClass],
) -> Result<IngressPath, NetlimitError> {
    check_guard(fx, netns, ifname)?;
    let io = |n: &str| {
        let n = n.to_string();
        move |source| NetlimitError::Io { ifname: n, source }
    };
    let ifindex = fx.link_index(netns, ifname).map_err(io(ifname))?;
    let ifb = ifb_name(ifindex);
    let have_clsact = fx.qdiscs(netns, ifindex).map_err(io(ifname))?.iter().any(|q| q.parent == TC_H_CLSACT);
    if !have_clsact {
        if fx.link_index(netns, &ifb).is_err() {
            journal
                .record(owner, Undo::LinkDelete { netns: netns.map(Path::to_path_buf), ifname: ifb.clone(), kind: "ifb".into() })
                .map_err(QdiscError::from)?;
            fx.add_link(netns, &ifb, "ifb").map_err(io(&ifb))?;
        }
        add_clsact(fx, journal, owner, netns, ifname, ifindex)?;
    } else if fx.link_index(netns, &ifb).is_err() {
        return Err(NetlimitError::Io {
            ifname: ifname.into(),
            source: io::Error::new(io::ErrorKind::AlreadyExists, "it has a clsact qdisc joule did not put: refusing to hang an ingress redirect on it"),
        });
    }
    let ifb_ifindex = install_htb(fx, journal, owner, netns, &ifb, defcls, classes)?;
    Ok(IngressPath { ifindex, ifb, ifb_ifindex })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::FakeEffects;
    use crate::journal;

    const NS: &str = "/run/netns/jnet-test";

    #[test]
    fn htb_options_encode_the_kernel_structs() {
        let root = htb_root(1);
        let glob = &root.option(TCA_HTB_INIT).unwrap().value;
        assert_eq!(glob.len(), 20, "struct tc_htb_glob");
        assert_eq!(u32::from_ne_bytes(glob[8..12].try_into().unwrap()), 1, "defcls");
        let c = htb_class(HtbClass { minor: 2, rate_mbit: 100.0 });
        assert_eq!(c.option(TCA_HTB_PARMS).unwrap().value.len(), 44, "struct tc_htb_opt");
        assert_eq!(c.handle, 0x6a6c_0002);
        assert_eq!(class_rate_bytes_per_s(&c), Some(12_500_000));
        // 12,500 bytes (1 ms) at 12.5 MB/s = 1 ms = 15,625 ticks of 64 ns.
        let buffer = u32::from_ne_bytes(c.option(TCA_HTB_PARMS).unwrap().value[24..28].try_into().unwrap());
        assert_eq!(buffer, 15_625);
        assert_eq!(burst_bytes(625_000), 3028, "two frames at 5 Mbit/s");
    }

    #[test]
    fn install_journals_the_root_first_and_restore_removes_root_and_classes() {
        let jd = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default();
        let ns = Some(Path::new(NS));
        fx.add_link(ns, 3, "veth-a", "noqueue");
        let j = Journal::open(jd.path()).unwrap();
        let classes = [HtbClass { minor: 1, rate_mbit: 10.0 }, HtbClass { minor: 2, rate_mbit: 1.0 }];
        assert_eq!(install_htb(&fx, &j, "netlimit", ns, "veth-a", 1, &classes).unwrap(), 3);
        assert_eq!(fx.classes(ns, 3).len(), 2);
        assert_eq!(journal::entries(jd.path()).unwrap().len(), 1);
        // Again, with a new rate: the root stays, the class changes, nothing new journalled.
        install_htb(&fx, &j, "netlimit", ns, "veth-a", 1, &[HtbClass { minor: 1, rate_mbit: 20.0 }]).unwrap();
        assert_eq!(journal::entries(jd.path()).unwrap().len(), 1);
        let c1 = fx.classes(ns, 3).into_iter().find(|c| c.handle == 0x6a6c_0001).unwrap();
        assert_eq!(class_rate_bytes_per_s(&c1), Some(2_500_000));
        journal::Journal::open(jd.path()).and_then(|j| j.restore_all(&fx)).unwrap();
        assert_eq!(fx.qdiscs(ns, 3).unwrap(), vec![Qdisc::new("noqueue", 0, TC_H_ROOT)]);
        assert!(fx.classes(ns, 3).is_empty());
    }

    #[test]
    fn ingress_creates_an_ifb_with_htb_and_a_clsact_and_restore_removes_all_three() {
        let jd = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default();
        let ns = Some(Path::new(NS));
        fx.add_link(ns, 3, "veth-b", "noqueue");
        let j = Journal::open(jd.path()).unwrap();
        let p = install_ingress(&fx, &j, "netlimit", ns, "veth-b", 1, &[HtbClass { minor: 1, rate_mbit: 10.0 }]).unwrap();
        assert_eq!(p.ifb, "jifb3");
        assert_eq!(fx.link_kind(ns, "jifb3").unwrap(), "ifb");
        assert_eq!(fx.qdiscs(ns, p.ifb_ifindex).unwrap()[0].kind, "htb");
        assert!(fx.qdiscs(ns, 3).unwrap().iter().any(|q| q.kind == "clsact"));
        let kinds: Vec<String> =
            journal::entries(jd.path()).unwrap().iter().map(|e| format!("{:?}", e.undo).split_whitespace().next().unwrap().to_string()).collect();
        assert_eq!(kinds, ["LinkDelete", "QdiscDelete", "QdiscDelete"], "the ifb's undo is recorded before it exists");
        // Put again (a rate change): nothing new is created or journalled.
        install_ingress(&fx, &j, "netlimit", ns, "veth-b", 1, &[HtbClass { minor: 1, rate_mbit: 20.0 }]).unwrap();
        assert_eq!(journal::entries(jd.path()).unwrap().len(), 3);
        let r = journal::Journal::open(jd.path()).and_then(|j| j.restore_all(&fx)).unwrap();
        assert!(r.failed.is_empty(), "{r:?}");
        assert!(fx.link_index(ns, "jifb3").is_err(), "the ifb is gone");
        assert_eq!(fx.qdiscs(ns, 3).unwrap(), vec![Qdisc::new("noqueue", 0, TC_H_ROOT)]);
    }

    #[test]
    fn the_guard_refuses_the_own_namespace_and_real_devices() {
        let fx = FakeEffects::default();
        let ns = Some(Path::new(NS));
        fx.add_link(None, 2, "eth0", "pfifo_fast");
        fx.add_link(ns, 3, "veth-a", "noqueue");
        fx.add_link(ns, 4, "eth1", "pfifo_fast");
        let refused = |r: Result<(), NetlimitError>| matches!(r, Err(NetlimitError::Guarded { .. }));
        assert!(refused(guard(&fx, None, "eth0", Some("net:[1]"))), "the caller's own namespace");
        assert!(refused(guard(&fx, ns, "eth1", Some("net:[1]"))), "a device that is not a veth");
        assert!(guard(&fx, ns, "veth-a", Some("net:[1]")).is_ok());
        // The namespace path that is our own namespace (here: /proc/self/ns/net itself).
        let own = own_netns_id();
        assert!(refused(guard(&fx, Some(Path::new("/proc/self/ns/net")), "veth-a", own.as_deref())));
        fx.set_link_kind(ns, "veth-a", "bridge");
        assert!(refused(guard(&fx, ns, "veth-a", Some("net:[1]"))));
    }
}

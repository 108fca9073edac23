//! Net: the traffic-control side of network interfaces — which qdiscs an interface has,
//! replacing one, deleting one — in the network namespace the caller names (`None`: the
//! caller's own). Every call names its namespace, so a test that works on a veth pair in a
//! namespace of its own cannot reach the machine's interfaces by mistake. The real
//! implementation speaks rtnetlink (`netlink.rs`); nothing runs `tc`.

use super::{not_found, FakeEffects};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// The parent of an interface's root qdisc (`tc ... root`).
pub const TC_H_ROOT: u32 = 0xFFFF_FFFF;

/// A tc handle `major:minor` (qdiscs are `major:0`).
pub const fn tc_handle(major: u16, minor: u16) -> u32 {
    ((major as u32) << 16) | minor as u32
}

/// One attribute inside a qdisc's `TCA_OPTIONS`, as the kernel's uapi for that qdisc defines
/// it (for fq: `TCA_FQ_PLIMIT` = 1, a u32 in host byte order, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QdiscOption {
    pub kind: u16,
    pub value: Vec<u8>,
}

impl QdiscOption {
    pub fn u32(kind: u16, value: u32) -> Self {
        QdiscOption { kind, value: value.to_ne_bytes().to_vec() }
    }
    pub fn as_u32(&self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.value.as_slice().try_into().ok()?))
    }
}

/// A queueing discipline on an interface: what `replace_qdisc` puts and `qdiscs` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    /// `fq`, `fq_codel`, `tbf`, `noqueue`, …
    pub kind: String,
    /// `major:0`; 0 for a qdisc the kernel attached by itself (an interface's default).
    pub handle: u32,
    /// [`TC_H_ROOT`] for the root qdisc, else the class it hangs under.
    pub parent: u32,
    /// The attributes of `TCA_OPTIONS`; listed as the kernel reports them (often all of them).
    pub options: Vec<QdiscOption>,
}

impl Qdisc {
    pub fn new(kind: &str, handle: u32, parent: u32) -> Self {
        Qdisc { kind: kind.to_string(), handle, parent, options: Vec::new() }
    }
    pub fn with_option(mut self, option: QdiscOption) -> Self {
        self.options.push(option);
        self
    }
    pub fn option(&self, kind: u16) -> Option<&QdiscOption> {
        self.options.iter().find(|o| o.kind == kind)
    }
}

pub trait Net {
    /// The index of interface `ifname` in `netns`; `NotFound` when it has none of that name.
    fn link_index(&self, netns: Option<&Path>, ifname: &str) -> io::Result<u32>;
    /// Every qdisc of interface `ifindex` in `netns`.
    fn qdiscs(&self, netns: Option<&Path>, ifindex: u32) -> io::Result<Vec<Qdisc>>;
    /// Puts `qdisc` at `qdisc.parent` of `ifindex` in place of what is there (`tc qdisc replace`).
    fn replace_qdisc(&self, netns: Option<&Path>, ifindex: u32, qdisc: &Qdisc) -> io::Result<()>;
    /// Deletes the qdisc at `parent` (with `handle`, unless 0) of `ifindex` (`tc qdisc del`).
    /// Deleting the root qdisc makes the kernel attach the interface's default again; the
    /// default itself (handle 0) cannot be deleted (`NotFound`).
    fn delete_qdisc(&self, netns: Option<&Path>, ifindex: u32, parent: u32, handle: u32) -> io::Result<()>;
    /// Puts traffic class `class` (same shape as a qdisc: `kind` of its qdisc, `handle` the
    /// classid major:minor, `parent` the qdisc or class above it, its `TCA_OPTIONS`) in place
    /// of the class with that handle, or creates it (`tc class replace`). Classes go with the
    /// qdisc they belong to: deleting it deletes them, and the filters attached to it.
    fn replace_class(&self, netns: Option<&Path>, ifindex: u32, class: &Qdisc) -> io::Result<()>;
    /// The kind of interface `ifname` (`veth`, `ifb`, `bridge`…; empty for a device without
    /// one, such as a physical NIC or `lo`).
    fn link_kind(&self, netns: Option<&Path>, ifname: &str) -> io::Result<String>;
    /// Creates interface `ifname` of `kind` (`ifb`) in `netns`, up; returns its index.
    fn add_link(&self, netns: Option<&Path>, ifname: &str, kind: &str) -> io::Result<u32>;
    /// Deletes interface `ifname` (`NotFound` when there is none).
    fn delete_link(&self, netns: Option<&Path>, ifname: &str) -> io::Result<()>;
}

/// `NotFound` naming the interface and namespace, for the real and the fake alike.
pub(super) fn no_link(netns: Option<&Path>, link: impl std::fmt::Display) -> io::Error {
    not_found(format!("interface {link} in network namespace {}", ns_name(netns)))
}

pub(super) fn ns_name(netns: Option<&Path>) -> String {
    netns.map_or("-".to_string(), |p| p.display().to_string())
}

/// An interface of [`FakeEffects`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeLink {
    pub netns: Option<PathBuf>,
    pub ifindex: u32,
    pub ifname: String,
    /// The kind of root qdisc the kernel attaches by itself (`noqueue` for veth and lo).
    pub default_root: String,
    pub qdiscs: Vec<Qdisc>,
    /// Traffic classes (of the qdiscs above), by handle.
    pub classes: Vec<Qdisc>,
    /// `veth`, `ifb`, … or "" (see [`Net::link_kind`]).
    pub kind: String,
}

impl FakeEffects {
    /// Adds interface `ifname` with its default root qdisc `default_root`.
    pub fn add_link(&self, netns: Option<&Path>, ifindex: u32, ifname: &str, default_root: &str) {
        self.links.lock().unwrap().push(FakeLink {
            netns: netns.map(Path::to_path_buf),
            ifindex,
            ifname: ifname.to_string(),
            default_root: default_root.to_string(),
            qdiscs: vec![Qdisc::new(default_root, 0, TC_H_ROOT)],
            classes: Vec::new(),
            kind: if ifname.starts_with("veth") { "veth".into() } else { String::new() },
        });
    }
    fn add_link_quietly(&self, netns: Option<&Path>, ifindex: u32, ifname: &str, default_root: &str, kind: &str) {
        self.add_link(netns, ifindex, ifname, default_root);
        self.set_link_kind(netns, ifname, kind);
    }
    /// Sets the kind of interface `ifname` (`add_link` guesses `veth` from a `veth` prefix).
    pub fn set_link_kind(&self, netns: Option<&Path>, ifname: &str, kind: &str) {
        let mut links = self.links.lock().unwrap();
        if let Some(l) = links.iter_mut().find(|l| l.netns.as_deref() == netns && l.ifname == ifname) {
            l.kind = kind.to_string();
        }
    }
    fn with_link<T>(&self, netns: Option<&Path>, ifindex: u32, f: impl FnOnce(&mut FakeLink) -> io::Result<T>) -> io::Result<T> {
        let mut links = self.links.lock().unwrap();
        let link = links.iter_mut().find(|l| l.netns.as_deref() == netns && l.ifindex == ifindex).ok_or_else(|| no_link(netns, ifindex))?;
        f(link)
    }
}

impl Net for FakeEffects {
    fn link_index(&self, netns: Option<&Path>, ifname: &str) -> io::Result<u32> {
        let links = self.links.lock().unwrap();
        links.iter().find(|l| l.netns.as_deref() == netns && l.ifname == ifname).map(|l| l.ifindex).ok_or_else(|| no_link(netns, ifname))
    }
    fn qdiscs(&self, netns: Option<&Path>, ifindex: u32) -> io::Result<Vec<Qdisc>> {
        self.with_link(netns, ifindex, |l| Ok(l.qdiscs.clone()))
    }
    fn replace_qdisc(&self, netns: Option<&Path>, ifindex: u32, q: &Qdisc) -> io::Result<()> {
        let line = format!("qdisc replace {} {ifindex} parent {:x} handle {:x} {}", ns_name(netns), q.parent, q.handle, q.kind);
        self.act(line, || {
            self.with_link(netns, ifindex, |l| {
                if q.parent == TC_H_ROOT {
                    // The old root goes, and everything that hung under it.
                    l.qdiscs.clear();
                    l.classes.clear();
                } else {
                    l.qdiscs.retain(|o| o.parent != q.parent);
                }
                l.qdiscs.push(q.clone());
                Ok(())
            })
        })
    }
    fn delete_qdisc(&self, netns: Option<&Path>, ifindex: u32, parent: u32, handle: u32) -> io::Result<()> {
        self.act(format!("qdisc delete {} {ifindex} parent {parent:x} handle {handle:x}", ns_name(netns)), || {
            self.with_link(netns, ifindex, |l| {
                let at = l.qdiscs.iter().position(|o| o.parent == parent && (handle == 0 || o.handle == handle));
                let Some(at) = at.filter(|&i| l.qdiscs[i].handle != 0) else {
                    return Err(not_found(format!("qdisc {handle:x} at parent {parent:x} (a default qdisc cannot be deleted)")));
                };
                if parent == TC_H_ROOT {
                    l.qdiscs = vec![Qdisc::new(&l.default_root, 0, TC_H_ROOT)];
                    l.classes.clear();
                } else {
                    l.qdiscs.remove(at);
                }
                Ok(())
            })
        })
    }
    fn replace_class(&self, netns: Option<&Path>, ifindex: u32, c: &Qdisc) -> io::Result<()> {
        let line = format!("class replace {} {ifindex} parent {:x} classid {:x} {}", ns_name(netns), c.parent, c.handle, c.kind);
        self.act(line, || {
            self.with_link(netns, ifindex, |l| {
                let major = c.handle & 0xffff_0000;
                if !l.qdiscs.iter().any(|q| q.handle == major && q.kind == c.kind) {
                    return Err(not_found(format!("{} qdisc {major:x} for class {:x}", c.kind, c.handle)));
                }
                l.classes.retain(|o| o.handle != c.handle);
                l.classes.push(c.clone());
                Ok(())
            })
        })
    }
    fn link_kind(&self, netns: Option<&Path>, ifname: &str) -> io::Result<String> {
        let links = self.links.lock().unwrap();
        links.iter().find(|l| l.netns.as_deref() == netns && l.ifname == ifname).map(|l| l.kind.clone()).ok_or_else(|| no_link(netns, ifname))
    }
    fn add_link(&self, netns: Option<&Path>, ifname: &str, kind: &str) -> io::Result<u32> {
        self.act(format!("link add {} {ifname} {kind}", ns_name(netns)), || {
            if self.link_index(netns, ifname).is_ok() {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            let ifindex = self.links.lock().unwrap().iter().map(|l| l.ifindex).max().unwrap_or(0) + 1;
            self.add_link_quietly(netns, ifindex, ifname, "noqueue", kind);
            Ok(ifindex)
        })
    }
    fn delete_link(&self, netns: Option<&Path>, ifname: &str) -> io::Result<()> {
        self.act(format!("link delete {} {ifname}", ns_name(netns)), || {
            let mut links = self.links.lock().unwrap();
            let at = links.iter().position(|l| l.netns.as_deref() == netns && l.ifname == ifname).ok_or_else(|| no_link(netns, ifname))?;
            links.remove(at);
            Ok(())
        })
    }
}

impl FakeEffects {
    /// The traffic classes of interface `ifindex`.
    pub fn classes(&self, netns: Option<&Path>, ifindex: u32) -> Vec<Qdisc> {
        self.with_link(netns, ifindex, |l| Ok(l.classes.clone())).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "/run/netns/test";

    fn fake() -> FakeEffects {
        let fx = FakeEffects::default();
        fx.add_link(Some(Path::new(NS)), 5, "veth0", "noqueue");
        fx
    }

    #[test]
    fn replacing_the_root_then_deleting_it_brings_the_default_back() {
        let fx = fake();
        let ns = Some(Path::new(NS));
        let ifindex = fx.link_index(ns, "veth0").unwrap();
        let fq = Qdisc::new("fq", tc_handle(0x4a, 0), TC_H_ROOT).with_option(QdiscOption::u32(1, 4321));
        fx.replace_qdisc(ns, ifindex, &fq).unwrap();
        assert_eq!(fx.qdiscs(ns, ifindex).unwrap(), vec![fq.clone()]);
        assert_eq!(fx.qdiscs(ns, ifindex).unwrap()[0].option(1).and_then(QdiscOption::as_u32), Some(4321));
        fx.delete_qdisc(ns, ifindex, TC_H_ROOT, fq.handle).unwrap();
        assert_eq!(fx.qdiscs(ns, ifindex).unwrap(), vec![Qdisc::new("noqueue", 0, TC_H_ROOT)]);
        assert_eq!(
            fx.calls(),
            vec!["qdisc replace /run/netns/test 5 parent ffffffff handle 4a0000 fq", "qdisc delete /run/netns/test 5 parent ffffffff handle 4a0000"]
        );
    }

    #[test]
    fn the_default_cannot_be_deleted_and_another_namespace_is_another_world() {
        let fx = fake();
        let ns = Some(Path::new(NS));
        assert_eq!(fx.delete_qdisc(ns, 5, TC_H_ROOT, 0).unwrap_err().kind(), io::ErrorKind::NotFound);
        let e = fx.link_index(None, "veth0").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("interface veth0 in network namespace -"), "{e}");
        assert_eq!(fx.replace_qdisc(None, 5, &Qdisc::new("fq", 0, TC_H_ROOT)).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert!(fx.calls().is_empty());
    }

    #[test]
    fn a_refused_replace_leaves_the_old_qdisc() {
        let fx = fake();
        let ns = Some(Path::new(NS));
        fx.fail_calls("qdisc replace", libc::EPERM);
        let e = fx.replace_qdisc(ns, 5, &Qdisc::new("fq", tc_handle(1, 0), TC_H_ROOT)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        assert_eq!(fx.qdiscs(ns, 5).unwrap()[0].kind, "noqueue");
    }

    #[test]
    fn handles_and_options_encode_as_the_kernel_reads_them() {
        assert_eq!(tc_handle(0x4a, 0), 0x004a_0000);
        assert_eq!(tc_handle(0xffff, 0xffff), TC_H_ROOT);
        assert_eq!(QdiscOption::u32(7, 1_000_000).as_u32(), Some(1_000_000));
        assert_eq!(QdiscOption { kind: 7, value: vec![1, 2] }.as_u32(), None);
    }
}

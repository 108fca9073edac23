//! Replacing an interface's root qdisc so that it can be undone: the undo (delete ours, and
//! the kernel attaches the interface's default again) is journalled *before* the change, and
//! only a root qdisc the kernel attached by itself (handle 0) is ever replaced — deleting ours
//! would not bring back a qdisc someone configured, with its classes and filters.

use crate::effects::{Effects, Qdisc, TC_H_ROOT};
use crate::journal::{Journal, JournalError, Undo};
use std::io;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum QdiscError {
    #[error("a root qdisc joule puts needs parent root and a handle of its own (not 0), so its undo can tell it from the next one")]
    Spec,
    #[error("{ifname}: {source}")]
    Io { ifname: String, source: io::Error },
    #[error(
        "the root qdisc of {ifname} is {kind} {handle:x}:, which someone configured: joule replaces only the kernel's default \
         (handle 0), because deleting its own would not bring that one back"
    )]
    NotDefault { ifname: String, kind: String, handle: u32 },
    #[error("recording the undo before replacing the qdisc: {0}")]
    Journal(#[from] JournalError),
}

/// Puts `q` as the root qdisc of `ifname` in `netns` (`None`: the agent's own), in place of
/// the kernel's default, journalling its deletion first under `owner`. Putting it again with
/// other options is allowed (and journalled again: a second undo finds it gone).
pub fn replace_root(fx: &dyn Effects, journal: &Journal, owner: &str, netns: Option<&Path>, ifname: &str, q: &Qdisc) -> Result<(), QdiscError> {
    if q.parent != TC_H_ROOT || q.handle == 0 {
        return Err(QdiscError::Spec);
    }
    let io = |source| QdiscError::Io { ifname: ifname.to_string(), source };
    let ifindex = fx.link_index(netns, ifname).map_err(io)?;
    let now = fx.qdiscs(netns, ifindex).map_err(io)?;
    if let Some(root) = now.iter().find(|o| o.parent == TC_H_ROOT && o.handle != 0 && !(o.handle == q.handle && o.kind == q.kind)) {
        return Err(QdiscError::NotDefault { ifname: ifname.to_string(), kind: root.kind.clone(), handle: root.handle });
    }
    journal.record(
        owner,
        Undo::QdiscDelete {
            netns: netns.map(Path::to_path_buf),
            ifname: ifname.to_string(),
            ifindex,
            parent: q.parent,
            handle: q.handle,
            kind: q.kind.clone(),
        },
    )?;
    fx.replace_qdisc(netns, ifindex, q).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::{tc_handle, FakeEffects, Net, QdiscOption};
    use crate::journal;

    const NS: &str = "/proc/1/task/2/ns/net";

    /// A root qdisc of joule's kind (the restore replays only the kinds joule puts).
    fn ours() -> Qdisc {
        Qdisc::new("htb", tc_handle(0x4a, 0), TC_H_ROOT).with_option(QdiscOption::u32(1, 4321))
    }

    #[test]
    fn replaces_a_default_root_journalled_first_and_restore_brings_the_default_back() {
        let jdir = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default();
        let ns = Some(Path::new(NS));
        fx.add_link(ns, 4, "veth0", "noqueue");
        // The journal must hold the undo even when the change itself is refused.
        fx.fail_calls("qdisc replace", libc::EPERM);
        let j = Journal::open(jdir.path()).unwrap();
        assert!(matches!(replace_root(&fx, &j, "net", ns, "veth0", &ours()), Err(QdiscError::Io { .. })));
        assert_eq!(journal::entries(jdir.path()).unwrap().len(), 1);
        fx.fail.lock().unwrap().clear();
        replace_root(&fx, &j, "net", ns, "veth0", &ours()).unwrap();
        assert_eq!(fx.qdiscs(ns, 4).unwrap(), vec![ours()]);
        let r = journal::Journal::open(jdir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
        assert_eq!((r.undone, r.already_gone, r.failed.len()), (1, 1, 0), "{r:?}");
        assert_eq!(fx.qdiscs(ns, 4).unwrap(), vec![Qdisc::new("noqueue", 0, TC_H_ROOT)]);
    }

    #[test]
    fn never_replaces_a_root_someone_configured_nor_puts_one_without_a_handle() {
        let jdir = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default();
        fx.add_link(None, 2, "eth0", "pfifo_fast");
        fx.replace_qdisc(None, 2, &Qdisc::new("htb", tc_handle(1, 0), TC_H_ROOT)).unwrap();
        fx.log.lock().unwrap().clear();
        let j = Journal::open(jdir.path()).unwrap();
        let e = replace_root(&fx, &j, "net", None, "eth0", &ours()).unwrap_err();
        assert!(matches!(&e, QdiscError::NotDefault { kind, .. } if kind == "htb"), "{e}");
        let no_handle = Qdisc::new("htb", 0, TC_H_ROOT);
        assert!(matches!(replace_root(&fx, &j, "net", None, "eth0", &no_handle), Err(QdiscError::Spec)));
        assert!(fx.calls().is_empty());
        assert!(journal::entries(jdir.path()).unwrap().is_empty());
    }

    #[test]
    fn undo_leaves_a_qdisc_someone_put_since_and_a_vanished_interface() {
        let fx = FakeEffects::default();
        fx.add_link(None, 2, "eth0", "pfifo_fast");
        fx.replace_qdisc(None, 2, &Qdisc::new("htb", tc_handle(1, 0), TC_H_ROOT)).unwrap();
        let ours = ours();
        let jdir = tempfile::tempdir().unwrap();
        let j = Journal::open(jdir.path()).unwrap();
        let undo = |ifname: &str, ifindex, handle, kind: &str| Undo::QdiscDelete {
            netns: None,
            ifname: ifname.into(),
            ifindex,
            parent: TC_H_ROOT,
            handle,
            kind: kind.into(),
        };
        j.record("net", undo("eth0", 2, ours.handle, &ours.kind)).unwrap();
        j.record("net", undo("eth9", 9, ours.handle, &ours.kind)).unwrap();
        // eth0 re-created with another index: not ours any more.
        j.record("net", undo("eth0", 3, tc_handle(1, 0), "htb")).unwrap();
        let r = j.restore_all(&fx).unwrap();
        assert_eq!((r.undone, r.already_gone, r.failed.len()), (0, 3, 0));
        assert_eq!(fx.qdiscs(None, 2).unwrap()[0].kind, "htb");
    }
}

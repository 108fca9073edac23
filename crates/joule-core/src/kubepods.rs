//! What a cgroup path says about a Kubernetes pod (issue 37): the kubelet puts every pod below
//! a `kubepods` cgroup, one level per QoS class, one per pod (named by its UID) and one per
//! container (named by the runtime's container id). This is the identity a class rule can trust:
//! only root (the kubelet, the runtime) creates these directories. Names, labels and
//! annotations come from the runtime over CRI, keyed by what is parsed here.
//!
//! Both cgroup drivers, v1 and v2 alike (a v1 hierarchy repeats the same path under each
//! controller):
//!
//! | driver | pod | container |
//! |---|---|---|
//! | cgroupfs | `/kubepods/burstable/pod<uid>` | `…/<id>` (containerd), `…/crio-<id>` |
//! | systemd | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice` | `…/cri-containerd-<id>.scope`, `…/crio-<id>.scope`, `…/docker-<id>.scope` |
//!
//! Guaranteed pods sit directly below `kubepods` (no QoS level). The `kubepods` level may itself
//! be below a kubelet cgroup root (`/kubelet.slice/kubelet-kubepods.slice`, kind and kubeadm
//! nodes); anything above it is ignored. CRI-O's `crio-conmon-<id>` scope holds the container's
//! monitor, not the container. The pause (sandbox) container is an ordinary container cgroup
//! here; CRI tells it apart (its id is the sandbox's id).
//!
//! Pure: a path in, a [`PodCgroup`] or None out.

use serde::Serialize;

/// A pod's QoS class, as the kubelet files it (the level below `kubepods`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    /// As the Kubernetes API spells it (`status.qosClass`), and as a class rule names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Qos::Guaranteed => "Guaranteed",
            Qos::Burstable => "Burstable",
            Qos::BestEffort => "BestEffort",
        }
    }

    /// The API's spelling, exactly (a class rule that says `guaranteed` is a config error).
    pub fn parse(s: &str) -> Option<Qos> {
        [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort].into_iter().find(|q| q.as_str() == s)
    }
}

/// Which runtime made a container's cgroup, from the prefix it gives the container id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    Containerd,
    Crio,
    Docker,
    /// A cgroupfs-driver container directory with a bare id (containerd's naming there).
    Unprefixed,
}

/// What a kubepods cgroup path names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodCgroup {
    pub qos: Qos,
    /// The pod's UID with dashes, as the API spells it (`metadata.uid`).
    pub pod_uid: String,
    /// The container's cgroup, when the path goes below the pod's.
    pub container: Option<ContainerCgroup>,
    /// The pod's own cgroup: the path up to and including the pod's level, as given.
    pub pod_path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerCgroup {
    pub runtime: Runtime,
    /// The runtime's container id (64 hex digits for containerd, CRI-O and Docker).
    pub id: String,
    /// CRI-O's `crio-conmon-<id>`: the container's monitor process, not the container.
    pub conmon: bool,
}

/// Where a path stands in the kubelet's tree, when it is in one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum KubeCgroup {
    /// `kubepods` itself or a QoS level (`burstable`, `besteffort`): the kubelet's.
    QosLevel(Option<Qos>),
    /// A pod's cgroup or one below it.
    Pod(PodCgroup),
}

/// Parses a cgroup path (relative to its hierarchy's root, as /proc/PID/cgroup spells it).
/// None: the path is not below a `kubepods` cgroup where the kubelet puts it (`/kubepods` at the
/// root, or `kubepods.slice` at the end of a chain of systemd slices from the root), or a level
/// below it is not one the kubelet or a runtime makes. A directory a user was handed elsewhere
/// (`/delegated/kubepods/…`, `…/user@1001.service/kubepods.slice/…`) is never a pod's.
pub fn parse(path: &str) -> Option<KubeCgroup> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let at = segs.iter().position(|s| *s == "kubepods" || *s == "kubepods.slice" || s.ends_with("-kubepods.slice"))?;
    // systemd names each slice after the one above it; cgroupfs puts kubepods at the root.
    let stem = segs[at].strip_suffix(".slice");
    let trusted = match stem {
        None => at == 0,
        Some(_) => crate::config::systemd_unit_at(&segs[..=at].join("/"), segs[at]),
    };
    if !trusted {
        return None;
    }
    let mut rest = segs[at + 1..].iter().copied();
    let Some(mut seg) = rest.next() else {
        return Some(KubeCgroup::QosLevel(None));
    };
    let qos = match qos_level(seg, stem) {
        Some(q) => {
            match rest.next() {
                Some(s) => seg = s,
                None => return Some(KubeCgroup::QosLevel(Some(q))),
            }
            q
        }
        None => Qos::Guaranteed,
    };
    let pod_uid = pod_uid(seg, stem, qos)?;
    let pod_path = format!("/{}", segs[..=at + 1 + usize::from(qos != Qos::Guaranteed)].join("/"));
    let container = match rest.next() {
        Some(c) => Some(container(c, stem.is_some())?),
        None => None,
    };
    // A deeper path is still that container's (a nested cgroup made inside it).
    Some(KubeCgroup::Pod(PodCgroup { qos, pod_uid, container, pod_path }))
}

/// The QoS level's name: `burstable` (cgroupfs) or `<kubepods stem>-burstable.slice`.
fn qos_level(seg: &str, stem: Option<&str>) -> Option<Qos> {
    let name = match stem {
        Some(kp) => seg.strip_prefix(kp)?.strip_prefix('-')?.strip_suffix(".slice")?,
        None => seg,
    };
    match name {
        "burstable" => Some(Qos::Burstable),
        "besteffort" => Some(Qos::BestEffort),
        _ => None,
    }
}

/// `pod<uid>` (cgroupfs) or `<qos level's stem>-pod<uid with underscores>.slice` (systemd).
fn pod_uid(seg: &str, stem: Option<&str>, qos: Qos) -> Option<String> {
    let uid = match stem {
        Some(kp) => {
            let level = match qos {
                Qos::Guaranteed => format!("{kp}-pod"),
                q => format!("{kp}-{}-pod", q.as_str().to_ascii_lowercase()),
            };
            // systemd's unit names spell the UID's dashes as underscores (a dash nests slices).
            let raw = seg.strip_prefix(level.as_str())?.strip_suffix(".slice")?;
            if raw.contains('-') {
                return None;
            }
            raw.replace('_', "-")
        }
        None => seg.strip_prefix("pod")?.to_string(),
    };
    is_uid(&uid).then_some(uid)
}

/// A UID as the API server makes them: 8-4-4-4-12 hex digits.
fn is_uid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5 && parts.iter().zip([8, 4, 4, 4, 12]).all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn container(seg: &str, systemd: bool) -> Option<ContainerCgroup> {
    let name = if systemd { seg.strip_suffix(".scope")? } else { seg };
    let (runtime, conmon, id) = if let Some(id) = name.strip_prefix("crio-conmon-") {
        (Runtime::Crio, true, id)
    } else if let Some(id) = name.strip_prefix("crio-") {
        (Runtime::Crio, false, id)
    } else if let Some(id) = name.strip_prefix("cri-containerd-") {
        (Runtime::Containerd, false, id)
    } else if let Some(id) = name.strip_prefix("docker-") {
        (Runtime::Docker, false, id)
    } else if !systemd {
        (Runtime::Unprefixed, false, name)
    } else {
        return None;
    };
    let hex = id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    hex.then(|| ContainerCgroup { runtime, id: id.to_string(), conmon })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c";
    const ID: &str = "4a5f0e3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f";

    fn pod(p: &str) -> PodCgroup {
        match parse(p) {
            Some(KubeCgroup::Pod(pc)) => pc,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn cgroupfs_driver_paths_give_qos_uid_and_container() {
        let p = pod(&format!("/kubepods/burstable/pod{UID}/{ID}"));
        assert_eq!((p.qos, p.pod_uid.as_str()), (Qos::Burstable, UID));
        assert_eq!(p.pod_path, format!("/kubepods/burstable/pod{UID}"));
        assert_eq!(p.container, Some(ContainerCgroup { runtime: Runtime::Unprefixed, id: ID.into(), conmon: false }));
        let g = pod(&format!("/kubepods/pod{UID}"));
        assert_eq!((g.qos, g.container), (Qos::Guaranteed, None));
        let crio = pod(&format!("/kubepods/besteffort/pod{UID}/crio-{ID}"));
        assert_eq!((crio.qos, crio.container.unwrap().runtime), (Qos::BestEffort, Runtime::Crio));
        assert_eq!(parse("/kubepods/besteffort"), Some(KubeCgroup::QosLevel(Some(Qos::BestEffort))));
        assert_eq!(parse("/kubepods"), Some(KubeCgroup::QosLevel(None)));
    }

    #[test]
    fn systemd_driver_paths_with_both_runtimes_and_crio_conmon() {
        let u = UID.replace('-', "_");
        let c = pod(&format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"));
        assert_eq!((c.qos, c.pod_uid.as_str()), (Qos::Burstable, UID));
        assert_eq!(c.container.unwrap().runtime, Runtime::Containerd);
        let g = pod(&format!("/kubepods.slice/kubepods-pod{u}.slice/crio-{ID}.scope"));
        assert_eq!(g.qos, Qos::Guaranteed);
        assert_eq!(g.container.unwrap(), ContainerCgroup { runtime: Runtime::Crio, id: ID.into(), conmon: false });
        let m = pod(&format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-conmon-{ID}.scope"));
        assert!(m.container.unwrap().conmon);
        assert_eq!(parse("/kubepods.slice/kubepods-besteffort.slice"), Some(KubeCgroup::QosLevel(Some(Qos::BestEffort))));
        // Below a kubelet cgroup root (kind, kubeadm): the levels above kubepods are ignored.
        let k =
            pod(&format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice/crio-{ID}.scope"));
        assert_eq!(k.qos, Qos::BestEffort, "{k:?}");
        assert_eq!(k.pod_path, format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice"));
        assert_eq!(g.pod_path, format!("/kubepods.slice/kubepods-pod{u}.slice"));
    }

    #[test]
    fn what_no_kubelet_makes_is_not_a_pod() {
        for p in [
            "/system.slice/kubepods-like.service".to_string(),
            format!("/user.slice/user-1001.slice/user@1001.service/kubepods.slice/kubepods-pod{}.slice", UID.replace('-', "_")),
            format!("/delegated/kubepods/pod{UID}"),
            format!("/system.slice/kubepods.slice/kubepods-pod{}.slice", UID.replace('-', "_")),
            format!("/kubepods/burstable/pod{UID}x"),
            format!("/kubepods/burstable/pod{UID}/{}", &ID[..12]),
            format!("/kubepods/burstable/pod{UID}/{}", ID.to_uppercase()),
            format!("/kubepods.slice/kubepods-pod{UID}.slice"),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/{ID}", UID.replace('-', "_")),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod{}.slice", UID.replace('-', "_")),
        ] {
            assert!(!matches!(parse(&p), Some(KubeCgroup::Pod(_))), "{p}");
        }
        assert_eq!(parse("/system.slice/containerd.service"), None);
        assert_eq!(Qos::parse("BestEffort"), Some(Qos::BestEffort));
        assert_eq!(Qos::parse("besteffort"), None);
    }
}

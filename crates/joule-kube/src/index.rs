//! The CRI's lists as a `PodIndex`: pod UID → namespace, name, labels, annotations, its
//! sandboxes' ids and its containers' names. Pure, so the mapping is tested without a runtime.

use joule_core::config::PodIndex;
use k8s_cri::v1::{Container, PodSandbox, PodSandboxState};

/// Builds the index from a `ListPodSandbox` and a `ListContainers` answer. A pod whose sandbox
/// was re-created has several: the ready one's metadata wins (else the newest), every
/// sandbox's id is kept (each was a pause container's cgroup) and every container of any of
/// them is named. A container whose sandbox is not listed (it went between the two calls) is
/// left out; a sandbox without metadata (a runtime bug) is skipped.
pub fn index(sandboxes: &[PodSandbox], containers: &[Container]) -> PodIndex {
    let mut by_uid: PodIndex = PodIndex::new();
    let mut chosen: std::collections::HashMap<String, (bool, i64)> = std::collections::HashMap::new();
    let mut uid_of: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for s in sandboxes {
        let Some(md) = &s.metadata else { continue };
        if md.uid.is_empty() {
            continue;
        }
        uid_of.insert(&s.id, &md.uid);
        let rank = (s.state == PodSandboxState::SandboxReady as i32, s.created_at);
        let e = by_uid.entry(md.uid.clone()).or_default();
        e.sandbox_ids.insert(s.id.clone());
        if chosen.get(&md.uid).is_none_or(|best| rank > *best) {
            chosen.insert(md.uid.clone(), rank);
            e.namespace = md.namespace.clone();
            e.name = md.name.clone();
            e.labels = s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            e.annotations = s.annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        }
    }
    for c in containers {
        let (Some(uid), Some(md)) = (uid_of.get(c.pod_sandbox_id.as_str()), &c.metadata) else { continue };
        if let Some(p) = by_uid.get_mut(*uid) {
            p.containers.insert(c.id.clone(), md.name.clone());
        }
    }
    by_uid
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_cri::v1::{ContainerMetadata, PodSandboxMetadata};

    fn sandbox(id: &str, uid: &str, name: &str, ready: bool, created_at: i64, tier: &str) -> PodSandbox {
        PodSandbox {
            id: id.into(),
            metadata: Some(PodSandboxMetadata { name: name.into(), uid: uid.into(), namespace: "shop".into(), attempt: 0 }),
            state: if ready { PodSandboxState::SandboxReady } else { PodSandboxState::SandboxNotready } as i32,
            created_at,
            labels: [("tier".to_string(), tier.to_string())].into(),
            ..Default::default()
        }
    }

    fn container(id: &str, sandbox: &str, name: &str) -> Container {
        Container { id: id.into(), pod_sandbox_id: sandbox.into(), metadata: Some(ContainerMetadata { name: name.into(), attempt: 0 }), ..Default::default() }
    }

    #[test]
    fn a_recreated_sandbox_keeps_the_ready_ones_metadata_and_every_id() {
        let sb =
            [sandbox("old", "u1", "web", false, 20, "stale"), sandbox("new", "u1", "web", true, 10, "frontend"), sandbox("b", "u2", "batch", true, 5, "batch")];
        let cs = [container("c1", "new", "nginx"), container("c0", "old", "nginx"), container("c9", "gone", "x"), container("c2", "b", "job")];
        let ix = index(&sb, &cs);
        let web = &ix["u1"];
        assert_eq!(
            (web.namespace.as_str(), web.name.as_str(), web.labels["tier"].as_str()),
            ("shop", "web", "frontend"),
            "the ready sandbox wins over a newer dead one"
        );
        assert_eq!(web.sandbox_ids.iter().map(String::as_str).collect::<Vec<_>>(), ["new", "old"]);
        assert_eq!(web.containers.len(), 2, "{web:?}");
        assert_eq!(ix["u2"].containers["c2"], "job");
        assert_eq!(ix.len(), 2, "a container of an unlisted sandbox makes no pod");
        let newest = index(&[sandbox("a", "u3", "p", false, 1, "one"), sandbox("b", "u3", "p", false, 2, "two")], &[]);
        assert_eq!(newest["u3"].labels["tier"], "two", "none ready: the newest");
    }
}

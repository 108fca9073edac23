//! `match.pod` of a `[[class]]` (issue 37): Kubernetes pods as class members. The pod's QoS
//! class comes from its cgroup path (`crate::kubepods`), which only the kubelet creates; its
//! namespace, name, labels, annotations and container names come read-only from the node's
//! container runtime over CRI (a [`PodIndex`] the agent keeps). Every kind given must match,
//! as for the other rules; a task matches when one of its cgroups is a pod's (a container's, or
//! the pod's own) and that pod passes.
//!
//! Who chooses what: the namespace is the cluster's boundary of who may create a pod (RBAC);
//! the labels, annotations, pod name and container names are chosen by whoever writes the pod.
//! A class that grants something therefore needs `namespace` (or a `uid` rule) among its rules:
//! anybody allowed to create a pod anywhere could otherwise label it into the class.

use crate::kubepods::{KubeCgroup, PodCgroup, Qos};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PodRules {
    /// Pod namespaces (`metadata.namespace`).
    pub namespace: Vec<String>,
    /// Pod names (`metadata.name`).
    pub name: Vec<String>,
    /// Labels the pod must carry, every one with this value (`tier = "frontend"`).
    pub labels: BTreeMap<String, String>,
    /// Annotations the pod must carry, every one with this value.
    pub annotations: BTreeMap<String, String>,
    /// Container names (`spec.containers[].name`): only that container's processes, never the
    /// pod's sandbox (pause) container.
    pub container: Vec<String>,
    /// QoS classes, as the API spells them: "Guaranteed", "Burstable", "BestEffort".
    pub qos: Vec<String>,
}

/// What the runtime says about one pod sandbox, keyed in a [`PodIndex`] by the pod's UID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PodMeta {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Its sandboxes' ids (one, or more where the sandbox was re-created): each pause
    /// container's cgroup carries one.
    pub sandbox_ids: std::collections::BTreeSet<String>,
    /// Container id → container name.
    pub containers: BTreeMap<String, String>,
}

/// Pod UID → what the runtime said about it. Empty where no runtime answers: then only `qos`
/// rules can match.
pub type PodIndex = HashMap<String, PodMeta>;

impl PodRules {
    pub fn is_empty(&self) -> bool {
        self.namespace.is_empty()
            && self.name.is_empty()
            && self.labels.is_empty()
            && self.annotations.is_empty()
            && self.container.is_empty()
            && self.qos.is_empty()
    }

    /// Whether the rules need the runtime's word (anything but `qos`).
    pub fn needs_runtime(&self) -> bool {
        !(self.namespace.is_empty() && self.name.is_empty() && self.labels.is_empty() && self.annotations.is_empty() && self.container.is_empty())
    }

    /// Whether a task in these cgroups matches (true when no pod rule is given).
    pub fn matches<'a>(&self, cgroups: impl IntoIterator<Item = &'a str>, pods: &PodIndex) -> bool {
        self.is_empty()
            || cgroups.into_iter().any(|p| match crate::kubepods::parse(p) {
                Some(KubeCgroup::Pod(pc)) => self.pod_matches(&pc, pods.get(&pc.pod_uid)),
                _ => false,
            })
    }

    fn pod_matches(&self, pc: &PodCgroup, meta: Option<&PodMeta>) -> bool {
        if pc.container.as_ref().is_some_and(|c| c.conmon) {
            return false; // CRI-O's monitor of the container, not the container
        }
        let qos = self.qos.is_empty() || self.qos.iter().any(|q| q == pc.qos.as_str());
        if !self.needs_runtime() {
            return qos;
        }
        let Some(m) = meta else { return false };
        let has = |want: &BTreeMap<String, String>, got: &BTreeMap<String, String>| want.iter().all(|(k, v)| got.get(k) == Some(v));
        let container = self.container.is_empty()
            || pc.container.as_ref().is_some_and(|c| !m.sandbox_ids.contains(&c.id) && m.containers.get(&c.id).is_some_and(|n| self.container.contains(n)));
        qos && container
            && (self.namespace.is_empty() || self.namespace.contains(&m.namespace))
            && (self.name.is_empty() || self.name.contains(&m.name))
            && has(&self.labels, &m.labels)
            && has(&self.annotations, &m.annotations)
    }
}

/// Problems with `class[i].match.pod`, as (key, message, hint).
pub fn validate(i: usize, class: &str, r: &PodRules, out: &mut Vec<(String, String, String)>) {
    let key = format!("class[{i}].match.pod");
    if !r.is_empty() {
        // Until joule acts on a pod's own cgroup (never moving its processes out of the
        // kubelet's tree) and reads the runtime's names over CRI, a pod rule is refused rather
        // than accepted: a class member is moved into joule's class cgroup, which a pod's
        // process must never be. The rules are parsed and checked so the refusal is the only one.
        out.push((
            key.clone(),
            format!("class {class:?}: match.pod is not acted on by this version of joule"),
            "joule does not manage pods yet (it would move their processes out of the kubelet's cgroups); docs/deploy.md, \"Kubernetes\"".into(),
        ));
    }
    for q in &r.qos {
        if Qos::parse(q).is_none() {
            out.push((
                format!("{key}.qos"),
                format!("class {class:?}: {q:?} is not a QoS class"),
                "one of \"Guaranteed\", \"Burstable\", \"BestEffort\", spelled as the API spells them".into(),
            ));
        }
    }
    for (what, keys) in [("labels", &r.labels), ("annotations", &r.annotations)] {
        for k in keys.keys().filter(|k| !label_key(k)) {
            out.push((
                format!("{key}.{what}"),
                format!("class {class:?}: {k:?} is not a Kubernetes {what} key"),
                "an optional DNS-subdomain prefix and '/', then a name of up to 63 letters, digits, '-', '_', '.'".into(),
            ));
        }
    }
}

/// A label or annotation key as the API validates it: `[prefix/]name`, the name 1–63 of
/// `[A-Za-z0-9._-]` beginning and ending alphanumeric, the prefix a DNS subdomain (≤253).
fn label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let name_ok = (1..=63).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && alnum(name.chars().next())
        && alnum(name.chars().last());
    let prefix_ok = prefix.is_none_or(|p| {
        (1..=253).contains(&p.len())
            && p.split('.').all(|l| (1..=63).contains(&l.len()) && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
    });
    name_ok && prefix_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c";
    const SANDBOX: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const APP: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    fn index() -> PodIndex {
        let meta = PodMeta {
            namespace: "shop".into(),
            name: "web-7d9f".into(),
            labels: [("tier".to_string(), "frontend".to_string())].into(),
            annotations: BTreeMap::new(),
            sandbox_ids: [SANDBOX.to_string()].into(),
            containers: [(SANDBOX.to_string(), "POD".to_string()), (APP.to_string(), "nginx".to_string())].into(),
        };
        [(UID.to_string(), meta)].into()
    }

    fn path(id: &str) -> String {
        format!("/kubepods/burstable/pod{UID}/{id}")
    }

    #[test]
    fn every_kind_given_must_match_and_metadata_comes_from_the_index() {
        let pods = index();
        let r = |t: &str| toml::from_str::<PodRules>(t).unwrap();
        let app = path(APP);
        assert!(r("namespace = [\"shop\"]\nlabels = { tier = \"frontend\" }").matches([app.as_str()], &pods));
        assert!(!r("namespace = [\"shop\"]\nlabels = { tier = \"backend\" }").matches([app.as_str()], &pods));
        assert!(!r("namespace = [\"batch\"]").matches([app.as_str()], &pods));
        assert!(r("qos = [\"Burstable\"]").matches([app.as_str()], &PodIndex::new()), "QoS needs no runtime");
        assert!(!r("qos = [\"BestEffort\"]").matches([app.as_str()], &pods));
        assert!(!r("namespace = [\"shop\"]").matches([app.as_str()], &PodIndex::new()), "no runtime's word: no match");
        assert!(r("container = [\"nginx\"]").matches([app.as_str()], &pods));
        assert!(!r("container = [\"POD\"]").matches([path(SANDBOX).as_str()], &pods), "the pause container is no container");
        assert!(r("name = [\"web-7d9f\"]").matches([path(SANDBOX).as_str()], &pods), "a pod rule takes the whole pod");
        assert!(!r("namespace = [\"shop\"]").matches(["/system.slice/x.service"], &pods));
        let conmon = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/crio-conmon-{APP}.scope", UID.replace('-', "_"));
        assert!(!r("namespace = [\"shop\"]").matches([conmon.as_str()], &pods), "CRI-O's conmon is not the pod");
        assert!(PodRules::default().matches(["/anything"], &pods), "no pod rule: nothing to hold");
    }

    #[test]
    fn bad_qos_and_label_keys_are_named() {
        let mut out = Vec::new();
        let r = PodRules {
            qos: vec!["guaranteed".into()],
            labels: [("app.kubernetes.io/name".to_string(), "x".to_string()), ("-bad".to_string(), "x".to_string())].into(),
            annotations: [("Example.com/x".to_string(), "y".to_string())].into(),
            ..Default::default()
        };
        validate(3, "c", &r, &mut out);
        let text: String = out.iter().map(|(k, m, _)| format!("{k}: {m}\n")).collect();
        assert_eq!(out.len(), 4, "{text}");
        assert!(text.contains("match.pod is not acted on by this version"), "{text}");
        let mut out = Vec::new();
        validate(0, "c", &PodRules::default(), &mut out);
        assert!(out.is_empty(), "{out:?}");
        for want in [
            "\"guaranteed\" is not a QoS class",
            "\"-bad\" is not a Kubernetes labels key",
            "\"Example.com/x\" is not a Kubernetes annotations key",
            "class[3].match.pod.qos",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert!(label_key("joule.io/cap") && label_key("tier") && !label_key("") && !label_key(&"a".repeat(64)));
    }
}

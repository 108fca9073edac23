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

/// `[kubernetes]`: where pods' names and labels come from (only read when a class has
/// `match.pod` rules other than `qos`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// The container runtime's CRI socket, read-only (ListContainers and ListPodSandbox, each
    /// filtered to one pod's ids). Unset: containerd's `/run/containerd/containerd.sock`, else
    /// CRI-O's `/run/crio/crio.sock`, whichever is there when a pod is asked about.
    pub cri_socket: Option<std::path::PathBuf>,
    /// How long the questions about one pod may take before the round is given up (the loop
    /// waits); the pods asked about stay unnamed, held at the capping classes' cap.
    pub cri_timeout_ms: u64,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig { cri_socket: None, cri_timeout_ms: 2000 }
    }
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

    /// Whether a capping class with these rules holds a pod the runtime has not named: its
    /// rules need the runtime's word, which is missing, and what the pod's cgroup proves (its
    /// QoS class) does not rule it out. Failing closed: until it is named, such a pod might be
    /// any pod, this class's too.
    pub fn holds_unnamed(&self, qos: Qos) -> bool {
        self.needs_runtime() && (self.qos.is_empty() || self.qos.iter().any(|q| q == qos.as_str()))
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

/// Problems with `class[i].match.pod`, as (key, message, hint). A pod class acts in its pods'
/// own cgroups (joule moves no pod's process), and only where the kubelet leaves room: this
/// version holds a `thermal = "best_effort"` pod class's Burstable and BestEffort pods to its
/// thermal cap (their CFS quota, never above the kubelet's) and does nothing else to pods;
/// every other action is refused here with the knob it would take from the kubelet.
pub fn validate(i: usize, c: &super::ClassConfig, cfg: &super::Config, out: &mut Vec<(String, String, String)>) {
    let (r, class) = (&c.matches.pod, c.name.as_str());
    let key = format!("class[{i}].match.pod");
    if !r.is_empty() {
        pod_class_problems(i, c, cfg, out);
    }
    if let Some(p) = c.matches.cgroup.iter().find(|p| crate::kubepods::parse(p).is_some()) {
        out.push((
            format!("class[{i}].match.cgroup"),
            format!("class {class:?}: {p:?} is the kubelet's pod tree"),
            "a class never moves a pod's processes out of the kubelet's cgroups (no class but a pod class matches them): match pods with match.pod (namespace, labels, qos, ...); docs/deploy.md, \"Pods as classes\"".into(),
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

/// What a pod class may not ask, with the kubelet's knob it would write or the action this
/// version does not take on pods.
fn pod_class_problems(i: usize, c: &super::ClassConfig, cfg: &super::Config, out: &mut Vec<(String, String, String)>) {
    let class = c.name.as_str();
    let mut refuse = |key: &str, msg: String, hint: &str| out.push((format!("class[{i}].{key}"), format!("class {class:?}: {msg}"), hint.to_string()));
    let kubelet = "the kubelet writes it from the pod's resources; joule acts on pods only by a thermal best-effort cap (thermal = \"best_effort\"); docs/deploy.md, \"Pods as classes\"";
    let owned: [(&str, bool, &str); 5] = [
        ("cpus", c.cpus.is_some(), "a pod's cpuset belongs to the kubelet's CPU manager"),
        ("quota_us", c.quota_us.is_some() || c.period_us.is_some() || c.burst_us.is_some(), "a pod's cpu.max / CFS quota is the kubelet's (its CPU limit)"),
        ("weight", c.weight.is_some(), "a pod's cpu.weight / cpu.shares is the kubelet's (its CPU request)"),
        ("cpu_idle", c.cpu_idle == Some(true), "cpu.idle on a pod's cgroup would override the weight the kubelet gives it"),
        (
            "rt_runtime_us",
            c.rt_runtime_us.is_some() || c.rt_period_us.is_some() || c.rt_threads.is_some(),
            "RT bandwidth for a pod's threads is not acted on by this version",
        ),
    ];
    for (key, asked, why) in owned {
        if asked {
            refuse(key, format!("a pod class cannot set {key}: {why}"), kubelet);
        }
    }
    if c.latency_slice_us.is_some() || c.thermal == super::ThermalRole::Labelled {
        refuse(
            "thermal",
            "a pod class cannot be labelled or get a latency slice: this version only takes from pods (a best-effort cap), never grants".into(),
            kubelet,
        );
    }
    if c.parent.is_some() {
        refuse("parent", "a pod class has no parent: its pods stay in the kubelet's cgroups".into(), kubelet);
    }
    if c.thermal == super::ThermalRole::BestEffort && c.matches.pod.qos.iter().any(|q| q == "Guaranteed") {
        refuse(
            "match.pod.qos",
            "a best-effort cap on Guaranteed pods would write their cpu.max, which is the kubelet's (their limits are their requests)".into(),
            "qos = [\"Burstable\", \"BestEffort\"]: a Guaranteed pod a class matches otherwise is skipped, never capped",
        );
    }
    if cfg.thermal.scheduler == super::ThermalScheduler::Scx && c.thermal == super::ThermalRole::BestEffort {
        refuse(
            "thermal",
            "thermal.scheduler = \"scx\" schedules classes by their joule cgroups, and a pod class has none".into(),
            "thermal.scheduler = \"cgroup\" (the default) caps pods in their own cgroups",
        );
    }
    let used_by = [
        ("nap.class", cfg.nap.class.as_deref() == Some(class)),
        ("elevate.class", cfg.elevate.enabled() && cfg.elevate.class == class),
        ("energy.target.class", cfg.energy.targets.iter().any(|t| t.class == class)),
        ("net.limit.class", cfg.net.limits.iter().any(|l| l.class.as_deref() == Some(class))),
    ];
    for (what, used) in used_by {
        if used {
            refuse("match.pod", format!("{what} names this pod class: this version acts on pods only by a thermal best-effort cap"), kubelet);
        }
    }
    let mixed = !(c.matches.cgroup.is_empty() && c.matches.unit.is_empty() && c.matches.slice.is_empty());
    if mixed {
        refuse("match", "a pod class cannot also match cgroups, units or slices (a pod's processes are in the kubelet's cgroups)".into(), kubelet);
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
    fn an_unnamed_pod_is_held_by_name_rules_unless_its_cgroup_rules_it_out() {
        let r = |t: &str| toml::from_str::<PodRules>(t).unwrap();
        assert!(r("namespace = [\"batch\"]").holds_unnamed(Qos::Burstable), "its namespace is unknown: it might be batch's");
        assert!(r("labels = { tier = \"x\" }\nqos = [\"BestEffort\"]").holds_unnamed(Qos::BestEffort));
        assert!(!r("namespace = [\"batch\"]\nqos = [\"BestEffort\"]").holds_unnamed(Qos::Burstable), "its cgroup says Burstable");
        assert!(!r("qos = [\"BestEffort\"]").holds_unnamed(Qos::BestEffort), "a QoS rule needs no name: it matches the pod itself");
    }

    fn class(toml_text: &str) -> (super::super::ClassConfig, super::super::Config) {
        let cfg: super::super::Config = toml::from_str(toml_text).unwrap();
        (cfg.classes[0].clone(), cfg)
    }

    fn problems(toml_text: &str) -> String {
        let (c, cfg) = class(toml_text);
        let mut out = Vec::new();
        validate(3, &c, &cfg, &mut out);
        out.iter().map(|(k, m, h)| format!("{k}: {m} ({h})\n")).collect()
    }

    #[test]
    fn bad_qos_and_label_keys_are_named() {
        let text = problems(
            "[[class]]\nname = \"c\"\nmatch.pod = { qos = [\"guaranteed\"], labels = { \"app.kubernetes.io/name\" = \"x\", \"-bad\" = \"x\" }, annotations = { \"Example.com/x\" = \"y\" } }\n",
        );
        assert_eq!(text.lines().count(), 3, "{text}");
        for want in [
            "\"guaranteed\" is not a QoS class",
            "\"-bad\" is not a Kubernetes labels key",
            "\"Example.com/x\" is not a Kubernetes annotations key",
            "class[3].match.pod.qos",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert_eq!(problems("[[class]]\nname = \"c\"\nmatch.comm = [\"x\"]\n"), "");
        assert!(label_key("joule.io/cap") && label_key("tier") && !label_key("") && !label_key(&"a".repeat(64)));
    }

    #[test]
    fn a_pod_class_that_would_write_a_kubelet_knob_is_refused_with_the_knob() {
        let ok = "[[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch.pod = { namespace = [\"batch\"], qos = [\"Burstable\", \"BestEffort\"] }\n";
        assert_eq!(problems(ok), "", "a best-effort cap on Burstable/BestEffort pods is what pod classes do");
        for (extra, want) in [
            ("cpus = \"2-3\"\n", "cpuset belongs to the kubelet's CPU manager"),
            ("quota_us = 50000\n", "cpu.max / CFS quota is the kubelet's"),
            ("weight = 50\n", "cpu.weight / cpu.shares is the kubelet's"),
            ("rt_runtime_us = 1000\n", "RT bandwidth"),
            ("latency_slice_us = 300\n", "never grants"),
        ] {
            let text = problems(&ok.replace("thermal = ", &format!("{extra}thermal = ")));
            assert!(text.contains(want), "{extra}: {text}");
        }
        let g = problems(&ok.replace("\"Burstable\", \"BestEffort\"", "\"Guaranteed\""));
        assert!(g.contains("class[3].match.pod.qos") && g.contains("Guaranteed pods would write their cpu.max"), "{g}");
        let nap = problems(&format!("[nap]\nenabled = true\nclass = \"batch\"\n\n{ok}"));
        assert!(nap.contains("nap.class names this pod class"), "{nap}");
        let path = problems("[[class]]\nname = \"k\"\nmatch.cgroup = [\"/kubepods/besteffort\"]\n");
        assert!(path.contains("class[3].match.cgroup") && path.contains("kubelet's pod tree"), "{path}");
    }
}

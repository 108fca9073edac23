//! Tier 2 (root): joule's view of pods against a real containerd (issue 37). Pods are made
//! through CRI as a kubelet makes them; joule reads them back read-only over CRI
//! (`joule_kube::Cri`), the whole node or one pod by the id its cgroup carries, names each
//! process's pod from its cgroup (`joule_core::kubepods`) and matches class rules on both
//! (`PodRules`). One containerd for every check.

use joule_core::config::PodRules;
use joule_core::kubepods::{self, KubeCgroup, Qos};
use joule_core::testing::{is_root, require};
use joule_testkit::containerd::{self, Containerd, PodSpec};
use std::path::Path;
use std::time::{Duration, Instant};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn spec(name: &str, uid: &str, qos: &'static str, tier: &str) -> PodSpec {
    PodSpec {
        namespace: "shop".into(),
        name: name.into(),
        uid: uid.into(),
        qos,
        labels: vec![("tier".into(), tier.into())],
        annotations: vec![("joule.io/cap".into(), "true".into())],
        container: "app".into(),
        args: Vec::new(),
        cpu_quota_us: (qos == "guaranteed").then_some(20_000),
    }
}

/// The cgroup path of `pid` in its first v1 hierarchy (the same path in all of them).
fn cgroup_of(pid: i32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    text.lines()
        .find_map(|l| l.splitn(3, ':').nth(2).filter(|p| p.contains("kubepods")).map(str::to_string))
        .unwrap_or_else(|| panic!("{pid} in no pod: {text}"))
}

#[test]
#[ignore]
fn root_kube_pods_from_a_real_containerd_are_named_and_matched() {
    if !require(is_root(), "root") {
        return;
    }
    if let Some(why) = containerd::absent() {
        if !require(false, &why) {
            return;
        }
    }
    let mut ctd = Containerd::start(repo()).unwrap_or_else(|e| panic!("containerd: {e}"));
    let t0 = Instant::now();
    let web = ctd.run_pod(&spec("web", "0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c", "burstable", "frontend")).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    let db = ctd.run_pod(&spec("db", "1c2f6d3b-5a4e-4f9b-8d2c-3e4f5a6b7c8d", "guaranteed", "backend")).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    eprintln!("two pods up in {:?}", t0.elapsed());

    // Identity from the cgroup the kubelet (here: containerd, asked as a kubelet asks) made.
    let app = containerd::pid_in(&web.container_id).expect("web's container process");
    let pause = containerd::pid_in(&web.sandbox_id).expect("web's pause process");
    let Some(KubeCgroup::Pod(pc)) = kubepods::parse(&cgroup_of(app)) else { panic!("{}", cgroup_of(app)) };
    assert_eq!((pc.qos, pc.pod_uid.as_str()), (Qos::Burstable, "0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c"));
    assert_eq!(pc.container.as_ref().map(|c| c.id.as_str()), Some(web.container_id.as_str()));
    let db_app = containerd::pid_in(&db.container_id).expect("db's container process");
    assert!(matches!(kubepods::parse(&cgroup_of(db_app)), Some(KubeCgroup::Pod(p)) if p.qos == Qos::Guaranteed));

    // Names, labels and containers from the runtime over CRI, read-only.
    let cri = joule_kube::Cri::new(ctd.socket(), Duration::from_secs(5)).unwrap();
    let t1 = Instant::now();
    let pods = cri.pods().unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    let refresh = t1.elapsed();
    eprintln!("one CRI refresh ({} pods): {refresh:?}", pods.len());
    let meta = &pods["0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c"];
    assert_eq!((meta.namespace.as_str(), meta.name.as_str(), meta.labels["tier"].as_str()), ("shop", "web", "frontend"), "{meta:?}");
    assert_eq!(meta.annotations.get("joule.io/cap").map(String::as_str), Some("true"));
    assert_eq!(meta.containers.get(&web.container_id).map(String::as_str), Some("app"));
    assert!(meta.sandbox_ids.contains(&web.sandbox_id));

    // One pod asked about alone, by the id its cgroup carries: that pod, and only when the
    // UID asked is its own.
    let ask = |uid: &str, id: &str| joule_core::membership::PodQuery { uid: uid.into(), ids: [id.to_string()].into() };
    let t1 = Instant::now();
    let one = cri.lookup(&[ask("0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c", &web.container_id)]).unwrap();
    eprintln!("one pod asked about: {:?}", t1.elapsed());
    assert_eq!(one.len(), 1);
    assert_eq!(one["0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c"], *meta, "the same as the node's listing says");
    assert!(
        cri.lookup(&[ask("0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c", &web.sandbox_id)]).unwrap().contains_key("0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c"),
        "by its pause container's id"
    );
    assert!(cri.lookup(&[ask("1c2f6d3b-5a4e-4f9b-8d2c-3e4f5a6b7c8d", &web.container_id)]).unwrap().is_empty(), "web's container is not db's");

    // Class rules on the real processes.
    let rules = |t: &str| toml::from_str::<PodRules>(t).unwrap();
    let cg = |pid: i32| vec![cgroup_of(pid)];
    let front = rules("namespace = [\"shop\"]\nlabels = { tier = \"frontend\" }");
    assert!(front.matches(cg(app).iter().map(String::as_str), &pods));
    assert!(front.matches(cg(pause).iter().map(String::as_str), &pods), "a pod rule takes the pod's sandbox too");
    assert!(!front.matches(cg(db_app).iter().map(String::as_str), &pods), "db is tier=backend");
    let container = rules("container = [\"app\"]");
    assert!(container.matches(cg(app).iter().map(String::as_str), &pods));
    assert!(!container.matches(cg(pause).iter().map(String::as_str), &pods), "the pause container is no container");
    assert!(rules("qos = [\"Guaranteed\"]").matches(cg(db_app).iter().map(String::as_str), &pods));

    // A pod deleted is gone from the runtime's answer; a new one appears.
    ctd.remove_pod(&web.sandbox_id).unwrap();
    let batch = ctd.run_pod(&spec("batch", "2d3a7e4c-6b5f-4a0c-9e3d-4f5a6b7c8d9e", "besteffort", "batch")).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    let pods = cri.pods().unwrap();
    assert!(!pods.contains_key("0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c"), "web was deleted: {:?}", pods.keys());
    assert_eq!(pods["2d3a7e4c-6b5f-4a0c-9e3d-4f5a6b7c8d9e"].labels["tier"], "batch");
    let b = containerd::pid_in(&batch.container_id).expect("batch's process");
    assert!(matches!(kubepods::parse(&cgroup_of(b)), Some(KubeCgroup::Pod(p)) if p.qos == Qos::BestEffort));

    // A runtime that is gone is an error naming the socket, within the timeout.
    drop(ctd);
    let t2 = Instant::now();
    let err = cri.pods().expect_err("containerd was stopped").to_string();
    assert!(err.contains("joule-cri.") && t2.elapsed() < Duration::from_secs(6), "{err} after {:?}", t2.elapsed());
    for d in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        assert!(!d.path().join("kubepods").exists(), "left behind: {}", d.path().join("kubepods").display());
    }
}

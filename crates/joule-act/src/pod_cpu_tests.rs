//! Pod classes on a fake cgroupfs (v1 and v2 kubelet trees, cgroupfs driver): a best-effort
//! pod class's cap goes into each Burstable/BestEffort pod's own quota, never above the
//! kubelet's, v1 containers above it first; a Guaranteed pod is never written; a pod that leaves
//! and a lifted cap give the kubelet's values back, the kubelet's own change since stays; the
//! cap is split by the pods' use, and a pod the runtime has not named is held fail-closed.

use super::*;
use joule_core::effects::{FakeEffects, Files};
use joule_core::membership::Member;
use joule_core::procfs::TaskCgroups;
use std::time::{Duration, Instant};

const BURST: &str = "0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c";
const GUAR: &str = "1c2f6d3b-5a4e-4f9b-8d2c-3e4f5a6b7c8d";
const ID: &str = "4a5f0e3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f";

fn member(pid: i32, line: &str) -> (i32, Member) {
    (pid, Member { pid, class: "batch".into(), started: Some(1), cgroups: TaskCgroups::parse(line), uid: Some(0) })
}

fn reading(members: Vec<(i32, Member)>) -> Membership {
    Membership { members: members.into_iter().collect(), full: true, generation: 1, ..Default::default() }
}

fn file(fx: &FakeEffects, p: &str) -> String {
    fx.file(p).unwrap_or_default()
}

#[test]
fn v1_caps_the_burstable_pod_below_its_containers_and_never_the_guaranteed_one() {
    let b = format!("/cg/cpu/kubepods/burstable/pod{BURST}");
    let g = format!("/cg/cpu/kubepods/pod{GUAR}");
    let fx = FakeEffects::default()
        .with_dir(&b)
        .with_dir(format!("{b}/{ID}"))
        .with_file(format!("{b}/cpu.cfs_quota_us"), "-1")
        .with_file(format!("{b}/cpu.cfs_period_us"), "100000")
        .with_file(format!("{b}/{ID}/cpu.cfs_quota_us"), "50000")
        .with_file(format!("{b}/{ID}/cpu.cfs_period_us"), "100000")
        .with_file(format!("{g}/cpu.cfs_quota_us"), "20000")
        .with_file(format!("{g}/cpu.cfs_period_us"), "100000")
        .with_file(format!("{g}/{ID}/cpu.cfs_quota_us"), "20000");
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut pods = PodCaps::new(["batch".to_string()], CpuHier::V1("/cg/cpu".into()), 4);
    let m = reading(vec![
        member(10, &format!("4:cpu,cpuacct:/kubepods/burstable/pod{BURST}/{ID}\n")),
        member(11, &format!("4:cpu,cpuacct:/kubepods/pod{GUAR}/{ID}\n")),
    ]);
    let r = pods.hold(&journal, &fx, &m).unwrap();
    assert!(r.notes.iter().any(|n| n.contains("joined")), "{:?}", r.notes);
    assert_eq!(pods.status().skipped_guaranteed, 1);
    // 15 % of 4 CPUs for its one pod: 60 ms per 100 ms; the container's own 50 ms is lower.
    assert!(pods.set_cap(&journal, &fx, "batch", 15.0).unwrap());
    assert_eq!((file(&fx, &format!("{b}/cpu.cfs_quota_us")), file(&fx, &format!("{b}/{ID}/cpu.cfs_quota_us"))), ("60000".into(), "50000".into()));
    // 5 %: 20 ms; v1 wants the container at or below its pod first.
    assert!(pods.set_cap(&journal, &fx, "batch", 5.0).unwrap());
    assert_eq!((file(&fx, &format!("{b}/cpu.cfs_quota_us")), file(&fx, &format!("{b}/{ID}/cpu.cfs_quota_us"))), ("20000".into(), "20000".into()));
    let undo: Vec<_> = joule_core::journal::entries(jd.path()).unwrap().into_iter().map(|e| (e.owner, e.undo)).collect();
    assert_eq!(undo.len(), 2, "{undo:?}");
    assert!(
        matches!(&undo[1].1, Undo::Write { path, old } if path.ends_with(format!("pod{BURST}/cpu.cfs_quota_us")) && old == "-1"),
        "the pod's record is the newest (replayed first): {undo:?}"
    );
    assert!(undo.iter().all(|(o, _)| o == OWNER));
    let rows = PodCaps::rows(&pods.status());
    assert_eq!(rows.len(), 1, "the Guaranteed pod is not held: {rows:?}");
    assert!(rows[0].0.contains(&("capped".into(), "true".into())), "{rows:?}");
    // Never the Guaranteed pod, nor the QoS levels.
    assert_eq!((file(&fx, &format!("{g}/cpu.cfs_quota_us")), file(&fx, &format!("{g}/{ID}/cpu.cfs_quota_us"))), ("20000".into(), "20000".into()));
    // The stage cools: the kubelet's values come back, pod first, and the journal empties.
    assert!(pods.set_cap(&journal, &fx, "batch", 100.0).unwrap());
    assert_eq!((file(&fx, &format!("{b}/cpu.cfs_quota_us")), file(&fx, &format!("{b}/{ID}/cpu.cfs_quota_us"))), ("-1".into(), "50000".into()));
    assert!(joule_core::journal::entries(jd.path()).unwrap().is_empty());
}

#[test]
fn v2_caps_each_pod_with_a_share_and_gives_back_a_pod_that_left_unless_the_kubelet_changed_it() {
    let other = "2d3a7e4c-6b5f-4a0c-9e3d-4f5a6b7c8d9e";
    let b = format!("/cg/kubepods/burstable/pod{BURST}");
    let e = format!("/cg/kubepods/besteffort/pod{other}");
    let fx = FakeEffects::default().with_file(format!("{b}/cpu.max"), "max 100000").with_file(format!("{e}/cpu.max"), "max 100000");
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut pods = PodCaps::new(["batch".to_string()], CpuHier::V2("/cg".into()), 4);
    let both =
        reading(vec![member(10, &format!("0::/kubepods/burstable/pod{BURST}/{ID}\n")), member(12, &format!("0::/kubepods/besteffort/pod{other}/crio-{ID}\n"))]);
    pods.hold(&journal, &fx, &both).unwrap();
    pods.set_cap(&journal, &fx, "batch", 15.0).unwrap();
    // 15 % of 4 CPUs split between two pods.
    assert_eq!((file(&fx, &format!("{b}/cpu.max")), file(&fx, &format!("{e}/cpu.max"))), ("30000 100000".into(), "30000 100000".into()));
    assert_eq!(pods.caps()["batch"].quota_us, Some(60_000));
    // The BestEffort pod goes: it gets its quota back and the other pod the whole share.
    pods.hold(&journal, &fx, &reading(vec![member(10, &format!("0::/kubepods/burstable/pod{BURST}/{ID}\n"))])).unwrap();
    assert_eq!((file(&fx, &format!("{b}/cpu.max")), file(&fx, &format!("{e}/cpu.max"))), ("60000 100000".into(), "max 100000".into()));
    // The kubelet resizes the pod meanwhile (a limit of 0.5 CPU): the cap follows the lower
    // of the two, and a release gives back the kubelet's new value.
    fx.write(std::path::Path::new(&format!("{b}/cpu.max")), "50000 100000").unwrap();
    pods.set_cap(&journal, &fx, "batch", 20.0).unwrap();
    assert_eq!(file(&fx, &format!("{b}/cpu.max")), "50000 100000", "20 % of 4 CPUs is 80 ms, above the pod's new 50 ms limit");
    pods.set_cap(&journal, &fx, "batch", 5.0).unwrap();
    assert_eq!(file(&fx, &format!("{b}/cpu.max")), "20000 100000");
    pods.release(&journal, &fx).unwrap();
    assert_eq!(file(&fx, &format!("{b}/cpu.max")), "50000 100000");
    // Resized again while capped: that value stays at release.
    pods.set_cap(&journal, &fx, "batch", 5.0).unwrap();
    fx.write(std::path::Path::new(&format!("{b}/cpu.max")), "150000 100000").unwrap();
    pods.release(&journal, &fx).unwrap();
    assert_eq!(file(&fx, &format!("{b}/cpu.max")), "150000 100000");
    assert!(joule_core::journal::entries(jd.path()).unwrap().is_empty());
}

fn uid(i: usize) -> String {
    format!("{i:08x}-4f3d-4e8a-9c1b-2d3e4f5a6b7c")
}

/// A busy BestEffort pod capped alone, then nine idle ones in the class: the busy pod keeps
/// its cap but for the idle pods' floors, the idle ones get the kernel's least quota, and the
/// class's total is what the stage allows (an even split gave the busy pod a tenth).
#[test]
fn idle_pods_joining_a_capped_class_take_only_their_floor_from_its_busy_pod() {
    let dir = |i: usize| format!("/cg/kubepods/besteffort/pod{}", uid(i));
    let mut fx = FakeEffects::default();
    for i in 0..10 {
        fx = fx.with_file(format!("{}/cpu.max", dir(i)), "max 100000").with_file(format!("{}/cpu.stat", dir(i)), "usage_usec 0\nuser_usec 0\n");
    }
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut pods = PodCaps::new(["batch".to_string()], CpuHier::V2("/cg".into()), 2);
    let m = |n: usize| reading((0..n).map(|i| member(10 + i as i32, &format!("0::/kubepods/besteffort/pod{}/{ID}\n", uid(i)))).collect());
    pods.hold(&journal, &fx, &m(1)).unwrap();
    pods.set_cap(&journal, &fx, "batch", 15.0).unwrap();
    let quota = |i: usize| file(&fx, &format!("{}/cpu.max", dir(i)));
    assert_eq!(quota(0), "30000 100000", "15 % of 2 CPUs, alone");
    // The busy pod uses all of it for a second: it is held back.
    let t0 = Instant::now();
    fx.write(std::path::Path::new(&format!("{}/cpu.stat", dir(0))), "usage_usec 300000\n").unwrap();
    pods.resplit_at(&journal, &fx, "batch", t0 + Duration::from_secs(1)).unwrap();
    assert_eq!(quota(0), "30000 100000");
    pods.hold(&journal, &fx, &m(10)).unwrap();
    fx.write(std::path::Path::new(&format!("{}/cpu.stat", dir(0))), "usage_usec 600000\n").unwrap();
    pods.resplit_at(&journal, &fx, "batch", t0 + Duration::from_secs(2)).unwrap();
    fx.write(std::path::Path::new(&format!("{}/cpu.stat", dir(0))), "usage_usec 891000\n").unwrap();
    pods.resplit_at(&journal, &fx, "batch", t0 + Duration::from_secs(3)).unwrap();
    assert_eq!(quota(0), format!("{} 100000", 30_000 - 9 * FLOOR_US), "the busy pod keeps its cap but for nine floors");
    for i in 1..10 {
        assert_eq!(quota(i), "1000 100000", "an idle pod gets the kernel's least quota");
    }
    assert_eq!(pods.caps()["batch"].quota_us, Some(30_000), "the class's total");
    // One of them wakes and uses its quota: held back, it shares with the busy pod.
    fx.write(std::path::Path::new(&format!("{}/cpu.stat", dir(3))), "usage_usec 10000\n").unwrap();
    fx.write(std::path::Path::new(&format!("{}/cpu.stat", dir(0))), "usage_usec 1180000\n").unwrap();
    pods.resplit_at(&journal, &fx, "batch", t0 + Duration::from_secs(4)).unwrap();
    assert_eq!((quota(0), quota(3)), ("14600 100000".to_string(), "14600 100000".to_string()), "two held back share what the idle leave");
    pods.release(&journal, &fx).unwrap();
    assert!((0..10).all(|i| quota(i) == "max 100000"));
    assert!(joule_core::journal::entries(jd.path()).unwrap().is_empty());
}

/// A pod the runtime has not named is held by the first capping class whose rules could be
/// its, until it is named; never when its cgroup rules it out, never a Guaranteed one.
#[test]
fn a_pod_the_runtime_has_not_named_is_held_by_the_first_class_that_could_be_its() {
    use joule_core::kubepods::Qos;
    use joule_core::membership::UnnamedPod;
    let (b, e, g) = (uid(1), uid(2), uid(3));
    let path = |qos: &str, u: &str| if qos.is_empty() { format!("/kubepods/pod{u}") } else { format!("/kubepods/{qos}/pod{u}") };
    let fx = FakeEffects::default()
        .with_file(format!("/cg{}/cpu.max", path("burstable", &b)), "max 100000")
        .with_file(format!("/cg{}/cpu.max", path("besteffort", &e)), "max 100000")
        .with_file(format!("/cg{}/cpu.max", path("", &g)), "20000 100000");
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let rules = |ns: &str, qos: &[&str]| joule_core::config::PodRules {
        namespace: vec![ns.into()],
        qos: qos.iter().map(|q| q.to_string()).collect(),
        ..Default::default()
    };
    let holders = vec![("only-besteffort".to_string(), rules("a", &["BestEffort"])), ("any".to_string(), rules("b", &[]))];
    let mut pods = PodCaps::new(["only-besteffort".to_string(), "any".to_string()], CpuHier::V2("/cg".into()), 4).holding_unnamed(holders);
    let unnamed = |u: &str, qos: Qos, p: String| (u.to_string(), UnnamedPod { qos, pod_path: p, since_unix_ms: 1 });
    let m = Membership {
        unnamed_pods: std::sync::Arc::new(
            [
                unnamed(&b, Qos::Burstable, path("burstable", &b)),
                unnamed(&e, Qos::BestEffort, path("besteffort", &e)),
                unnamed(&g, Qos::Guaranteed, path("", &g)),
            ]
            .into_iter()
            .collect(),
        ),
        ..reading(Vec::new())
    };
    let r = pods.hold(&journal, &fx, &m).unwrap();
    assert!(r.notes.iter().any(|n| n.contains("not named by the runtime yet")), "{:?}", r.notes);
    let st = pods.status();
    let held = |c: &str| st.pods[c].iter().map(|p| p.uid.clone()).collect::<Vec<_>>();
    assert_eq!((held("only-besteffort"), held("any")), (vec![e.clone()], vec![b.clone()]), "the Burstable pod is not the first class's: its cgroup says so");
    pods.set_cap(&journal, &fx, "only-besteffort", 15.0).unwrap();
    pods.set_cap(&journal, &fx, "any", 15.0).unwrap();
    assert_eq!(file(&fx, &format!("/cg{}/cpu.max", path("besteffort", &e))), "60000 100000");
    assert_eq!(file(&fx, &format!("/cg{}/cpu.max", path("burstable", &b))), "60000 100000");
    assert_eq!(file(&fx, &format!("/cg{}/cpu.max", path("", &g))), "20000 100000", "never a Guaranteed pod");
    let rows = PodCaps::rows(&pods.status());
    assert!(rows.iter().any(|(l, _)| l.contains(&("pod".into(), e.clone()))), "an unnamed pod is shown by its UID: {rows:?}");
    // Named, and not the class's: given back.
    pods.hold(&journal, &fx, &reading(Vec::new())).unwrap();
    assert_eq!(file(&fx, &format!("/cg{}/cpu.max", path("besteffort", &e))), "max 100000");
    assert!(joule_core::journal::entries(jd.path()).unwrap().is_empty());
}

//! Tier 2 (root): pods as classes against a real containerd (issue 37). Pods are made through
//! CRI as a kubelet makes them (joule-testkit's harness: Debian's containerd and runc, its own
//! state dir, the cgroupfs driver); the agent reads them read-only over the same CRI socket,
//! matches its classes by namespace, caps the Burstable and BestEffort pods in their own
//! cgroups at the hot stage, leaves the Guaranteed pod's quota and cpuset alone, follows a pod
//! deleted and a new one created, and after SIGKILL + `joule restore` every pod has the quota
//! the kubelet gave it.

use super::{http_get, is_root, require, Agent, JOULE};
use joule_testkit::containerd::{self, Containerd, PodSpec};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Stage 3's best-effort share of the whole machine (`StageActions::default_for(3)`).
const STAGE3_PCT: f64 = 15.0;

fn spec(namespace: &str, name: &str, uid: &str, qos: &'static str, spin: bool) -> PodSpec {
    PodSpec {
        namespace: namespace.into(),
        name: name.into(),
        uid: uid.into(),
        qos,
        labels: vec![("app".into(), name.into())],
        annotations: Vec::new(),
        container: "app".into(),
        args: if spin { vec!["spin".into()] } else { Vec::new() },
        cpu_quota_us: (qos == "guaranteed").then_some(20_000),
    }
}

/// The v1 `cpu` hierarchy (this machine's cpu controller; the harness uses the cgroupfs driver).
fn cpu_hier() -> Option<PathBuf> {
    ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"].into_iter().map(PathBuf::from).find(|d| d.join("cpu.cfs_quota_us").exists())
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_else(|e| format!("<{e}>"))
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// CPUs a process used over 3 s.
fn cpu_share(pid: i32) -> f64 {
    let ticks = || {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    };
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).unwrap().unwrap() as f64;
    let (t0, c0) = (Instant::now(), ticks());
    std::thread::sleep(Duration::from_secs(3));
    (ticks() - c0) as f64 / hz / t0.elapsed().as_secs_f64()
}

#[test]
#[ignore = "tier 2: root"]
fn root_kube_pod_classes_cap_pods_in_place_never_a_guaranteed_one_and_restore_gives_them_back() {
    if !require(is_root(), "root (containerd, cgroups, the agent)") {
        return;
    }
    if let Some(why) = containerd::absent() {
        if !require(false, &why) {
            return;
        }
    }
    let Some(cpu) = cpu_hier() else {
        require(false, "a v1 cpu hierarchy (the containerd harness uses the cgroupfs driver on this machine's hybrid layout)");
        return;
    };
    let repo = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut ctd = Containerd::start(repo).unwrap_or_else(|e| panic!("containerd: {e}"));
    let (web_uid, db_uid, batch_uid, web2_uid) = (
        "0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c",
        "1c2f6d3b-5a4e-4f9b-8d2c-3e4f5a6b7c8d",
        "2d3a7e4c-6b5f-4a0c-9e3d-4f5a6b7c8d9e",
        "3e4b8f5d-7c6a-4b1d-8f4e-5a6b7c8d9e0f",
    );
    let web = ctd.run_pod(&spec("shop", "web", web_uid, "burstable", false)).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    let db = ctd.run_pod(&spec("shop", "db", db_uid, "guaranteed", false)).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    let batch = ctd.run_pod(&spec("batch", "batch", batch_uid, "besteffort", true)).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    let dir = |cgroup_parent: &str| cpu.join(cgroup_parent.trim_start_matches('/'));
    let (web_dir, db_dir, batch_dir) = (dir(&web.cgroup_parent), dir(&db.cgroup_parent), dir(&batch.cgroup_parent));
    let quota = |d: &Path| read(&d.join("cpu.cfs_quota_us"));
    let db_knobs = || {
        (
            quota(&db_dir),
            quota(&db_dir.join(&db.container_id)),
            read(&Path::new("/sys/fs/cgroup/cpuset").join(db.cgroup_parent.trim_start_matches('/')).join("cpuset.cpus")),
        )
    };
    let db_before = db_knobs();
    let (web_before, batch_before) = (quota(&web_dir), quota(&batch_dir));
    assert_eq!(db_before.1, "20000", "the Guaranteed pod's container has its limit");
    let spinner = containerd::pid_in(&batch.container_id).expect("the batch pod's process");

    // Two pod classes by namespace; shop also matches the Guaranteed db, which must stay untouched.
    let cfg = format!(
        "[thermal]\nstage_thresholds_celsius = [10.0, 15.0, 20.0]\nact_on_model = true\n\n[kubernetes]\ncri_socket = \"{}\"\n\n\
         [[class]]\nname = \"shop\"\nthermal = \"best_effort\"\nmatch.pod = {{ namespace = [\"shop\"] }}\n\n\
         [[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch.pod = {{ namespace = [\"batch\"], qos = [\"BestEffort\"] }}\n",
        ctd.socket().display()
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &cfg).unwrap();
    let out = Command::new(JOULE).arg("check-config").arg(file.path()).output().unwrap();
    assert!(out.status.success(), "check-config refused the pod classes: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let mut agent = Agent::start(&cfg);
    let ncpus = std::thread::available_parallelism().unwrap().get() as f64;
    // One pod in each class: each gets the class's whole share, 15 % of the machine.
    let want = ((STAGE3_PCT / 100.0 * ncpus * 100_000.0).round() as u64).to_string();
    wait_for("the batch and web pods capped in their own cgroups", || quota(&batch_dir) == want && quota(&web_dir) == want);
    let capped = cpu_share(spinner);
    eprintln!("spinning BestEffort pod capped at {:.2} CPU: used {capped:.3} CPU", STAGE3_PCT / 100.0 * ncpus);
    assert!(capped < STAGE3_PCT / 100.0 * ncpus + 0.08, "the capped pod used {capped:.3} CPU");
    assert_eq!(db_knobs(), db_before, "the Guaranteed pod's quota or cpuset changed");
    assert!(read(&Path::new("/proc").join(spinner.to_string()).join("cgroup")).contains(&batch.container_id), "the pod's process was moved out of its cgroup");
    let (_, metrics) = http_get(&agent.metrics_addr(), "/metrics", None);
    for want in [
        "joule_class_pods{class=\"batch\",namespace=\"batch\",pod=\"batch\",capped=\"true\"} 1",
        "joule_class_pods{class=\"shop\",namespace=\"shop\",pod=\"web\",capped=\"true\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == want), "no {want} in:\n{}", metrics.lines().filter(|l| l.contains("pods")).collect::<Vec<_>>().join("\n"));
    }
    assert!(!metrics.contains("pod=\"db\""), "the Guaranteed pod is held by no class");
    let (_, plan) = http_get(&agent.metrics_addr(), "/plan.json", None);
    assert!(plan.contains("(pods batch/batch)") && plan.contains("(pods shop/web)"), "the caps' reasons do not name the pods: {plan}");

    // web is deleted and web2 created: web2 is found from the process events (its first exec
    // refreshes the pod list) and capped; the class's share stays one pod's.
    ctd.remove_pod(&web.sandbox_id).unwrap();
    let t0 = Instant::now();
    let web2 = ctd.run_pod(&spec("shop", "web2", web2_uid, "burstable", false)).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    let web2_dir = dir(&web2.cgroup_parent);
    let addr = agent.metrics_addr();
    let deadline = Instant::now() + Duration::from_secs(30);
    while quota(&web2_dir) != want {
        if Instant::now() > deadline {
            let (_, snap) = http_get(&addr, "/snapshot.json", None);
            let snap: serde_json::Value = serde_json::from_str(&snap).unwrap();
            panic!("web2 never capped ({}): pods {} classes {} events {}", quota(&web2_dir), snap["pods"], snap["classes"], snap["process_events"]);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("a new pod capped {:?} after its sandbox was asked for", t0.elapsed());
    let (_, snap) = http_get(&agent.metrics_addr(), "/snapshot.json", None);
    let snap: serde_json::Value = serde_json::from_str(&snap).unwrap();
    let pods = &snap["pods"];
    eprintln!("pod index: {pods}");
    assert!(pods["refreshes_total"].as_u64().unwrap_or(0) >= 1 && pods["errors_total"] == 0, "{pods}");
    assert_eq!(db_knobs(), db_before, "the Guaranteed pod's quota or cpuset changed");

    // SIGKILL at the hot stage: caps stay until restore, which gives the kubelet's values back.
    joule_testkit::sigkill_agent_and_guardian(&mut agent.child);
    assert_eq!(quota(&batch_dir), want, "the cap vanished without a restore: the test would prove nothing");
    let records = joule_core::journal::entries(&agent.journal_dir()).unwrap();
    assert!(records.iter().any(|e| e.owner == "pods"), "the pods' caps are not journalled: {records:#?}");
    let out = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(agent.journal_dir()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!((quota(&batch_dir), quota(&web2_dir)), (batch_before.clone(), web_before.clone()), "restore did not give the pods their quota back");
    assert_eq!(db_knobs(), db_before);
    assert!(joule_core::journal::entries(&agent.journal_dir()).unwrap().is_empty());
    let free = cpu_share(spinner);
    assert!(free > capped + 0.2, "the pod still looks capped after restore: {free:.3} CPU (capped {capped:.3})");
    drop(agent);
    drop(ctd);
}

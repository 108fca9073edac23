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

/// The metric lines of `name` in a scrape of `agent`.
fn metric_lines(agent: &Agent, name: &str) -> Vec<String> {
    let (_, m) = http_get(&agent.metrics_addr(), "/metrics", None);
    m.lines().filter(|l| l.starts_with(name)).map(str::to_string).collect()
}

fn metric(agent: &Agent, name: &str) -> Option<f64> {
    metric_lines(agent, name).iter().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// A tenant's attempts against pod classes, with one containerd: (a) 18 pods with 250 kB
/// annotations each (under the API's 256 KiB) make a listing of every pod larger than tonic's
/// 4 MiB default, which blinded the agent to every later pod: a new pod of a capping class is
/// named and capped anyway; (b) 9 idle pods join the busy pod's class: its cap stays within
/// 10 % (an even split gave it a tenth) and the class's use stays within its total; (c) a
/// runtime that does not answer: every pod the capping class could hold by its cgroup is held
/// at the cap, none that its cgroup rules out, and the metrics and `joule status` say since when.
#[test]
#[ignore = "tier 2: root"]
fn root_kube_a_tenants_annotations_and_idle_pods_neither_uncap_nor_squeeze_another_tenants_pod() {
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
    let t0 = Instant::now();
    let repo = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut ctd = Containerd::start(repo).unwrap_or_else(|e| panic!("containerd: {e}"));
    let uid = |tenant: u32, i: u32| format!("{tenant:08x}-{i:04x}-4e8a-9c1b-2d3e4f5a6b7c");
    let mut fat = Vec::new();
    for i in 0..18 {
        let mut s = spec("tenant", &format!("fat-{i}"), &uid(0xfa7, i), "burstable", false);
        s.annotations = vec![("tenant.example.com/blob".into(), "x".repeat(250_000))];
        fat.push(ctd.run_pod(&s).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log())));
    }
    let listed = joule_kube::Cri::new(ctd.socket(), Duration::from_secs(5)).unwrap().pods().unwrap();
    let annotations: usize = listed.values().flat_map(|p| p.annotations.values()).map(String::len).sum();
    assert!(annotations > 4 << 20, "the listing is not over 4 MiB ({annotations} bytes of annotations): the test would prove nothing");
    eprintln!("containerd and 18 pods ({annotations} bytes of annotations) in {:?}", t0.elapsed());
    let dir = |p: &containerd::Pod| cpu.join(p.cgroup_parent.trim_start_matches('/'));
    let quota = |p: &containerd::Pod| read(&dir(p).join("cpu.cfs_quota_us"));
    let class = "[[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch.pod = { namespace = [\"batch\"], qos = [\"BestEffort\"] }\n";
    let cfg = |socket: &Path| {
        format!(
            "[thermal]\nstage_thresholds_celsius = [10.0, 15.0, 20.0]\nact_on_model = true\n\n[kubernetes]\ncri_socket = \"{}\"\n\n{class}",
            socket.display()
        )
    };
    let ncpus = std::thread::available_parallelism().unwrap().get() as f64;
    let total_us = (STAGE3_PCT / 100.0 * ncpus * 100_000.0).round() as u64;

    // (a) A new pod of the capping class, after the tenant's: named and capped.
    let agent = Agent::start(&cfg(ctd.socket()));
    agent.wait_event(0, "thermal_actions");
    let t1 = Instant::now();
    let busy = ctd.run_pod(&spec("batch", "busy", &uid(0xb, 0), "besteffort", true)).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    let named = "joule_class_pods{class=\"batch\",namespace=\"batch\",pod=\"busy\",capped=\"true\"} 1";
    let deadline = Instant::now() + Duration::from_secs(30);
    while quota(&busy) != total_us.to_string() || !metric_lines(&agent, "joule_class_pods").iter().any(|l| l == named) {
        if Instant::now() > deadline {
            let (_, snap) = http_get(&agent.metrics_addr(), "/snapshot.json", None);
            let pods = serde_json::from_str::<serde_json::Value>(&snap).unwrap()["pods"].clone();
            panic!("the new pod was never named and capped (quota {}): pod index {pods}; {:?}", quota(&busy), metric_lines(&agent, "joule_class_pods"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("(a) the new pod named and capped at {total_us} µs {:?} after it was asked for", t1.elapsed());
    assert_eq!((metric(&agent, "joule_pod_index_pods"), metric(&agent, "joule_pod_index_unnamed_pods")), (Some(19.0), Some(0.0)), "every pod named");
    assert_eq!(metric(&agent, "joule_pod_index_errors_total"), Some(0.0));
    let before = quota(&busy).parse::<u64>().unwrap();

    // (b) Another tenant's 9 idle pods in the same class.
    let idle: Vec<containerd::Pod> = (0..9)
        .map(|i| ctd.run_pod(&spec("batch", &format!("idle-{i}"), &uid(0x1d, i), "besteffort", false)).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log())))
        .collect();
    wait_for("the 9 idle pods held", || idle.iter().all(|p| quota(p) != "-1"));
    let spinner = containerd::pid_in(&busy.container_id).expect("the busy pod's process");
    let used = cpu_share(spinner);
    let after = quota(&busy).parse::<u64>().unwrap();
    let idle_quotas: Vec<String> = idle.iter().map(quota).collect();
    eprintln!("(b) busy pod's cap {before} µs alone, {after} µs beside 9 idle pods ({idle_quotas:?}); it used {used:.3} CPU");
    assert!(after as f64 >= 0.9 * before as f64, "9 idle pods squeezed the busy pod from {before} to {after} µs");
    assert!(used < total_us as f64 / 100_000.0 + 0.05, "the class's busy pod used {used:.3} CPU, over the class's {total_us} µs per 100 ms");
    assert_eq!(metric_lines(&agent, "joule_class_pods{class=\"batch\"").len(), 10, "{:?}", metric_lines(&agent, "joule_class_pods"));
    drop(agent);
    assert!(std::iter::once(&busy).chain(&idle).all(|p| quota(p) == "-1"), "the agent's stop gave the pods back their quota");

    // (c) A runtime that does not answer: the pods are unnamed, and the class holds those it
    // could be holding (BestEffort), never the tenant's Burstable ones.
    let gone = tempfile::tempdir().unwrap();
    let agent = Agent::start(&cfg(&gone.path().join("containerd.sock")));
    wait_for("the BestEffort pods held unnamed", || std::iter::once(&busy).chain(&idle).all(|p| quota(p) != "-1"));
    assert!(quota(&busy).parse::<u64>().unwrap() <= total_us, "{}", quota(&busy));
    assert!(fat.iter().all(|p| quota(p) == "-1"), "a Burstable pod was held by a BestEffort class");
    wait_for("the stale index said", || metric(&agent, "joule_pod_index_stale_seconds").is_some_and(|s| s >= 1.0));
    assert_eq!(metric(&agent, "joule_pod_index_unnamed_pods"), Some(28.0));
    assert!(metric(&agent, "joule_pod_index_errors_total").is_some_and(|e| e >= 1.0));
    let out = Command::new(JOULE).args(["status", "--journal-dir"]).arg(agent.journal_dir()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Pods: 0 named by cri:") && text.contains("; 28 not named, the oldest for "), "{text}");
    drop(agent);
    assert!(std::iter::once(&busy).chain(&idle).all(|p| quota(p) == "-1"));
    drop(ctd);
    eprintln!("all in {:?}", t0.elapsed());
}

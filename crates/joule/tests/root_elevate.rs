//! Tier 2 (root): `joule elevate` really alternates its targets at the requested slice, as the
//! targets' own timestamps show; a table's order is obeyed; the preemption API bounds a long
//! request; a SIGKILLed scheduler leaves no thread at an RT policy or a changed affinity —
//! through its guardian, and through `joule restore` when the guardian is killed too.
//! Every run is shorter than 0.9 s of RT time so RT throttling never cuts it.

use joule_core::testing::{is_root, require};
use joule_elevate::demo::{Server, REQ_BYTES, RESP_BYTES};
use joule_elevate::probe::{run_and_gap_us, runs, Record};
use joule_elevate::timing::now_ns;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

/// A scratch directory on tmpfs (the journal is synced on every record; on a busy disk that
/// takes long enough to blur the timings).
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("joule-elevate-test").tempdir_in("/run").or_else(|_| tempfile::tempdir()).unwrap()
}

/// A busy target process recording its runs until `secs` from now into `dir/name.json`: the
/// benchmarks' hidden `joule-bench elevate-target`, from the `joule-bench` beside `joule` (the
/// workspace's tests build both).
fn target(dir: &Path, name: &str, secs: f64) -> (Child, PathBuf) {
    let out = dir.join(format!("{name}.json"));
    let until = now_ns() + (secs * 1e9) as u64;
    let bench = Path::new(JOULE).with_file_name("joule-bench");
    assert!(bench.is_file(), "{} is missing: build it with `cargo build --release --workspace`", bench.display());
    let c = Command::new(bench).args(["elevate-target", "--until-ns", &until.to_string(), "--out"]).arg(&out).spawn().unwrap();
    (c, out)
}

fn finish(t: (Child, PathBuf)) -> Record {
    let (mut c, out) = t;
    c.wait().unwrap();
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

/// Runs `joule elevate --json` with `args`; its JSON report.
fn elevate(journal: &Path, args: &[String]) -> serde_json::Value {
    let out = Command::new(JOULE).arg("elevate").arg("--json").arg("--journal-dir").arg(journal).args(args).output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Root for SCHED_FIFO, and two CPUs (the dedicated pattern's scheduler and the targets).
fn can_run() -> bool {
    require(is_root(), "root (SCHED_FIFO)") && require(joule_elevate::online_cpus().len() >= 2, "two online CPUs")
}

fn window(v: &serde_json::Value) -> (u64, u64) {
    (v["run"]["start_ns"].as_u64().unwrap() + 20_000_000, v["run"]["end_ns"].as_u64().unwrap() - 5_000_000)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// `joule elevate` for 0.7 s on two busy targets on CPU 0: its JSON, the targets' merged runs
/// and the window they were cut to.
fn two_targets(dir: &Path, pattern: &str, slice_us: u64) -> (serde_json::Value, Vec<joule_elevate::probe::Run>, (u64, u64)) {
    let (a, b) = (target(dir, "a", 1.2), target(dir, "b", 1.2));
    let pids = format!("{},{}", a.0.id(), b.0.id());
    let v = elevate(dir, &["--cpu", "0", "--pattern", pattern, "--slice-us", &slice_us.to_string(), "--pids", &pids, "--duration-s", "0.7"].map(String::from));
    let recs = [finish(a), finish(b)];
    let (from, to) = window(&v);
    (v, runs(&recs, from, to), (from, to))
}

#[test]
#[ignore = "tier 2: root"]
fn root_elevate_targets_alternate_at_the_requested_slice() {
    if !can_run() {
        return;
    }
    let dir = scratch();
    for (pattern, slice_us) in [("dedicated", 1000u64), ("shared", 1000)] {
        let (_, rs, (from, to)) = two_targets(dir.path(), pattern, slice_us);
        let (lens, gaps) = run_and_gap_us(&rs);
        let expected = (to - from) as f64 / 1000.0 / slice_us as f64;
        // Merged runs alternate by construction; what can fail is how long they are and how
        // many there are: a scheduler that did not switch gives one long run.
        assert!(lens.len() as f64 > expected * 0.6 && (lens.len() as f64) < expected * 1.4, "{pattern}: {} runs, expected about {expected:.0}", lens.len());
        let (m, g) = (median(&lens), median(&gaps));
        assert!((m - slice_us as f64).abs() < 0.3 * slice_us as f64, "{pattern}: median run {m:.1} µs for a {slice_us} µs slice");
        assert!((g - slice_us as f64).abs() < 0.3 * slice_us as f64, "{pattern}: median gap {g:.1} µs for a {slice_us} µs slice");
        let share: f64 = rs.iter().filter(|r| r.who == 0).map(|r| (r.end_ns - r.start_ns) as f64).sum::<f64>()
            / rs.iter().map(|r| (r.end_ns - r.start_ns) as f64).sum::<f64>();
        assert!((0.35..0.65).contains(&share), "{pattern}: target a ran {share:.2} of the time");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Issue 19's 10 µs pathology: the dedicated scheduler asked for switches faster than the
/// reschedule IPI delivered them (~20 µs here), so they cancelled out and one target ran for
/// hundreds of µs. Waiting for each switch to land keeps every run near the slice.
///
/// A 0.7 s window of 10 µs slices is the one check here that a burst of other work on the
/// machine can spoil (a CI run failed it once, its reason lost): a spoiled window is measured
/// again, once, and both windows' numbers are printed. A scheduler with the pathology fails both.
#[test]
#[ignore = "tier 2: root"]
fn root_elevate_dedicated_10us_slices_land_and_stay_short() {
    if !can_run() {
        return;
    }
    let dir = scratch();
    let first = ten_us_window(dir.path());
    if let Err(why) = first {
        eprintln!("10 µs dedicated, first window: {why}; measuring a second window");
        std::thread::sleep(Duration::from_millis(300));
        if let Err(again) = ten_us_window(dir.path()) {
            panic!("10 µs dedicated, both windows failed: first: {why}; second: {again}");
        }
    }
}

/// One 0.7 s window of 10 µs dedicated slices on two targets: Err says which bound it broke.
fn ten_us_window(dir: &Path) -> Result<(), String> {
    let (v, rs, _) = two_targets(dir, "dedicated", 10);
    let (lens, _) = run_and_gap_us(&rs);
    if lens.is_empty() {
        return Err(format!("the targets recorded no run in the window: {}", v["run"]));
    }
    let m = median(&lens);
    let switches = v["run"]["switches"].as_f64().unwrap();
    let unlanded = v["run"]["unlanded"].as_f64().unwrap();
    let landing = v["run"]["landing_us_median"].as_f64();
    let seen = format!("{} runs, median {m:.1} µs, landing {landing:?} µs, {unlanded} of {switches} switches unlanded, run {}", lens.len(), v["run"]);
    eprintln!("10 µs dedicated: {seen}");
    if m < 8.0 {
        return Err(format!("median run {m:.1} µs: under 0.8× the 10 µs slice ({seen})"));
    }
    if m >= 60.0 {
        return Err(format!("median run {m:.1} µs: switches were lost, the pathology ran 300–1,300 µs ({seen})"));
    }
    if !landing.is_some_and(|l| l > 0.0) {
        return Err(format!("no landing measured ({seen})"));
    }
    if unlanded >= switches / 10.0 {
        return Err(format!("{unlanded} of {switches} switches never seen to land ({seen})"));
    }
    Ok(())
}

#[test]
#[ignore = "tier 2: root"]
fn root_elevate_table_order_is_obeyed() {
    if !can_run() {
        return;
    }
    let dir = scratch();
    let t: Vec<_> = ["a", "b", "c"].iter().map(|n| target(dir.path(), n, 1.2)).collect();
    let map = format!("A={},B={},C={}", t[0].0.id(), t[1].0.id(), t[2].0.id());
    let v = elevate(
        dir.path(),
        &["--cpu", "0", "--pattern", "dedicated", "--slice-us", "1000", "--table", "A,B,A,C", "--map", &map, "--duration-s", "0.7"].map(String::from),
    );
    let recs: Vec<Record> = t.into_iter().map(finish).collect();
    let (from, to) = window(&v);
    let seq: Vec<usize> = runs(&recs, from, to).iter().map(|r| r.who).collect();
    assert!(seq.len() > 300, "{} runs", seq.len());
    // Every other run is A, and the others alternate B, C.
    let pairs = seq.windows(2).count();
    let a_every_other = seq.windows(2).filter(|w| (w[0] == 0) != (w[1] == 0)).count();
    let others: Vec<usize> = seq.iter().copied().filter(|&w| w != 0).collect();
    let bc_alternate = others.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(a_every_other as f64 > 0.9 * pairs as f64, "A in every other slot only {a_every_other} of {pairs}: {:?}", &seq[..40.min(seq.len())]);
    assert!(
        bc_alternate as f64 > 0.9 * (others.len() - 1) as f64,
        "B/C alternate only {bc_alternate} of {}: {:?}",
        others.len() - 1,
        &seq[..40.min(seq.len())]
    );
}

/// Sends one request for `service_us` of work; returns the stream to read the answer from.
fn send(addr: std::net::SocketAddr, id: u64, service_us: u64) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let mut req = [0u8; REQ_BYTES];
    req[..8].copy_from_slice(&id.to_le_bytes());
    req[8..].copy_from_slice(&(service_us * 1000).to_le_bytes());
    s.write_all(&req).unwrap();
    s
}

/// Time until the answer on `s`, from `t0`.
fn answered(mut s: TcpStream, t0: Instant) -> Duration {
    let mut b = [0u8; RESP_BYTES];
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.read_exact(&mut b).unwrap();
    t0.elapsed()
}

/// A 300 ms request, then a 10 µs one 5 ms later: (long, short) latencies. The client runs on
/// CPU 1, away from the server's CPU 0: there the RT server leaves a SCHED_OTHER client only
/// what the kernel's fair server lends it (50 ms a second), so a client that happened to sit on
/// CPU 0 measured its own wait, up to the whole long request (seen: 234 and 301 ms).
fn long_then_short(threshold: Option<Duration>) -> (Duration, Duration) {
    use joule_core::effects::{RealEffects, Sched};
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let before = RealEffects.get_affinity(me).unwrap();
    RealEffects.set_affinity(me, &[1]).unwrap();
    let r = long_then_short_on_cpu1(threshold);
    RealEffects.set_affinity(me, &before).unwrap();
    r
}

fn long_then_short_on_cpu1(threshold: Option<Duration>) -> (Duration, Duration) {
    let srv = Server::preemptive(0, 4, threshold).unwrap();
    let t_long = Instant::now();
    let long = send(srv.addr, 1, 300_000);
    std::thread::sleep(Duration::from_millis(5));
    let t_short = Instant::now();
    let short = send(srv.addr, 2, 10);
    let s = answered(short, t_short);
    let l = answered(long, t_long);
    let stats = srv.stop().unwrap();
    eprintln!("long_then_short({threshold:?}): long {l:?}, short {s:?}, {stats:?}");
    (l, s)
}

#[test]
#[ignore = "tier 2: root"]
fn root_elevate_preemption_bounds_a_long_request() {
    if !can_run() {
        return;
    }
    let (long, short) = long_then_short(Some(Duration::from_micros(50)));
    // All its work was done: not cut short by the switch (a dropped request answers in µs).
    // The work is calibrated iterations, and this VM's speed drifts by a few % between the
    // calibration and the request (294.6 ms seen for 300 ms), hence 0.9×.
    assert!(long >= Duration::from_millis(270), "the long request took only {long:?}");
    // Switched out on arrival (it is past the threshold) and served at once: ~0.1 ms here.
    assert!(short < Duration::from_millis(5), "with preemption the short request behind a 300 ms one took {short:?}");
    // And the long one finishes in the background without a resume step stretching it.
    assert!(long < Duration::from_millis(400), "the switched-out long request took {long:?}");
    std::thread::sleep(Duration::from_millis(300));
    // The same server without a threshold: the short one waits for the long one (so the bound
    // above is the preemption's doing).
    let (_, short_np) = long_then_short(None);
    assert!(short_np > Duration::from_millis(200), "without preemption the short request took only {short_np:?}");
}

/// Policy (field 41) of every thread of `pid`, with its affinity.
fn threads_state(pid: u32) -> Vec<(i32, u32, Vec<usize>)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: i32 = e.unwrap().file_name().to_str().unwrap().parse().unwrap();
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) else { continue };
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after.split(' ').collect();
        let policy: u32 = f[41 - 3].parse().unwrap();
        let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid)).unwrap();
        let cpus = (0..nix::sched::CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect();
        v.push((tid, policy, cpus));
    }
    v
}

fn wait_for(what: &str, secs: f64, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `joule elevate` on two busy targets and waits until they are SCHED_FIFO.
fn scheduled(dir: &Path) -> (Child, [(Child, PathBuf); 2], Vec<usize>) {
    let t = [target(dir, "a", 3.0), target(dir, "b", 3.0)];
    let orig = threads_state(t[0].0.id())[0].2.clone();
    let pids = format!("{},{}", t[0].0.id(), t[1].0.id());
    let el = Command::new(JOULE)
        .args(["elevate", "--json", "--cpu", "0", "--slice-us", "200", "--duration-s", "0.6", "--pids", &pids, "--journal-dir"])
        .arg(dir)
        .spawn()
        .unwrap();
    let (a, b) = (t[0].0.id(), t[1].0.id());
    wait_for("the targets at SCHED_FIFO", 2.0, || [a, b].iter().all(|&p| threads_state(p).iter().all(|s| s.1 == 1)));
    (el, t, orig)
}

fn assert_restored(pids: &[u32], orig: &[usize], when: &str) {
    for &p in pids {
        for (tid, policy, cpus) in threads_state(p) {
            assert_eq!(policy, 0, "{when}: thread {tid} of {p} still has policy {policy}");
            assert_eq!(cpus, orig, "{when}: thread {tid} of {p} has affinity {cpus:?}, was {orig:?}");
        }
    }
}

fn restore(dir: &Path) {
    let out = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(dir).output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
#[ignore = "tier 2: root"]
fn root_elevate_sigkilled_scheduler_leaves_no_rt_thread_or_changed_affinity() {
    if !can_run() {
        return;
    }
    let dir = scratch();
    // 1. The guardian puts them back.
    let (mut el, t, orig) = scheduled(dir.path());
    let pids = [t[0].0.id(), t[1].0.id()];
    el.kill().unwrap();
    el.wait().unwrap();
    wait_for("the guardian's restore", 2.0, || pids.iter().all(|&p| threads_state(p).iter().all(|s| s.1 == 0)));
    assert_restored(&pids, &orig, "after SIGKILL (guardian)");
    restore(dir.path());
    assert_restored(&pids, &orig, "after SIGKILL and joule restore");
    let _ = t.map(finish);
    std::thread::sleep(Duration::from_millis(300));

    // 2. Guardian killed first, then the scheduler: the journal alone puts them back.
    let (mut el, t, orig) = scheduled(dir.path());
    let pids = [t[0].0.id(), t[1].0.id()];
    let guardian = std::fs::read_to_string(format!("/proc/{}/task/{}/children", el.id(), el.id())).unwrap();
    let gpid: i32 = guardian
        .split_whitespace()
        .find(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "joule-guardian"))
        .expect("a guardian child")
        .parse()
        .unwrap();
    // SAFETY: SIGKILL to the guardian process this test's child started.
    unsafe { libc::kill(gpid, libc::SIGKILL) };
    el.kill().unwrap();
    el.wait().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        pids.iter().any(|&p| threads_state(p).iter().any(|s| s.1 == 1)),
        "the targets were restored without the guardian: the journal path is not exercised"
    );
    restore(dir.path());
    assert_restored(&pids, &orig, "after SIGKILL of guardian and scheduler, then joule restore");
    let _ = t.map(finish);
}

#[test]
#[ignore = "tier 2: root"]
fn root_elevate_refuses_kernel_threads_naming_the_pid() {
    if !require(is_root(), "root") {
        return;
    }
    let dir = scratch();
    let out = Command::new(JOULE).args(["elevate", "--pids", "2", "--duration-s", "0.1", "--journal-dir"]).arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pid 2") && err.contains("kernel thread"), "{err}");
}

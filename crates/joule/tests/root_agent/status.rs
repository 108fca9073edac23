//! Tier 2 (root): `joule status` answers from a running agent over its socket (issue 38): the
//! budget with its source, the stage, the plan's reasons for a capped best-effort class, the
//! class table, the agent's own cost; `--json` carries the same; once the agent stopped it
//! exits 3 and says no agent answers, and the socket is gone.

use super::{Agent, JOULE};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
#[ignore = "tier 2: root"]
fn root_status_answers_from_the_running_agent_and_exits_3_once_it_stopped() {
    if !super::require(super::is_root(), "root (the agent loads eBPF; its socket is root's)") {
        return;
    }
    let mut sleeper = super::KillOnDrop(Command::new("sleep").arg("60").spawn().unwrap());
    let cfg = format!(
        "[thermal]\nstage_thresholds_celsius = [10.0, 15.0, 20.0]\nact_on_model = true\n\n[[class]]\nname = \"jst\"\nthermal = \"best_effort\"\nmatch = {{ pid = [{}] }}\n",
        sleeper.0.id()
    );
    let mut agent = Agent::start(&cfg);
    agent.wait_event(0, "thermal_actions");
    let journal = agent.journal_dir();
    let status = |json: bool| {
        let mut c = Command::new(JOULE);
        c.args(["status", "--journal-dir"]).arg(&journal);
        if json {
            c.arg("--json");
        }
        c.output().unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let out = status(false);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() && text.contains("stage 3") && text.contains("cap class") {
            break text;
        }
        assert!(Instant::now() < deadline, "status never showed stage 3 and the cap: {}\n{text}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("{text}");
    for want in [
        "joule agent pid",
        "(model; no CPU temperature sensor)",
        "stages from 10.0 °C to 20.0 °C (set by [thermal] stage_thresholds_celsius)",
        "stage 3 (computed by ebpf, driven by temperature)",
        "best-effort classes get 15% of the machine",
        "jst",
        "15%",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    let out = status(true);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["stage"]["value"], 3, "{v}");
    assert_eq!(v["budget"]["temp_source"], "model", "{v}");
    assert_eq!(v["classes"][0]["class"], "jst", "{v}");
    assert_eq!(v["classes"][0]["cap_ratio"], 0.15, "{v}");
    assert!(v["agent"]["cpu_pct"].as_f64().is_some_and(|c| c > 0.0), "{v}");

    // SIGTERM: the agent undoes its changes and removes its socket.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.child.id() as i32), nix::sys::signal::SIGTERM).unwrap();
    let _ = agent.child.wait();
    let out = status(false);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no joule agent answers"));
    assert!(!journal.join("agent.sock").exists(), "the stopped agent left its socket");
    let _ = sleeper.0.kill();
}

/// A tmux session, killed when dropped.
struct Tmux(String);

impl Tmux {
    fn start(name: &str, cmd: &str) -> Tmux {
        let ok = Command::new("tmux").args(["new-session", "-d", "-s", name, "-x", "160", "-y", "45", cmd]).status().unwrap();
        assert!(ok.success(), "tmux new-session");
        Tmux(name.into())
    }
    fn screen(&self) -> String {
        String::from_utf8_lossy(&Command::new("tmux").args(["capture-pane", "-p", "-t", &self.0]).output().unwrap().stdout).into_owned()
    }
    fn keys(&self, k: &str) {
        Command::new("tmux").args(["send-keys", "-t", &self.0, k]).status().unwrap();
    }
    /// Waits until the screen shows every one of `want`.
    fn wait_for(&self, want: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.screen();
            if want.iter().all(|w| s.contains(w)) {
                return s;
            }
            assert!(Instant::now() < deadline, "the screen never showed {want:?}:\n{s}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.0]).status();
    }
}

/// `joule monitor` in a real terminal (tmux): the dashboard of the running agent — header with
/// the stage, the temperature against its limit with its source, power — a panel per mechanism
/// that acts, and `m` switches to the full metric list; with no agent it samples itself and
/// says so.
#[test]
#[ignore = "tier 2: root"]
fn root_monitor_dashboard_in_tmux_reads_the_agent_and_its_keys_work() {
    if !super::require(super::is_root(), "root (the agent and its socket)") {
        return;
    }
    if !super::require(Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success()), "tmux (a real terminal for the dashboard)") {
        return;
    }
    let sleeper = super::KillOnDrop(Command::new("sleep").arg("60").spawn().unwrap());
    let cfg = format!(
        "[thermal]\nstage_thresholds_celsius = [10.0, 15.0, 20.0]\nact_on_model = true\n\n[[class]]\nname = \"jmon\"\nthermal = \"best_effort\"\nmatch = {{ pid = [{}] }}\n",
        sleeper.0.id()
    );
    let agent = Agent::start(&cfg);
    agent.wait_event(0, "thermal_actions");
    let dir = agent.journal_dir();
    let name = format!("joule-test-{}", std::process::id());
    let t = Tmux::start(&name, &format!("{JOULE} monitor --interval-ms 300 --journal-dir {}", dir.display()));
    let screen = t.wait_for(&[
        "source: the running agent",
        "stage 3 (by ebpf",
        "temperature",
        "(model",
        "acts from 10.0 °C",
        "limit 25.0 °C (past hottest stage)",
        "power",
        " thermal ",
        " classes ",
        "best-effort 15%",
    ]);
    eprintln!("{screen}");
    t.keys("c");
    t.wait_for(&[" classes ", "jmon", "best effort (capped when hot)"]);
    t.keys("m");
    t.wait_for(&[" all metrics ", "°C"]);
    t.keys("q");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Command::new("tmux").args(["has-session", "-t", &name]).output().unwrap().status.success() {
        assert!(Instant::now() < deadline, "q did not end the monitor");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(agent);
    let t = Tmux::start(&name, &format!("{JOULE} monitor --no-bpf --interval-ms 300 --journal-dir {}", dir.display()));
    t.wait_for(&["source: this monitor's own sampling: no agent answers", "decisions need one"]);
    drop(sleeper);
}

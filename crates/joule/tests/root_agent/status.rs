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
        "(model, no sensor: the model)",
        "stages from 10.0 °C to 20.0 °C (config)",
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

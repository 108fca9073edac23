//! A test helper of joule-qos's root tier, not a tool: `root_sigkill_after_apply_then_restore_
//! leaves_nothing` starts it to apply two classes into a journal, then SIGKILLs it, so the test
//! can check that the journal alone undoes everything. (It was a `#[test]` that only did
//! something when an environment variable was set: a helper posing as a test.)
//!
//!   joule-qos-test-helper JOURNAL_DIR PID GROUP [deadline]
//!
//! Applies `main` (RT 200 ms per second, holding PID) and `apps` (CFS 20 %, CPU 0) under the
//! top group GROUP, writes JOURNAL_DIR/ready and sleeps until it is killed (at most 10 min).
//! With `deadline`, `main` runs on every CPU through the deadline backend: PID's threads get
//! SCHED_DEADLINE reservations.

use joule_core::config::{ClassConfig, MatchRules};
use joule_core::effects::RealEffects;
use joule_core::journal::Journal;
use joule_qos::{QosController, QosOpts};
use std::path::Path;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, pid, group, deadline) = match args.as_slice() {
        [dir, pid, group] => (dir, pid, group, false),
        [dir, pid, group, mode] if mode == "deadline" => (dir, pid, group, true),
        _ => anyhow::bail!("usage: joule-qos-test-helper JOURNAL_DIR PID GROUP [deadline] (a test helper of joule-qos's root tier)"),
    };
    let pid: i32 = pid.parse()?;
    let class = |name: &str, pid: i32| ClassConfig {
        name: name.into(),
        matches: MatchRules { pid: vec![pid], ..Default::default() },
        cpus: Some("1".into()),
        ..Default::default()
    };
    let main = ClassConfig { rt_runtime_us: Some(200_000), ..class("main", pid) };
    let classes = vec![
        if deadline { ClassConfig { cpus: None, ..main } } else { main },
        ClassConfig { quota_us: Some(20_000), cpus: Some("0".into()), ..class("apps", -1) },
    ];
    let rt_backend = deadline.then_some(joule_qos::RtBackend::Deadline);
    let opts = QosOpts { group_name: group.clone(), owner: "qos-test".into(), rt_backend, ..Default::default() };
    let mut c = QosController::new(&classes, opts)?;
    let j = Journal::open(Path::new(dir))?;
    c.apply(&j, &RealEffects)?;
    std::fs::write(Path::new(dir).join("ready"), "")?;
    std::thread::sleep(std::time::Duration::from_secs(600));
    Ok(())
}

//! SIGKILL an agent the way a test of the journal needs it: its guardian first (found by its
//! `comm` among the agent's children), so nothing replays the journal but the test's own
//! `joule restore` or the next start.

use std::process::Child;

/// The pids of `pid`'s children whose `comm` is `joule-guardian`.
pub fn guardians_of(pid: u32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse::<i32>().ok()).collect::<Vec<_>>())
        .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "joule-guardian"))
        .collect()
}

/// SIGKILLs the agent's guardian, then the agent, and reaps both. Panics when the agent has
/// no guardian: a journal test must know that nothing else replays.
pub fn sigkill_agent_and_guardian(agent: &mut Child) {
    let id = agent.id();
    assert!(kill_agent(agent) > 0, "agent {id} has no joule-guardian child");
}

/// A harness's teardown: SIGKILLs the agent's guardian (if it still has one), then the agent,
/// reaps both, and returns how many guardians it killed. The harness then runs its own
/// `joule restore`, synchronously: a guardian left to replay on its own would race with the
/// next test's agent.
pub fn kill_agent(agent: &mut Child) -> usize {
    let guardians = guardians_of(agent.id());
    for g in &guardians {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*g), nix::sys::signal::SIGKILL);
    }
    let _ = agent.kill();
    let _ = agent.wait();
    for g in &guardians {
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(*g), None); // reparented: may not be ours
        while std::path::Path::new(&format!("/proc/{g}/stat")).exists() && proc_state(*g) != Some('Z') {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    guardians.len()
}

fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')').next()?.split_whitespace().next()?.chars().next()
}

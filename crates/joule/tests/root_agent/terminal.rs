//! Tier 2 (root): what reaches root's terminal, written as the attempts of an unprivileged user
//! (uid 64001, no account made). Threads the user named with escape sequences — the window
//! title (`ESC ] 2 ; … BEL`), the clipboard (OSC 52), a C1 OSC … ST — held by a class of a
//! running agent and waiting for a CPU are printed escaped by `joule monitor --once` (text and
//! JSON) and `joule status`; a fake agent socket, in a journal directory the user owns or in
//! root's directory but served by a process of the user's, is refused by `joule status` and
//! `joule monitor` with an error naming what was refused, and nothing it says is shown.

use super::untrusted::{shared_dir, USER};
use super::{is_root, require, Agent, JOULE};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";

/// A process group the test started (a parent and its forks), killed whole when dropped.
struct Group(Child);

impl Group {
    fn spawn(cmd: &mut Command) -> Group {
        Group(cmd.process_group(0).stdin(Stdio::null()).spawn().unwrap())
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.0.id() as i32), nix::sys::signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// The control characters in `text` other than newlines: what must never reach the terminal.
fn controls(text: &str) -> Vec<char> {
    text.chars().filter(|c| c.is_control() && *c != '\n').collect()
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// Three processes of the user, each with a thread named with an escape sequence that spins
/// on CPU 0 beside the others, so each waits for a CPU most of the time: the longest waiters
/// of the machine, in the agent's `task_wait` and the monitor's.
const SPINNERS: &str = r"
import os, threading, time
NAMES = [b'\x1b]2;jx-title\x07', b'\x1b]52;c;SGk=\x07', b'\xc2\x9d0;jx-c1\xc2\x9c']
def spin(name):
    with open('/proc/self/task/%d/comm' % threading.get_native_id(), 'wb') as f:
        f.write(name)
    while True:
        pass
for n in NAMES:
    if os.fork() == 0:
        os.sched_setaffinity(0, {0})
        threading.Thread(target=spin, args=(n,), daemon=True).start()
        while True:
            time.sleep(1)
time.sleep(120)
";

/// What each name looks like escaped, and a part of it that shows it was printed at all.
const SHOWN: [(&str, &str); 3] = [("\\x1b]2;jx-title\\x07", "jx-title"), ("\\x1b]52;c;SGk=\\x07", "52;c;SGk="), ("\\u{9d}0;jx-c1\\u{9c}", "jx-c1")];

/// Runs `cmd` until its output shows every name in some form (raw or escaped), at most 30 s.
fn until_all_names_show(what: &str, mut cmd: impl FnMut() -> Output) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cmd();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && SHOWN.iter().all(|(_, part)| text.contains(part)) {
            return text;
        }
        assert!(Instant::now() < deadline, "{what} never showed the user's threads: {}\n{text}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn assert_escaped(what: &str, text: &str) {
    let raw = controls(text);
    assert!(raw.is_empty(), "{what} wrote control characters {raw:?} to the terminal:\n{}", text.escape_debug());
    for (escaped, _) in SHOWN {
        assert!(text.contains(escaped), "{what}: {escaped:?} not in:\n{text}");
    }
}

#[test]
#[ignore = "tier 2: root"]
fn root_terminal_thread_names_with_escape_sequences_are_printed_escaped_by_monitor_and_status() {
    if !require(is_root(), "root (the agent, and monitor's eBPF)") || !require(Path::new(PYTHON).exists(), "python3") {
        return;
    }
    let t0 = Instant::now();
    let agent = Agent::start(&format!("[[class]]\nname = \"jterm\"\nmatch = {{ uid = [{USER}] }}\n"));
    agent.wait_event(0, "listening");
    let users = Group::spawn(super::untrusted::as_user(Command::new(PYTHON).args(["-c", SPINNERS])));

    let text = until_all_names_show("joule monitor --once", || run(Command::new(JOULE).args(["monitor", "--once", "--interval-ms", "500"])));
    assert_escaped("joule monitor --once", &text);
    let json = until_all_names_show("joule monitor --once --json", || run(Command::new(JOULE).args(["monitor", "--once", "--json", "--interval-ms", "500"])));
    let raw = controls(&json);
    assert!(raw.is_empty(), "the JSON carried control characters {raw:?} raw:\n{}", json.escape_debug());
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = v["task_wait"].as_array().unwrap().iter().filter_map(|t| t["comm"].as_str()).collect();
    assert!(names.contains(&"\u{9d}0;jx-c1\u{9c}"), "the JSON keeps the name as the kernel has it: {names:?}");

    let journal = agent.journal_dir();
    let status = || run(Command::new(JOULE).args(["status", "--journal-dir"]).arg(&journal));
    let text = until_all_names_show("joule status", status);
    assert_escaped("joule status", &text);
    let out = run(Command::new(JOULE).args(["status", "--json", "--journal-dir"]).arg(&journal));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let class = v["classes"].as_array().unwrap().iter().find(|c| c["class"] == "jterm").cloned().unwrap_or_default();
    assert!(class["processes"].as_u64().unwrap_or(0) >= 4, "the class holds the user's parent and its three forks: {class}");
    drop(users);
    println!("took {:?}", t0.elapsed());
}

/// A fake agent: binds `socket`, then (with `drop`) becomes uid 64001 before it listens, so
/// its `SO_PEERCRED` is the user's; every connection gets a view that would print `FAKE`.
const FAKE_AGENT: &str = r#"
import json, os, socket, sys
path, drop, user = sys.argv[1], sys.argv[2] == 'drop', int(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
if drop:
    os.setgroups([]); os.setresgid(user, user, user); os.setresuid(user, user, user)
s.listen(16)
view = json.dumps({"budget": {"pid": 4242, "classes": []}, "snapshot": {"stage": {"value": 0}},
                   "plan": {"decisions": [{"policy": "thermal", "want": {"kind": "nap"}, "reason": "FAKE-VIEW"}]},
                   "actuators": [], "agent": {}}).encode()
while True:
    c, _ = s.accept()
    try:
        c.sendall(view)
    except OSError:
        pass  # a client that refused us hung up first
    c.close()
"#;

/// Waits until the fake at `dir` answers (root reads it: it does answer, with its view).
fn wait_answers(dir: &Path) {
    use std::io::Read;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = std::os::unix::net::UnixStream::connect(dir.join("agent.sock")) {
            let mut body = String::new();
            let _ = s.read_to_string(&mut body);
            assert!(body.contains("FAKE-VIEW"), "{body}");
            return;
        }
        assert!(Instant::now() < deadline, "the fake agent never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `joule status` (text and JSON) and `joule monitor` (in a terminal: `script`) against the
/// fake at `dir`: each fails (exit 1: neither a view nor "no agent"), prints nothing of the
/// fake's, and says what it refused (`want` in its error).
fn assert_refused(dir: &Path, want: &[&str]) {
    for json in [false, true] {
        let mut c = Command::new(JOULE);
        c.args(["status", "--journal-dir"]).arg(dir);
        if json {
            c.arg("--json");
        }
        let t0 = Instant::now();
        let out = run(&mut c);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        println!("joule status{} took {:?}: {}", if json { " --json" } else { "" }, t0.elapsed(), stderr.trim());
        assert!(!stdout.contains("FAKE-VIEW") && !stdout.contains("4242"), "joule status showed the fake agent's view:\n{stdout}");
        assert_eq!(out.status.code(), Some(1), "exit 1, a refusal, not a view (0) or no agent (3): {stderr}");
        for w in want {
            assert!(stderr.contains(w), "{w:?} not in the error: {stderr}");
        }
    }
    let monitor = format!("{JOULE} monitor --no-bpf --interval-ms 200 --journal-dir {}", dir.display());
    let out = run(Command::new("timeout").args(["10", "script", "-qec", &monitor, "/dev/null"]));
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(!screen.contains("FAKE-VIEW"), "joule monitor showed the fake agent's view:\n{screen}");
    for w in want {
        assert!(screen.contains(w), "{w:?} not in joule monitor's error: {screen}");
    }
}

#[test]
#[ignore = "tier 2: root"]
fn root_terminal_a_status_client_refuses_a_socket_another_uid_serves() {
    if !require(is_root(), "root")
        || !require(Path::new(PYTHON).exists(), "python3")
        || !require(Path::new("/usr/bin/script").exists(), "script (a terminal for the monitor)")
    {
        return;
    }
    let t0 = Instant::now();
    // A journal directory the user made, mode 0700 as the agent's own, served by the user.
    let parent = shared_dir();
    let users_dir = parent.path().join("journal");
    std::fs::create_dir(&users_dir).unwrap();
    std::fs::set_permissions(&users_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::chown(&users_dir, Some(nix::unistd::Uid::from_raw(USER)), Some(nix::unistd::Gid::from_raw(USER))).unwrap();
    let sock = users_dir.join("agent.sock");
    let fake = Group::spawn(super::untrusted::as_user(Command::new(PYTHON).args(["-c", FAKE_AGENT]).arg(&sock).args(["stay", &USER.to_string()])));
    wait_answers(&users_dir);
    assert_refused(&users_dir, &[&format!("refusing {}", users_dir.display()), &format!("owned by uid {USER}")]);
    drop(fake);

    // Root's own 0700 directory and a socket of root's, but the process listening on it runs
    // as the user: only its credentials tell.
    let roots_dir = tempfile::tempdir().unwrap();
    let sock = roots_dir.path().join("agent.sock");
    let fake = Group::spawn(Command::new(PYTHON).args(["-c", FAKE_AGENT]).arg(&sock).args(["drop", &USER.to_string()]));
    wait_answers(roots_dir.path());
    let pid = fake.0.id();
    assert_refused(roots_dir.path(), &[&format!("refusing {}", sock.display()), &format!("(pid {pid}) runs as uid {USER}, not as root")]);
    drop(fake);
    println!("took {:?}", t0.elapsed());
}

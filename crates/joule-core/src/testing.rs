//! Test-tier helpers shared by every crate. Tier-2 (root) tests are `#[ignore]`d tests whose
//! names start with `root_`, tier-3 (VM) tests start with `vm_`; `make test` runs them with
//! `--ignored root_` / `--ignored vm_`. A test skips only when a capability is truly absent,
//! and says which; with `JOULE_TEST_STRICT=1` (set by `.ci/run` on this machine) a skip is a
//! failure instead, so CI cannot go green by skipping. Outside CI every skip is also appended
//! to `$JOULE_SKIP_LOG`, which `scripts/test-tier.sh` counts in its summary.
//!
//! The test harnesses themselves (the VM tier's, a bpffs of a test's own) live in the
//! dev-only crate `joule-testkit`; `require` and `is_root` stay here because production code
//! asks `is_root` too.

/// Returns true when `present`; otherwise reports the missing capability and returns false
/// (or panics under `JOULE_TEST_STRICT=1`). Use as `if !require(cond, "what") { return; }`.
pub fn require(present: bool, capability: &str) -> bool {
    if present {
        return true;
    }
    if std::env::var("JOULE_TEST_STRICT").as_deref() == Ok("1") {
        panic!("capability absent: {capability} (JOULE_TEST_STRICT=1 forbids skipping)");
    }
    eprintln!("SKIP: capability absent: {capability}");
    // The test runner captures stderr of passing tests, so `make test` counts skips from here.
    if let Some(log) = std::env::var_os("JOULE_SKIP_LOG") {
        use std::io::Write;
        let test = std::thread::current().name().unwrap_or("?").to_string();
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
            let _ = writeln!(f, "{test}: {capability}");
        }
    }
    false
}

/// True when running with root's effective uid (CAP_SYS_ADMIN and friends on this machine).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Panics when the /proc parsers lose, invent or choke on anything in `data` (the fuzz target
/// `procfs` and the unit tier's replay of its corpus share it): any bytes as a whole stat,
/// status or cgroup file parse without a panic, and `data` as a task's name (any bytes, as
/// `prctl(PR_SET_NAME)` and the kernel's longer kernel-thread names allow) or a cgroup's path
/// comes back byte for byte, hiding neither the fields after it nor the task's uid. A class's
/// comm rule spelling the name's lossy text takes it only when that is its name.
pub fn procfs_round_trips(data: &[u8]) {
    use crate::procfs::{Stat, Status, TaskCgroups};
    let _ = Stat::parse(data);
    let st = Status::parse(data);
    let _ = (st.uids(), st.tgid(), st.get("Name"));
    let cg = TaskCgroups::parse(data);
    let _ = (cg.paths().count(), cg.raw_paths().count(), cg.dir_in(std::path::Path::new("/m"), None));

    // The kernel prints comm as it is in stat (at most 64 bytes, never a NUL).
    let name: Vec<u8> = data.iter().copied().filter(|b| *b != 0).take(64).collect();
    let line = [&b"4242 ("[..], &name, b") S 77 4242 4242 0 -1 4194304 0 0 0 0 1 2 0 0 20 0 1 0 159172 0\n"].concat();
    let s = Stat::parse(&line).expect("a stat line with any name parses");
    assert_eq!((s.pid, s.comm.as_bytes(), s.ppid, s.start_time_ticks), (4242, &name[..], 77, Some(159172)));
    assert_eq!(s.comm.as_str().is_some(), std::str::from_utf8(&name).is_ok());
    assert!(!s.comm.to_string().chars().any(char::is_control), "Display let a control character through");

    // status escapes a newline in Name; nothing the name holds reaches the Uid line.
    let one_line: Vec<u8> = name.iter().copied().filter(|b| *b != b'\n').collect();
    let status = [&b"Name:\t"[..], &one_line, b"\nTgid:\t4242\nUid:\t64001\t64002\t64003\t64004\n"].concat();
    let st = Status::parse(status);
    assert_eq!(st.uids().map(|u| (u.real, u.fs)), Some((64001, 64004)));
    assert_eq!(st.tgid(), Some(4242));

    // A cgroup path is everything after the second colon, colons included, up to the line's end.
    let path = [&b"/"[..], &one_line].concat();
    let cg = TaskCgroups::parse(&[&b"1:cpu,cpuacct:"[..], &path, b"\n0::/x\n"].concat());
    assert_eq!(cg.raw_path(Some(crate::cgroupfs::Controller::Cpu)), Some(&path[..]));
    assert_eq!(cg.raw_path(None), Some(&b"/x"[..]));
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Component, Path};
    let dir = cg.dir_in(Path::new("/m"), Some(crate::cgroupfs::Controller::Cpu));
    let below = Path::new(std::ffi::OsStr::from_bytes(&path)).components().filter(|c| !matches!(c, Component::RootDir));
    assert!(dir.components().eq(Path::new("/m").components().chain(below)), "{dir:?} is not {path:?} under /m");

    // Matching: by uid always; by a comm rule only when the rule is the name, byte for byte.
    let lossy = String::from_utf8_lossy(&name).into_owned();
    let rules = crate::config::MatchRules { comm: vec![lossy.clone()], ..Default::default() };
    let by_uid = crate::config::MatchRules { uid: vec![64001], ..Default::default() };
    let pods = crate::config::PodIndex::new();
    assert_eq!(rules.matches(4242, s.comm.as_bytes(), None, Some(64001), cg.raw_paths(), &pods), lossy.as_bytes() == &name[..]);
    assert!(by_uid.matches(4242, s.comm.as_bytes(), None, Some(64001), cg.raw_paths(), &pods));
}

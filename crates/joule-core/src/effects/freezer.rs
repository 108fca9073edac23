//! Freezer: stopping and resuming every task of a cgroup at once, in cgroup v1
//! (`freezer.state`: THAWED, FREEZING, FROZEN) and v2 (`cgroup.freeze` to ask, the `frozen`
//! line of `cgroup.events` to see it done). Built on [`Files`] alone, so its fake is the file
//! fake; what it adds is the policy: wait, bounded, for the kernel to settle, and never leave a
//! cgroup half-frozen.

use super::Files;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the kernel reports about a cgroup's freezer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreezeState {
    Thawed,
    /// Asked to freeze; some tasks have not stopped yet (v1 `FREEZING`, v2 `cgroup.freeze` 1
    /// while `cgroup.events` still says `frozen 0`).
    Freezing,
    Frozen,
}

/// How long a freeze or thaw may take to settle by default. A freeze waits for every task to
/// reach the freezer; one in uninterruptible sleep (D state, a hung NFS read) can hold it
/// off indefinitely, which is why the wait is bounded.
pub const FREEZE_SETTLE: Duration = Duration::from_secs(1);

/// Longest pause between two looks at the state while waiting.
const POLL_MAX: Duration = Duration::from_millis(50);

pub trait Freezer {
    fn freezer_state(&self, cgroup: &Path) -> io::Result<FreezeState>;
    /// Freezes every task of `cgroup` (and of its descendants) and waits up to `settle` until
    /// the kernel says they all stopped. When they do not, thaws the cgroup again and fails
    /// with `TimedOut`: a cgroup is never left freezing.
    fn freeze(&self, cgroup: &Path, settle: Duration) -> io::Result<()>;
    /// Thaws `cgroup` and waits up to `settle` until it is thawed; fails with `TimedOut` when
    /// it stays frozen (a frozen ancestor keeps it so).
    fn thaw(&self, cgroup: &Path, settle: Duration) -> io::Result<()>;
}

#[derive(Clone, Copy)]
enum Version {
    V1,
    V2,
}

impl Version {
    fn of<F: Files + ?Sized>(fx: &F, cgroup: &Path) -> io::Result<Version> {
        if fx.exists(&cgroup.join("cgroup.freeze")) {
            Ok(Version::V2)
        } else if fx.exists(&cgroup.join("freezer.state")) {
            Ok(Version::V1)
        } else if !fx.exists(cgroup) {
            Err(io::Error::new(io::ErrorKind::NotFound, format!("cgroup {} not found", cgroup.display())))
        } else {
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{} has neither cgroup.freeze (cgroup v2, not in the root cgroup) nor freezer.state (a v1 freezer hierarchy, not its root)",
                    cgroup.display()
                ),
            ))
        }
    }
    /// The file to write and the values that ask for frozen / thawed.
    fn knob(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Version::V1 => ("freezer.state", "FROZEN", "THAWED"),
            Version::V2 => ("cgroup.freeze", "1", "0"),
        }
    }
    fn state<F: Files + ?Sized>(self, fx: &F, cgroup: &Path) -> io::Result<FreezeState> {
        let bad = |what: &str, got: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{}/{what}: unexpected {got:?}", cgroup.display()));
        match self {
            Version::V1 => match fx.read(&cgroup.join("freezer.state"))?.trim() {
                "THAWED" => Ok(FreezeState::Thawed),
                "FREEZING" => Ok(FreezeState::Freezing),
                "FROZEN" => Ok(FreezeState::Frozen),
                other => Err(bad("freezer.state", other)),
            },
            Version::V2 => {
                let events = fx.read(&cgroup.join("cgroup.events"))?;
                let frozen = events.lines().find_map(|l| l.strip_prefix("frozen ")).ok_or_else(|| bad("cgroup.events", &events))?;
                if frozen.trim() == "1" {
                    return Ok(FreezeState::Frozen);
                }
                let asked = fx.read(&cgroup.join("cgroup.freeze"))?;
                Ok(if asked.trim() == "1" { FreezeState::Freezing } else { FreezeState::Thawed })
            }
        }
    }
    /// Polls until the state is `want` or `settle` has passed; true when it got there.
    fn settles<F: Files + ?Sized>(self, fx: &F, cgroup: &Path, want: FreezeState, settle: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + settle;
        // From 100 µs: a freezer usually settles within a millisecond, and a nap's entry (and
        // a request waiting on it) should not wait for a coarse first poll.
        let mut pause = Duration::from_micros(100);
        loop {
            if self.state(fx, cgroup)? == want {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(POLL_MAX);
        }
    }
}

/// Asks for `want` (Frozen or Thawed) and waits up to `settle`; Ok(true) when it got there.
fn ask<F: Files + ?Sized>(fx: &F, cgroup: &Path, want: FreezeState, settle: Duration) -> io::Result<bool> {
    let v = Version::of(fx, cgroup)?;
    let (knob, frozen, thawed) = v.knob();
    fx.write(&cgroup.join(knob), if want == FreezeState::Frozen { frozen } else { thawed })?;
    v.settles(fx, cgroup, want, settle)
}

fn timed_out(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what)
}

impl<T: Files + ?Sized> Freezer for T {
    fn freezer_state(&self, cgroup: &Path) -> io::Result<FreezeState> {
        Version::of(self, cgroup)?.state(self, cgroup)
    }
    fn freeze(&self, cgroup: &Path, settle: Duration) -> io::Result<()> {
        if ask(self, cgroup, FreezeState::Frozen, settle)? {
            return Ok(());
        }
        let (knob, _, thawed) = Version::of(self, cgroup)?.knob();
        let undone = match self.write(&cgroup.join(knob), thawed) {
            Ok(()) => "thawed it again".to_string(),
            Err(e) => format!("thawing it again failed too: {e}"),
        };
        let ms = settle.as_millis();
        Err(timed_out(format!("{} did not freeze within {ms} ms (a task in uninterruptible sleep?); {undone}", cgroup.display())))
    }
    fn thaw(&self, cgroup: &Path, settle: Duration) -> io::Result<()> {
        if ask(self, cgroup, FreezeState::Thawed, settle)? {
            return Ok(());
        }
        let ms = settle.as_millis();
        Err(timed_out(format!("{} is still frozen {ms} ms after thawing it (is an ancestor frozen?)", cgroup.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::FakeEffects;

    const SHORT: Duration = Duration::from_millis(30);

    fn v1() -> FakeEffects {
        FakeEffects::default().with_dir("/fz/a").with_file("/fz/a/freezer.state", "THAWED\n")
    }

    fn v2() -> FakeEffects {
        FakeEffects::default().with_dir("/cg/a").with_file("/cg/a/cgroup.freeze", "0\n").with_file("/cg/a/cgroup.events", "populated 1\nfrozen 0\n")
    }

    #[test]
    fn v1_freeze_waits_through_freezing_and_thaw_is_immediate() {
        let fx = v1();
        let a = Path::new("/fz/a");
        fx.then_reads("/fz/a/freezer.state", &["FREEZING\n", "FREEZING\n"]);
        fx.freeze(a, SHORT).unwrap();
        assert!(fx.reads.lock().unwrap()[Path::new("/fz/a/freezer.state")].is_empty(), "it returned before FROZEN");
        assert_eq!(fx.freezer_state(a).unwrap(), FreezeState::Frozen);
        fx.thaw(a, SHORT).unwrap();
        assert_eq!(fx.freezer_state(a).unwrap(), FreezeState::Thawed);
        assert_eq!(fx.calls(), vec!["write /fz/a/freezer.state FROZEN", "write /fz/a/freezer.state THAWED"]);
    }

    #[test]
    fn v1_a_freeze_that_never_settles_is_thawed_again_and_times_out() {
        let fx = v1();
        fx.then_reads("/fz/a/freezer.state", &["FREEZING\n"; 10_000]);
        let started = Instant::now();
        let e = fx.freeze(Path::new("/fz/a"), SHORT).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(started.elapsed() >= SHORT && started.elapsed() < SHORT * 20, "waited {:?}", started.elapsed());
        assert!(e.to_string().contains("thawed it again"), "{e}");
        assert_eq!(fx.calls(), vec!["write /fz/a/freezer.state FROZEN", "write /fz/a/freezer.state THAWED"]);
    }

    #[test]
    fn v2_freeze_waits_for_cgroup_events_frozen() {
        let fx = v2();
        let a = Path::new("/cg/a");
        fx.then_reads("/cg/a/cgroup.events", &["populated 1\nfrozen 0\n", "populated 1\nfrozen 0\n", "populated 1\nfrozen 1\n"]);
        fx.freeze(a, SHORT).unwrap();
        assert!(fx.reads.lock().unwrap()[Path::new("/cg/a/cgroup.events")].is_empty(), "it returned before frozen 1");
        // The kernel's events file still says frozen 0 in the fake: asked but not settled.
        assert_eq!(fx.freezer_state(a).unwrap(), FreezeState::Freezing);
        fx.thaw(a, SHORT).unwrap();
        assert_eq!(fx.calls(), vec!["write /cg/a/cgroup.freeze 1", "write /cg/a/cgroup.freeze 0"]);
    }

    #[test]
    fn v2_a_thaw_held_by_a_frozen_ancestor_times_out() {
        let fx = v2().with_file("/cg/a/cgroup.events", "populated 1\nfrozen 1\n");
        let e = fx.thaw(Path::new("/cg/a"), SHORT).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("ancestor"), "{e}");
    }

    #[test]
    fn a_cgroup_without_a_freezer_says_why_and_a_missing_one_is_not_found() {
        let fx = FakeEffects::default().with_dir("/cg");
        let e = fx.freeze(Path::new("/cg"), SHORT).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("cgroup.freeze") && e.to_string().contains("freezer.state"), "{e}");
        assert_eq!(fx.thaw(Path::new("/cg/gone"), SHORT).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert!(fx.calls().is_empty());
    }
}

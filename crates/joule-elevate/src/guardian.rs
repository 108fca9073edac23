//! The guardian: a process forked before the first change that outlives the scheduler. The
//! scheduler sends it every undo record (the same [`Undo`] the journal holds) over a
//! close-on-exec pipe before it makes the change; the pipe's end-of-file is the scheduler's
//! death — however it died, SIGKILL included, since the kernel closes a dead process's files —
//! and the guardian then replays the records (newest first, pid reuse checked by start time)
//! and exits. A scheduler that ends normally restores by itself and disarms the guardian first.
//!
//! Why a forked child and not a pidfd watch or a second binary: the pipe needs no polling and
//! no extra executable, works on kernels without pidfd (< 5.3), and the child ignores the
//! terminal's SIGINT/SIGTERM/SIGHUP (its own process group) so a Ctrl-C that kills the
//! scheduler cannot take the guardian with it. Forking a multi-threaded process is safe here
//! because the child only reads a pipe, parses JSON (glibc's malloc is fork-safe) and calls
//! sched_setscheduler/sched_setaffinity/write before `_exit`.

use joule_core::effects::RealEffects;
use joule_core::journal::{self, Undo};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::FromRawFd;

const DISARM: &str = "disarm";

/// The scheduler's end of the guardian.
pub struct Guardian {
    pid: i32,
    tx: Option<File>,
}

impl Guardian {
    /// Forks the guardian. `prio`: the SCHED_FIFO priority it waits at (0: stay SCHED_OTHER),
    /// so it runs as soon as the scheduler dies even when the targets hog their core.
    pub fn spawn(prio: i32) -> io::Result<Guardian> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two fds into the array we own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fork has no preconditions; the child only runs `child_main`, then `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: the write end is ours to close in the child (else EOF never comes).
            unsafe { libc::close(fds[1]) };
            child_main(fds[0], prio);
        }
        // SAFETY: the read end is the child's; the write end is owned by the File from here.
        unsafe { libc::close(fds[0]) };
        // SAFETY: fds[1] is a fresh descriptor nobody else owns.
        Ok(Guardian { pid, tx: Some(unsafe { File::from_raw_fd(fds[1]) }) })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Tells the guardian how to undo a change the caller is about to make.
    pub fn watch(&mut self, undo: &Undo) -> io::Result<()> {
        let mut line = serde_json::to_string(undo).expect("undo records serialise");
        line.push('\n');
        self.tx.as_mut().expect("armed").write_all(line.as_bytes())
    }

    /// The scheduler restored everything itself: the guardian exits without acting.
    pub fn disarm(mut self) {
        self.finish(true);
    }

    fn finish(&mut self, disarm: bool) {
        if let Some(mut tx) = self.tx.take() {
            if disarm {
                let _ = tx.write_all(format!("{DISARM}\n").as_bytes());
            }
            drop(tx);
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
        }
    }
}

impl Drop for Guardian {
    /// Dropped without `disarm` (an error path, a panic): the guardian restores now.
    fn drop(&mut self) {
        self.finish(false);
    }
}

fn child_main(rx: i32, prio: i32) -> ! {
    // SAFETY: plain syscalls in the child on its own state.
    unsafe {
        libc::setpgid(0, 0);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::prctl(libc::PR_SET_NAME, c"joule-guardian".as_ptr());
        if prio > 0 {
            let p = libc::sched_param { sched_priority: prio };
            libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &p);
        }
    }
    // SAFETY: rx is the child's read end.
    let reader = BufReader::new(unsafe { File::from_raw_fd(rx) });
    let mut records = Vec::new();
    let mut disarmed = false;
    for line in reader.lines() {
        let Ok(line) = line else { break };
        if line == DISARM {
            disarmed = true;
            break;
        }
        if let Ok(u) = serde_json::from_str::<Undo>(&line) {
            records.push(u);
        }
    }
    if !disarmed {
        journal::replay(&records, &RealEffects);
    }
    // SAFETY: leave without running the parent's atexit handlers or destructors.
    unsafe { libc::_exit(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file stands in for a thread: the guardian's replay goes through the same
    /// `journal::replay` for every kind of record, and a file needs no privilege.
    #[test]
    fn a_guardian_left_without_disarm_replays_and_a_disarmed_one_does_not() {
        let d = tempfile::tempdir().unwrap();
        let knob = d.path().join("knob");
        for disarm in [false, true] {
            std::fs::write(&knob, "changed").unwrap();
            let mut g = Guardian::spawn(0).unwrap();
            g.watch(&Undo::Write { path: knob.clone(), old: "original".into() }).unwrap();
            if disarm {
                g.disarm();
            } else {
                drop(g); // what the kernel does to the pipe when the scheduler dies
            }
            let want = if disarm { "changed" } else { "original" };
            assert_eq!(std::fs::read_to_string(&knob).unwrap(), want, "disarm = {disarm}");
        }
    }
}

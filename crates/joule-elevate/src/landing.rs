//! When a switch lands: the kernel counts every time a thread is switched onto a CPU
//! (`/proc/<tid>/schedstat`, third field, `sched_info.pcount`). The dedicated pattern's
//! scheduler raises a target from another core; the raise takes effect only when the
//! reschedule IPI reaches the target's core (about 10 µs in this VM). A scheduler that issues
//! the next switch before the previous one landed can have the two cancel out: the running
//! target is lowered and raised again before its core reschedules, and keeps running. Waiting
//! for the raised target's count to move before starting its slice rules that out, and makes
//! the slice time the target runs rather than time since the call.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// A thread's `/proc/<tid>/schedstat`, kept open and re-read in place.
pub struct SchedIns {
    file: File,
    buf: [u8; 96],
}

impl SchedIns {
    pub fn open(tid: i32) -> io::Result<SchedIns> {
        Ok(SchedIns { file: File::open(format!("/proc/{tid}/schedstat"))?, buf: [0; 96] })
    }

    /// Times the thread has been switched onto a CPU so far.
    pub fn count(&mut self) -> io::Result<u64> {
        let n = self.file.read_at(&mut self.buf, 0)?;
        parse_pcount(&self.buf[..n]).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/<tid>/schedstat"))
    }
}

/// `"<run ns> <wait ns> <pcount>\n"` → pcount.
pub fn parse_pcount(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text).ok()?.split_ascii_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_third_field_is_the_count_and_a_short_line_is_refused() {
        assert_eq!(parse_pcount(b"256027682 38347974 1235\n"), Some(1235));
        assert_eq!(parse_pcount(b"0 0\n"), None);
        assert_eq!(parse_pcount(b""), None);
    }

    #[test]
    fn a_thread_that_sleeps_and_wakes_is_switched_in_again() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let mut s = SchedIns::open(me).unwrap();
        let before = s.count().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(s.count().unwrap() > before);
    }
}

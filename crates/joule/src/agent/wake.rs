//! What ends the control loop's sleep before its time (issue 36): the loop sleeps in one
//! `ppoll` on a socket that threads and signal handlers write a byte to (the in-kernel stage's
//! change thread, SIGINT/SIGTERM, a scrape of a stale reading at most once per rest period) and
//! on the ring buffers whose data the loop itself reads each period (the process monitor's
//! events, which the kernel sends only when they can change a class, waking the loop for the
//! first of a batch). No thread polls on a timer for it, so a machine at rest sees the loop
//! once per rest period, whatever other users do, and not more.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

pub struct LoopWake {
    rx: UnixStream,
    tx: UnixStream,
    /// Ring buffers the loop drains each period: readable means an event waits.
    rings: Vec<OwnedFd>,
}

/// A thread's handle that ends the loop's current (or next) sleep.
#[derive(Clone)]
pub struct Poker(std::sync::Arc<UnixStream>);

impl Poker {
    pub fn poke(&self) {
        // Non-blocking: a full socket already holds a wake.
        let _ = (&*self.0).write(&[1]);
    }
}

impl LoopWake {
    pub fn new() -> std::io::Result<LoopWake> {
        let (rx, tx) = UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        Ok(LoopWake { rx, tx, rings: Vec::new() })
    }

    pub fn poker(&self) -> std::io::Result<Poker> {
        Ok(Poker(std::sync::Arc::new(self.tx.try_clone()?)))
    }

    /// `sig` ends the sleep too (signal-hook writes a byte from its handler).
    pub fn on_signal(&self, sig: i32) -> std::io::Result<()> {
        signal_hook::low_level::pipe::register(sig, self.tx.try_clone()?).map(|_| ())
    }

    /// Data in this ring buffer (a BPF ringbuf map's fd) ends the sleep.
    pub fn watch_ring(&mut self, fd: Option<OwnedFd>) {
        self.rings.extend(fd);
    }

    /// Sleeps up to `limit`, or until a poke, a signal or a watched ring's data; returns how
    /// far into the sleep that came, or None when `limit` passed.
    pub fn sleep(&mut self, limit: Duration) -> Option<Duration> {
        let t0 = Instant::now();
        let mut fds: Vec<libc::pollfd> = std::iter::once(self.rx.as_raw_fd())
            .chain(self.rings.iter().map(|f| f.as_raw_fd()))
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
            .collect();
        loop {
            let left = limit.saturating_sub(t0.elapsed());
            if left.is_zero() {
                return None;
            }
            let ts = libc::timespec { tv_sec: left.as_secs() as libc::time_t, tv_nsec: left.subsec_nanos() as libc::c_long };
            // SAFETY: the kernel reads and writes at most fds.len() entries of our array.
            let n = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
            if n > 0 {
                let mut buf = [0u8; 64];
                while matches!((&self.rx).read(&mut buf), Ok(k) if k > 0) {}
                return Some(t0.elapsed());
            }
            if n == 0 {
                return None;
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                // Cannot wait on the fds: sleep the time out rather than spin.
                std::thread::sleep(left);
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poke_ends_the_sleep_and_no_poke_lets_it_run_out() {
        let mut w = LoopWake::new().unwrap();
        assert_eq!(w.sleep(Duration::from_millis(20)), None);
        let p = w.poker().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            p.poke();
            p.poke();
        });
        let woke = w.sleep(Duration::from_secs(10)).expect("the poke ended the sleep");
        assert!(woke < Duration::from_secs(5), "{woke:?}");
        t.join().unwrap();
        // Both pokes were read: the next sleep is a whole one.
        assert_eq!(w.sleep(Duration::from_millis(20)), None);
    }

    #[test]
    fn a_readable_watched_fd_ends_the_sleep() {
        let mut w = LoopWake::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        w.watch_ring(Some(OwnedFd::from(a)));
        (&b).write_all(b"x").unwrap();
        assert!(w.sleep(Duration::from_secs(10)).is_some());
    }
}

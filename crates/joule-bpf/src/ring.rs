//! Sleeping on a BPF ring buffer until a record or a stop, with no period of its own: the
//! waiters of the nap's fast wake and of the thermal stage's changes. A napped machine's
//! wake-ups are the point of a nap, so neither may poll (issue 19: the nap waiter's 100 ms
//! poll was 10 of the napped agent's 11.7 wake-ups a second).

use crate::error::{bpf, BpfError};
use libbpf_rs::{MapHandle, RingBufferBuilder};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

/// Ends a waiter's [`wait`] from another thread: an eventfd in the waiter's epoll set.
#[derive(Clone)]
pub struct RingStop(Arc<OwnedFd>);

impl RingStop {
    pub fn new() -> Result<RingStop, BpfError> {
        // SAFETY: plain syscall; the fd is owned right away.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io_err("creating a ring waiter's stop eventfd", io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(RingStop(Arc::new(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Wakes the waiter, which returns; a stop before the wait makes it return at once.
    pub fn stop(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd from a buffer we own.
        unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

fn io_err(what: &str, source: io::Error) -> BpfError {
    BpfError::Io { path: PathBuf::from(what), source }
}

/// Sleeps in epoll on `ring` (named `name` in errors) and `stop`, no timeout, and hands every
/// record to `on_record`, until `stop` is signalled.
pub fn wait(ring: &MapHandle, name: &str, stop: &RingStop, mut on_record: impl FnMut(&[u8])) -> Result<(), BpfError> {
    let mut b = RingBufferBuilder::new();
    bpf(
        format!("reading {name}"),
        b.add(ring, |data: &[u8]| {
            on_record(data);
            0
        }),
    )?;
    let rb = bpf(format!("building the {name} ring buffer"), b.build())?;
    // SAFETY: plain syscall; the fd is owned right away.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(io_err("creating a ring waiter's epoll", io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    const RING: u64 = 0;
    const STOP: u64 = 1;
    for (fd, token) in [(rb.epoll_fd(), RING), (stop.0.as_raw_fd(), STOP)] {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        // SAFETY: registering a live fd with an event we own.
        if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io_err("watching a ring buffer", io::Error::last_os_error()));
        }
    }
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 2];
    loop {
        // SAFETY: the kernel fills at most 2 events of our array; -1: no timeout.
        let n = unsafe { libc::epoll_wait(ep.as_raw_fd(), evs.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io_err("waiting on a ring buffer", e));
        }
        if evs[..n as usize].iter().any(|e| e.u64 == STOP) {
            return Ok(());
        }
        bpf(format!("consuming {name}"), rb.consume())?;
    }
}

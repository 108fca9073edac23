//! A demo request server on the preemption API and its load client, over kernel TCP on
//! loopback. A request is 16 bytes (id, service time in ns, little-endian); the server spins
//! that long on CPU work (calibrated iterations, so time switched out does not count) and
//! answers the 8-byte id. The client is open-loop: requests leave on a fixed schedule and the
//! latency is measured from the scheduled send time, so a stalled server cannot hide its
//! queue (no coordinated omission).

use crate::preempt::{Preempt, Request};
use crate::timing::now_ns;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

pub const REQ_BYTES: usize = 16;
pub const RESP_BYTES: usize = 8;

/// Work units per µs of this CPU (measured once: the fastest of 30 short runs, so time the
/// calibrating thread spent switched out on a busy machine does not count).
fn units_per_us() -> f64 {
    static U: OnceLock<f64> = OnceLock::new();
    *U.get_or_init(|| {
        let n = 100_000u64;
        let best_ns = (0..30)
            .map(|_| {
                let t0 = now_ns();
                spin_units(n);
                now_ns() - t0
            })
            .min()
            .unwrap_or(1);
        n as f64 / (best_ns.max(1) as f64 / 1000.0)
    })
}

fn spin_units(n: u64) {
    let mut x = 1u64;
    for _ in 0..n {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
}

/// CPU work of `ns` nanoseconds (of running, not of wall time).
pub fn work_ns(ns: u64) {
    spin_units((ns as f64 / 1000.0 * units_per_us()) as u64);
}

/// The service-time distribution the client draws from.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    Fixed {
        ns: u64,
    },
    /// `long_per_mille` of 1000 requests take `long_ns`, the rest `short_ns` (the seed's
    /// bimodal: 995 × 0.5 µs + 5 × 500 µs).
    Bimodal {
        short_ns: u64,
        long_ns: u64,
        long_per_mille: u32,
    },
}

impl Workload {
    pub const FIXED: Workload = Workload::Fixed { ns: 500 };
    pub const BIMODAL: Workload = Workload::Bimodal { short_ns: 500, long_ns: 500_000, long_per_mille: 5 };
    fn draw(&self, rng: &mut u64) -> u64 {
        match *self {
            Workload::Fixed { ns } => ns,
            Workload::Bimodal { short_ns, long_ns, long_per_mille } => {
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                if *rng % 1000 < long_per_mille as u64 {
                    long_ns
                } else {
                    short_ns
                }
            }
        }
    }
}

/// The poll token of the preemption timer (connections count up from 1, the listener is 0).
const TIMER_TOKEN: u64 = u64::MAX;

/// Accepts connections and reads requests (non-blocking sockets under one epoll).
struct Poller {
    epfd: i32,
    listener: TcpListener,
    conns: HashMap<u64, (Arc<TcpStream>, Vec<u8>)>,
    next: u64,
}

impl Poller {
    fn new(listener: TcpListener) -> io::Result<Poller> {
        listener.set_nonblocking(true)?;
        // SAFETY: plain syscall.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(io::Error::last_os_error());
        }
        let p = Poller { epfd, listener, conns: HashMap::new(), next: 1 };
        p.add(p.listener.as_raw_fd(), 0)?;
        Ok(p)
    }
    fn add(&self, fd: i32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        // SAFETY: registering an fd we own with an event we own.
        if unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    /// Waits up to `timeout_ms` (-1: forever) and calls `on_req(conn, id, service_ns)` for every
    /// complete request.
    fn poll(&mut self, timeout_ms: i32, mut on_req: impl FnMut(&Arc<TcpStream>, u64, u64)) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: the kernel fills at most 64 events of our array.
        let n = unsafe { libc::epoll_wait(self.epfd, evs.as_mut_ptr(), 64, timeout_ms) };
        for ev in evs.iter().take(n.max(0) as usize) {
            let token = ev.u64;
            if token == TIMER_TOKEN {
                continue; // the preemption timer: `Preempt::dispatch` reads it
            }
            if token == 0 {
                while let Ok((s, _)) = self.listener.accept() {
                    let _ = s.set_nonblocking(true);
                    let _ = s.set_nodelay(true);
                    let t = self.next;
                    self.next += 1;
                    if self.add(s.as_raw_fd(), t).is_ok() {
                        self.conns.insert(t, (Arc::new(s), Vec::new()));
                    }
                }
                continue;
            }
            let Some((s, buf)) = self.conns.get_mut(&token) else { continue };
            let mut tmp = [0u8; 4096];
            let mut closed = false;
            loop {
                match (&**s).read(&mut tmp) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(k) => buf.extend_from_slice(&tmp[..k]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let whole = buf.len() / REQ_BYTES * REQ_BYTES;
            for c in buf[..whole].chunks_exact(REQ_BYTES) {
                on_req(s, u64::from_le_bytes(c[..8].try_into().unwrap()), u64::from_le_bytes(c[8..].try_into().unwrap()));
            }
            buf.drain(..whole);
            if closed {
                self.conns.remove(&token);
            }
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        // SAFETY: closing our epoll fd.
        unsafe { libc::close(self.epfd) };
    }
}

fn respond(s: &TcpStream, id: u64) {
    let b = id.to_le_bytes();
    let mut off = 0;
    while off < RESP_BYTES {
        match (&*s).write(&b[off..]) {
            Ok(k) => off += k,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => std::hint::spin_loop(),
            Err(_) => return,
        }
    }
}

/// A running server.
pub struct Server {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<crate::preempt::PreemptStats>>>,
}

impl Server {
    /// A listener on a free loopback port under a poller, its address, and the stop flag
    /// (twice: the server's and its thread's); calibrates the work first.
    fn listen() -> io::Result<(Poller, SocketAddr, Arc<AtomicBool>, Arc<AtomicBool>)> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        units_per_us();
        let stop = Arc::new(AtomicBool::new(false));
        Ok((Poller::new(listener)?, addr, stop.clone(), stop))
    }

    /// The preemptive server of seed 3.4 on `cpu`: a dispatcher and `workers` workers; with
    /// `threshold`, a request past it is switched out when another waits (without it, the same
    /// server with no preemption).
    pub fn preemptive(cpu: usize, workers: usize, threshold: Option<Duration>) -> io::Result<Server> {
        let (mut poller, addr, stop, st) = Server::listen()?;
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new().name("elev-dispatch".into()).spawn(move || {
            let mut p = match Preempt::start(cpu, workers, threshold) {
                Ok(p) => p,
                Err(e) => {
                    let _ = tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                    return Err(e);
                }
            };
            if let Some(fd) = p.timer_fd() {
                if let Err(e) = poller.add(fd, TIMER_TOKEN) {
                    let _ = tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                    return Err(e);
                }
            }
            let _ = tx.send(Ok(()));
            while !st.load(Ordering::Relaxed) {
                // Blocks until a request or the preemption timer: the dispatcher outranks the
                // workers, so they run while it waits here.
                poller.poll(20, |s, id, ns| {
                    let s = s.clone();
                    p.submit(Request { work: Box::new(move || work_ns(ns)), done: Box::new(move || respond(&s, id)) });
                });
                p.dispatch();
            }
            Ok(p.stats())
        })?;
        rx.recv().map_err(|_| io::Error::other("the dispatcher did not start"))??;
        Ok(Server { addr, stop, thread: Some(thread) })
    }

    /// A single-threaded server (requests served inline by the polling thread) for the
    /// table-driven schedules: the returned tid is the thread to schedule.
    pub fn inline() -> io::Result<(Server, i32)> {
        let (mut poller, addr, stop, st) = Server::listen()?;
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new().name("elev-inline".into()).spawn(move || {
            let _ = tx.send(crate::gettid());
            while !st.load(Ordering::Relaxed) {
                poller.poll(20, |s, id, ns| {
                    work_ns(ns);
                    respond(s, id);
                });
            }
            Ok(Default::default())
        })?;
        let tid = rx.recv().map_err(|_| io::Error::other("the server did not start"))?;
        Ok((Server { addr, stop, thread: Some(thread) }, tid))
    }

    /// Stops the server; the preemption counters of its run.
    pub fn stop(mut self) -> io::Result<crate::preempt::PreemptStats> {
        self.halt()
    }

    fn halt(&mut self) -> io::Result<crate::preempt::PreemptStats> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| io::Error::other("the server thread panicked"))?,
            None => Ok(Default::default()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// What the client measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ClientReport {
    /// Latency of every answered request, µs, from its scheduled send time.
    #[serde(skip)]
    pub latency_us: Vec<f64>,
    pub sent: u64,
    pub answered: u64,
    /// Answered requests per second of the run.
    pub rps: f64,
    /// Latency of the long requests only (bimodal), µs.
    #[serde(skip)]
    pub long_latency_us: Vec<f64>,
    /// When the slowest request was due, ms after the client's start (where a stall was).
    pub worst_at_ms: f64,
    /// The same moment on CLOCK_MONOTONIC, ns (to find it in a trace).
    pub worst_due_ns: u64,
}

/// Sends requests at `rate_rps` over `conns` connections for `duration`, then waits up to 1 s
/// for the last answers.
pub fn run_client(addr: SocketAddr, conns: usize, rate_rps: f64, duration: Duration, workload: Workload) -> io::Result<ClientReport> {
    let mut streams = Vec::new();
    for _ in 0..conns.max(1) {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        streams.push((s, Vec::<u8>::new()));
    }
    let interval_ns = (1e9 / rate_rps.max(1.0)) as u64;
    let start = now_ns();
    let end = start + duration.as_nanos() as u64;
    let mut sched_at: Vec<(u64, bool)> = Vec::new();
    let mut rep = ClientReport::default();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = start;
    let mut k = 0usize;
    let mut last_answer = start;
    let mut worst_us = 0.0;
    loop {
        let now = now_ns();
        if now >= end + 1_000_000_000 || (now >= end && rep.answered == rep.sent) {
            break;
        }
        while now < end && next <= now {
            let ns = workload.draw(&mut rng);
            let id = sched_at.len() as u64;
            sched_at.push((next, ns > 100_000));
            let mut req = [0u8; REQ_BYTES];
            req[..8].copy_from_slice(&id.to_le_bytes());
            req[8..].copy_from_slice(&ns.to_le_bytes());
            let s = &streams[k % streams.len()].0;
            k += 1;
            let mut off = 0;
            while off < REQ_BYTES {
                match (&*s).write(&req[off..]) {
                    Ok(n) => off += n,
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => std::hint::spin_loop(),
                    Err(e) => return Err(e),
                }
            }
            rep.sent += 1;
            next += interval_ns;
        }
        let mut tmp = [0u8; 4096];
        for (s, buf) in streams.iter_mut() {
            if let Ok(n) = (&*s).read(&mut tmp) {
                buf.extend_from_slice(&tmp[..n]);
            }
            if buf.len() < RESP_BYTES {
                continue;
            }
            let t = now_ns();
            let whole = buf.len() / RESP_BYTES * RESP_BYTES;
            for c in buf[..whole].chunks_exact(RESP_BYTES) {
                let id = u64::from_le_bytes(c.try_into().unwrap()) as usize;
                if let Some(&(at, long)) = sched_at.get(id) {
                    let us = t.saturating_sub(at) as f64 / 1000.0;
                    if us > worst_us {
                        worst_us = us;
                        rep.worst_at_ms = at.saturating_sub(start) as f64 / 1e6;
                        rep.worst_due_ns = at;
                    }
                    rep.latency_us.push(us);
                    if long {
                        rep.long_latency_us.push(us);
                    }
                    rep.answered += 1;
                    last_answer = t;
                }
            }
            buf.drain(..whole);
        }
    }
    rep.rps = rep.answered as f64 / ((last_answer.max(end) - start) as f64 / 1e9);
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inline_server_answers_every_request_of_the_open_loop_client() {
        let (srv, tid) = Server::inline().unwrap();
        assert!(tid > 0);
        let r = run_client(srv.addr, 2, 2000.0, Duration::from_millis(200), Workload::BIMODAL).unwrap();
        srv.stop().unwrap();
        assert!(r.sent >= 300, "{r:?}");
        assert_eq!(r.answered, r.sent);
        assert!(r.latency_us.iter().all(|&us| us > 0.0));
    }
}

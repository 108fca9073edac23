//! The loads of `joule-bench overhead`'s scale mode (issue 16): N idle processes, M loopback
//! UDP flows, and a churn of short processes started at a fixed rate. Every load is bounded:
//! the processes are copies of `sleep` told how long to live, the flow sender and the churn
//! thread stop at a deadline, so nothing outlives the bench even if it is killed. Names are
//! the bench's (`jbench-*`), so the agent's classes match them and nothing else.

use anyhow::Context;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Process names (comm, ≤ 15 bytes) the bench's classes match.
pub const IDLE_COMM: &str = "jbench-idle";
pub const CHURN_COMM: &str = "jbench-churn";
pub const SVC_COMM: &str = "jbench-svc";

/// How long a churn process lives: long enough for the agent to put it in its class (one
/// period), short enough that 500 starts a second keep ~100 alive.
const CHURN_LIFE: &str = "0.2";

/// Copies of `sleep` under the names above, in `dir` (the bench's temp dir).
#[derive(Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    pub fn new(dir: &Path) -> anyhow::Result<Binaries> {
        let sleep =
            ["/usr/bin/sleep", "/bin/sleep"].into_iter().map(Path::new).find(|p| p.exists()).context("no sleep binary in /usr/bin or /bin (coreutils)")?;
        for name in [IDLE_COMM, CHURN_COMM, SVC_COMM] {
            std::fs::copy(sleep, dir.join(name)).with_context(|| format!("while copying {} to {}", sleep.display(), dir.display()))?;
        }
        Ok(Binaries { dir: dir.to_path_buf() })
    }

    fn spawn(&self, name: &str, seconds: &str) -> std::io::Result<Child> {
        Command::new(self.dir.join(name)).arg(seconds).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn()
    }
}

/// Processes that sleep for the whole level; killed (and reaped) on drop.
pub struct IdleProcs(Vec<Child>);

impl IdleProcs {
    /// `n` processes called `comm`, each exiting by itself after `life`.
    pub fn start(bins: &Binaries, comm: &str, n: usize, life: Duration) -> anyhow::Result<IdleProcs> {
        let mut procs = IdleProcs(Vec::with_capacity(n));
        let secs = format!("{}", life.as_secs().max(1));
        for i in 0..n {
            procs.0.push(bins.spawn(comm, &secs).with_context(|| format!("while starting idle process {} of {n}", i + 1))?);
        }
        Ok(procs)
    }
}

impl Drop for IdleProcs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// Raises this process's soft (and, as root, hard) open-file limit to at least `n`.
fn raise_nofile(n: u64) -> anyhow::Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= n {
        return Ok(());
    }
    setrlimit(Resource::RLIMIT_NOFILE, n, hard.max(n)).with_context(|| format!("while raising RLIMIT_NOFILE to {n} (hard limit {hard})"))
}

/// A load thread that counts what it does: stopped (and joined) on drop, or by itself at its
/// deadline.
struct Worker {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Runs `body(stop, count)` on a thread called `name`.
    fn spawn(name: &str, body: impl FnOnce(Arc<AtomicBool>, Arc<AtomicU64>) + Send + 'static) -> anyhow::Result<Worker> {
        let (stop, count) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (st, c) = (stop.clone(), count.clone());
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || body(st, c))?;
        Ok(Worker { stop, count, thread: Some(thread) })
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Loopback UDP flows: each of `n` sockets sends one 100-byte datagram a second to one
/// receiver, which a thread drains; it stops by itself at its deadline.
pub struct Flows(Worker);

impl Flows {
    pub fn start(n: usize, deadline: Instant) -> anyhow::Result<Flows> {
        raise_nofile(n as u64 + 1024)?;
        let rx = UdpSocket::bind("127.0.0.1:0")?;
        rx.set_nonblocking(true)?;
        let to = rx.local_addr()?;
        let tx: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<Result<_, _>>().context("while opening the flows' sockets")?;
        let worker = Worker::spawn("jbench-flows", move |st, count| {
            let (payload, mut buf) = ([0x6a_u8; 100], [0u8; 2048]);
            while !st.load(Ordering::Acquire) && Instant::now() < deadline {
                let t0 = Instant::now();
                for s in &tx {
                    if s.send_to(&payload, to).is_ok() {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    while rx.recv(&mut buf).is_ok() {}
                }
                std::thread::sleep(Duration::from_secs(1).saturating_sub(t0.elapsed()));
            }
        })?;
        Ok(Flows(worker))
    }

    /// Datagrams sent so far.
    pub fn sent(&self) -> u64 {
        self.0.count()
    }
}

/// Starts `per_s` short processes a second (each a copy of `sleep` living 0.2 s), counting
/// the starts; stops by itself at its deadline.
pub struct Churn(Worker);

impl Churn {
    pub fn start(bins: Binaries, per_s: u32, deadline: Instant) -> anyhow::Result<Churn> {
        let worker = Worker::spawn("jbench-churn", move |st, count| {
            let gap = Duration::from_secs_f64(1.0 / per_s as f64);
            let t0 = Instant::now();
            let mut alive: Vec<Child> = Vec::new();
            let mut n = 0u64;
            while !st.load(Ordering::Acquire) && Instant::now() < deadline {
                // On schedule: start as many as the time since t0 asks for (spawn takes time).
                let due = (t0.elapsed().as_secs_f64() * per_s as f64) as u64;
                while n < due {
                    if let Ok(c) = bins.spawn(CHURN_COMM, CHURN_LIFE) {
                        alive.push(c);
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
                alive.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
                std::thread::sleep(gap);
            }
            for c in &mut alive {
                let _ = c.wait();
            }
        })?;
        Ok(Churn(worker))
    }

    /// Processes started so far.
    pub fn started(&self) -> u64 {
        self.0.count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_processes_carry_the_class_name_and_are_gone_after_drop() {
        let dir = tempfile::tempdir().unwrap();
        let bins = Binaries::new(dir.path()).unwrap();
        let procs = IdleProcs::start(&bins, IDLE_COMM, 3, Duration::from_secs(30)).unwrap();
        let pids: Vec<u32> = procs.0.iter().map(Child::id).collect();
        // The kernel lets a vfork parent go on before exec sets the new comm: wait for it.
        let comm = |p: &u32| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap().trim().to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while pids.iter().any(|p| comm(p) != IDLE_COMM) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for p in &pids {
            assert_eq!(comm(p), IDLE_COMM);
        }
        drop(procs);
        assert!(pids.iter().all(|p| !Path::new(&format!("/proc/{p}")).exists()), "reaped");
    }

    #[test]
    fn churn_starts_about_the_rate_asked_and_stops_at_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let churn = Churn::start(Binaries::new(dir.path()).unwrap(), 100, Instant::now() + Duration::from_millis(500)).unwrap();
        std::thread::sleep(Duration::from_millis(800));
        let n = churn.started();
        assert!((30..=60).contains(&n), "{n} starts in 0.5 s at 100/s");
        drop(churn);
    }

    #[test]
    fn flows_send_from_every_socket() {
        let flows = Flows::start(20, Instant::now() + Duration::from_secs(5)).unwrap();
        let t0 = Instant::now();
        while flows.sent() < 20 {
            assert!(t0.elapsed() < Duration::from_secs(2), "{} of 20 sockets sent", flows.sent());
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(flows); // joins: the sender stops before its deadline
        assert!(t0.elapsed() < Duration::from_secs(3));
    }
}

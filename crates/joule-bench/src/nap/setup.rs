//! What `joule-bench nap` stands up and tears down: a network namespace with a veth pair (the
//! client's side), nginx with its own config, pid and logs under a temp dir, the agent as a
//! child process, and the client: HTTP/1.0 requests made from a thread that entered the
//! namespace. Every guard removes what it made on drop, panics included.

use anyhow::{bail, Context};
use joule_core::view::NapView;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The nginx binary: $JOULE_NGINX, the one scripts/install-deps.sh unpacks, or PATH's.
pub fn find_nginx() -> Option<PathBuf> {
    let cache = PathBuf::from(std::env::var("JOULE_TOOLS").unwrap_or_else(|_| "/var/cache/joule-tools".into())).join("bin/nginx");
    std::env::var_os("JOULE_NGINX").map(PathBuf::from).into_iter().chain([cache, "/usr/sbin/nginx".into()]).find(|p| p.is_file())
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("while running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// `jnap-<pid>` with the veth `jnapb<pid>` (host side, `host_ip`) ↔ `jnap0` (inside, `.2`).
pub struct Netns {
    pub name: String,
    host_if: String,
    pub host_ip: String,
}

impl Netns {
    pub fn create() -> anyhow::Result<Netns> {
        let pid = std::process::id();
        let net = format!("10.214.{}", pid % 250);
        let ns = Netns { name: format!("jnap-{pid}"), host_if: format!("jnapb{pid}"), host_ip: format!("{net}.1") };
        ip(&["netns", "add", &ns.name])?;
        // From here on, Drop removes whatever exists.
        ip(&["link", "add", &ns.host_if, "type", "veth", "peer", "name", "jnap0", "netns", &ns.name])?;
        ip(&["addr", "add", &format!("{net}.1/30"), "dev", &ns.host_if])?;
        ip(&["link", "set", &ns.host_if, "up"])?;
        ip(&["-n", &ns.name, "addr", "add", &format!("{net}.2/30"), "dev", "jnap0"])?;
        ip(&["-n", &ns.name, "link", "set", "jnap0", "up"])?;
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Moves the calling thread into the namespace (sockets it opens afterwards are there).
    pub fn enter_this_thread(&self) -> std::io::Result<()> {
        let f = std::fs::File::open(Path::new("/var/run/netns").join(&self.name))?;
        // SAFETY: setns on an fd we hold open; it affects only the calling thread (CLONE_NEWNET).
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// nginx in the foreground (`daemon off`), one worker, its files in `dir`.
pub struct Nginx {
    child: Child,
}

impl Nginx {
    /// `timer_resolution`: nginx's periodic timer (the workers wake every period while awake),
    /// the stand-in for the housekeeping timers services keep while idle.
    pub fn start(bin: &Path, dir: &Path, addr: SocketAddr, timer_resolution_ms: u64) -> anyhow::Result<Nginx> {
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process on;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\ntimer_resolution {timer_resolution_ms}ms;\nevents {{ worker_connections 512; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  server {{\n    listen {addr} backlog=511;\n    location / {{ return 200 \"ok\\n\"; }}\n  }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf)?;
        let child = Command::new(bin)
            .args(["-p"])
            .arg(dir)
            .args(["-e"])
            .arg(dir.join("error.log"))
            .args(["-c"])
            .arg(dir.join("nginx.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("while starting {}", bin.display()))?;
        let mut me = Nginx { child };
        let listens = || TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok();
        super::super::wait_ready(&mut me.child, Duration::from_secs(5), "nginx", &dir.join("error.log"), listens)?;
        Ok(me)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The master and its workers.
    pub fn pids(&self) -> Vec<u32> {
        let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.pid())).unwrap_or_default();
        std::iter::once(self.pid()).chain(kids.split_whitespace().filter_map(|p| p.parse().ok())).collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT: graceful stop of master and workers (SIGKILL of the master would orphan them).
        super::super::stop_child(&mut self.child, nix::sys::signal::Signal::SIGQUIT, Duration::from_secs(3));
    }
}

/// One GET from the calling thread: the time to the whole answer, or why it failed.
pub fn get(addr: SocketAddr, timeout: Duration) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: bench\r\n\r\n").map_err(|e| format!("write: {e}"))?;
    let mut body = Vec::new();
    s.read_to_end(&mut body).map_err(|e| format!("read after {:?}: {e}", t0.elapsed()))?;
    if !body.starts_with(b"HTTP/1.1 200") {
        return Err(format!("answer {:?}", String::from_utf8_lossy(&body[..body.len().min(40)])));
    }
    Ok(t0.elapsed())
}

/// The nap actuator's state in the view of the agent whose journal directory is `dir` (None: no
/// agent answers there, or it runs no nap).
fn nap_status(dir: &Path) -> Option<NapView> {
    joule_core::view::client::read(dir).ok()?.nap()
}

/// The agent as a child process with the bench's nap config; SIGTERM on drop (it restores).
pub struct Agent {
    child: Child,
    pub journal_dir: PathBuf,
}

impl Agent {
    /// `nginx_pids`: the master and its workers, every one by pid: the workers run as another
    /// user than the root master, and a child of another uid does not follow its parent into
    /// a class (docs/security.md), so matching the master alone leaves the workers unfrozen.
    pub fn start(dir: &Path, nginx_pids: &[u32], port: u16, idle_ms: u64, offline_cpus: &[u32]) -> anyhow::Result<Agent> {
        std::fs::create_dir_all(dir)?;
        let journal_dir = dir.join("journal");
        let cfg = format!(
            "[agent]\nperiod_ms = 50\nmetrics_addr = \"127.0.0.1:0\"\njournal_dir = \"{j}\"\nevent_log = \"{d}/events.jsonl\"\nstatus_interval_ms = 0\n\n[telemetry]\nbpf_pin_dir = \"/sys/fs/bpf/joule-bench-nap-{pid}\"\n\n[[class]]\nname = \"bench-nap\"\nmatch.pid = {nginx_pids:?}\n\n[nap]\nenabled = true\nidle_ms = {idle_ms}\nclass = \"bench-nap\"\n\n[nap.monitors]\ntcp_ports = [{port}]\n\n[nap.machine]\ncpus_offline = {offline_cpus:?}\n",
            j = journal_dir.display(),
            d = dir.display(),
            pid = std::process::id(),
        );
        joule_core::config::Config::parse(&cfg).map_err(|p| anyhow::anyhow!("the bench's agent config is invalid: {p:?}"))?;
        std::fs::write(dir.join("joule.toml"), cfg)?;
        let exe = crate::joule_exe()?;
        let log = std::fs::File::create(dir.join("agent.log"))?;
        let child =
            Command::new(exe).args(["agent", "--config"]).arg(dir.join("joule.toml")).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).spawn()?;
        let mut a = Agent { child, journal_dir };
        let journal_dir = a.journal_dir.clone();
        super::super::wait_ready(&mut a.child, Duration::from_secs(20), "the agent", &dir.join("agent.log"), || nap_status(&journal_dir).is_some())?;
        Ok(a)
    }

    /// The nap status the actuator keeps, from the agent's view (what `joule nap status` shows).
    pub fn status(&self) -> Option<NapView> {
        nap_status(&self.journal_dir)
    }

    /// Waits until the status says napping (or `limit` passes).
    pub fn wait_napping(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.status().is_some_and(|s| s.status.napping) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the agent serves /metrics (its `listening` event).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        let log = std::fs::read_to_string(self.journal_dir.parent()?.join("events.jsonl")).ok()?;
        let url =
            log.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).find(|e| e["event"] == "listening")?["metrics"].as_str()?.to_string();
        url.strip_prefix("http://")?.strip_suffix("/metrics")?.parse().ok()
    }

    pub fn stop(mut self) -> anyhow::Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> anyhow::Result<()> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let st = self.child.wait()?;
        if !st.success() {
            bail!("the agent exited with {st}");
        }
        Ok(())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.terminate();
        }
    }
}

/// Machine-wide local timer interrupts (`LOC`) and all interrupts, summed over CPUs.
pub fn interrupts() -> (u64, u64) {
    let p = Path::new("/proc");
    let loc = joule_telemetry::nap::interrupts(p, |label, _| label == "LOC").unwrap_or(0);
    let all = joule_telemetry::nap::interrupts(p, |label, _| label != "ERR" && label != "MIS").unwrap_or(0);
    (loc, all)
}

/// Context switches (voluntary + involuntary) of these processes: the service's own wake-ups.
pub fn ctx_switches(pids: &[u32]) -> u64 {
    pids.iter().map(|p| status_ctx_switches(&format!("/proc/{p}/status"))).sum()
}

/// Voluntary + involuntary context switches in one `status` file (0 when it is gone).
fn status_ctx_switches(path: &str) -> u64 {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    s.lines().filter(|l| l.contains("ctxt_switches:")).filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()).sum()
}

/// One plain HTTP/1.0 GET of /metrics; the body's size.
pub fn scrape(addr: SocketAddr) -> std::io::Result<usize> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    Ok(body.len())
}

/// Context switches of every thread of `pid` (`/proc/PID/status` counts the main thread only).
pub fn thread_ctx_switches(pid: u32) -> u64 {
    let tids: Vec<u32> =
        std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()).unwrap_or_default();
    tids.iter().map(|t| status_ctx_switches(&format!("/proc/{pid}/task/{t}/status"))).sum()
}

/// Busy share of the whole machine from two /proc/stat `cpu` lines (0..1).
pub fn cpu_times() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = s.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().take(8).sum();
    (total, v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0))
}

//! The nap's activity monitors, one per kind of activity, each behind [`Monitor`] and each
//! reading from a root given as a parameter (procfs, sysfs), so the tests below run on fixture
//! trees. Counter monitors (CPU, block I/O, console, interface) report activity on their first
//! poll: with no previous reading, idleness is not known, and napping on a guess is the wrong
//! side to fail on.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// One monitor's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub active: bool,
    /// What it saw, with units.
    pub detail: String,
}

impl Activity {
    fn new(active: bool, detail: String) -> Self {
        Self { active, detail }
    }
}

/// Something that says whether the machine was active since its previous poll.
pub trait Monitor: Send {
    /// `tcp`, `udp`, `processes`, `cpu_load`, `block_io`, `console`, `interface`.
    fn name(&self) -> &'static str;
    fn poll(&mut self) -> io::Result<Activity>;
}

/// A counter that must not move for the machine to be idle.
fn counter_moved(prev: &mut Option<u64>, now: u64) -> (bool, u64) {
    let delta = prev.map(|p| now.saturating_sub(p));
    *prev = Some(now);
    (delta != Some(0), delta.unwrap_or(0))
}

/// TCP sockets on local `ports` (IPv4 and IPv6): a connection in any state that carries a
/// request (established, SYN received, closing with data), or a listener with connections in
/// its accept queue (`rx_queue` of a LISTEN socket). TIME_WAIT and CLOSE are over.
pub struct TcpPorts {
    pub procfs: PathBuf,
    pub ports: Vec<u16>,
    /// The nap actuator's counters: their eBPF count of live sockets stands in for the walk.
    pub counters: Option<std::sync::Arc<joule_core::nap::NapCounters>>,
}

/// TCP states from include/net/tcp_states.h (hex in /proc/net/tcp).
const TCP_LISTEN: u8 = 0x0A;
const TCP_TIME_WAIT: u8 = 0x06;
const TCP_CLOSE: u8 = 0x07;

/// (local port, state, rx_queue) of each socket line of a /proc/net/{tcp,udp}{,6} file.
fn sockets(path: &Path) -> io::Result<Vec<(u16, u8, u64)>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()), // no IPv6
        Err(e) => return Err(e),
    };
    let bad = |l: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{}: unexpected line {l:?}", path.display()));
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 {
            continue;
        }
        let port = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()).ok_or_else(|| bad(line))?;
        let state = u8::from_str_radix(f[3], 16).map_err(|_| bad(line))?;
        let rx = f[4].split(':').nth(1).and_then(|q| u64::from_str_radix(q, 16).ok()).ok_or_else(|| bad(line))?;
        out.push((port, state, rx));
    }
    Ok(out)
}

impl TcpPorts {
    /// (connections, queued) on the ports now. Also the actuator's last idle check.
    pub fn count(&self) -> io::Result<(usize, u64)> {
        let (mut conns, mut queued) = (0, 0);
        for f in ["net/tcp", "net/tcp6"] {
            for (port, state, rx) in sockets(&self.procfs.join(f))? {
                if !self.ports.contains(&port) {
                    continue;
                }
                match state {
                    TCP_LISTEN => queued += rx,
                    TCP_TIME_WAIT | TCP_CLOSE => {}
                    _ => conns += 1,
                }
            }
        }
        Ok((conns, queued))
    }
}

impl Monitor for TcpPorts {
    fn name(&self) -> &'static str {
        "tcp"
    }
    fn poll(&mut self) -> io::Result<Activity> {
        // The eBPF count of live sockets when the nap actuator keeps one: no walk of the whole
        // established hash every period (1.5 ms a read on this machine).
        if let Some(conns) = self.counters.as_ref().and_then(|c| c.tcp_conns()) {
            return Ok(Activity::new(conns > 0, format!("{conns} connection(s) on {:?} (ebpf)", self.ports)));
        }
        let (conns, queued) = self.count()?;
        Ok(Activity::new(conns + queued as usize > 0, format!("{conns} connection(s), {queued} queued for accept on {:?}", self.ports)))
    }
}

/// UDP sockets bound to `ports`: datagrams waiting in their receive queue. A server that reads
/// at once leaves the queue empty; the eBPF counter of datagrams (port hits) covers that.
pub struct UdpPorts {
    pub procfs: PathBuf,
    pub ports: Vec<u16>,
}

impl UdpPorts {
    /// Bytes queued on the ports now.
    pub fn queued(&self) -> io::Result<u64> {
        let mut queued = 0;
        for f in ["net/udp", "net/udp6"] {
            queued += sockets(&self.procfs.join(f))?.iter().filter(|(p, _, _)| self.ports.contains(p)).map(|(_, _, rx)| rx).sum::<u64>();
        }
        Ok(queued)
    }
}

impl Monitor for UdpPorts {
    fn name(&self) -> &'static str {
        "udp"
    }
    fn poll(&mut self) -> io::Result<Activity> {
        let q = self.queued()?;
        Ok(Activity::new(q > 0, format!("{q} byte(s) queued on {:?}", self.ports)))
    }
}

/// Processes by name (/proc/PID/comm) of the given real uids: any one alive is activity (a
/// backup, a build). A name alone is anyone's to take.
pub struct Processes {
    pub procfs: PathBuf,
    pub names: Vec<String>,
    pub uids: Vec<u32>,
}

/// The real uid in /proc/PID/status, read as bytes (its `Name:` line is the process's own
/// choice, in any bytes).
fn real_uid(dir: &Path) -> Option<u32> {
    let status = joule_core::procfs::Status::parse(fs::read(dir.join("status")).ok()?);
    status.uids().map(|u| u.real)
}

impl Monitor for Processes {
    fn name(&self) -> &'static str {
        "processes"
    }
    fn poll(&mut self) -> io::Result<Activity> {
        let mut found = Vec::new();
        for e in fs::read_dir(&self.procfs)?.filter_map(|e| e.ok()) {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            // A process that exits between the listing and the read is simply not there.
            let Ok(comm) = fs::read(e.path().join("comm")) else { continue };
            let comm = joule_core::Comm::new(comm.strip_suffix(b"\n").unwrap_or(&comm));
            if self.names.iter().any(|n| comm == **n) && real_uid(&e.path()).is_some_and(|u| self.uids.contains(&u)) {
                found.push(format!("{comm} ({pid})"));
            }
        }
        found.sort();
        Ok(Activity::new(!found.is_empty(), if found.is_empty() { format!("none of {:?}", self.names) } else { found.join(", ") }))
    }
}

/// Whole-machine CPU busy share from /proc/stat's `cpu` line, above `threshold_pct`.
pub struct CpuLoad {
    pub procfs: PathBuf,
    pub threshold_pct: f64,
    prev: Option<(u64, u64)>,
}

impl CpuLoad {
    pub fn new(procfs: PathBuf, threshold_pct: f64) -> Self {
        Self { procfs, threshold_pct, prev: None }
    }
}

impl Monitor for CpuLoad {
    fn name(&self) -> &'static str {
        "cpu_load"
    }
    fn poll(&mut self) -> io::Result<Activity> {
        let path = self.procfs.join("stat");
        let text = fs::read_to_string(&path)?;
        let line = text
            .lines()
            .find(|l| l.starts_with("cpu "))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{}: no cpu line", path.display())))?;
        let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal (guest is inside user).
        let total: u64 = v.iter().take(8).sum();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        let prev = self.prev.replace((total, idle));
        let Some((pt, pi)) = prev else { return Ok(Activity::new(true, "first reading".into())) };
        let dt = total.saturating_sub(pt).max(1) as f64;
        let busy_pct = 100.0 * (1.0 - idle.saturating_sub(pi) as f64 / dt);
        let active = busy_pct > self.threshold_pct;
        Ok(Activity::new(active, format!("cpu {busy_pct:.1}% {} {:.1}%", if active { ">" } else { "≤" }, self.threshold_pct)))
    }
}

/// Sectors read or written on any block device but loop, ram and zram (/proc/diskstats).
pub struct BlockIo {
    pub procfs: PathBuf,
    prev: Option<u64>,
}

impl BlockIo {
    pub fn new(procfs: PathBuf) -> Self {
        Self { procfs, prev: None }
    }
}

impl Monitor for BlockIo {
    fn name(&self) -> &'static str {
        "block_io"
    }
    fn poll(&mut self) -> io::Result<Activity> {
        let text = fs::read_to_string(self.procfs.join("diskstats"))?;
        let mut sectors = 0u64;
        for f in text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).filter(|f| f.len() >= 10) {
            if ["loop", "ram", "zram"].iter().any(|p| f[2].starts_with(p)) {
                continue;
            }
            sectors += f[5].parse::<u64>().unwrap_or(0) + f[9].parse::<u64>().unwrap_or(0);
        }
        let (active, delta) = counter_moved(&mut self.prev, sectors);
        Ok(Activity::new(active, format!("{delta} sector(s) moved")))
    }
}

/// Terminal/console input: interrupts on /proc/interrupts lines whose description contains one
/// of `irqs` (a keyboard controller `i8042`, a serial console `ttyS0`).
pub struct Console {
    pub procfs: PathBuf,
    pub irqs: Vec<String>,
    prev: Option<u64>,
}

impl Console {
    pub fn new(procfs: PathBuf, irqs: Vec<String>) -> Self {
        Self { procfs, irqs, prev: None }
    }
}

/// The sum over CPUs of the /proc/interrupts lines `pick` selects (by the whole line).
pub fn interrupts(procfs: &Path, pick: impl Fn(&str, &str) -> bool) -> io::Result<u64> {
    let text = fs::read_to_string(procfs.join("interrupts"))?;
    let ncpu = text.lines().next().map(|h| h.split_whitespace().count()).unwrap_or(0);
    let mut sum = 0;
    for line in text.lines().skip(1) {
        let Some((label, rest)) = line.split_once(':') else { continue };
        if pick(label.trim(), rest) {
            sum += rest.split_whitespace().take(ncpu).filter_map(|x| x.parse::<u64>().ok()).sum::<u64>();
        }
    }
    Ok(sum)
}

impl Monitor for Console {
    fn name(&self) -> &'static str {
        "console"
    }
    fn poll(&mut self) -> io::Result<Activity> {
        let n = interrupts(&self.procfs, |_, rest| self.irqs.iter().any(|i| rest.contains(i.as_str())))?;
        let (active, delta) = counter_moved(&mut self.prev, n);
        Ok(Activity::new(active, format!("{delta} interrupt(s) on {:?}", self.irqs)))
    }
}

/// Packets received on one interface (`<sysfs>/class/net/IF/statistics/rx_packets`).
pub struct Interface {
    pub sysfs: PathBuf,
    pub ifname: String,
    prev: Option<u64>,
}

impl Interface {
    pub fn new(sysfs: PathBuf, ifname: String) -> Self {
        Self { sysfs, ifname, prev: None }
    }
}

impl Monitor for Interface {
    fn name(&self) -> &'static str {
        "interface"
    }
    fn poll(&mut self) -> io::Result<Activity> {
        let path = self.sysfs.join("class/net").join(&self.ifname).join("statistics/rx_packets");
        let s = fs::read_to_string(&path)?;
        let n = s.trim().parse::<u64>().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?;
        let (active, delta) = counter_moved(&mut self.prev, n);
        Ok(Activity::new(active, format!("{delta} packet(s) received on {}", self.ifname)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, text) in files {
            let path = d.path().join(p);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        d
    }

    const TCP_HEAD: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";

    fn tcp(lines: &[&str]) -> String {
        TCP_HEAD.to_string() + &lines.join("\n") + "\n"
    }

    #[test]
    fn tcp_listener_alone_is_idle_a_queued_accept_or_a_connection_is_activity() {
        // :0050 = 80 listening with nothing queued; :1F90 = 8080 established (not watched).
        let idle = tcp(&[
            "   0: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1",
            "   1: 0100007F:1F90 0100007F:D000 01 00000000:00000000 00:00000000 00000000     0        0 2 1",
            "   2: 0100007F:0050 0100007F:D001 06 00000000:00000000 00:00000000 00000000     0        0 0 1",
        ]);
        let d = tree(&[("net/tcp", &idle)]);
        let mut m = TcpPorts { procfs: d.path().into(), ports: vec![80], counters: None };
        let a = m.poll().unwrap();
        assert!(!a.active, "{a:?}");

        let queued = tcp(&["   0: 00000000:0050 00000000:0000 0A 00000000:00000002 00:00000000 00000000     0        0 1 1"]);
        fs::write(d.path().join("net/tcp"), queued).unwrap();
        assert_eq!(m.count().unwrap(), (0, 2));
        assert!(m.poll().unwrap().active);

        // A SYN received on the IPv6 side counts as a connection.
        fs::write(d.path().join("net/tcp"), &idle).unwrap();
        let v6 = tcp(&[
            "   0: 00000000000000000000000001000000:0050 00000000000000000000000001000000:D002 03 00000000:00000000 00:00000000 00000000     0        0 3 1",
        ]);
        fs::write(d.path().join("net/tcp6"), v6).unwrap();
        assert_eq!(m.count().unwrap(), (1, 0));
    }

    #[test]
    fn udp_queue_on_a_watched_port_is_activity() {
        let head = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n";
        let d = tree(&[("net/udp", &format!("{head}  10: 00000000:0035 00000000:0000 07 00000000:00000000 00 00000000 0 0 1 2 0 0\n"))]);
        let mut m = UdpPorts { procfs: d.path().into(), ports: vec![53] };
        assert!(!m.poll().unwrap().active);
        fs::write(d.path().join("net/udp"), format!("{head}  10: 00000000:0035 00000000:0000 07 00000000:00000300 00 00000000 0 0 1 2 0 0\n")).unwrap();
        let a = m.poll().unwrap();
        assert!(a.active && a.detail.starts_with("768 byte"), "{a:?}");
    }

    #[test]
    fn processes_match_comm_exactly() {
        let root = "Name:\tx\nUid:\t0\t0\t0\t0\n";
        let user = "Name:\tx\nUid:\t1001\t1001\t1001\t1001\n";
        let d = tree(&[
            ("1/comm", "init\n"),
            ("1/status", root),
            ("42/comm", "rsync\n"),
            ("42/status", root),
            ("43/comm", "rsyncd\n"),
            ("43/status", root),
            ("44/comm", "rsync\n"),
            ("44/status", user),
            ("self/comm", "x\n"),
        ]);
        let mut m = Processes { procfs: d.path().into(), names: vec!["rsync".into()], uids: vec![0] };
        let a = m.poll().unwrap();
        assert_eq!((a.active, a.detail.as_str()), (true, "rsync (42)"), "uid 1001's rsync is not root's");
        m.names = vec!["backup".into()];
        assert!(!m.poll().unwrap().active);
    }

    #[test]
    fn cpu_load_compares_the_busy_share_of_the_interval_with_the_threshold() {
        let d = tree(&[("stat", "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n")]);
        let mut m = CpuLoad::new(d.path().into(), 20.0);
        assert!(m.poll().unwrap().active, "no previous reading: not known to be idle");
        // +10 busy, +90 idle: 10%.
        fs::write(d.path().join("stat"), "cpu  105 0 105 890 0 0 0 0 0 0\n").unwrap();
        let a = m.poll().unwrap();
        assert!(!a.active && a.detail.starts_with("cpu 10.0%"), "{a:?}");
        // +50 busy, +50 idle: 50%.
        fs::write(d.path().join("stat"), "cpu  155 0 105 930 10 0 0 0 0 0\n").unwrap();
        assert!(m.poll().unwrap().active);
    }

    #[test]
    fn block_io_counts_sectors_of_real_devices_only() {
        let stats = |vda: u64, loop0: u64| format!("   7 0 loop0 1 0 {loop0} 0 0 0 {loop0} 0 0 0 0\n 254 0 vda 1 0 {vda} 0 0 0 8 0 0 0 0\n");
        let d = tree(&[("diskstats", &stats(10, 0))]);
        let mut m = BlockIo::new(d.path().into());
        assert!(m.poll().unwrap().active);
        fs::write(d.path().join("diskstats"), stats(10, 500)).unwrap();
        assert!(!m.poll().unwrap().active, "loop devices are not the machine's I/O");
        fs::write(d.path().join("diskstats"), stats(18, 500)).unwrap();
        assert!(m.poll().unwrap().active);
    }

    #[test]
    fn console_and_interface_count_their_own_interrupts_and_packets() {
        let irq = |tty: u64, loc: u64| {
            format!("           CPU0       CPU1\n  4:          0  {tty}  IO-APIC   4-edge      ttyS0\nLOC:    {loc}    {loc}   Local timer interrupts\n")
        };
        let d = tree(&[("interrupts", &irq(10, 100)), ("class/net/eth0/statistics/rx_packets", "7\n")]);
        let mut c = Console::new(d.path().into(), vec!["ttyS".into()]);
        assert!(c.poll().unwrap().active);
        fs::write(d.path().join("interrupts"), irq(10, 900)).unwrap();
        assert!(!c.poll().unwrap().active, "timer interrupts are not input");
        fs::write(d.path().join("interrupts"), irq(11, 900)).unwrap();
        assert!(c.poll().unwrap().active);
        assert_eq!(interrupts(d.path(), |label, _| label == "LOC").unwrap(), 1800);

        let mut i = Interface::new(d.path().into(), "eth0".into());
        assert!(i.poll().unwrap().active);
        assert!(!i.poll().unwrap().active);
        fs::write(d.path().join("class/net/eth0/statistics/rx_packets"), "9\n").unwrap();
        assert_eq!(i.poll().unwrap().detail, "2 packet(s) received on eth0");
    }
}

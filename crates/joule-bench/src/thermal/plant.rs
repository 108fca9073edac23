//! The bench's own thermal plant: what `joule-bench thermal` scores every mode against on a
//! machine without a thermal sensor (this one). It is not joule's telemetry model and shares
//! no code or parameter with it: its input is the machine's real CPU busy time
//! (`/proc/stat`), its physics two thermal nodes — the die and the heatsink/board — with a
//! power curve whose static (leakage) part doubles every `leak_doubling_celsius`, and its
//! parameters those of a named board. Its temperature is presented where joule reads a
//! sensor: a thermal zone in a sysfs-like tree the agent is pointed at
//! (`telemetry.thermal_root`), which joule reads as it would a real zone, or, in the VM tier,
//! the guest's own ACPI zone (scripts/vm/thermal.asl), so the kernel's thermal tracepoint
//! fires on it and the in-kernel stage follows. Every output that shows it says
//! `temp_source: "plant"`; scores are always the plant's own value, never the zone's.
//!
//! ```text
//! P(T_die, u) = base_w + static_w_25 · 2^((T_die − 25) / leak_doubling) + u · dynamic_w_full
//! C_die  dT_die/dt  = P − (T_die − T_sink) / R_die_sink
//! C_sink dT_sink/dt = (T_die − T_sink) / R_die_sink − (T_sink − T_amb) / R_sink_air
//! ```
//!
//! Time is compressed: a real heatsink takes minutes, a bench mode one. The capacitances are
//! chosen for a die time constant of ~0.5 s and a heatsink one of ~15 s (stated in the
//! output), so a 60 s mode sees the plant settle; the steady temperatures are the board's.
//!
//! A board's firmware may throttle on its own ([`Firmware`]: a Pi's from 80 °C, hard at
//! 85 °C). With `--firmware` the plant does what that firmware does to the whole machine: its
//! clock speed falls with the die temperature, and firmware.rs takes the lost share of every
//! CPU away from every task alike, the labelled one included; the plant's power counts only
//! the work that still runs.

use serde::Serialize;
use std::path::{Path, PathBuf};

/// A board the plant models.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Board {
    pub name: &'static str,
    pub ambient_celsius: f64,
    /// Power that neither load nor temperature changes (uncore, memory, board).
    pub base_w: f64,
    /// Leakage at 25 °C, and the temperature rise that doubles it.
    pub static_w_25: f64,
    pub leak_doubling_celsius: f64,
    /// Extra power with every core busy.
    pub dynamic_w_full: f64,
    pub die_j_per_celsius: f64,
    pub sink_j_per_celsius: f64,
    pub die_sink_celsius_per_w: f64,
    pub sink_air_celsius_per_w: f64,
    /// The temperature the board's own firmware or a fleet keeps it under: the bench's default
    /// limit for this board.
    pub limit_celsius: f64,
    /// The board's own throttle, which slows every task (None: the kernel's trip points are the
    /// only governor).
    pub firmware: Option<Firmware>,
    /// The device tree's root `compatible` (NUL-separated), by which joule knows the board; None:
    /// no device tree (x86).
    pub compatible: Option<&'static str>,
    /// Where the figures come from.
    pub source: &'static str,
}

/// A board firmware's throttle: full speed under `soft_celsius`, falling linearly to
/// `min_speed` at `hard_celsius`, held there above it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Firmware {
    pub soft_celsius: f64,
    pub hard_celsius: f64,
    /// The clock at the hard limit, a share of the top one.
    pub min_speed: f64,
}

impl Firmware {
    /// The share of full speed the firmware leaves at `die_celsius`.
    pub fn speed(&self, die_celsius: f64) -> f64 {
        let x = ((die_celsius - self.soft_celsius) / (self.hard_celsius - self.soft_celsius)).clamp(0.0, 1.0);
        1.0 - x * (1.0 - self.min_speed)
    }
}

/// Raspberry Pi 5 (BCM2712, 4 × Cortex-A76), bare board in still air.
pub const PI5: Board = Board {
    name: "rpi5",
    ambient_celsius: 25.0,
    base_w: 2.4,
    static_w_25: 0.3,
    leak_doubling_celsius: 30.0,
    dynamic_w_full: 4.5,
    die_j_per_celsius: 0.33,
    sink_j_per_celsius: 2.1,
    die_sink_celsius_per_w: 1.5,
    sink_air_celsius_per_w: 7.0,
    limit_celsius: 80.0,
    // The Arm cores progressively from 80 °C, everything at 85 °C; at the hard limit the cores
    // run at the firmware's lowest clock, 1.5 of 2.4 GHz (arm_freq_min / arm_freq, Raspberry
    // Pi's config.txt documentation).
    firmware: Some(Firmware { soft_celsius: 80.0, hard_celsius: 85.0, min_speed: 1500.0 / 2400.0 }),
    compatible: Some("raspberrypi,5-model-b\0brcm,bcm2712\0"),
    source: "idle ≈ 3 W at the wall (u-labs.de, 'So verbraucht der Raspberry Pi 5 …', 2024); the firmware \
             throttles the Arm cores from 80 °C and everything at 85 °C (Raspberry Pi documentation, \
             'Frequency management and thermal control'); R and the dynamic power are set so a bare board \
             idles near 50 °C and passes 85 °C under a full load, as that page says an uncooled one does",
};

/// A small x86 server: one 4-core, 65 W-TDP socket (Xeon E-2300 class) under a tower heatsink.
pub const X86_SMALL: Board = Board {
    name: "x86-small",
    ambient_celsius: 25.0,
    base_w: 12.0,
    static_w_25: 3.0,
    leak_doubling_celsius: 30.0,
    dynamic_w_full: 48.0,
    die_j_per_celsius: 2.0,
    sink_j_per_celsius: 33.0,
    die_sink_celsius_per_w: 0.25,
    sink_air_celsius_per_w: 0.45,
    limit_celsius: 65.0,
    firmware: None,
    compatible: None,
    source: "65 W TDP (Intel Xeon E-2300 datasheet); 0.25 °C/W die-to-heatsink and 0.45 °C/W heatsink-to-air, \
             representative of a tower cooler rated for that TDP; the 65 °C limit is a fleet budget under the \
             part's 100 °C Tjmax",
};

#[cfg(test)]
const BOARDS: [Board; 2] = [PI5, X86_SMALL];

impl Board {
    pub fn power_w(&self, die_celsius: f64, util: f64) -> f64 {
        self.base_w + self.static_w_25 * ((die_celsius - 25.0) / self.leak_doubling_celsius).exp2() + util.clamp(0.0, 1.0) * self.dynamic_w_full
    }

    /// (die, sink) time constants, seconds.
    pub fn time_constants_s(&self) -> (f64, f64) {
        (self.die_j_per_celsius * self.die_sink_celsius_per_w, self.sink_j_per_celsius * self.sink_air_celsius_per_w)
    }

    /// The steady state at utilisation `util`: (die, sink) °C. None when leakage runs away
    /// (no steady state below 200 °C).
    pub fn steady(&self, util: f64) -> Option<(f64, f64)> {
        let mut die = self.ambient_celsius;
        for _ in 0..200 {
            let p = self.power_w(die, util);
            let next = self.ambient_celsius + p * (self.die_sink_celsius_per_w + self.sink_air_celsius_per_w);
            if next > 200.0 {
                return None;
            }
            if (next - die).abs() < 1e-6 {
                return Some((next, self.ambient_celsius + p * self.sink_air_celsius_per_w));
            }
            die = next;
        }
        None
    }
}

/// The plant's state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Plant {
    pub board: Board,
    pub die_celsius: f64,
    pub sink_celsius: f64,
}

impl Plant {
    /// At the idle machine's steady state: every run starts here.
    pub fn idle(board: Board) -> Plant {
        let (die, sink) = board.steady(0.0).expect("every board has an idle steady state");
        Plant { board, die_celsius: die, sink_celsius: sink }
    }

    /// Advances `dt_s` at utilisation `util` (0..1, the machine's busy share), in sub-steps
    /// short against the die's time constant (explicit Euler is stable there).
    pub fn step(&mut self, util: f64, dt_s: f64) {
        let b = self.board;
        let (tau_die, _) = b.time_constants_s();
        let n = (dt_s / (tau_die / 20.0)).ceil().max(1.0) as usize;
        let h = dt_s / n as f64;
        for _ in 0..n {
            let p = b.power_w(self.die_celsius, util);
            let to_sink = (self.die_celsius - self.sink_celsius) / b.die_sink_celsius_per_w;
            let to_air = (self.sink_celsius - b.ambient_celsius) / b.sink_air_celsius_per_w;
            self.die_celsius += h * (p - to_sink) / b.die_j_per_celsius;
            self.sink_celsius += h * (to_sink - to_air) / b.sink_j_per_celsius;
        }
    }
}

/// The machine's CPU time, from `/proc/stat`'s first line, in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ticks {
    /// user, nice, system, irq and softirq (guest time is inside user): the work done here.
    pub busy: u64,
    /// Steal: a hypervisor ran something else on this vCPU. No work of this machine's ran, so
    /// it heats nothing; counted as busy, a noisy host's steal warmed the plant of whichever
    /// mode it fell in (8 s of 40 in one run here, 0.2 s in the next).
    pub steal: u64,
    pub total: u64,
}

pub fn cpu_ticks(proc_stat: &str) -> Option<Ticks> {
    let line = proc_stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line.split_whitespace().map(|x| x.parse().ok()).collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest is inside user)
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    let total: u64 = v.iter().take(8).sum();
    let (idle, steal) = (at(3) + at(4), at(7));
    Some(Ticks { busy: total.saturating_sub(idle + steal), steal, total })
}

/// Where the plant's temperature is presented to joule.
pub enum Zone {
    /// A thermal zone in a sysfs-like tree of the bench's own (`<root>/class/thermal/
    /// thermal_zone0/{type,temp,trip_point_0_*}`), written the way the kernel presents one:
    /// millidegrees, and each update a whole file put in place by rename, so a reader never
    /// sees half a number. The agent is pointed at `root` (`telemetry.thermal_root`).
    Tree { root: PathBuf, dir: PathBuf },
    /// The VM tier's ACPI zone (scripts/vm/thermal.asl): its `_TMP` reads CMOS byte 0x70,
    /// written here through /dev/nvram (checksum fixed first, as scripts/vm/set-temp.sh does).
    /// Whole °C, polled by the guest kernel each second. Dropped: 0, the zone's own wave again.
    Acpi { nvram: std::fs::File },
}

/// `_IO('p', 0x41)` from <linux/nvram.h>: recompute the CMOS checksum.
const NVRAM_SETCKS: libc::c_ulong = 0x7041;
/// CMOS byte 0x70, where /dev/nvram starts at byte 14.
const NVRAM_TEMP_OFFSET: u64 = 0x70 - 14;

impl Zone {
    pub fn create(root: &Path, board: &Board) -> std::io::Result<Zone> {
        let dir = root.join("class/thermal/thermal_zone0");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("type"), format!("plant-{}\n", board.name))?;
        std::fs::write(dir.join("trip_point_0_type"), "passive\n")?;
        std::fs::write(dir.join("trip_point_0_temp"), format!("{}\n", (board.limit_celsius * 1000.0).round() as i64))?;
        let z = Zone::Tree { root: root.to_path_buf(), dir };
        z.write(Plant::idle(*board).die_celsius)?;
        Ok(z)
    }

    /// Puts the board's device tree `compatible` in the tree (`firmware/devicetree/base/`), as
    /// the kernel shows it, so the agent knows the board; nothing for a board without one.
    pub fn write_device_tree(&self, board: &Board) -> std::io::Result<()> {
        let (Zone::Tree { root, .. }, Some(c)) = (self, board.compatible) else { return Ok(()) };
        let dt = root.join("firmware/devicetree/base");
        std::fs::create_dir_all(&dt)?;
        std::fs::write(dt.join("compatible"), c)
    }

    /// The guest's ACPI zone; an error naming what is missing on a machine without it.
    pub fn acpi(sysfs: &Path) -> anyhow::Result<Zone> {
        use anyhow::Context;
        let zones = std::fs::read_dir(sysfs.join("class/thermal")).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>()).unwrap_or_default();
        anyhow::ensure!(
            zones.iter().any(|z| std::fs::read_to_string(z.join("type")).is_ok_and(|t| t.trim() == "acpitz")),
            "--zone acpi: no ACPI thermal zone (type acpitz) under {}: it is the VM tier's (scripts/vm/run.sh --thermal)",
            sysfs.join("class/thermal").display()
        );
        if !Path::new("/dev/nvram").exists() {
            let _ = std::process::Command::new("modprobe").arg("nvram").status();
        }
        let nvram = std::fs::OpenOptions::new().read(true).write(true).open("/dev/nvram").context("--zone acpi: opening /dev/nvram (the nvram driver)")?;
        Ok(Zone::Acpi { nvram })
    }

    /// The tree the agent reads its zone from; None: the machine's own /sys.
    pub fn thermal_root(&self) -> Option<&Path> {
        match self {
            Zone::Tree { root, .. } => Some(root),
            Zone::Acpi { .. } => None,
        }
    }

    /// How the zone is presented, for the output.
    pub fn kind(&self) -> &'static str {
        match self {
            Zone::Tree { .. } => "plant's own zone (telemetry.thermal_root)",
            Zone::Acpi { .. } => "the guest's ACPI zone (whole °C, polled each second)",
        }
    }

    pub fn write(&self, celsius: f64) -> std::io::Result<()> {
        match self {
            Zone::Tree { dir, .. } => {
                let tmp = dir.join(".temp.new");
                std::fs::write(&tmp, format!("{}\n", (celsius * 1000.0).round() as i64))?;
                std::fs::rename(&tmp, dir.join("temp"))
            }
            Zone::Acpi { nvram } => write_cmos_temp(nvram, celsius.round().clamp(1.0, 150.0) as u8),
        }
    }
}

fn write_cmos_temp(nvram: &std::fs::File, byte: u8) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    // SAFETY: an argument-less ioctl on a file we own.
    if unsafe { libc::ioctl(nvram.as_raw_fd(), NVRAM_SETCKS) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    nvram.write_all_at(&[byte], NVRAM_TEMP_OFFSET)
}

impl Drop for Zone {
    fn drop(&mut self) {
        if let Zone::Acpi { nvram } = self {
            let _ = write_cmos_temp(nvram, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_board_idles_under_its_limit_and_passes_it_fully_loaded() {
        for b in BOARDS {
            let (idle, _) = b.steady(0.0).unwrap();
            let (full, sink) = b.steady(1.0).unwrap();
            assert!(idle + 7.0 < b.limit_celsius && full > b.limit_celsius + 5.0, "{}: idle {idle:.1}, full {full:.1}, limit {}", b.name, b.limit_celsius);
            assert!(sink < full && sink > b.ambient_celsius, "{}", b.name);
            let (tau_die, tau_sink) = b.time_constants_s();
            assert!((0.2..=2.0).contains(&tau_die) && (8.0..=30.0).contains(&tau_sink), "{}: τ {tau_die:.2} s / {tau_sink:.1} s", b.name);
        }
        // The Pi's figures: near 50 °C idle, past its 85 °C firmware limit with every core busy.
        let (idle, _) = PI5.steady(0.0).unwrap();
        let (full, _) = PI5.steady(1.0).unwrap();
        assert!((45.0..=55.0).contains(&idle) && full > 85.0, "{idle:.1} / {full:.1}");
    }

    #[test]
    fn the_pis_firmware_slows_the_board_from_80_and_hard_at_85() {
        let fw = PI5.firmware.unwrap();
        assert_eq!(fw.speed(50.0), 1.0);
        assert_eq!(fw.speed(80.0), 1.0);
        let at82 = fw.speed(82.0);
        assert!(at82 < 1.0 && at82 > fw.min_speed, "progressive at 82 °C: {at82}");
        assert_eq!(fw.speed(85.0), 1500.0 / 2400.0, "hard at 85 °C: the lowest clock");
        assert_eq!(fw.speed(95.0), fw.speed(85.0));
        assert!(X86_SMALL.firmware.is_none());
        // A fully loaded bare Pi under its firmware settles between the two limits, as the
        // documentation says one does: the firmware, not the heatsink, holds it.
        let mut p = Plant::idle(PI5);
        for _ in 0..3000 {
            let util = fw.speed(p.die_celsius);
            p.step(util, 0.1);
        }
        assert!((80.0..85.0).contains(&p.die_celsius), "{:.1}", p.die_celsius);
    }

    #[test]
    fn leakage_grows_with_temperature() {
        let b = PI5;
        assert!((b.power_w(25.0 + b.leak_doubling_celsius, 0.0) - b.base_w - 2.0 * b.static_w_25).abs() < 1e-9);
        assert!(b.power_w(80.0, 0.5) > b.power_w(50.0, 0.5));
    }

    #[test]
    fn the_plant_settles_to_its_steady_state_with_the_stated_time_constant() {
        let b = PI5;
        let mut p = Plant::idle(b);
        let (full, _) = b.steady(1.0).unwrap();
        let start = p.die_celsius;
        let (_, tau_sink) = b.time_constants_s();
        // After one heatsink time constant most of the way up, but not there; after eight, there.
        let dt = 0.1;
        for _ in 0..(tau_sink / dt) as usize {
            p.step(1.0, dt);
        }
        let frac = (p.die_celsius - start) / (full - start);
        assert!((0.5..0.9).contains(&frac), "after τ: {frac:.2} of the way");
        for _ in 0..(7.0 * tau_sink / dt) as usize {
            p.step(1.0, dt);
        }
        assert!((p.die_celsius - full).abs() < 0.5, "{:.2} vs {full:.2}", p.die_celsius);
        // Same state, same input, same path: the runs are comparable.
        let (mut a, mut c) = (Plant::idle(b), Plant::idle(b));
        for i in 0..100 {
            let u = (i % 7) as f64 / 6.0;
            a.step(u, 0.1);
            c.step(u, 0.1);
        }
        assert_eq!(a, c);
    }

    #[test]
    fn busy_ticks_come_from_proc_stat() {
        let t = cpu_ticks("cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 1 2 3\n").unwrap();
        assert_eq!(t, Ticks { busy: 160, steal: 0, total: 980 });
        let t = cpu_ticks("cpu  100 5 50 800 20 3 2 40 0 0\n").unwrap();
        assert_eq!(t, Ticks { busy: 160, steal: 40, total: 1020 }, "steal is neither work nor idle");
        assert!(cpu_ticks("intr 1 2\n").is_none());
    }

    #[test]
    fn the_zone_reads_like_a_kernel_one() {
        let d = tempfile::tempdir().unwrap();
        let z = Zone::create(d.path(), &PI5).unwrap();
        z.write(71.2345).unwrap();
        let zone = d.path().join("class/thermal/thermal_zone0");
        assert_eq!(std::fs::read_to_string(zone.join("temp")).unwrap(), "71235\n");
        assert_eq!(std::fs::read_to_string(zone.join("type")).unwrap(), "plant-rpi5\n");
        assert_eq!(std::fs::read_to_string(zone.join("trip_point_0_temp")).unwrap(), "80000\n");
        // The Pi's device tree, as joule reads it: the firmware's limit.
        z.write_device_tree(&PI5).unwrap();
        let fw = joule_core::board_limits::read(d.path(), &d.path().join("boot")).unwrap();
        assert_eq!((fw.board.as_str(), fw.soft_celsius), ("raspberrypi,5-model-b", PI5.firmware.unwrap().soft_celsius));
    }
}

/// One sample of the running plant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reading {
    /// Seconds since the plant was last reset.
    pub t_s: f64,
    pub die_celsius: f64,
    /// The machine's busy share over the step, 0..1 (steal and the firmware's stolen time
    /// left out: no work ran in them).
    pub util: f64,
    /// The hypervisor's steal over the step, a share of the machine's time (0 on bare metal).
    pub steal: f64,
    pub power_w: f64,
    /// The firmware's clock over the step, a share of full speed (1: not throttling, or no
    /// firmware modelled).
    pub speed: f64,
}

struct Shared {
    plant: Plant,
    since: std::time::Instant,
    trace: Vec<Reading>,
}

/// The plant on its own thread: every `STEP` it reads `/proc/stat`, advances the plant by
/// the wall time that passed and writes the zone. `reset` puts it back at the idle state (each
/// run starts there) and clears its trace.
pub struct Running {
    shared: std::sync::Arc<std::sync::Mutex<Shared>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

pub const STEP: std::time::Duration = std::time::Duration::from_millis(100);

impl Running {
    /// `firmware`: the board's firmware throttle acts on the machine (firmware.rs), and the
    /// time it takes is not the work's.
    pub fn start(board: Board, zone: Zone, proc_stat: PathBuf, firmware: bool) -> anyhow::Result<Running> {
        use std::sync::atomic::Ordering;
        let throttle = match (firmware, board.firmware) {
            (true, Some(_)) => Some(super::firmware::Throttle::start()?),
            (true, None) => anyhow::bail!("--firmware: the {} board has no firmware throttle to model", board.name),
            (false, _) => None,
        };
        // SAFETY: sysconf reads a constant of the C library.
        let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let mut stolen_ns = throttle.as_ref().map_or(0, |t| t.stolen_ns());
        let shared = std::sync::Arc::new(std::sync::Mutex::new(Shared { plant: Plant::idle(board), since: std::time::Instant::now(), trace: Vec::new() }));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let read = move || std::fs::read_to_string(&proc_stat).ok().as_deref().and_then(cpu_ticks);
        let mut last = (std::time::Instant::now(), read().ok_or_else(|| anyhow::anyhow!("cannot read the machine's CPU time (/proc/stat)"))?);
        let (sh, st) = (shared.clone(), stop.clone());
        let thread = std::thread::Builder::new().name("bench-plant".into()).spawn(move || {
            while !st.load(Ordering::Relaxed) {
                std::thread::sleep(STEP);
                let (now, Some(ticks)) = (std::time::Instant::now(), read()) else { continue };
                let (busy, steal, total) =
                    (ticks.busy.saturating_sub(last.1.busy), ticks.steal.saturating_sub(last.1.steal), ticks.total.saturating_sub(last.1.total));
                // The firmware's stolen time is busy in /proc/stat but heats nothing: a slower
                // clock, not work.
                let stolen = throttle.as_ref().map_or(0.0, |t| {
                    let now_ns = t.stolen_ns();
                    let d = now_ns.saturating_sub(stolen_ns);
                    stolen_ns = now_ns;
                    d as f64 * ticks_per_s / 1e9
                });
                let util = if total > 0 { ((busy as f64 - stolen) / total as f64).clamp(0.0, 1.0) } else { 0.0 };
                let dt = now.duration_since(last.0).as_secs_f64();
                last = (now, ticks);
                let mut s = sh.lock().unwrap_or_else(|e| e.into_inner());
                s.plant.step(util, dt);
                let speed = match (&throttle, s.plant.board.firmware) {
                    (Some(t), Some(fw)) => t.set_speed(fw.speed(s.plant.die_celsius)),
                    _ => 1.0,
                };
                let r = Reading {
                    t_s: s.since.elapsed().as_secs_f64(),
                    die_celsius: s.plant.die_celsius,
                    util,
                    steal: if total > 0 { steal as f64 / total as f64 } else { 0.0 },
                    power_w: s.plant.board.power_w(s.plant.die_celsius, util),
                    speed,
                };
                s.trace.push(r);
                if let Err(e) = zone.write(r.die_celsius) {
                    eprintln!("thermal: the plant cannot write its zone: {e}");
                }
            }
        })?;
        Ok(Running { shared, stop, thread: Some(thread) })
    }

    /// Back to the idle state, the clock and trace from zero.
    pub fn reset(&self) {
        let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        s.plant = Plant::idle(s.plant.board);
        s.since = std::time::Instant::now();
        s.trace.clear();
    }

    pub fn die_celsius(&self) -> f64 {
        self.shared.lock().unwrap_or_else(|e| e.into_inner()).plant.die_celsius
    }

    /// The trace since the last reset.
    pub fn trace(&self) -> Vec<Reading> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner()).trace.clone()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

//! The alternatives a user would pick instead of joule, run by the bench itself against the
//! same plant temperature:
//!
//! - `uniform`: every task throttled alike, the way the kernel's step_wise governor drives a
//!   frequency or idle-injection cooling device. This machine has no cpufreq, so the cooling
//!   device is CFS bandwidth on one group holding every load (the whole machine's work), with
//!   ten cooling states from no cap to 10 % of the machine.
//! - `batch-cap`: a Thunderbolt-like controller (Google, OSDI'20): only the best-effort work
//!   is capped, in fixed steps, when the temperature nears the limit, and released below it
//!   with hysteresis; the serving work is never touched.
//!
//! The controllers are pure (temperature in, cap out) and tested here; [`Group`] is the one
//! side effect, a cgroup of the bench's own that it removes when dropped.

use anyhow::Context;
use std::path::{Path, PathBuf};

/// The kernel's step_wise governor on one passive trip: while the temperature is at or over
/// the trip and not falling, one cooling state more each poll; once it is under the trip by
/// the hysteresis and not rising, one less.
#[derive(Debug, Clone)]
pub struct StepWise {
    pub trip_celsius: f64,
    pub hysteresis_celsius: f64,
    pub max_state: u32,
    state: u32,
    last: Option<f64>,
}

impl StepWise {
    pub fn new(trip_celsius: f64, hysteresis_celsius: f64, max_state: u32) -> StepWise {
        StepWise { trip_celsius, hysteresis_celsius, max_state, state: 0, last: None }
    }

    /// One poll: the cooling state after it.
    pub fn poll(&mut self, celsius: f64) -> u32 {
        let trend = self.last.map_or(0.0, |l| celsius - l);
        self.last = Some(celsius);
        if celsius >= self.trip_celsius && trend >= 0.0 {
            self.state = (self.state + 1).min(self.max_state);
        } else if celsius < self.trip_celsius - self.hysteresis_celsius && trend <= 0.0 {
            self.state = self.state.saturating_sub(1);
        }
        self.state
    }

    /// The share of the machine the throttled work may use at the current state: 1 at state
    /// 0, 0.1 at the last.
    pub fn share(&self) -> f64 {
        1.0 - 0.9 * self.state as f64 / self.max_state as f64
    }
}

/// Thunderbolt's shape for a temperature: two thresholds under the limit, each with a fixed
/// cap for the batch work (a share of the machine), released under the lower one by the
/// hysteresis.
#[derive(Debug, Clone)]
pub struct BatchCap {
    pub soft_celsius: f64,
    pub hard_celsius: f64,
    pub release_celsius: f64,
    pub soft_share: f64,
    pub hard_share: f64,
    level: u8,
}

impl BatchCap {
    /// Soft at the limit − 3 °C (batch to half the machine), hard at the limit − 1 °C (batch to
    /// a tenth), released under the limit − 4 °C.
    pub fn for_limit(limit_celsius: f64) -> BatchCap {
        BatchCap {
            soft_celsius: limit_celsius - 3.0,
            hard_celsius: limit_celsius - 1.0,
            release_celsius: limit_celsius - 4.0,
            soft_share: 0.5,
            hard_share: 0.1,
            level: 0,
        }
    }

    /// One poll: the batch work's share of the machine, None for no cap.
    pub fn poll(&mut self, celsius: f64) -> Option<f64> {
        if celsius >= self.hard_celsius {
            self.level = 2;
        } else if celsius >= self.soft_celsius {
            self.level = self.level.max(1);
        } else if celsius < self.release_celsius {
            self.level = 0;
        }
        match self.level {
            0 => None,
            1 => Some(self.soft_share),
            _ => Some(self.hard_share),
        }
    }
}

/// Which cgroup interface the machine's CPU controller has.
#[derive(Debug, Clone, PartialEq)]
enum Cpu {
    /// cgroup v1: `cpu.cfs_quota_us` / `cpu.cfs_period_us` under this mount.
    V1(PathBuf),
    /// cgroup v2: `cpu.max` under this root.
    V2(PathBuf),
}

fn cpu_hierarchy(cgroup_root: &Path) -> anyhow::Result<Cpu> {
    let v1 = cgroup_root.join("cpu");
    if v1.join("cpu.cfs_quota_us").exists() {
        return Ok(Cpu::V1(v1));
    }
    let controllers = std::fs::read_to_string(cgroup_root.join("cgroup.controllers")).unwrap_or_default();
    anyhow::ensure!(
        controllers.split_whitespace().any(|c| c == "cpu"),
        "no CPU bandwidth controller under {} (neither cpu/cpu.cfs_quota_us nor cpu in cgroup.controllers)",
        cgroup_root.display()
    );
    Ok(Cpu::V2(cgroup_root.to_path_buf()))
}

/// On cgroup v2, enables the cpu controller for the root's children when it is not yet
/// (a fresh machine's root enables none); returns the file to write `-cpu` to afterwards.
fn enable_cpu(cpu: &Cpu) -> anyhow::Result<Option<PathBuf>> {
    let Cpu::V2(root) = cpu else { return Ok(None) };
    let file = root.join("cgroup.subtree_control");
    if std::fs::read_to_string(&file).unwrap_or_default().split_whitespace().any(|c| c == "cpu") {
        return Ok(None);
    }
    std::fs::write(&file, "+cpu").with_context(|| format!("while enabling the cpu controller in {}", file.display()))?;
    Ok(Some(file))
}

const PERIOD_US: u64 = 100_000;

/// A CPU cgroup of the bench's own (`joule-bench-thermal-<pid>-<name>`): the loads it holds
/// are capped by writing its bandwidth. Dropped, it sends what is left in it back to the root
/// group and is removed.
pub struct Group {
    cpu: Cpu,
    dir: PathBuf,
    ncpu: usize,
    /// The root's `cgroup.subtree_control` where the group enabled `cpu` (v2), to disable again.
    enabled_cpu: Option<PathBuf>,
}

pub const GROUP_PREFIX: &str = "joule-bench-thermal-";

impl Group {
    pub fn create(cgroup_root: &Path, name: &str, ncpu: usize) -> anyhow::Result<Group> {
        let cpu = cpu_hierarchy(cgroup_root)?;
        let base = match &cpu {
            Cpu::V1(m) | Cpu::V2(m) => m.clone(),
        };
        let dir = base.join(format!("{GROUP_PREFIX}{}-{name}", std::process::id()));
        let enabled_cpu = enable_cpu(&cpu)?;
        if let Err(e) = std::fs::create_dir(&dir) {
            if let Some(f) = &enabled_cpu {
                let _ = std::fs::write(f, "-cpu");
            }
            return Err(e).with_context(|| format!("while creating {}", dir.display()));
        }
        let g = Group { cpu, dir, ncpu, enabled_cpu };
        g.cap(None)?;
        Ok(g)
    }

    /// Moves process `pid` (and, through fork, what it starts later) into the group.
    pub fn add(&self, pid: i32) -> anyhow::Result<()> {
        let procs = self.dir.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).with_context(|| format!("while moving {pid} into {}", procs.display()))
    }

    /// Caps the group at `share` of the whole machine (None: no cap).
    pub fn cap(&self, share: Option<f64>) -> anyhow::Result<()> {
        let quota = share.map(|s| ((s.clamp(0.01, 1.0) * self.ncpu as f64 * PERIOD_US as f64).round() as u64).max(1000));
        let (file, text) = match (&self.cpu, quota) {
            (Cpu::V1(_), q) => ("cpu.cfs_quota_us", q.map_or("-1".to_string(), |q| q.to_string())),
            (Cpu::V2(_), q) => ("cpu.max", format!("{} {PERIOD_US}", q.map_or("max".to_string(), |q| q.to_string()))),
        };
        if let Cpu::V1(_) = self.cpu {
            std::fs::write(self.dir.join("cpu.cfs_period_us"), PERIOD_US.to_string())?;
        }
        std::fs::write(self.dir.join(file), text).with_context(|| format!("while writing {}", self.dir.join(file).display()))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let root = self.dir.parent().map(|p| p.join("cgroup.procs"));
        for _ in 0..50 {
            let left = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for pid in left.split_whitespace() {
                if let Some(r) = &root {
                    let _ = std::fs::write(r, pid);
                }
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                if let Some(f) = &self.enabled_cpu {
                    if let Err(e) = std::fs::write(f, "-cpu") {
                        eprintln!("thermal: could not disable the cpu controller again in {}: {e}", f.display());
                    }
                }
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("thermal: could not remove {}", self.dir.display());
    }
}

/// Removes the groups a killed bench left (their pid is gone).
pub fn sweep_stale(cgroup_root: &Path) {
    let Ok(cpu) = cpu_hierarchy(cgroup_root) else { return };
    let base = match cpu {
        Cpu::V1(m) | Cpu::V2(m) => m,
    };
    let Ok(dir) = std::fs::read_dir(&base) else { return };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix(GROUP_PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let procs = std::fs::read_to_string(e.path().join("cgroup.procs")).unwrap_or_default();
        for p in procs.split_whitespace() {
            let _ = std::fs::write(base.join("cgroup.procs"), p);
        }
        let _ = std::fs::remove_dir(e.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_wise_climbs_while_hot_and_not_falling_and_steps_down_below_the_hysteresis() {
        let mut g = StepWise::new(78.0, 1.0, 10);
        assert_eq!(g.poll(70.0), 0);
        assert_eq!(g.poll(78.5), 1);
        assert_eq!(g.poll(79.0), 2);
        assert_eq!(g.poll(78.2), 2, "over the trip but falling: hold");
        assert_eq!(g.poll(77.5), 2, "inside the hysteresis: hold");
        assert_eq!(g.poll(76.5), 1);
        assert_eq!(g.poll(76.0), 0);
        assert_eq!(g.poll(75.0), 0);
        for _ in 0..20 {
            g.poll(90.0);
        }
        assert_eq!(g.poll(90.0), 10);
        assert!((g.share() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn batch_cap_steps_soft_then_hard_and_releases_only_below_the_hysteresis() {
        let mut b = BatchCap::for_limit(80.0);
        assert_eq!(b.poll(70.0), None);
        assert_eq!(b.poll(77.0), Some(0.5));
        assert_eq!(b.poll(76.5), Some(0.5), "between release and soft: hold");
        assert_eq!(b.poll(79.0), Some(0.1));
        assert_eq!(b.poll(77.5), Some(0.1), "hard holds until release");
        assert_eq!(b.poll(75.9), None);
    }

    #[test]
    fn a_group_caps_in_the_interface_the_machine_has() {
        let root = tempfile::tempdir().unwrap();
        // v2: cpu offered by the root and enabled for its children.
        std::fs::write(root.path().join("cgroup.controllers"), "cpuset cpu io\n").unwrap();
        std::fs::write(root.path().join("cgroup.subtree_control"), "cpuset cpu io\n").unwrap();
        let g = Group::create(root.path(), "t", 2).unwrap();
        assert_eq!(std::fs::read_to_string(g.dir.join("cpu.max")).unwrap(), "max 100000");
        g.cap(Some(0.25)).unwrap();
        assert_eq!(std::fs::read_to_string(g.dir.join("cpu.max")).unwrap(), "50000 100000");
        assert_eq!(g.enabled_cpu, None, "enabled already: nothing to undo");
        // A fixture directory holds files: rmdir (Drop) is for cgroupfs.
        std::mem::forget(g);
        // v2, a fresh root that enables nothing: the group enables cpu, and will disable it.
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpuset cpu io\n").unwrap();
        std::fs::write(root.path().join("cgroup.subtree_control"), "").unwrap();
        let g = Group::create(root.path(), "t", 2).unwrap();
        assert_eq!(std::fs::read_to_string(root.path().join("cgroup.subtree_control")).unwrap(), "+cpu");
        assert_eq!(g.enabled_cpu, Some(root.path().join("cgroup.subtree_control")));
        std::mem::forget(g);
        // v1: cpu/cpu.cfs_quota_us.
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("cpu")).unwrap();
        std::fs::write(root.path().join("cpu/cpu.cfs_quota_us"), "-1").unwrap();
        let g = Group::create(root.path(), "t", 2).unwrap();
        g.cap(Some(0.5)).unwrap();
        assert_eq!(std::fs::read_to_string(g.dir.join("cpu.cfs_quota_us")).unwrap(), "100000");
        std::mem::forget(g);
        let none = tempfile::tempdir().unwrap();
        assert!(Group::create(none.path(), "t", 2).is_err());
    }
}

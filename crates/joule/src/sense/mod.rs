//! Sensing: one Snapshot per period from one list of sources — telemetry's (procfs, sysfs,
//! cgroupfs, the models), then the eBPF ones (run-queue latency, runq.rs) and the thermal stage
//! (stage.rs), computed in the kernel from the sensor temperature or — on machines without a
//! sensor — the model temperature that user space feeds through the same in-kernel rule.
//! With `[net] flow_monitor`, the flow monitor (flow.rs) runs among the eBPF sources.
//! Shared by `joule agent` and `joule monitor`. Every snapshot says whether eBPF is on and, if
//! not, why; the caller decides whether a failed load is an error (`telemetry.bpf = true`)
//! or a reason to run without it (`"auto"`).

mod flow;
mod follow;
pub(crate) mod membership;
mod runq;
pub(crate) mod stage;

use anyhow::Context;
use joule_bpf::{RunqLat, ThermalStage};
use joule_core::config::{BpfMode, Config};
use joule_core::effects::RealEffects;
use joule_core::journal::Journal;
use joule_core::mounts::{self, PseudoFs};
use joule_core::snapshot::BpfStatus;
use joule_core::thermal_sensors;
use joule_core::Snapshot;
use runq::RunqSource;
use stage::{mc, PowerBudget, StageSource};

/// What to do with BPF.
pub enum Bpf<'a> {
    /// Do not load anything, for the reason given; the snapshot says so.
    Off(BpfOff),
    /// Load for this process only; nothing pinned, no bpffs needed (monitor).
    Private,
    /// Load and pin the stage map under the config's pin dir, mounting bpffs there first when
    /// it is missing; pins and mount recorded in the journal (agent).
    Pinned(&'a Journal),
}

/// Why eBPF is off: the user's choice (`--no-bpf`, `telemetry.bpf = false`), or, under
/// `telemetry.bpf = "auto"`, what this machine lacks (root, the kernel's BTF) or the kernel's
/// refusal of a program. `joule monitor` run by a non-root user also runs without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BpfOff {
    Flag,
    Config,
    NotRoot,
    NoBtf,
    LoadFailed,
}

/// What each mechanism does without eBPF, said with the reason it is off.
pub const WITHOUT_EBPF: &str = "no run-queue latency (per-task wait read from /proc); the thermal stage is computed in user space and not pinned for a scheduler; class membership is a /proc walk (each second, or each period for energy placement and elevation); a nap is left at the next period instead of at the first packet; no flow monitor";

impl BpfOff {
    const ALL: [BpfOff; 5] = [BpfOff::Flag, BpfOff::Config, BpfOff::NotRoot, BpfOff::NoBtf, BpfOff::LoadFailed];

    /// Why eBPF is off before anything is tried, if it is: the user's flag, then the config,
    /// then a caller without root.
    pub fn reason(no_bpf_flag: bool, cfg: &Config, root: bool) -> Option<BpfOff> {
        if no_bpf_flag {
            Some(BpfOff::Flag)
        } else if cfg.telemetry.bpf == BpfMode::Off {
            Some(BpfOff::Config)
        } else if !root {
            Some(BpfOff::NotRoot)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BpfOff::Flag => "flag",
            BpfOff::Config => "config",
            BpfOff::NotRoot => "not_root",
            BpfOff::NoBtf => "no_btf",
            BpfOff::LoadFailed => "load_failed",
        }
    }

    /// The reason [`Self::as_str`] names, for a snapshot's `off_reason`.
    pub fn parse(s: &str) -> Option<BpfOff> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }

    pub fn explain(self) -> &'static str {
        match self {
            BpfOff::Flag => "--no-bpf",
            BpfOff::Config => "telemetry.bpf = false",
            BpfOff::NotRoot => "not root; run as root for it",
            BpfOff::NoBtf => "this kernel has no BTF at /sys/kernel/btf/vmlinux; a kernel built with CONFIG_DEBUG_INFO_BTF=y has it",
            BpfOff::LoadFailed => "the kernel refused a program or the bpffs mount; the log has its words",
        }
    }
}

/// How a snapshot's notes begin the kernel's words when it refused a load.
pub const LOAD_FAILED_NOTE: &str = "eBPF load failed: ";

/// Whether a failed eBPF start is the kernel's refusal (no BTF, a verifier or attach error,
/// a bpffs mount it does not allow) rather than a pin directory joule must not use.
fn kernel_refused(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(c.downcast_ref::<joule_bpf::BpfError>(), Some(joule_bpf::BpfError::Unavailable(_) | joule_bpf::BpfError::Libbpf { .. }))
            || matches!(c.downcast_ref::<mounts::MountError>(), Some(mounts::MountError::Mount { .. }))
    })
}

pub struct Snapshotter {
    /// Every source, in the order they run: telemetry's, then eBPF's, then the stage.
    sampler: joule_telemetry::Sampler,
    status: BpfStatus,
    /// Why eBPF is off (None: on), and the kernel's words when it refused a load.
    off: Option<BpfOff>,
    load_error: Option<String>,
    /// What is missing or degraded about eBPF, repeated in every snapshot's notes.
    bpf_notes: Vec<String>,
    /// The in-kernel stage's change events, for a loop that sleeps through a nap.
    stage_waker: Option<joule_bpf::StageWaker>,
    /// The sensors the stage follows and its thresholds, as chosen at start.
    sensor_choice: thermal_sensors::SensorChoice,
}

impl Snapshotter {
    /// [`Self::new`] as `telemetry.bpf` asks: under `"auto"` a kernel that refuses a program
    /// (or the bpffs mount) gives the sources without eBPF, with the kernel's words in every
    /// snapshot's notes, after removing any pin already made, so no scheduler reads a stage
    /// nobody updates. A pin directory joule will not use (a user's symlink, a directory not
    /// root's) is an error under every setting. `telemetry.btf_path` holds for every program
    /// this process opens from here on.
    pub fn load(cfg: &Config, bpf: Bpf<'_>) -> anyhow::Result<Self> {
        joule_bpf::set_btf_path(Some(cfg.telemetry.btf_path.clone()).filter(|p| !p.as_os_str().is_empty()));
        let tried = !matches!(bpf, Bpf::Off(_));
        let pins = match &bpf {
            Bpf::Pinned(j) => Some(*j),
            _ => None,
        };
        match Self::new(cfg, bpf) {
            Ok(s) => Ok(s),
            Err(e) if tried && cfg.telemetry.bpf == BpfMode::Auto && kernel_refused(&e) => {
                if let Some(j) = pins {
                    j.restore_owner(joule_bpf::PIN_JOURNAL_OWNER, &RealEffects).context("while removing the pins of a failed eBPF start")?;
                }
                let mut s = Self::new(cfg, Bpf::Off(BpfOff::LoadFailed))?;
                let words = format!("{e:#}");
                s.bpf_notes.push(format!("{LOAD_FAILED_NOTE}{words}"));
                s.load_error = Some(words);
                Ok(s)
            }
            Err(e) if cfg.telemetry.bpf == BpfMode::Required => {
                Err(e.context("telemetry.bpf = true: eBPF must load (\"auto\" runs without it where the kernel refuses it)"))
            }
            Err(e) => Err(e.context("while loading eBPF")),
        }
    }

    /// Loads what `bpf` asks for and lists every source. When eBPF was asked for and cannot
    /// run, this is an error that says why; the agent under `"auto"` then starts again with
    /// [`Bpf::Off`] and the kernel's words (`note_bpf`), never a quiet fallback.
    pub fn new(cfg: &Config, bpf: Bpf<'_>) -> anyhow::Result<Self> {
        let t = &cfg.telemetry;
        // The sensors the stage follows and its thresholds, from the zones present now and the
        // board's firmware limit (the board is read where the zones are, so a test tree or the
        // bench's plant carries its own).
        let board = joule_core::board_limits::read(t.thermal_root(), &t.boot_root);
        let choice = thermal_sensors::choose_on(&joule_telemetry::thermal::read_once(t.thermal_root()), &cfg.thermal, board.as_ref());
        let thresholds_mc: Vec<i64> = choice.thresholds_celsius.iter().map(|c| mc(*c)).collect();
        let tp_zones: Vec<u32> = choice.used().filter_map(|n| n.strip_prefix("thermal_zone")?.parse().ok()).collect();
        let hysteresis_mc = mc(choice.hysteresis_celsius);
        let power = PowerBudget::new(&cfg.thermal.power_thresholds_watts, cfg.thermal.power_hysteresis_watts);
        let th = cfg.thermal.clone();
        let mut me = Self {
            sampler: joule_telemetry::Sampler::new(t),
            status: BpfStatus::default(),
            off: None,
            load_error: None,
            bpf_notes: vec![],
            stage_waker: None,
            sensor_choice: choice,
        };
        let (pin_dir, journal) = match bpf {
            Bpf::Off(why) => {
                me.status.off_reason = why.as_str().into();
                me.off = Some(why);
                me.bpf_notes.push(format!("eBPF off ({}): {WITHOUT_EBPF}", why.explain()));
                me.sampler.push(Box::new(StageSource::new(None, thresholds_mc, hysteresis_mc, power, th, None)));
                if cfg.net.flow_monitor {
                    me.bpf_notes.push(format!("[net] flow_monitor is on but eBPF is off ({}): no flow monitor", why.explain()));
                }
                return Ok(me);
            }
            Bpf::Private => (None, None),
            Bpf::Pinned(j) => (Some(t.bpf_pin_dir.clone()), Some(j)),
        };
        joule_bpf::probe()?;
        if let Some(dir) = &pin_dir {
            mounts::ensure(PseudoFs::Bpf, dir, &RealEffects, journal).context("while making sure the BPF pin directory is on bpffs")?;
        }
        let runq = RunqLat::load(joule_bpf::RunqLatOpts::for_root(&t.cgroup_root)).context("while loading the run-queue latency program")?;
        me.sampler.remove_source("task_wait");
        me.sampler.push(Box::new(RunqSource::new(runq, t.task_wait_top)));
        if cfg.net.flow_monitor {
            let layout = joule_core::cgroupfs::Layout::detect(&t.cgroup_root, &RealEffects);
            let cg2 =
                layout.unified.map(|u| u.dir).with_context(|| format!("[net] flow_monitor needs a cgroup2 hierarchy under {}", t.cgroup_root.display()))?;
            let mon = joule_bpf::FlowMonitor::load(&cg2).context("while loading the flow monitor")?;
            me.sampler.push(Box::new(flow::FlowSource::new(mon, cfg.net.top_n, std::time::Duration::from_millis(cfg.net.flow_period_ms))));
        }
        let tracepoint_zones = Some(tp_zones.into_iter().filter(|z| *z < joule_bpf::intf::JOULE_MAX_ZONES).collect::<Vec<_>>());
        let opts = joule_bpf::ThermalStageOpts {
            pin_dir: pin_dir.clone(),
            thresholds_mc: thresholds_mc.clone(),
            hysteresis_mc,
            tracepoint_zones: tracepoint_zones.clone(),
        };
        let ts = ThermalStage::load(opts, journal).context("while loading the in-kernel thermal stage")?;
        if let Some(e) = ts.tracepoint_error() {
            me.bpf_notes.push(format!("thermal/thermal_temperature did not attach ({e}): only the temperatures joule reads and feeds move the stage"));
        }
        me.stage_waker = Some(ts.stage_waker().context("while opening the thermal stage's change events")?);
        me.sampler.push(Box::new(StageSource::new(Some(ts), thresholds_mc, hysteresis_mc, power, th, tracepoint_zones)));
        me.status = BpfStatus { enabled: true, off_reason: String::new(), pin_dir: pin_dir.map(|p| p.display().to_string()) };
        Ok(me)
    }

    /// Why eBPF is off, if it is.
    pub fn bpf_off(&self) -> Option<BpfOff> {
        self.off
    }

    /// The kernel's words when it refused the load that `"auto"` then ran without.
    pub fn load_error(&self) -> Option<&str> {
        self.load_error.as_deref()
    }

    pub fn bpf_status(&self) -> &BpfStatus {
        &self.status
    }

    /// The sensors the stage follows and its thresholds, as chosen at start.
    pub fn sensor_choice(&self) -> &thermal_sensors::SensorChoice {
        &self.sensor_choice
    }

    /// The reader of the in-kernel stage's changes (once; None without eBPF).
    pub fn take_stage_waker(&mut self) -> Option<joule_bpf::StageWaker> {
        self.stage_waker.take()
    }

    /// Appends a source that runs after every other (the nap monitors).
    pub fn push_source(&mut self, source: Box<dyn joule_telemetry::Source + Send>) {
        self.sampler.push(source);
    }

    /// Names of the sources, in the order they run.
    pub fn source_names(&self) -> Vec<&'static str> {
        self.sampler.source_names()
    }

    pub fn sample(&mut self) -> Snapshot {
        let mut snap = self.sampler.sample();
        snap.bpf = self.status.clone();
        snap.notes.extend(self.bpf_notes.iter().cloned());
        snap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_ebpf_the_stage_runs_last_and_the_snapshot_says_why() {
        // This host has no CPU sensor: only a model the config lets act gives a stage.
        let mut cfg = Config::default();
        cfg.thermal.act_on_model = true;
        let mut sn = Snapshotter::new(&cfg, Bpf::Off(BpfOff::Config)).unwrap();
        let names = sn.source_names();
        assert_eq!(names.last(), Some(&"stage"), "{names:?}");
        assert!(names.contains(&"task_wait") && !names.contains(&"runq_latency"), "{names:?}");
        let snap = sn.sample();
        assert_eq!((snap.bpf.enabled, snap.bpf.off_reason.as_str()), (false, "config"));
        assert!(snap.notes.iter().any(|n| n.starts_with("eBPF off (telemetry.bpf = false)")), "{:?}", snap.notes);
        assert_eq!(snap.stage.computed_by, joule_core::snapshot::StageEngine::Userspace, "the model temperature gives a stage");
    }
}

//! Builds one Snapshot per period from the telemetry sampler and, where BPF works, the eBPF
//! programs: run-queue latency per cgroup, and the thermal stage computed in the kernel from
//! the sensor temperature or — on machines without a sensor — the model temperature that user
//! space feeds through the same in-kernel rule. Shared by `joule agent` and `joule monitor`.
//! eBPF is on unless the user turned it off; when it was asked for and cannot run, that is an
//! error, and every snapshot says whether it is on (`bpf`).

use anyhow::Context;
use joule_bpf::{RunqLat, ThermalStage};
use joule_core::config::Config;
use joule_core::effects::RealEffects;
use joule_core::journal::Journal;
use joule_core::mounts::{self, PseudoFs};
use joule_core::snapshot::{BpfStatus, Stage, StageEngine};
use joule_core::{Origin, Snapshot};

/// What to do with BPF.
pub enum Bpf<'a> {
    /// Do not load anything, for the reason given; the snapshot says so.
    Off(BpfOff),
    /// Load for this process only; nothing pinned, no bpffs needed (monitor).
    Private,
    /// Load and pin the stage map under the config's pin dir, mounting bpffs there first when
    /// it is missing; pins and mount recorded in the journal (agent).
    Pinned(&'a mut Journal),
}

/// Why eBPF is off. Only the user's choice (`--no-bpf`, `telemetry.bpf = false`) turns it off
/// in the agent; `joule monitor` run by a non-root user also runs without it, and says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BpfOff {
    Flag,
    Config,
    NotRoot,
}

impl BpfOff {
    pub fn as_str(self) -> &'static str {
        match self {
            BpfOff::Flag => "flag",
            BpfOff::Config => "config",
            BpfOff::NotRoot => "not_root",
        }
    }
    fn explain(self) -> &'static str {
        match self {
            BpfOff::Flag => "--no-bpf",
            BpfOff::Config => "telemetry.bpf = false",
            BpfOff::NotRoot => "not root; run as root for it",
        }
    }
}

pub struct Snapshotter {
    sampler: joule_telemetry::Sampler,
    runq: Option<RunqLat>,
    thermal: Option<ThermalStage>,
    thresholds_mc: Vec<i64>,
    hysteresis_mc: i64,
    /// Per-zone stages of the user-space fallback (only without the in-kernel program).
    fallback_stages: std::collections::HashMap<u32, u32>,
    task_wait_top: usize,
    status: BpfStatus,
    /// What is missing or degraded about eBPF, repeated in every snapshot's notes.
    bpf_notes: Vec<String>,
}

/// The in-kernel zone id of a sensor, from its name; None for a name joule does not know.
fn zone_id(name: &str) -> Option<u32> {
    if let Some(n) = name.strip_prefix("thermal_zone") {
        return n.parse().ok();
    }
    let (chip, chan) = name.split_once('/')?;
    let x: u32 = chip.strip_prefix("hwmon")?.parse().ok()?;
    let y: u32 = chan.strip_prefix("temp")?.parse().ok()?;
    (y < 64).then(|| joule_bpf::HWMON_ZONE_BASE + 64 * x + y)
}

fn mc(celsius: f64) -> i64 {
    (celsius * 1000.0).round() as i64
}

impl Snapshotter {
    /// Loads what `bpf` asks for. When eBPF was asked for and cannot run, this is an error that
    /// says why and what to do (`--no-bpf` is the way to run without it), never a quiet fallback.
    pub fn new(cfg: &Config, bpf: Bpf<'_>) -> anyhow::Result<Self> {
        let t = &cfg.telemetry;
        let sampler = joule_telemetry::Sampler::new(t);
        let thresholds_mc: Vec<i64> = cfg.thermal.stage_thresholds_celsius.iter().map(|c| mc(*c)).collect();
        let hysteresis_mc = mc(cfg.thermal.hysteresis_celsius);
        let mut me = Self {
            sampler,
            runq: None,
            thermal: None,
            thresholds_mc,
            hysteresis_mc,
            fallback_stages: Default::default(),
            task_wait_top: t.task_wait_top,
            status: BpfStatus::default(),
            bpf_notes: vec![],
        };
        let (pin_dir, journal) = match bpf {
            Bpf::Off(why) => {
                me.status.off_reason = why.as_str().into();
                me.bpf_notes.push(format!("eBPF off ({}): no run-queue latency; thermal stage computed in user space", why.explain()));
                return Ok(me);
            }
            Bpf::Private => (None, None),
            Bpf::Pinned(j) => (Some(t.bpf_pin_dir.clone()), Some(j)),
        };
        joule_bpf::probe()?;
        let mut journal = journal;
        if let Some(dir) = &pin_dir {
            mounts::ensure(PseudoFs::Bpf, dir, &RealEffects, journal.as_deref_mut()).context("while making sure the BPF pin directory is on bpffs")?;
        }
        let r = RunqLat::load(joule_bpf::RunqLatOpts::for_root(&t.cgroup_root)).context("while loading the run-queue latency program")?;
        // The kernel now accounts CPU wait per task as it happens, at a cost that grows with
        // the tasks that run, not with every thread on the machine.
        me.sampler.remove_source("task_wait");
        me.runq = Some(r);
        let opts = joule_bpf::ThermalStageOpts { pin_dir: pin_dir.clone(), thresholds_mc: me.thresholds_mc.clone(), hysteresis_mc };
        let ts = ThermalStage::load(opts, journal).context("while loading the in-kernel thermal stage")?;
        if let Some(e) = ts.tracepoint_error() {
            me.bpf_notes.push(format!("thermal/thermal_temperature did not attach ({e}): only the temperatures joule reads and feeds move the stage"));
        }
        me.thermal = Some(ts);
        me.status = BpfStatus { enabled: true, off_reason: String::new(), pin_dir: pin_dir.map(|p| p.display().to_string()) };
        Ok(me)
    }

    pub fn bpf_status(&self) -> &BpfStatus {
        &self.status
    }

    pub fn sample(&mut self) -> Snapshot {
        let mut snap = self.sampler.sample();
        if let Some(r) = self.runq.as_mut() {
            snap.runq_latency = r.sample();
            snap.task_wait = r.task_waits(self.task_wait_top);
        }
        snap.stage = self.stage(&snap);
        snap.bpf = self.status.clone();
        snap.notes.extend(self.bpf_notes.iter().cloned());
        snap
    }

    /// Every temperature the stage is computed from, with the zone id the in-kernel program
    /// keys it by: thermal_zoneN under N (the id the tracepoint reports), hwmonX/tempY under
    /// HWMON_ZONE_BASE + 64·X + Y (from the name, so a sensor that fails one read does not shift
    /// the others), or, with no sensor at all, the model under MODEL_ZONE.
    fn temperatures(snap: &Snapshot) -> Vec<(u32, f64, Origin)> {
        let sensors: Vec<_> = snap
            .thermal
            .zones
            .iter()
            .filter(|z| z.source == Origin::Sensor)
            .filter_map(|z| Some((zone_id(&z.name)?, z.temp_celsius, Origin::Sensor)))
            .collect();
        if !sensors.is_empty() {
            return sensors;
        }
        snap.thermal.model.iter().map(|m| (joule_bpf::MODEL_ZONE, m.temp_celsius, Origin::Model)).collect()
    }

    fn stage(&mut self, snap: &Snapshot) -> Stage {
        let temps = Self::temperatures(snap);
        if temps.is_empty() {
            return Stage::default();
        }
        if let Some(ts) = &self.thermal {
            // Thermal zones also reach the kernel program through the thermal tracepoint;
            // feeding what we read covers zones whose polling is off and hwmon sensors. Model
            // values only get there this way. The kernel takes the max over zones.
            let fed = temps.iter().try_for_each(|(zone, temp_c, origin)| {
                let src = if *origin == Origin::Sensor { joule_bpf::TempSource::Sensor } else { joule_bpf::TempSource::Model };
                ts.feed(*zone, mc(*temp_c), src)
            });
            match fed {
                Ok(()) => {
                    let r = ts.read();
                    return Stage {
                        value: r.stage,
                        temp_celsius: r.temp_mc as f64 / 1000.0,
                        computed_by: StageEngine::Ebpf,
                        temp_source: match r.source {
                            joule_bpf::TempSource::Sensor => Origin::Sensor,
                            joule_bpf::TempSource::Model => Origin::Model,
                            joule_bpf::TempSource::None => Origin::Unknown,
                        },
                    };
                }
                Err(e) => tracing::warn!("feeding the in-kernel thermal stage failed: {e}"),
            }
        }
        // The kernel program's rule, per zone, then the max over zones (highest stage, then
        // hottest), so both engines agree.
        let mut best: Option<(u32, f64, Origin)> = None;
        for (zone, temp_c, origin) in temps {
            let prev = self.fallback_stages.get(&zone).copied().unwrap_or(0);
            let st = joule_core::policy::thermal_stage(prev, mc(temp_c), &self.thresholds_mc, self.hysteresis_mc);
            self.fallback_stages.insert(zone, st);
            if best.is_none_or(|(bs, bt, _)| (st, temp_c) > (bs, bt)) {
                best = Some((st, temp_c, origin));
            }
        }
        let (value, temp_celsius, temp_source) = best.expect("non-empty");
        Stage { value, temp_celsius, computed_by: StageEngine::Userspace, temp_source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::snapshot::{ModelTemperature, ThermalZone};

    fn zone(name: &str, t: f64) -> ThermalZone {
        ThermalZone { name: name.into(), temp_celsius: t, source: Origin::Sensor, ..Default::default() }
    }

    #[test]
    fn every_sensor_is_fed_under_its_own_zone_id_and_the_model_only_without_sensors() {
        let mut s = Snapshot::default();
        s.thermal.model = Some(ModelTemperature { temp_celsius: 40.0, source: Origin::Model });
        assert_eq!(Snapshotter::temperatures(&s), vec![(joule_bpf::MODEL_ZONE, 40.0, Origin::Model)]);
        // hwmon1/temp1 failed its read this sample: hwmon1/temp2 keeps its own id.
        s.thermal.zones = vec![zone("thermal_zone3", 55.0), zone("hwmon1/temp2", 61.0), zone("weird", 70.0)];
        let ids: Vec<u32> = Snapshotter::temperatures(&s).iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![3, joule_bpf::HWMON_ZONE_BASE + 64 + 2]);
    }

    /// Regression: a stage computed from nothing read as `computed_by: ebpf`.
    #[test]
    fn with_no_temperature_the_stage_says_nobody_computed_it() {
        let cfg = joule_core::config::Config::default();
        let mut sn = Snapshotter::new(&cfg, Bpf::Off(BpfOff::Config)).unwrap();
        let st = sn.stage(&Snapshot::default());
        assert_eq!((st.value, st.computed_by, st.temp_source), (0, StageEngine::None, Origin::Unknown));
        let snap = sn.sample();
        assert_eq!((snap.bpf.enabled, snap.bpf.off_reason.as_str()), (false, "config"));
        assert!(snap.notes.iter().any(|n| n.starts_with("eBPF off (telemetry.bpf = false)")), "{:?}", snap.notes);
    }

    #[test]
    fn fallback_keeps_a_stage_per_zone_like_the_kernel_program() {
        let cfg = joule_core::config::Config::default(); // thresholds 70/80/90, hysteresis 3
        let mut sn = Snapshotter::new(&cfg, Bpf::Off(BpfOff::Flag)).unwrap();
        let mut s = Snapshot::default();
        s.thermal.zones = vec![zone("thermal_zone0", 71.0), zone("thermal_zone1", 40.0)];
        assert_eq!(sn.stage(&s).value, 1);
        // Zone 0 cools well below its exit point; zone 1 warms to 69 without reaching 70.
        // Applying the rule to the hottest temperature alone would keep stage 1 (69 ≥ 67).
        s.thermal.zones = vec![zone("thermal_zone0", 60.0), zone("thermal_zone1", 69.0)];
        let st = sn.stage(&s);
        assert_eq!((st.value, st.computed_by), (0, StageEngine::Userspace));
    }
}

//! Builds one Snapshot per period from the telemetry sampler and, where BPF works, the eBPF
//! programs: run-queue latency per cgroup, and the thermal stage computed in the kernel from
//! the sensor temperature or — on machines without a sensor — the model temperature that user
//! space feeds through the same in-kernel rule. Shared by `joule agent` and `joule monitor`.

use joule_bpf::{RunqLat, ThermalStage};
use joule_core::config::Config;
use joule_core::journal::Journal;
use joule_core::snapshot::{StageEngine, Stage};
use joule_core::{Origin, Snapshot};

/// What to do with BPF.
pub enum Bpf<'a> {
    /// Do not load anything (not root, or disabled in the config).
    Off,
    /// Load for this process only; nothing pinned (monitor).
    Private,
    /// Load and pin the stage map under the config's pin dir, recording pins in the journal
    /// (agent).
    Pinned(&'a mut Journal),
}

pub struct Snapshotter {
    sampler: joule_telemetry::Sampler,
    runq: Option<RunqLat>,
    thermal: Option<ThermalStage>,
    thresholds_mc: Vec<i64>,
    hysteresis_mc: i64,
    fallback_stage: u32,
    task_wait_top: usize,
    /// Why BPF parts are missing, repeated in every snapshot's notes.
    bpf_notes: Vec<String>,
}

fn mc(celsius: f64) -> i64 {
    (celsius * 1000.0).round() as i64
}

impl Snapshotter {
    pub fn new(cfg: &Config, bpf: Bpf<'_>) -> anyhow::Result<Self> {
        let t = &cfg.telemetry;
        let sampler = joule_telemetry::Sampler::new(t);
        let thresholds_mc: Vec<i64> = cfg.thermal.stage_thresholds_celsius.iter().map(|c| mc(*c)).collect();
        let hysteresis_mc = mc(cfg.thermal.hysteresis_celsius);
        let mut me = Self { sampler, runq: None, thermal: None, thresholds_mc, hysteresis_mc, fallback_stage: 0, task_wait_top: t.task_wait_top, bpf_notes: vec![] };
        let (pin_dir, journal) = match bpf {
            Bpf::Off => {
                me.bpf_notes.push("eBPF off: no run-queue latency; thermal stage computed in user space".into());
                return Ok(me);
            }
            Bpf::Private => (None, None),
            Bpf::Pinned(j) => (Some(t.bpf_pin_dir.clone()), Some(j)),
        };
        if let Err(e) = joule_bpf::probe() {
            tracing::warn!("eBPF unavailable, continuing without it: {e}");
            me.bpf_notes.push(format!("eBPF unavailable ({e}): no run-queue latency; thermal stage computed in user space"));
            return Ok(me);
        }
        match RunqLat::load(joule_bpf::RunqLatOpts::for_root(&t.cgroup_root)) {
            Ok(r) => {
                // The kernel now accounts CPU wait per task as it happens, at a cost that
                // grows with the tasks that run, not with every thread on the machine.
                me.sampler.remove_source("task_wait");
                me.runq = Some(r);
            }
            Err(e) => {
                tracing::warn!("run-queue latency program failed to load: {e}");
                me.bpf_notes.push(format!("run-queue latency unavailable: {e}"));
            }
        }
        let opts = joule_bpf::ThermalStageOpts { pin_dir, thresholds_mc: me.thresholds_mc.clone(), hysteresis_mc };
        match ThermalStage::load(opts, journal) {
            Ok(ts) => me.thermal = Some(ts),
            Err(e) => {
                tracing::warn!("thermal stage program failed to load: {e}");
                me.bpf_notes.push(format!("in-kernel thermal stage unavailable ({e}): computed in user space"));
            }
        }
        Ok(me)
    }

    pub fn bpf_loaded(&self) -> bool {
        self.runq.is_some() || self.thermal.is_some()
    }

    pub fn sample(&mut self) -> Snapshot {
        let mut snap = self.sampler.sample();
        if let Some(r) = self.runq.as_mut() {
            snap.runq_latency = r.sample();
            snap.task_wait = r.task_waits(self.task_wait_top);
        }
        snap.stage = self.stage(&snap);
        snap.notes.extend(self.bpf_notes.iter().cloned());
        snap
    }

    /// The hottest sensor, or the model temperature when there is no sensor.
    fn temperature(snap: &Snapshot) -> Option<(u32, f64, Origin)> {
        let hottest = snap
            .thermal
            .zones
            .iter()
            .enumerate()
            .filter(|(_, z)| z.source == Origin::Sensor)
            .max_by(|a, b| a.1.temp_celsius.total_cmp(&b.1.temp_celsius));
        if let Some((i, z)) = hottest {
            let id = z.name.strip_prefix("thermal_zone").and_then(|n| n.parse().ok()).unwrap_or(i as u32);
            return Some((id, z.temp_celsius, Origin::Sensor));
        }
        snap.thermal.model.as_ref().map(|m| (0, m.temp_celsius, Origin::Model))
    }

    fn stage(&mut self, snap: &Snapshot) -> Stage {
        let Some((zone, temp_c, origin)) = Self::temperature(snap) else {
            return Stage::default();
        };
        if let Some(ts) = &self.thermal {
            // Sensor zones also reach the kernel program through the thermal tracepoint; feeding
            // the value we read covers zones whose polling is off. Model values only get there
            // this way.
            let src = if origin == Origin::Sensor { joule_bpf::TempSource::Sensor } else { joule_bpf::TempSource::Model };
            match ts.feed(zone, mc(temp_c), src) {
                Ok(()) => {
                    let r = ts.read();
                    return Stage {
                        value: r.stage,
                        temp_celsius: r.temp_mc as f64 / 1000.0,
                        computed_by: StageEngine::Ebpf,
                        temp_source: if r.source == joule_bpf::TempSource::Sensor { Origin::Sensor } else { Origin::Model },
                    };
                }
                Err(e) => tracing::warn!("feeding the in-kernel thermal stage failed: {e}"),
            }
        }
        self.fallback_stage = joule_core::policy::thermal_stage(self.fallback_stage, mc(temp_c), &self.thresholds_mc, self.hysteresis_mc);
        Stage { value: self.fallback_stage, temp_celsius: temp_c, computed_by: StageEngine::Userspace, temp_source: origin }
    }
}

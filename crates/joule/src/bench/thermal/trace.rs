//! The bench's own temperature trace, the same in both modes: /proc/stat sampled by
//! joule-telemetry's cpu source, the power model and the RC thermal model of the generated
//! config (the agent's own code, not a copy), and any thermal sensor. The temperature is the
//! hottest sensor when there is one (the VM's ACPI zone), else the model — labelled so. The
//! stage is the agent's own reading when it runs, else `joule_core::policy::thermal_stage`
//! applied to this trace, which is the rule the agent applies.

use crate::sense::stage::mc;
use joule_core::config::Config;
use joule_core::{Origin, Snapshot};
use joule_telemetry::{CpuSource, PowerModel, RcThermalModel, Sampler, Source, ThermalSource};
use serde::Serialize;
use std::time::Instant;

/// One sample of a mode.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub t_s: f64,
    pub temp_celsius: f64,
    pub temp_source: Origin,
    pub stage: u32,
    /// `agent` (its /snapshot.json) or `rule` (the stage rule on this trace).
    pub stage_from: &'static str,
    /// The agent's own temperature behind its stage, where it answered.
    pub agent_temp_celsius: Option<f64>,
    /// The best-effort cap the agent's plan asks for, % of the machine.
    pub cap_pct: Option<f64>,
    pub power_watts: f64,
    /// Busy share of the whole machine, %.
    pub machine_busy_pct: f64,
    /// CPU used by the stress-ng workers over the last interval, % of the whole machine.
    pub stress_cpu_pct: f64,
}

/// What the agent said this sample (None in the default mode or when it did not answer).
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentReading {
    pub stage: Option<u32>,
    pub temp_celsius: Option<f64>,
    pub cap_pct: Option<f64>,
}

pub struct Tracer {
    sampler: Sampler,
    /// The sampler's monotonic clock (its intervals drive the model).
    clock_base: Instant,
    thresholds_mc: Vec<i64>,
    hysteresis_mc: i64,
    rule_stage: u32,
    start: Instant,
    ncpu: f64,
    last: Option<(Instant, f64)>,
}

/// The hottest sensor, else the model's temperature.
pub fn temperature(snap: &Snapshot) -> Option<(f64, Origin)> {
    let hottest = snap
        .thermal
        .zones
        .iter()
        .filter(|z| z.source == Origin::Sensor)
        .map(|z| z.temp_celsius)
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))));
    match hottest {
        Some(t) => Some((t, Origin::Sensor)),
        None => snap.thermal.model.as_ref().map(|m| (m.temp_celsius, Origin::Model)),
    }
}

impl Tracer {
    /// A trace over `procfs`/`sysfs` with `cfg`'s models and stage rule. The model starts at the
    /// steady state of the first power it sees (here: the machine before the loads start).
    pub fn new(cfg: &Config) -> Tracer {
        let t = &cfg.telemetry;
        let sources: Vec<Box<dyn Source + Send>> = vec![
            Box::new(CpuSource::new(&t.procfs_root)),
            Box::new(ThermalSource::new(&t.sysfs_root)),
            Box::new(PowerModel::new(&t.power_model)),
            Box::new(RcThermalModel::new(&t.thermal_model)),
        ];
        let mut sampler = Sampler::from_sources(sources);
        sampler.sample_at(joule_core::clock::now_ms(), 0); // the /proc/stat baseline
        Tracer {
            clock_base: Instant::now(),
            sampler,
            thresholds_mc: cfg.thermal.stage_thresholds_celsius.iter().map(|c| mc(*c)).collect(),
            hysteresis_mc: mc(cfg.thermal.hysteresis_celsius),
            rule_stage: 0,
            start: Instant::now(),
            ncpu: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
            last: None,
        }
    }

    /// Restarts the clock of `t_s` (when the loads start).
    pub fn zero_clock(&mut self) {
        self.start = Instant::now();
    }

    /// One sample: reads the machine, advances the model, applies the stage rule.
    /// `stress_cpu_s` is the stress-ng workers' CPU seconds so far.
    pub fn sample(&mut self, stress_cpu_s: f64, agent: AgentReading) -> Option<Point> {
        let ms = self.clock_base.elapsed().as_millis() as u64;
        self.sample_at_ms(ms, stress_cpu_s, agent)
    }

    /// [`Tracer::sample`] with the model's clock given (ms since the tracer was made).
    fn sample_at_ms(&mut self, monotonic_ms: u64, stress_cpu_s: f64, agent: AgentReading) -> Option<Point> {
        let snap = self.sampler.sample_at(joule_core::clock::now_ms(), monotonic_ms);
        let now = Instant::now();
        let (temp_celsius, temp_source) = temperature(&snap)?;
        self.rule_stage = joule_core::policy::thermal_stage(self.rule_stage, mc(temp_celsius), &self.thresholds_mc, self.hysteresis_mc);
        let stress_cpu_pct = match self.last {
            Some((t0, c0)) if now > t0 => ((stress_cpu_s - c0).max(0.0) / now.duration_since(t0).as_secs_f64() / self.ncpu * 100.0).min(100.0),
            _ => 0.0,
        };
        self.last = Some((now, stress_cpu_s));
        let (stage, stage_from) = match agent.stage {
            Some(s) => (s, "agent"),
            None => (self.rule_stage, "rule"),
        };
        Some(Point {
            t_s: now.duration_since(self.start).as_secs_f64(),
            temp_celsius,
            temp_source,
            stage,
            stage_from,
            agent_temp_celsius: agent.temp_celsius,
            cap_pct: agent.cap_pct,
            power_watts: snap.power.watts,
            machine_busy_pct: snap.cpu.total_utilization * 100.0,
            stress_cpu_pct,
        })
    }
}

/// Seconds spent in each stage (index = stage), each sample counting until the next.
pub fn stage_seconds(points: &[Point], stages: usize) -> Vec<f64> {
    let mut s = vec![0.0; stages];
    for w in points.windows(2) {
        let i = (w[0].stage as usize).min(stages - 1);
        s[i] += w[1].t_s - w[0].t_s;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::snapshot::{ModelTemperature, ThermalZone};

    fn pt(t_s: f64, stage: u32) -> Point {
        Point {
            t_s,
            temp_celsius: 40.0,
            temp_source: Origin::Model,
            stage,
            stage_from: "rule",
            agent_temp_celsius: None,
            cap_pct: None,
            power_watts: 0.0,
            machine_busy_pct: 0.0,
            stress_cpu_pct: 0.0,
        }
    }

    #[test]
    fn each_sample_counts_until_the_next_in_its_stage() {
        let p = [pt(0.0, 0), pt(0.2, 0), pt(0.4, 2), pt(1.0, 1), pt(1.2, 9)];
        let s = stage_seconds(&p, 4);
        let want = [0.4, 0.2, 0.6, 0.0];
        assert!(s.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-9), "{s:?}");
    }

    #[test]
    fn a_sensor_wins_over_the_model_and_is_labelled_so() {
        let mut s = Snapshot::default();
        assert_eq!(temperature(&s), None);
        s.thermal.model = Some(ModelTemperature { temp_celsius: 48.0, source: Origin::Model });
        assert_eq!(temperature(&s), Some((48.0, Origin::Model)));
        let z = |t| ThermalZone { name: "thermal_zone0".into(), temp_celsius: t, source: Origin::Sensor, ..Default::default() };
        s.thermal.zones = vec![z(61.0), z(65.0)];
        assert_eq!(temperature(&s), Some((65.0, Origin::Sensor)));
    }

    /// The trace integrates the crate's RC model on measured utilisation: on a fixture /proc
    /// with a known busy share, the temperature moves toward ambient + P·R exactly as the
    /// model's closed form says, and the stage follows the rule.
    #[test]
    fn the_trace_integrates_the_rc_model_on_measured_utilisation() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/proc-two-cpus");
        let proc = tempfile::tempdir().unwrap();
        let copy = |from: &str| {
            std::fs::copy(root.join(from).join("stat"), proc.path().join("stat")).unwrap();
        };
        copy("t0");
        let file = proc.path().join("joule.toml");
        std::fs::write(
            &file,
            "[telemetry]\nsysfs_root = \"/nonexistent\"\n[telemetry.power_model]\nidle_watts = 10.0\ncpu_dynamic_watts = 8.0\n\
             [telemetry.thermal_model]\nambient_celsius = 25.0\nresistance_celsius_per_watt = 1.0\ncapacitance_joules_per_celsius = 2.0\n\
             [thermal]\nstage_thresholds_celsius = [30.0, 60.0]\nhysteresis_celsius = 1.0\n",
        )
        .unwrap();
        let mut cfg = Config::load(&file).unwrap();
        cfg.telemetry.procfs_root = proc.path().to_path_buf();
        let mut tr = Tracer::new(&cfg);
        copy("t1");
        // One time constant (R·C = 2 s) later: 63 % of the way from where the model started (the
        // steady state of the baseline sample, whose /proc/stat shares are since boot: 1300 of
        // 5400 ticks busy on each CPU) to the steady state of the measured power.
        let p = tr.sample_at_ms(2000, 0.0, AgentReading::default()).unwrap();
        let busy: f64 = [0.75, 30.0 / 190.0].iter().sum();
        let watts = 10.0 + 8.0 * busy;
        assert!((p.power_watts - watts).abs() < 1e-9, "{} W vs {watts}", p.power_watts);
        let start = 25.0 + 10.0 + 8.0 * 2.0 * 1300.0 / 5400.0;
        let want = 25.0 + watts + (start - (25.0 + watts)) * (-1.0f64).exp();
        assert!((p.temp_celsius - want).abs() < 1e-9, "{} vs {want}", p.temp_celsius);
        assert_eq!((p.temp_source, p.stage, p.stage_from), (Origin::Model, 1, "rule"));
        // The agent's stage, where given, is what the point carries.
        let p = tr.sample_at_ms(2200, 0.0, AgentReading { stage: Some(2), temp_celsius: Some(61.0), cap_pct: Some(35.0) }).unwrap();
        assert_eq!((p.stage, p.stage_from, p.cap_pct), (2, "agent", Some(35.0)));
    }
}

//! The thermal stage as a source: it runs after the thermal sources and the model, and turns
//! their temperatures into the stage — in the kernel when the eBPF program is loaded (each
//! reading fed through the same rule the tracepoint runs), else by the same rule in user space.
//! Only the CPU sensors count (`joule_core::thermal_sensors`; the tracepoint is told which
//! zones those are), and a model — temperature or power — only with `act_on_model`.
//! A power budget (`thermal.power_thresholds_watts`) raises the stage through the same map:
//! the power stage is computed here, by the same rule on milliwatts, and fed to the kernel
//! program as a pseudo-zone (`POWER_ZONE`) whose "temperature" is that stage's threshold.

use joule_bpf::ThermalStage;
use joule_core::config::ThermalConfig;
use joule_core::snapshot::{Stage, StageDriver, StageEngine, StagePower};
use joule_core::thermal_sensors::choose_sensors;
use joule_core::{Origin, Snapshot};
use joule_telemetry::{Source, SourceError};
use std::collections::HashMap;

pub struct StageSource {
    /// The in-kernel stage; None: computed here.
    kernel: Option<ThermalStage>,
    thresholds_mc: Vec<i64>,
    hysteresis_mc: i64,
    /// Per-zone stages of the user-space rule (only without the in-kernel program).
    fallback_stages: HashMap<u32, u32>,
    power: Option<PowerBudget>,
    /// Which sensors count (`zones`) and whether a model may (`act_on_model`).
    th: ThermalConfig,
    /// The zones the in-kernel tracepoint was last told to count.
    tp_zones: Option<Vec<u32>>,
}

/// `thermal.power_thresholds_watts` in mW, and the power stage it gave last sample.
pub struct PowerBudget {
    pub thresholds_mw: Vec<i64>,
    pub hysteresis_mw: i64,
    stage: u32,
    /// The stage the in-kernel pseudo-zone holds (what was last fed).
    fed: u32,
}

impl PowerBudget {
    /// None when no power thresholds are configured.
    pub fn new(thresholds_watts: &[f64], hysteresis_watts: f64) -> Option<PowerBudget> {
        (!thresholds_watts.is_empty()).then(|| PowerBudget {
            thresholds_mw: thresholds_watts.iter().map(|w| mc(*w)).collect(),
            hysteresis_mw: mc(hysteresis_watts),
            stage: 0,
            fed: 0,
        })
    }
}

/// The stand-in temperature to feed under `POWER_ZONE` so that the kernel's rule (with the
/// temperature thresholds and hysteresis) moves that zone from stage `from` to stage `to`.
/// Rising or staying: `thresholds_mc[to-1]`. Stage 0: just under the lowest exit point
/// (`thresholds_mc[0] - hysteresis - 1`), which drops from any stage. Falling to `to > 0`:
/// `thresholds_mc[to] - hysteresis - 1`, at or above `thresholds_mc[to-1]` because config
/// validation keeps the hysteresis below every gap between thresholds. None without thresholds.
pub fn power_feed_mc(from: u32, to: u32, thresholds_mc: &[i64], hysteresis_mc: i64) -> Option<i64> {
    let first = *thresholds_mc.first()?;
    let to = (to as usize).min(thresholds_mc.len());
    Some(if to == 0 {
        first - hysteresis_mc - 1
    } else if to as u32 >= from {
        thresholds_mc[to - 1]
    } else {
        thresholds_mc[to] - hysteresis_mc - 1
    })
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

pub fn mc(celsius: f64) -> i64 {
    (celsius * 1000.0).round() as i64
}

impl StageSource {
    /// `tp_zones`: what the kernel program's tracepoint was loaded counting (its opts).
    pub fn new(
        kernel: Option<ThermalStage>,
        thresholds_mc: Vec<i64>,
        hysteresis_mc: i64,
        power: Option<PowerBudget>,
        th: ThermalConfig,
        tp_zones: Option<Vec<u32>>,
    ) -> StageSource {
        StageSource { kernel, thresholds_mc, hysteresis_mc, fallback_stages: HashMap::new(), power, th, tp_zones }
    }

    /// The power stage of this sample, when a budget is set and power was read.
    fn power_stage(&mut self, snap: &Snapshot) -> Option<StagePower> {
        let b = self.power.as_mut()?;
        let p = &snap.power;
        if p.source == Origin::Unknown || (p.source == Origin::Model && !self.th.act_on_model) {
            return None;
        }
        b.stage = joule_core::policy::thermal_stage(b.stage, mc(p.watts), &b.thresholds_mw, b.hysteresis_mw);
        Some(StagePower { stage: b.stage, watts: p.watts, source: p.source })
    }

    /// Every temperature the stage is computed from, with the zone id the in-kernel program
    /// keys it by: thermal_zoneN under N (the id the tracepoint reports), hwmonX/tempY under
    /// HWMON_ZONE_BASE + 64·X + Y (from the name, so a sensor that fails one read does not shift
    /// the others), or, with no CPU sensor and `act_on_model`, the model under MODEL_ZONE. Only
    /// the sensors `choose_sensors` uses: a drive's or a NIC's zone moves nothing.
    fn temperatures(snap: &Snapshot, th: &ThermalConfig) -> Vec<(u32, f64, Origin)> {
        let read: Vec<_> = snap.thermal.zones.iter().filter(|z| z.source == Origin::Sensor).cloned().collect();
        let sensors: Vec<_> = read
            .iter()
            .zip(choose_sensors(&read, th))
            .filter(|(_, u)| u.used)
            .filter_map(|(z, _)| Some((zone_id(&z.name)?, z.temp_celsius, Origin::Sensor)))
            .collect();
        if !sensors.is_empty() || !th.act_on_model {
            return sensors;
        }
        snap.thermal.model.iter().map(|m| (joule_bpf::MODEL_ZONE, m.temp_celsius, Origin::Model)).collect()
    }

    /// The thermal zones (tz->id) among `temps`, which the tracepoint should count.
    fn zone_ids(temps: &[(u32, f64, Origin)]) -> Vec<u32> {
        let mut ids: Vec<u32> = temps.iter().map(|t| t.0).filter(|id| *id < joule_bpf::intf::JOULE_MAX_ZONES).collect();
        ids.sort_unstable();
        ids
    }

    /// Feeds every temperature to the kernel program and reads the stage it computed.
    fn in_kernel(
        ts: &ThermalStage,
        temps: &[(u32, f64, Origin)],
        power: Option<(StagePower, &mut PowerBudget)>,
        rule: (&[i64], i64),
    ) -> Result<Stage, joule_bpf::BpfError> {
        // Thermal zones also reach the kernel program through the thermal tracepoint; feeding
        // what we read covers zones whose polling is off and hwmon sensors. Model values only
        // get there this way. The kernel takes the max over zones.
        for (zone, temp_c, origin) in temps {
            let src = if *origin == Origin::Sensor { joule_bpf::TempSource::Sensor } else { joule_bpf::TempSource::Model };
            ts.feed(*zone, mc(*temp_c), src)?;
        }
        let reading = power.as_ref().map(|(p, _)| *p);
        if let Some((p, b)) = power {
            if let Some(t) = power_feed_mc(b.fed, p.stage, rule.0, rule.1) {
                ts.feed(joule_bpf::POWER_ZONE, t, joule_bpf::TempSource::Power)?;
            }
            b.fed = p.stage;
        }
        let r = ts.read();
        let (temp_celsius, temp_source, driven_by) = match r.source {
            joule_bpf::TempSource::Sensor => (r.temp_mc as f64 / 1000.0, Origin::Sensor, StageDriver::Temperature),
            joule_bpf::TempSource::Model => (r.temp_mc as f64 / 1000.0, Origin::Model, StageDriver::Temperature),
            // The kernel's "temperature" is the power stage's stand-in: report the real one.
            joule_bpf::TempSource::Power => {
                let (t, o) = Self::hottest(temps);
                (t, o, StageDriver::Power)
            }
            joule_bpf::TempSource::None => (r.temp_mc as f64 / 1000.0, Origin::Unknown, StageDriver::Temperature),
        };
        Ok(Stage { value: r.stage, temp_celsius, computed_by: StageEngine::Ebpf, temp_source, driven_by, power: reading })
    }

    /// The hottest temperature read, with its origin (0 °C, unknown, when none was).
    fn hottest(temps: &[(u32, f64, Origin)]) -> (f64, Origin) {
        temps.iter().map(|t| (t.1, t.2)).max_by(|a, b| a.0.total_cmp(&b.0)).unwrap_or((0.0, Origin::Unknown))
    }

    /// The kernel program's rule, per zone, then the max over zones (highest stage, then
    /// hottest), so both engines agree.
    fn in_user_space(&mut self, temps: Vec<(u32, f64, Origin)>, power: Option<StagePower>) -> Stage {
        let mut best: Option<(u32, f64, Origin)> = None;
        for (zone, temp_c, origin) in temps {
            let prev = self.fallback_stages.get(&zone).copied().unwrap_or(0);
            let st = joule_core::policy::thermal_stage(prev, mc(temp_c), &self.thresholds_mc, self.hysteresis_mc);
            self.fallback_stages.insert(zone, st);
            if best.is_none_or(|(bs, bt, _)| (st, temp_c) > (bs, bt)) {
                best = Some((st, temp_c, origin));
            }
        }
        let (value, temp_celsius, temp_source) = best.unwrap_or((0, 0.0, Origin::Unknown));
        let mut st = Stage { value, temp_celsius, computed_by: StageEngine::Userspace, temp_source, driven_by: StageDriver::Temperature, power };
        if let Some(p) = power.filter(|p| p.stage > value) {
            (st.value, st.driven_by) = (p.stage, StageDriver::Power);
        }
        st
    }

    pub fn stage(&mut self, snap: &Snapshot) -> Result<Stage, SourceError> {
        let temps = Self::temperatures(snap, &self.th);
        let power = self.power_stage(snap);
        if let Some(ts) = self.kernel.as_mut() {
            // The tracepoint counts the chosen zones only (none when no zone is chosen).
            let ids = Self::zone_ids(&temps);
            if self.tp_zones.as_ref() != Some(&ids) {
                ts.set_tracepoint_zones(Some(ids.as_slice()))
                    .map_err(|e| SourceError::Other(format!("telling the thermal tracepoint which zones count: {e}")))?;
                self.tp_zones = Some(ids);
            }
        }
        if temps.is_empty() && power.is_none() {
            return Ok(Stage::default());
        }
        match &self.kernel {
            Some(ts) => {
                let budget = power.zip(self.power.as_mut());
                Self::in_kernel(ts, &temps, budget, (&self.thresholds_mc, self.hysteresis_mc))
                    .map_err(|e| SourceError::Other(format!("feeding the in-kernel thermal stage: {e}")))
            }
            None => Ok(self.in_user_space(temps, power)),
        }
    }
}

impl Source for StageSource {
    fn name(&self) -> &'static str {
        "stage"
    }
    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        snap.stage = self.stage(snap)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::snapshot::{ModelTemperature, ThermalZone};

    fn zone(name: &str, t: f64) -> ThermalZone {
        ThermalZone { name: name.into(), kind: "cpu-thermal".into(), temp_celsius: t, source: Origin::Sensor, ..Default::default() }
    }

    fn user_space() -> StageSource {
        StageSource::new(None, vec![70_000, 80_000, 90_000], 3_000, None, cpu_only(), None)
    }

    fn cpu_only() -> ThermalConfig {
        ThermalConfig::default()
    }

    fn on_model() -> ThermalConfig {
        ThermalConfig { act_on_model: true, ..ThermalConfig::default() }
    }

    /// Replays the kernel's rule on what `power_feed_mc` feeds, for every move between stages.
    #[test]
    fn power_feeds_land_the_pseudo_zone_on_the_power_stage_from_any_stage() {
        let (thr, hyst) = (vec![70_000, 80_000, 90_000], 3_000);
        for from in 0..=3u32 {
            for to in 0..=3u32 {
                let t = power_feed_mc(from, to, &thr, hyst).expect("thresholds given");
                let got = joule_core::policy::thermal_stage(from, t, &thr, hyst);
                assert_eq!(got, to, "{from} -> {to} with {thr:?} ± {hyst}: fed {t}");
            }
        }
        assert_eq!(power_feed_mc(0, 2, &[70_000, 80_000], 3_000), Some(80_000), "stage k: threshold k-1");
        assert_eq!(power_feed_mc(2, 0, &[70_000, 80_000], 3_000), Some(66_999), "stage 0: under the lowest exit point");
        assert_eq!(power_feed_mc(0, 1, &[], 3_000), None);
        // One feed always lands because validation refuses thresholds closer than the hysteresis.
        let tight = joule_core::config::Config::parse("[thermal]\nstage_thresholds_celsius = [50.0, 51.0]\nhysteresis_celsius = 3.0\n");
        assert!(tight.is_err(), "a table one feed cannot serve passed validation");
    }

    #[test]
    fn power_raises_the_stage_with_its_own_hysteresis_and_says_so() {
        let mut src = StageSource::new(None, vec![70_000, 80_000, 90_000], 3_000, PowerBudget::new(&[10.0, 20.0, 30.0], 2.0), on_model(), None);
        let mut s = Snapshot::default();
        s.thermal.zones = vec![zone("thermal_zone0", 72.0)];
        s.power.watts = 25.0;
        s.power.source = Origin::Model;
        let st = src.stage(&s).unwrap();
        assert_eq!((st.value, st.driven_by, st.temp_celsius, st.temp_source), (2, StageDriver::Power, 72.0, Origin::Sensor));
        assert_eq!(st.power, Some(StagePower { stage: 2, watts: 25.0, source: Origin::Model }));
        // 18.5 W is within the 2 W hysteresis of 20 W: the power stage holds at 2.
        s.power.watts = 18.5;
        assert_eq!(src.stage(&s).unwrap().value, 2);
        // Under 18 W it falls to 1, the temperature's stage: temperature holds it now.
        s.power.watts = 17.0;
        let st = src.stage(&s).unwrap();
        assert_eq!((st.value, st.driven_by), (1, StageDriver::Temperature));
        // No power reading: the budget does not move the stage and says nothing.
        s.power.source = Origin::Unknown;
        assert_eq!(src.stage(&s).unwrap().power, None);
    }

    #[test]
    fn every_sensor_is_fed_under_its_own_zone_id_and_the_model_only_without_sensors() {
        let mut s = Snapshot::default();
        s.thermal.model = Some(ModelTemperature { temp_celsius: 40.0, source: Origin::Model });
        assert_eq!(StageSource::temperatures(&s, &on_model()), vec![(joule_bpf::MODEL_ZONE, 40.0, Origin::Model)]);
        // hwmon1/temp1 failed its read this sample: hwmon1/temp2 keeps its own id.
        s.thermal.zones = vec![zone("thermal_zone3", 55.0), zone("hwmon1/temp2", 61.0), zone("weird", 70.0)];
        let temps = StageSource::temperatures(&s, &on_model());
        let ids: Vec<u32> = temps.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![3, joule_bpf::HWMON_ZONE_BASE + 64 + 2]);
        assert_eq!(StageSource::zone_ids(&temps), vec![3], "the tracepoint counts thermal zones only");
    }

    fn hot_snapshot(kind: &str) -> Snapshot {
        let mut s = Snapshot::default();
        s.thermal.zones =
            vec![ThermalZone { name: "thermal_zone0".into(), kind: kind.into(), temp_celsius: 95.0, source: Origin::Sensor, ..Default::default() }];
        s.thermal.model = Some(ModelTemperature { temp_celsius: 190.0, source: Origin::Model });
        s
    }

    /// The measurement: an nvme zone at 95 °C put the stage at 3.
    #[test]
    fn an_nvme_or_nic_zone_at_95_changes_no_stage_and_a_cpu_zone_does() {
        for kind in ["nvme", "iwlwifi_1", "gpu-thermal"] {
            let st = user_space().stage(&hot_snapshot(kind)).unwrap();
            assert_eq!((st.value, st.computed_by), (0, StageEngine::None), "{kind}: {st:?}");
        }
        for kind in ["cpu-thermal", "x86_pkg_temp", "acpitz"] {
            let st = user_space().stage(&hot_snapshot(kind)).unwrap();
            assert_eq!((st.value, st.temp_source), (3, Origin::Sensor), "{kind}: {st:?}");
        }
    }

    /// A busy VM's model at 190 °C: reported, never acted on unless told.
    #[test]
    fn a_model_temperature_changes_no_stage_unless_act_on_model() {
        let mut s = hot_snapshot("nvme");
        s.thermal.zones.clear();
        let st = user_space().stage(&s).unwrap();
        assert_eq!((st.value, st.computed_by), (0, StageEngine::None), "{st:?}");
        let mut told = StageSource::new(None, vec![70_000, 80_000, 90_000], 3_000, None, on_model(), None);
        let st = told.stage(&s).unwrap();
        assert_eq!((st.value, st.temp_source), (3, Origin::Model), "{st:?}");
        // A power budget on a modelled power reading: the same rule.
        let mut budget = StageSource::new(None, vec![70_000, 80_000, 90_000], 3_000, PowerBudget::new(&[1.0, 2.0, 3.0], 0.5), cpu_only(), None);
        s.power.watts = 50.0;
        s.power.source = Origin::Model;
        assert_eq!(budget.stage(&s).unwrap().value, 0, "modelled watts moved the stage");
        s.power.source = Origin::Sensor;
        assert_eq!(budget.stage(&s).unwrap().value, 3, "measured watts over the budget");
    }

    /// Regression: a stage computed from nothing read as `computed_by: ebpf`.
    #[test]
    fn with_no_temperature_the_stage_says_nobody_computed_it() {
        let st = user_space().stage(&Snapshot::default()).unwrap();
        assert_eq!((st.value, st.computed_by, st.temp_source), (0, StageEngine::None, Origin::Unknown));
    }

    #[test]
    fn fallback_keeps_a_stage_per_zone_like_the_kernel_program() {
        let mut src = user_space();
        let mut s = Snapshot::default();
        s.thermal.zones = vec![zone("thermal_zone0", 71.0), zone("thermal_zone1", 40.0)];
        assert_eq!(src.stage(&s).unwrap().value, 1);
        // Zone 0 cools well below its exit point; zone 1 warms to 69 without reaching 70.
        // Applying the rule to the hottest temperature alone would keep stage 1 (69 ≥ 67).
        s.thermal.zones = vec![zone("thermal_zone0", 60.0), zone("thermal_zone1", 69.0)];
        let st = src.stage(&s).unwrap();
        assert_eq!((st.value, st.computed_by), (0, StageEngine::Userspace));
    }
}

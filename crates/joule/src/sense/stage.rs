//! The thermal stage as a source: it runs after the thermal sources and the model, and turns
//! their temperatures into the stage — in the kernel when the eBPF program is loaded (each
//! reading fed through the same rule the tracepoint runs), else by the same rule in user space.

use joule_bpf::ThermalStage;
use joule_core::snapshot::{Stage, StageEngine};
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
    pub fn new(kernel: Option<ThermalStage>, thresholds_mc: Vec<i64>, hysteresis_mc: i64) -> StageSource {
        StageSource { kernel, thresholds_mc, hysteresis_mc, fallback_stages: HashMap::new() }
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

    /// Feeds every temperature to the kernel program and reads the stage it computed.
    fn in_kernel(ts: &ThermalStage, temps: &[(u32, f64, Origin)]) -> Result<Stage, joule_bpf::BpfError> {
        // Thermal zones also reach the kernel program through the thermal tracepoint; feeding
        // what we read covers zones whose polling is off and hwmon sensors. Model values only
        // get there this way. The kernel takes the max over zones.
        for (zone, temp_c, origin) in temps {
            let src = if *origin == Origin::Sensor { joule_bpf::TempSource::Sensor } else { joule_bpf::TempSource::Model };
            ts.feed(*zone, mc(*temp_c), src)?;
        }
        let r = ts.read();
        let temp_source = match r.source {
            joule_bpf::TempSource::Sensor => Origin::Sensor,
            joule_bpf::TempSource::Model => Origin::Model,
            joule_bpf::TempSource::None => Origin::Unknown,
        };
        Ok(Stage { value: r.stage, temp_celsius: r.temp_mc as f64 / 1000.0, computed_by: StageEngine::Ebpf, temp_source })
    }

    /// The kernel program's rule, per zone, then the max over zones (highest stage, then
    /// hottest), so both engines agree.
    fn in_user_space(&mut self, temps: Vec<(u32, f64, Origin)>) -> Stage {
        let mut best: Option<(u32, f64, Origin)> = None;
        for (zone, temp_c, origin) in temps {
            let prev = self.fallback_stages.get(&zone).copied().unwrap_or(0);
            let st = joule_core::policy::thermal_stage(prev, mc(temp_c), &self.thresholds_mc, self.hysteresis_mc);
            self.fallback_stages.insert(zone, st);
            if best.is_none_or(|(bs, bt, _)| (st, temp_c) > (bs, bt)) {
                best = Some((st, temp_c, origin));
            }
        }
        let Some((value, temp_celsius, temp_source)) = best else { return Stage::default() };
        Stage { value, temp_celsius, computed_by: StageEngine::Userspace, temp_source }
    }

    pub fn stage(&mut self, snap: &Snapshot) -> Result<Stage, SourceError> {
        let temps = Self::temperatures(snap);
        if temps.is_empty() {
            return Ok(Stage::default());
        }
        match &self.kernel {
            Some(ts) => Self::in_kernel(ts, &temps).map_err(|e| SourceError::Other(format!("feeding the in-kernel thermal stage: {e}"))),
            None => Ok(self.in_user_space(temps)),
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
        ThermalZone { name: name.into(), temp_celsius: t, source: Origin::Sensor, ..Default::default() }
    }

    fn user_space() -> StageSource {
        StageSource::new(None, vec![70_000, 80_000, 90_000], 3_000)
    }

    #[test]
    fn every_sensor_is_fed_under_its_own_zone_id_and_the_model_only_without_sensors() {
        let mut s = Snapshot::default();
        s.thermal.model = Some(ModelTemperature { temp_celsius: 40.0, source: Origin::Model });
        assert_eq!(StageSource::temperatures(&s), vec![(joule_bpf::MODEL_ZONE, 40.0, Origin::Model)]);
        // hwmon1/temp1 failed its read this sample: hwmon1/temp2 keeps its own id.
        s.thermal.zones = vec![zone("thermal_zone3", 55.0), zone("hwmon1/temp2", 61.0), zone("weird", 70.0)];
        let ids: Vec<u32> = StageSource::temperatures(&s).iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![3, joule_bpf::HWMON_ZONE_BASE + 64 + 2]);
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

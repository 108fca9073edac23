//! What thermal.bpf.c reports: the machine-wide stage (`thermal_stage`) and each zone's last
//! reading (`thermal_zones`), decoded from map values, with where each temperature came from.

use crate::error::{bpf, BpfError};
use crate::intf::{joule_stage, joule_zone_state, JOULE_TEMP_MODEL, JOULE_TEMP_NONE, JOULE_TEMP_POWER, JOULE_TEMP_SENSOR};
use crate::pod::from_bytes;
use libbpf_rs::{MapCore, MapFlags};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TempSource {
    Sensor,
    Model,
    /// The power budget's pseudo-zone: the "temperature" is the threshold of the power stage.
    Power,
    /// No reading has reached this entry yet (or it holds a value this joule does not know).
    None,
}

impl TempSource {
    pub(crate) fn to_raw(self) -> u32 {
        match self {
            TempSource::Sensor => JOULE_TEMP_SENSOR,
            TempSource::Model => JOULE_TEMP_MODEL,
            TempSource::Power => JOULE_TEMP_POWER,
            TempSource::None => JOULE_TEMP_NONE,
        }
    }
    fn from_raw(raw: u32) -> Self {
        match raw {
            JOULE_TEMP_SENSOR => TempSource::Sensor,
            JOULE_TEMP_MODEL => TempSource::Model,
            JOULE_TEMP_POWER => TempSource::Power,
            _ => TempSource::None,
        }
    }
}

/// The machine-wide stage, as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageReading {
    pub stage: u32,
    /// Temperature of the zone that set the stage.
    pub temp_mc: i64,
    pub zone: u32,
    pub source: TempSource,
    /// Stage changes since load.
    pub transitions: u64,
    /// CLOCK_MONOTONIC ns of the last reading (0: none yet).
    pub updated_ns: u64,
}

impl StageReading {
    /// Decodes a value of the `thermal_stage` map (for readers of the pinned map).
    pub fn from_map_value(bytes: &[u8]) -> Option<StageReading> {
        let s: joule_stage = from_bytes(bytes)?;
        Some(StageReading {
            stage: s.stage,
            temp_mc: s.temp_mc,
            zone: s.zone,
            source: TempSource::from_raw(s.source),
            transitions: s.transitions,
            updated_ns: s.updated_ns,
        })
    }
}

/// The last reading of one zone and that zone's own stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneReading {
    pub zone: u32,
    pub temp_mc: i64,
    pub stage: u32,
    pub source: TempSource,
    pub updated_ns: u64,
}

impl ZoneReading {
    /// Decodes one `thermal_zones` entry.
    fn from_map_entry(key: &[u8], value: &[u8]) -> Option<ZoneReading> {
        let zone: u32 = from_bytes(key)?;
        let z: joule_zone_state = from_bytes(value)?;
        Some(ZoneReading { zone, temp_mc: z.temp_mc, stage: z.stage, source: TempSource::from_raw(z.source), updated_ns: z.updated_ns })
    }
}

/// The one entry of a `thermal_stage` map (the loader's, or a pinned one).
pub(crate) fn read_stage(map: &dyn MapCore) -> Result<StageReading, BpfError> {
    let v = bpf("reading thermal_stage", map.lookup(&0u32.to_ne_bytes(), MapFlags::ANY))?;
    v.as_deref().and_then(StageReading::from_map_value).ok_or_else(|| BpfError::Unavailable("thermal_stage holds no value of this joule's layout".into()))
}

/// Every zone of a `thermal_zones` map, by zone id.
pub(crate) fn read_zones(map: &dyn MapCore) -> Vec<ZoneReading> {
    let mut out: Vec<ZoneReading> = map.keys().filter_map(|k| ZoneReading::from_map_entry(&k, &map.lookup(&k, MapFlags::ANY).ok()??)).collect();
    out.sort_by_key(|z| z.zone);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::as_bytes;

    #[test]
    fn stage_value_decodes_from_map_bytes() {
        let s = joule_stage { stage: 2, zone: 7, temp_mc: 81_500, source: JOULE_TEMP_MODEL, transitions: 3, ..Default::default() };
        let r = StageReading::from_map_value(as_bytes(&s)).unwrap();
        assert_eq!((r.stage, r.zone, r.temp_mc, r.source, r.transitions), (2, 7, 81_500, TempSource::Model, 3));
        assert!(StageReading::from_map_value(&[0u8; 3]).is_none());
    }

    #[test]
    fn zone_entry_decodes_from_key_and_value_bytes() {
        let z = joule_zone_state { temp_mc: 66_000, updated_ns: 9, stage: 1, source: JOULE_TEMP_SENSOR };
        let r = ZoneReading::from_map_entry(&5u32.to_ne_bytes(), as_bytes(&z)).unwrap();
        assert_eq!(r, ZoneReading { zone: 5, temp_mc: 66_000, stage: 1, source: TempSource::Sensor, updated_ns: 9 });
        assert!(ZoneReading::from_map_entry(&5u64.to_ne_bytes(), as_bytes(&z)).is_none(), "a key of another layout");
    }

    /// Regression: an all-zero entry (a stage map no one has written yet) decoded as `sensor`.
    #[test]
    fn an_unwritten_stage_entry_has_no_source() {
        let r = StageReading::from_map_value(as_bytes(&joule_stage::default())).unwrap();
        assert_eq!((r.source, r.updated_ns), (TempSource::None, 0));
        assert_eq!(TempSource::from_raw(TempSource::Sensor.to_raw()), TempSource::Sensor);
        assert_eq!(TempSource::from_raw(TempSource::Power.to_raw()), TempSource::Power);
        assert_eq!(TempSource::from_raw(99), TempSource::None);
    }
}

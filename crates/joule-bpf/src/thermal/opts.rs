//! What `ThermalStage::load` is told: where to pin, the thresholds and the hysteresis, checked
//! here before anything goes into the kernel and turned into `thermal_config`'s value.

use crate::error::BpfError;
use crate::intf::{joule_thermal_config, JOULE_MAX_STAGES, JOULE_MAX_ZONES};
use std::path::PathBuf;

/// How long a zone counts in the machine-wide stage after its last reading, unless
/// `ThermalStage::set_stale_ms` says otherwise: 10 s, ten of the kernel's usual 1 s polls of a
/// thermal zone and many of the agent's samples, each of which feeds every sensor it reads.
pub const DEFAULT_STALE_MS: u64 = 10_000;

#[derive(Debug, Clone)]
pub struct ThermalStageOpts {
    /// Where the maps are pinned (the agent uses `telemetry.bpf_pin_dir`, `/sys/fs/bpf/joule`
    /// by default) so a sched_ext scheduler can
    /// read the stage; `None` keeps them private to this process (tests, benchmarks, or a
    /// machine without bpffs): the stage still works, only other processes cannot see it.
    pub pin_dir: Option<PathBuf>,
    /// Stage n (1..=8) starts at `thresholds_mc[n-1]`; strictly ascending.
    pub thresholds_mc: Vec<i64>,
    /// A stage is left only below its threshold minus this, so a temperature hovering at a
    /// threshold does not flap the scheduler between stages.
    pub hysteresis_mc: i64,
    /// The thermal zones (`tz->id`, below `JOULE_MAX_ZONES`) whose tracepoint readings count;
    /// None: every zone's. Set before the tracepoint attaches, so a zone left out never moves
    /// the stage, not even for its first reading; `ThermalStage::set_tracepoint_zones` changes it.
    pub tracepoint_zones: Option<Vec<u32>>,
}

/// The `thermal_config` value of `opts`, with [`DEFAULT_STALE_MS`], or what is wrong with them.
pub(crate) fn validate(opts: &ThermalStageOpts) -> Result<joule_thermal_config, BpfError> {
    let t = &opts.thresholds_mc;
    if t.is_empty() || t.len() > JOULE_MAX_STAGES as usize {
        return Err(BpfError::Config(format!("need 1 to {JOULE_MAX_STAGES} thresholds, got {}", t.len())));
    }
    if let Some(w) = t.windows(2).find(|w| w[0] >= w[1]) {
        return Err(BpfError::Config(format!("thresholds must ascend strictly ({} mC then {} mC)", w[0], w[1])));
    }
    if opts.hysteresis_mc < 0 {
        return Err(BpfError::Config(format!("hysteresis {} mC is negative", opts.hysteresis_mc)));
    }
    if let Some(z) = opts.tracepoint_zones.iter().flatten().find(|z| **z >= JOULE_MAX_ZONES) {
        return Err(BpfError::Config(format!("thermal zone {z} is past the {JOULE_MAX_ZONES} the tracepoint filter holds")));
    }
    let mut cfg = joule_thermal_config {
        hysteresis_mc: opts.hysteresis_mc,
        stale_ns: stale_ns(DEFAULT_STALE_MS),
        nr_thresholds: t.len() as u32,
        tp_filter: u32::from(opts.tracepoint_zones.is_some()),
        ..Default::default()
    };
    cfg.thresholds_mc[..t.len()].copy_from_slice(t);
    Ok(cfg)
}

/// The kernel compares ages as signed 64-bit ns; 0 stays 0 (never stale).
pub(crate) fn stale_ns(stale_ms: u64) -> u64 {
    stale_ms.saturating_mul(1_000_000).min(i64::MAX as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(t: &[i64], h: i64) -> ThermalStageOpts {
        ThermalStageOpts { pin_dir: None, thresholds_mc: t.to_vec(), hysteresis_mc: h, tracepoint_zones: None }
    }

    #[test]
    fn config_is_validated_before_anything_is_loaded() {
        assert!(validate(&opts(&[], 0)).is_err());
        assert!(validate(&opts(&[70_000, 70_000], 0)).is_err());
        assert!(validate(&opts(&[70_000], -1)).is_err());
        assert!(validate(&opts(&[1; 9], 0)).is_err());
        let cfg = validate(&opts(&[70_000, 80_000, 90_000], 3_000)).unwrap();
        assert_eq!((cfg.nr_thresholds, cfg.thresholds_mc[2], cfg.thresholds_mc[3]), (3, 90_000, 0));
        assert_eq!(cfg.stale_ns, DEFAULT_STALE_MS * 1_000_000);
        assert_eq!((stale_ns(0), stale_ns(300), stale_ns(u64::MAX)), (0, 300_000_000, i64::MAX as u64));
    }
}

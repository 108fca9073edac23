//! An energy model written down rather than read from the kernel: `[[energy.domain]]` in the
//! agent config, or the same `[[domain]]` tables in a file of their own (the shipped
//! `deploy/energy/odroid-xu4.toml`). A domain gives its capacity directly or as the device
//! tree's `capacity-dmips-mhz` (normalised across domains the way the kernel does:
//! dmips × max MHz, the biggest = 1024), and each OPP its power directly or as the device
//! tree's voltage with the domain's `dynamic-power-coefficient` (the kernel's
//! `P = C × V² × f`, `drivers/opp/of.c`), so a file can carry exactly the published numbers.

use super::{EnergyError, EnergyModel, Opp, PerfDomain, CAPACITY_SCALE};
use crate::Origin;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OppSpec {
    pub frequency_khz: u64,
    /// Power of one CPU busy at this OPP, mW. Else from `voltage_uv` and the domain's
    /// `dynamic_power_coefficient`.
    #[serde(default)]
    pub power_mw: Option<f64>,
    #[serde(default)]
    pub voltage_uv: Option<u64>,
    /// Capacity at this OPP; default: the domain's capacity × frequency / its highest frequency.
    #[serde(default)]
    pub capacity: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainSpec {
    pub name: String,
    /// CPU list ("0-3").
    pub cpus: String,
    /// Capacity of one CPU at the highest OPP (kernel scale, ≤ 1024).
    #[serde(default)]
    pub capacity: Option<f64>,
    /// The device tree's `capacity-dmips-mhz` (used when `capacity` is not given).
    #[serde(default)]
    pub capacity_dmips_mhz: Option<f64>,
    /// The device tree's `dynamic-power-coefficient`, µW/MHz/V².
    #[serde(default)]
    pub dynamic_power_coefficient: Option<f64>,
    /// Power whenever any CPU of the domain is busy, mW (an assumption; the kernel's EM has none).
    #[serde(default)]
    pub static_mw: f64,
    pub opps: Vec<OppSpec>,
}

/// A model file: `[[domain]]` tables and the notes that say where each number came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub notes: Vec<String>,
    #[serde(rename = "domain")]
    pub domains: Vec<DomainSpec>,
}

impl ModelFile {
    pub fn parse(text: &str) -> Result<ModelFile, EnergyError> {
        toml::from_str(text).map_err(|e| EnergyError::Invalid(format!("model file: {e}")))
    }

    pub fn load(path: &std::path::Path) -> Result<EnergyModel, EnergyError> {
        let text = crate::fsread::read_file_capped(path, 1 << 20).map_err(|e| EnergyError::Invalid(format!("reading {}: {e}", path.display())))?;
        let f = ModelFile::parse(&text)?;
        build(&f.domains, &path.display().to_string(), f.notes)
    }
}

/// The kernel's `P = C × V² × f` in mW, with C in µW/MHz/V², V in µV, f in kHz.
pub fn coefficient_power_mw(coefficient: f64, voltage_uv: u64, frequency_khz: u64) -> f64 {
    let (v, mhz) = (voltage_uv as f64 / 1e6, frequency_khz as f64 / 1e3);
    coefficient * v * v * mhz / 1e3
}

/// Builds and validates a model from specs; `from` names where they came from.
pub fn build(specs: &[DomainSpec], from: &str, mut notes: Vec<String>) -> Result<EnergyModel, EnergyError> {
    let fmax = |d: &DomainSpec| d.opps.iter().map(|o| o.frequency_khz).max().unwrap_or(0);
    let raw = |d: &DomainSpec| d.capacity_dmips_mhz.map(|c| c * fmax(d) as f64);
    let biggest = specs.iter().filter_map(raw).fold(0.0, f64::max);
    let mut domains = Vec::new();
    for d in specs {
        let cap = match (d.capacity, raw(d)) {
            (Some(c), _) => c,
            (None, Some(r)) if biggest > 0.0 => r / biggest * CAPACITY_SCALE,
            _ => return Err(EnergyError::Invalid(format!("domain {}: give capacity or capacity_dmips_mhz", d.name))),
        };
        let cpus = crate::cpulist::parse(&d.cpus).ok_or_else(|| EnergyError::Invalid(format!("domain {}: cpus {:?} is not a CPU list", d.name, d.cpus)))?;
        let mut opps = Vec::new();
        for o in &d.opps {
            let power_mw = match (o.power_mw, o.voltage_uv, d.dynamic_power_coefficient) {
                (Some(p), _, _) => p,
                (None, Some(v), Some(c)) => coefficient_power_mw(c, v, o.frequency_khz),
                _ => {
                    return Err(EnergyError::Invalid(format!(
                        "domain {} OPP {} kHz: give power_mw, or voltage_uv and the domain's dynamic_power_coefficient",
                        d.name, o.frequency_khz
                    )))
                }
            };
            let f = fmax(d);
            let capacity = o.capacity.unwrap_or(if f == 0 { cap } else { cap * o.frequency_khz as f64 / f as f64 });
            opps.push(Opp { frequency_khz: o.frequency_khz, capacity, power_mw });
        }
        opps.sort_by_key(|o| o.frequency_khz);
        domains.push(PerfDomain { name: d.name.clone(), cpus, opps, static_mw: d.static_mw, power_source: Origin::Model });
    }
    if domains.iter().all(|d| d.static_mw == 0.0) {
        notes.push("no static (leakage) power: idle domains cost 0 mW, as in the kernel's EM".into());
    }
    let m = EnergyModel { domains, from: from.into(), notes };
    m.validate()?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dmips_are_normalised_and_coefficients_give_milliwatts() {
        let f = ModelFile::parse(
            r#"
            [[domain]]
            name = "little"
            cpus = "0-1"
            capacity_dmips_mhz = 512
            dynamic_power_coefficient = 100
            opps = [{ frequency_khz = 500000, voltage_uv = 1000000 }, { frequency_khz = 1000000, voltage_uv = 1000000 }]
            [[domain]]
            name = "big"
            cpus = "2,3"
            capacity_dmips_mhz = 1024
            opps = [{ frequency_khz = 2000000, power_mw = 900.0 }]
            "#,
        )
        .unwrap();
        let m = build(&f.domains, "test", vec![]).unwrap();
        assert_eq!(m.domains[0].cpus, vec![0, 1]);
        assert_eq!(m.domains[0].max_capacity(), 256.0, "512 × 1000 MHz against 1024 × 2000 MHz");
        assert_eq!(m.domains[0].opps[0].capacity, 128.0);
        assert!((m.domains[0].opps[1].power_mw - 100.0).abs() < 1e-9, "100 µW/MHz/V² × 1 V² × 1000 MHz = 100 mW");
        assert_eq!(m.domains[1].max_capacity(), 1024.0);
        assert!(m.notes.iter().any(|n| n.contains("static")));
    }

    #[test]
    fn missing_numbers_are_refused_with_the_domain_named() {
        let d = DomainSpec {
            name: "x".into(),
            cpus: "0".into(),
            capacity: Some(1024.0),
            opps: vec![OppSpec { frequency_khz: 1, ..OppSpec::default() }],
            ..DomainSpec::default()
        };
        let e = build(std::slice::from_ref(&d), "t", vec![]).unwrap_err().to_string();
        assert!(e.contains("domain x") && e.contains("power_mw"), "{e}");
        let e = build(&[DomainSpec { capacity: None, ..d }], "t", vec![]).unwrap_err().to_string();
        assert!(e.contains("capacity"), "{e}");
    }

    #[test]
    fn the_shipped_xu4_file_builds() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/energy/odroid-xu4.toml");
        let m = ModelFile::load(&path).unwrap();
        assert_eq!(m.domains, EnergyModel::odroid_xu4().domains, "the compiled-in copy is the file");
        assert_eq!((m.domains[0].cpus.len(), m.domains[1].cpus.len()), (4, 4));
    }
}

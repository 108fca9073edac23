//! RAPL energy counters from `<sysfs>/class/powercap/intel-rapl:*` (and subzones
//! `intel-rapl:N:M`): `energy_uj` wraps at `max_energy_range_uj`, so each delta is taken modulo
//! that range and accumulated into a cumulative joule count.

use crate::fsread::{read_trimmed, read_u64};
use joule_core::snapshot::PowerDomain;
use joule_core::Origin;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;

/// µJ consumed between two readings of a counter that wraps to 0 after `max_range_uj`.
pub(crate) fn energy_delta_uj(prev_uj: u64, cur_uj: u64, max_range_uj: u64) -> u64 {
    if cur_uj >= prev_uj {
        cur_uj - prev_uj
    } else {
        max_range_uj.saturating_sub(prev_uj) + cur_uj
    }
}

#[derive(Debug, Clone, Copy)]
struct Counter {
    last_uj: u64,
    total_joules: f64,
}

/// What one pass over the powercap zones found.
#[derive(Debug, Default)]
pub(crate) struct RaplReading {
    /// Domains with a rate (none on the first reading: a rate needs two).
    pub domains: Vec<PowerDomain>,
    /// Sum of the top-level `package-*` domains (or of all top-level ones when none is named
    /// package), which are marked `part_of_total`; subzones (core, uncore, dram under a
    /// package) are inside it and not added, nor is psys (it contains the packages).
    pub machine_watts: Option<f64>,
    /// Zones exist on this machine.
    pub present: bool,
    /// Zones exist but `energy_uj` is not readable (root-only since Linux 5.10).
    pub denied: bool,
}

#[derive(Default)]
pub(crate) struct Rapl {
    counters: HashMap<String, Counter>,
}

impl Rapl {
    pub(crate) fn read(&mut self, sysfs_root: &Path, interval_ms: u64) -> RaplReading {
        let mut r = RaplReading::default();
        let Ok(rd) = fs::read_dir(sysfs_root.join("class/powercap")) else { return r };
        let mut zones: Vec<(String, std::path::PathBuf)> = rd
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_str()?.to_string();
                // intel-rapl-mmio:* duplicates the package zone through MMIO: skip it.
                n.starts_with("intel-rapl:").then(|| (n, e.path()))
            })
            .collect();
        zones.sort();
        r.present = !zones.is_empty();
        let (mut package_w, mut top_w, mut any_package) = (0.0, 0.0, false);
        let mut seen = HashMap::with_capacity(zones.len());
        for (zone, dir) in zones {
            let cur_uj = match read_u64(&dir.join("energy_uj")) {
                Ok(v) => v,
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    r.denied = true;
                    continue;
                }
                Err(_) => continue,
            };
            let max_uj = read_u64(&dir.join("max_energy_range_uj")).unwrap_or(u64::MAX);
            let kind = read_trimmed(&dir.join("name")).unwrap_or_default();
            let counter = match self.counters.get(&zone) {
                Some(prev) => {
                    let delta_uj = energy_delta_uj(prev.last_uj, cur_uj, max_uj);
                    let joules = delta_uj as f64 / 1e6;
                    let c = Counter { last_uj: cur_uj, total_joules: prev.total_joules + joules };
                    if interval_ms > 0 {
                        let watts = joules / (interval_ms as f64 / 1000.0);
                        if zone.matches(':').count() == 1 {
                            top_w += watts;
                            if kind.starts_with("package") {
                                package_w += watts;
                                any_package = true;
                            }
                        }
                        r.domains.push(PowerDomain {
                            name: format!("{zone}/{kind}"),
                            watts,
                            energy_joules_total: c.total_joules,
                            source: Origin::Sensor,
                            part_of_total: false, // set below, once any_package is known
                        });
                    }
                    c
                }
                // Cumulative energy starts at the counter's own value, as the kernel shows it.
                None => Counter { last_uj: cur_uj, total_joules: cur_uj as f64 / 1e6 },
            };
            seen.insert(zone, counter);
        }
        self.counters = seen;
        if !r.domains.is_empty() {
            r.machine_watts = Some(if any_package { package_w } else { top_w });
            for d in &mut r.domains {
                let (zone, kind) = d.name.split_once('/').unwrap_or((&d.name, ""));
                d.part_of_total = zone.matches(':').count() == 1 && (!any_package || kind.starts_with("package"));
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_counts_the_tail_and_the_head() {
        assert_eq!(energy_delta_uj(100, 250, 1000), 150);
        assert_eq!(energy_delta_uj(990, 15, 1000), 25);
    }
}

//! RAPL energy counters from `<sysfs>/class/powercap/intel-rapl:*` (and subzones
//! `intel-rapl:N:M`): `energy_uj` wraps at `max_energy_range_uj`, so each delta is taken modulo
//! that range and accumulated into a cumulative joule count.

use crate::fsread::read_num;
use crate::rediscover::gone;
use joule_core::effects::RealEffects;
use joule_core::fsread::read_trimmed;
use joule_core::snapshot::PowerDomain;
use joule_core::Origin;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

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
    /// Time of the samples since `last_uj` whose read failed: the next delta covers them too.
    unread_ms: u64,
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

/// A discovered zone: all but its counter.
#[derive(Debug)]
struct Zone {
    zone: String,
    kind: String,
    energy_uj: PathBuf,
    max_uj: u64,
    top_level: bool,
}

#[derive(Default)]
pub(crate) struct Rapl {
    zones: Vec<Zone>,
    counters: HashMap<String, Counter>,
}

impl Rapl {
    /// Lists the zones with their `name` and `max_energy_range_uj`.
    pub(crate) fn discover(&mut self, sysfs_root: &Path) {
        self.zones.clear();
        let Ok(rd) = fs::read_dir(sysfs_root.join("class/powercap")) else { return };
        let mut found: Vec<(String, PathBuf)> = rd
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_str()?.to_string();
                // intel-rapl-mmio:* duplicates the package zone through MMIO: skip it.
                n.starts_with("intel-rapl:").then(|| (n, e.path()))
            })
            .collect();
        found.sort();
        self.zones = found
            .into_iter()
            .map(|(zone, dir)| Zone {
                kind: read_trimmed(&RealEffects, &dir.join("name")).unwrap_or_default(),
                max_uj: read_num::<u64>(&dir.join("max_energy_range_uj")).unwrap_or(u64::MAX),
                energy_uj: dir.join("energy_uj"),
                top_level: zone.matches(':').count() == 1,
                zone,
            })
            .collect();
    }

    /// Reads every discovered zone's counter. The flag is true when a zone read as gone (the
    /// caller discovers again).
    pub(crate) fn read(&mut self, interval_ms: u64) -> (RaplReading, bool) {
        let mut r = RaplReading { present: !self.zones.is_empty(), ..RaplReading::default() };
        let mut stale = false;
        let (mut package_w, mut top_w, mut any_package) = (0.0, 0.0, false);
        let mut seen = HashMap::with_capacity(self.zones.len());
        for Zone { zone, kind, energy_uj, max_uj, top_level } in &self.zones {
            let (zone, max_uj) = (zone.clone(), *max_uj);
            let cur_uj = match read_num::<u64>(energy_uj) {
                Ok(v) => v,
                Err(e) => {
                    r.denied |= e.kind() == io::ErrorKind::PermissionDenied;
                    stale |= gone(&e);
                    // Carry the last counter forward: a failed read must not restart the
                    // zone's cumulative energy, and the next delta spans this interval too.
                    if let Some(prev) = self.counters.get(&zone) {
                        seen.insert(zone, Counter { unread_ms: prev.unread_ms + interval_ms, ..*prev });
                    }
                    continue;
                }
            };
            let counter = match self.counters.get(&zone) {
                Some(prev) => {
                    let delta_uj = energy_delta_uj(prev.last_uj, cur_uj, max_uj);
                    let joules = delta_uj as f64 / 1e6;
                    let c = Counter { last_uj: cur_uj, total_joules: prev.total_joules + joules, unread_ms: 0 };
                    let span_ms = interval_ms + prev.unread_ms;
                    if interval_ms > 0 {
                        let watts = joules / (span_ms as f64 / 1000.0);
                        if *top_level {
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
                None => Counter { last_uj: cur_uj, total_joules: cur_uj as f64 / 1e6, unread_ms: 0 },
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
        (r, stale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(root: &Path, uj: Option<u64>) {
        let dir = root.join("class/powercap/intel-rapl:0");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("name"), "package-0\n").unwrap();
        fs::write(dir.join("max_energy_range_uj"), "262143328850\n").unwrap();
        let f = dir.join("energy_uj");
        let _ = fs::remove_file(&f).or_else(|_| fs::remove_dir(&f));
        match uj {
            Some(v) => fs::write(&f, format!("{v}\n")).unwrap(),
            None => fs::create_dir(&f).unwrap(), // reading a directory fails (EISDIR)
        }
    }

    #[test]
    fn a_failed_read_carries_the_counter_forward() {
        let t = tempfile::tempdir().unwrap();
        let mut rapl = Rapl::default();
        zone(t.path(), Some(5_000_000));
        rapl.discover(t.path());
        assert!(rapl.read(0).0.domains.is_empty());
        zone(t.path(), Some(6_000_000));
        assert_eq!(rapl.read(100).0.domains[0].energy_joules_total, 6.0);
        zone(t.path(), None);
        let failed = rapl.read(100).0;
        assert!(failed.domains.is_empty() && failed.machine_watts.is_none());
        // 2 J since the last good reading, over the 200 ms since it: not a restart at 8 J,
        // not 2 J charged to the last 100 ms only.
        zone(t.path(), Some(8_000_000));
        let r = rapl.read(100).0;
        assert_eq!(r.domains[0].energy_joules_total, 8.0);
        assert_eq!(r.domains[0].watts, 10.0);
        assert_eq!(r.machine_watts, Some(10.0));
        zone(t.path(), Some(9_000_000));
        assert_eq!(rapl.read(100).0.domains[0].watts, 10.0, "back to one interval");
    }

    #[test]
    fn wrap_counts_the_tail_and_the_head() {
        assert_eq!(energy_delta_uj(100, 250, 1000), 150);
        assert_eq!(energy_delta_uj(990, 15, 1000), 25);
    }
}

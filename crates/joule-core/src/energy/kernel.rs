//! The energy model as the running kernel knows it: performance domains from cpufreq
//! (`cpuN/cpufreq/related_cpus`), each CPU's capacity (`cpuN/cpu_capacity`, 1024 where the file
//! is missing), OPP frequencies (`scaling_available_frequencies`, else the cpuinfo min/max), and
//! OPP powers from the kernel's Energy Model in debugfs (`energy_model/<dev>/cpus` and
//! `ps:<kHz>/{frequency,power}`, read as µW: `Documentation/power/energy-model.rst` says micro-Watts
//! today, milli-Watts in older kernels). Every root is a parameter so tests read
//! fixture trees. What is missing is filled from the config and said in the model's notes.

use super::{EnergyError, EnergyModel, Opp, PerfDomain};
use crate::effects::Effects;
use crate::fsread::read_trimmed;
use crate::Origin;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the kernel publishes what the model is read from.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelRoots {
    /// `/sys/devices/system/cpu`.
    pub cpu_root: PathBuf,
    /// `/sys/kernel/debug/energy_model` (debugfs must be mounted; joule never mounts it).
    pub em_root: PathBuf,
}

impl KernelRoots {
    pub fn under(sysfs: &Path) -> KernelRoots {
        KernelRoots { cpu_root: sysfs.join("devices/system/cpu"), em_root: sysfs.join("kernel/debug/energy_model") }
    }
}

fn numbers<T: std::str::FromStr>(fx: &dyn Effects, p: &Path) -> Option<Vec<T>> {
    let s = read_trimmed(fx, p).ok()?;
    let v: Option<Vec<T>> = s.split_whitespace().map(|x| x.parse().ok()).collect();
    v.filter(|v| !v.is_empty())
}

/// One CPU as sysfs shows it.
struct CpuInfo {
    capacity: f64,
    /// The CPUs it shares a clock with (itself included); `None` without cpufreq.
    related: Option<Vec<usize>>,
    freqs_khz: Vec<u64>,
}

fn read_cpu(fx: &dyn Effects, dir: &Path) -> CpuInfo {
    let cf = dir.join("cpufreq");
    let freqs_khz = numbers(fx, &cf.join("scaling_available_frequencies"))
        .or_else(|| Some([numbers::<u64>(fx, &cf.join("cpuinfo_min_freq"))?[0], numbers::<u64>(fx, &cf.join("cpuinfo_max_freq"))?[0]].to_vec()))
        .unwrap_or_default();
    CpuInfo {
        capacity: numbers::<f64>(fx, &dir.join("cpu_capacity")).map_or(super::CAPACITY_SCALE, |v| v[0]),
        related: numbers(fx, &cf.join("related_cpus")),
        freqs_khz,
    }
}

/// `(frequency kHz, power mW)` of the debugfs EM entry covering `cpu`, ascending.
fn em_table(fx: &dyn Effects, em_root: &Path, cpu: usize) -> Option<Vec<(u64, f64)>> {
    let dev = fx
        .list_dir(em_root)
        .ok()?
        .into_iter()
        .find(|d| read_trimmed(fx, &em_root.join(d).join("cpus")).ok().and_then(|s| crate::cpulist::parse(&s)).is_some_and(|c| c.contains(&cpu)))?;
    let d = em_root.join(dev);
    let mut t: Vec<(u64, f64)> = fx
        .list_dir(&d)
        .ok()?
        .iter()
        .filter(|n| n.starts_with("ps:"))
        .filter_map(|n| Some((numbers::<u64>(fx, &d.join(n).join("frequency"))?[0], numbers::<f64>(fx, &d.join(n).join("power"))?[0] / 1000.0)))
        .collect();
    t.sort_by_key(|x| x.0);
    (!t.is_empty()).then_some(t)
}

/// Reads the model. `fallback_power_mw` is the power of one CPU busy at its highest OPP where
/// the kernel has no EM (the config's `telemetry.power_model.cpu_dynamic_watts`); lower OPPs then
/// get `P × (f / f_max)³` (voltage roughly proportional to frequency), labelled `model`.
pub fn read_kernel(fx: &dyn Effects, roots: &KernelRoots, fallback_power_mw: f64) -> Result<EnergyModel, EnergyError> {
    let mut cpus: BTreeMap<usize, CpuInfo> = BTreeMap::new();
    for name in fx.list_dir(&roots.cpu_root).unwrap_or_default() {
        if let Some(n) = name.strip_prefix("cpu").and_then(|x| x.parse::<usize>().ok()) {
            cpus.insert(n, read_cpu(fx, &roots.cpu_root.join(&name)));
        }
    }
    if cpus.is_empty() {
        return Err(EnergyError::NoDomains(roots.cpu_root.display().to_string()));
    }
    let mut notes = Vec::new();
    // Domains: cpufreq policies; without cpufreq, CPUs of equal capacity (one clock assumed).
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (&n, c) in &cpus {
        if groups.iter().any(|g| g.contains(&n)) {
            continue;
        }
        let g = match &c.related {
            Some(r) => r.iter().copied().filter(|x| cpus.contains_key(x)).collect(),
            None => cpus.iter().filter(|(_, o)| o.related.is_none() && o.capacity == c.capacity).map(|(k, _)| *k).collect(),
        };
        groups.push(g);
    }
    if cpus.values().any(|c| c.related.is_none()) {
        notes.push(format!("no cpufreq under {}: CPUs of equal cpu_capacity form one domain with one OPP", roots.cpu_root.display()));
    }
    let mut domains = Vec::new();
    for g in groups {
        let first = &cpus[&g[0]];
        // The kernel's Energy Model is an estimate too (C·V²·f from the device tree, or what a
        // driver registered), so its powers are `model` like the fallback's; a note says which.
        let (from_em, table) = match em_table(fx, &roots.em_root, g[0]) {
            Some(t) => (true, t),
            None => {
                let mut f = first.freqs_khz.clone();
                f.sort_unstable();
                f.dedup();
                let top = f.last().copied().unwrap_or(0).max(1) as f64;
                let f = if f.is_empty() { vec![0] } else { f };
                (false, f.iter().map(|&k| (k, fallback_power_mw * if k == 0 { 1.0 } else { (k as f64 / top).powi(3) })).collect())
            }
        };
        if from_em {
            notes.push(format!("powers of CPU {} from the kernel's energy model under {} (an estimate: model)", g[0], roots.em_root.display()));
        } else {
            notes.push(format!(
                "no kernel energy model for CPU {} under {}: power {fallback_power_mw} mW per busy CPU at the top OPP, × (f/f_max)³ below (model)",
                g[0],
                roots.em_root.display()
            ));
        }
        let top = table.last().map_or(0, |t| t.0).max(1) as f64;
        let opps = table
            .iter()
            .map(|&(k, p)| Opp { frequency_khz: k, capacity: if k == 0 { first.capacity } else { first.capacity * k as f64 / top }, power_mw: p })
            .collect();
        domains.push(PerfDomain { name: format!("cpu{}", crate::cpulist::format(&g)), cpus: g, opps, static_mw: 0.0, power_source: Origin::Model });
    }
    let m = EnergyModel { domains, from: format!("kernel: {}", roots.cpu_root.display()), notes };
    m.validate()?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::FakeEffects;

    fn roots() -> KernelRoots {
        KernelRoots::under(Path::new("/s"))
    }

    /// A big.LITTLE tree: cpu0-1 LITTLE (capacity 446) and cpu2-3 big, cpufreq on both, and
    /// the EM in debugfs for the big domain only.
    fn big_little() -> FakeEffects {
        let mut fx =
            FakeEffects::default().with_dir("/s/devices/system/cpu").with_dir("/s/devices/system/cpu/cpufreq").with_dir("/s/kernel/debug/energy_model");
        for n in 0..4 {
            let d = format!("/s/devices/system/cpu/cpu{n}");
            let (cap, rel, freqs) = if n < 2 { ("446", "0 1", "500000 1000000") } else { ("1024", "2 3", "1000000 2000000") };
            fx = fx
                .with_dir(d.as_str())
                .with_file(format!("{d}/cpu_capacity"), &format!("{cap}\n"))
                .with_file(format!("{d}/cpufreq/related_cpus"), &format!("{rel}\n"))
                .with_file(format!("{d}/cpufreq/scaling_available_frequencies"), &format!("{freqs} \n"));
        }
        let em = "/s/kernel/debug/energy_model/cpu2";
        fx = fx.with_dir(em).with_file(format!("{em}/cpus"), "2-3\n");
        for (k, uw) in [(2000000, "900000"), (1000000, "200000")] {
            fx = fx
                .with_dir(format!("{em}/ps:{k}"))
                .with_file(format!("{em}/ps:{k}/frequency"), &format!("{k}\n"))
                .with_file(format!("{em}/ps:{k}/power"), &format!("{uw}\n"));
        }
        fx
    }

    #[test]
    fn domains_capacities_and_em_powers_come_from_the_tree() {
        let m = read_kernel(&big_little(), &roots(), 1000.0).unwrap();
        assert_eq!(m.domains.len(), 2);
        let (little, big) = (&m.domains[0], &m.domains[1]);
        assert_eq!((little.cpus.clone(), big.cpus.clone()), (vec![0, 1], vec![2, 3]));
        assert_eq!(big.name, "cpu2-3");
        assert_eq!(big.power_source, Origin::Model, "the kernel's EM is an estimate, not a measurement");
        assert!(m.notes.iter().any(|n| n.contains("powers of CPU 2 from the kernel's energy model")), "{:?}", m.notes);
        assert_eq!(
            big.opps.iter().map(|o| (o.frequency_khz, o.capacity, o.power_mw)).collect::<Vec<_>>(),
            vec![(1000000, 512.0, 200.0), (2000000, 1024.0, 900.0)]
        );
        assert_eq!(little.power_source, Origin::Model, "no EM entry for the LITTLE domain");
        assert_eq!(little.opps[1].capacity, 446.0);
        assert_eq!(little.opps[0].power_mw, 125.0, "1000 mW × (1/2)³");
        assert!(m.notes.iter().any(|n| n.contains("no kernel energy model for CPU 0")), "{:?}", m.notes);
        assert_eq!(m.reference_khz(), 2_000_000);
    }

    #[test]
    fn without_cpufreq_equal_capacities_are_one_domain_of_one_opp() {
        let fx = FakeEffects::default()
            .with_dir("/s/devices/system/cpu")
            .with_dir("/s/devices/system/cpu/cpu0")
            .with_dir("/s/devices/system/cpu/cpu1")
            .with_dir("/s/devices/system/cpu/cpuidle")
            .with_file("/s/devices/system/cpu/cpu0/cpu_capacity", "1024\n");
        let m = read_kernel(&fx, &roots(), 8000.0).unwrap();
        assert_eq!(m.domains.len(), 1);
        assert!(m.is_homogeneous());
        assert_eq!(m.domains[0].cpus, vec![0, 1]);
        assert_eq!(m.domains[0].opps, vec![Opp { frequency_khz: 0, capacity: 1024.0, power_mw: 8000.0 }]);
        assert_eq!(m.reference_khz(), super::super::FALLBACK_REFERENCE_KHZ);
        assert!(m.notes.iter().any(|n| n.contains("no cpufreq")));
    }

    #[test]
    fn rk3588_clusters_come_from_cpufreq_policies_cpu_capacity_and_the_debugfs_em() {
        let m = super::super::fixtures::rk3588();
        let names: Vec<(&str, &[usize])> = m.domains.iter().map(|d| (d.name.as_str(), d.cpus.as_slice())).collect();
        assert_eq!(names, [("cpu0-3", &[0, 1, 2, 3][..]), ("cpu4-5", &[4, 5][..]), ("cpu6-7", &[6, 7][..])], "policy0, policy4, policy6");
        assert_eq!(m.domains.iter().map(|d| d.max_capacity()).collect::<Vec<_>>(), [397.0, 1024.0, 1024.0]);
        let table = |k: usize| m.domains[k].opps.iter().map(|o| (o.frequency_khz / 1000, o.power_mw)).collect::<Vec<_>>();
        // The EM's µW, as the kernel computed them from the DT's coefficient and OPP voltages.
        assert_eq!(table(0), [(1008, 104.713), (1200, 138.699), (1416, 187.459), (1608, 264.885), (1800, 370.386)]);
        let big = [(1200, 227.448), (1416, 309.622), (1608, 388.409), (1800, 541.008), (2016, 717.575), (2208, 894.801), (2400, 998.4)];
        assert_eq!((table(1).as_slice(), table(2).as_slice()), (&big[..], &big[..]));
        // Capacity linear in frequency, as the EM's own `performance` (⌊397 × 1416 / 1800⌋ = 312).
        assert_eq!(m.domains[0].opps[2].capacity.floor(), 312.0);
        assert_eq!(m.domains[1].opps[3].capacity, 768.0);
        assert!(m.domains.iter().all(|d| d.power_source == Origin::Model && d.static_mw == 0.0));
        assert_eq!(m.notes.iter().filter(|n| n.contains("from the kernel's energy model")).count(), 3, "{:?}", m.notes);
        assert_eq!(m.reference_khz(), 2_400_000);
    }

    #[test]
    fn rpi5_is_one_domain_of_ten_opps_without_an_em() {
        let m = read_kernel(&crate::effects::RealEffects, &KernelRoots::under(&super::super::fixtures::board_root("rpi5")), 2000.0).unwrap();
        assert!(m.is_homogeneous());
        let d = &m.domains[0];
        assert_eq!((d.name.as_str(), d.cpus.as_slice(), d.opps.len()), ("cpu0-3", &[0, 1, 2, 3][..], 10));
        assert_eq!((d.opps[0].frequency_khz, d.max_capacity(), d.opps[9].power_mw), (1_500_000, 1024.0, 2000.0));
        assert!(m.notes.iter().any(|n| n.contains("no kernel energy model for CPU 0")), "{:?}", m.notes);
    }

    #[test]
    fn no_cpus_is_an_error_naming_the_root() {
        let e = read_kernel(&FakeEffects::default(), &roots(), 1.0).unwrap_err();
        assert_eq!(e, EnergyError::NoDomains("/s/devices/system/cpu".into()));
    }
}

//! What `joule doctor` reads of the CPUs' clocks and of the kernel's energy estimate: the
//! cpufreq policies (which CPUs share a clock, their frequency range and governor) and the
//! kernel's Energy Model in debugfs (its performance domains and their states) — what
//! energy-aware placement decides with under `[energy] model = "kernel"` (docs/energy.md).

use serde::Serialize;
use std::path::Path;

/// One cpufreq policy (`<sys>/devices/system/cpu/cpufreq/policyN`): CPUs sharing one clock.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpufreqPolicy {
    /// `policy0`.
    pub name: String,
    /// `related_cpus` as a CPU list (`0-3`).
    pub cpus: String,
    pub min_khz: Option<u64>,
    pub max_khz: Option<u64>,
    /// How many frequencies `scaling_available_frequencies` lists (0: the driver lists none,
    /// as intel_pstate; placement then knows only the two ends).
    pub frequencies: usize,
    pub governor: Option<String>,
}

/// One performance domain of the kernel's Energy Model.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EmDomain {
    /// The debugfs directory, named after the domain's first CPU (`cpu0`).
    pub name: String,
    pub cpus: String,
    pub states: usize,
    /// One CPU busy at the fastest state, mW (debugfs says µW).
    pub top_power_mw: Option<f64>,
}

/// What debugfs shows of the Energy Model.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EnergyModelFacts {
    /// `kernel` (domains found), `none registered` (debugfs shows the Energy Model without a
    /// domain), `no support` (debugfs is there, the kernel has no Energy Model), `not mounted`
    /// (no debugfs where joule looks), `not readable` (debugfs is root-only).
    pub status: &'static str,
    /// Where joule looks for it (`<sys>/kernel/debug/energy_model`; joule never mounts debugfs).
    pub path: String,
    pub domains: Vec<EmDomain>,
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn num(p: &Path) -> Option<u64> {
    read_trim(p)?.parse().ok()
}

/// Entries of `dir` starting with `prefix`, sorted by the number after it.
fn numbered(dir: &Path, prefix: &str) -> Vec<(u64, String)> {
    let names = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.file_name().to_string_lossy().into_owned());
    let mut v: Vec<(u64, String)> = names.filter_map(|n| Some((n.strip_prefix(prefix)?.parse().ok()?, n))).collect();
    v.sort();
    v
}

/// `0 1 2 3` (cpufreq's format) as `0-3`.
fn cpu_list(spaced: &str) -> String {
    let cpus: Option<Vec<usize>> = spaced.split_whitespace().map(|c| c.parse().ok()).collect();
    cpus.filter(|c| !c.is_empty()).map_or_else(|| spaced.to_string(), |c| joule_core::cpulist::format(&c))
}

pub fn cpufreq_policies(sys: &Path) -> Vec<CpufreqPolicy> {
    let root = sys.join("devices/system/cpu/cpufreq");
    numbered(&root, "policy")
        .into_iter()
        .map(|(_, name)| {
            let d = root.join(&name);
            CpufreqPolicy {
                cpus: read_trim(&d.join("related_cpus")).map(|s| cpu_list(&s)).unwrap_or_default(),
                min_khz: num(&d.join("cpuinfo_min_freq")),
                max_khz: num(&d.join("cpuinfo_max_freq")),
                frequencies: read_trim(&d.join("scaling_available_frequencies")).map_or(0, |s| s.split_whitespace().count()),
                governor: read_trim(&d.join("scaling_governor")),
                name,
            }
        })
        .collect()
}

impl EnergyModelFacts {
    pub fn read(sys: &Path) -> EnergyModelFacts {
        let debug = sys.join("kernel/debug");
        let em = debug.join("energy_model");
        let facts = |status, domains| EnergyModelFacts { status, path: em.display().to_string(), domains };
        let listing = match std::fs::read_dir(&debug) {
            Ok(rd) => rd.flatten().count(),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return facts("not readable", vec![]),
            Err(_) => 0,
        };
        if listing == 0 {
            // An unmounted debugfs leaves an empty directory behind.
            return facts("not mounted", vec![]);
        }
        if !em.is_dir() {
            return facts("no support", vec![]);
        }
        let domains: Vec<EmDomain> = numbered(&em, "cpu")
            .into_iter()
            .map(|(_, name)| {
                let d = em.join(&name);
                let states = numbered(&d, "ps:");
                EmDomain {
                    cpus: read_trim(&d.join("cpus")).unwrap_or_default(),
                    states: states.len(),
                    top_power_mw: states.last().and_then(|(_, ps)| num(&d.join(ps).join("power"))).map(|uw| uw as f64 / 1000.0),
                    name,
                }
            })
            .collect();
        facts(if domains.is_empty() { "none registered" } else { "kernel" }, domains)
    }
}

/// The report's row of cpufreq policies, in operator words.
pub fn policies_row(policies: &[CpufreqPolicy]) -> String {
    if policies.is_empty() {
        return "none (no cpufreq: the frequency is unknown and placement has one speed per CPU)".to_string();
    }
    let mhz = |k: Option<u64>| k.map_or("?".to_string(), |k| (k / 1000).to_string());
    let each = policies.iter().map(|p| {
        let steps = if p.frequencies > 0 { format!("{} steps, ", p.frequencies) } else { String::new() };
        format!("{} CPU {} {}–{} MHz ({steps}{})", p.name, p.cpus, mhz(p.min_khz), mhz(p.max_khz), p.governor.as_deref().unwrap_or("no governor"))
    });
    each.collect::<Vec<_>>().join("; ")
}

/// The report's row of the kernel's energy model, in operator words.
pub fn model_row(em: &EnergyModelFacts) -> String {
    let fallback = "placement prices power with telemetry.power_model instead";
    match em.status {
        "kernel" => {
            let each = em.domains.iter().map(|d| {
                let top = d.top_power_mw.map_or(String::new(), |p| format!(", {p:.0} mW per busy CPU at the top"));
                format!("{} (CPU {}, {} states{top})", d.name, d.cpus, d.states)
            });
            format!("the kernel's, {} domains: {}", em.domains.len(), each.collect::<Vec<_>>().join("; "))
        }
        "none registered" => format!("none registered (the device tree or firmware gives no CPU power figures); {fallback}"),
        "no support" => format!("none (this kernel has no energy model in debugfs); {fallback}"),
        "not readable" => format!("not readable at {} (debugfs is root-only: run as root to see it)", em.path),
        _ => format!("not visible (debugfs is not mounted at {}; joule does not mount it); {fallback}", em.path.trim_end_matches("/energy_model")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/boards").join(name).join("sys")
    }

    #[test]
    fn rk3588_three_policies_and_the_kernels_energy_model() {
        let sys = board("rk3588");
        let p = cpufreq_policies(&sys);
        let short: Vec<(&str, &str, usize)> = p.iter().map(|p| (p.name.as_str(), p.cpus.as_str(), p.frequencies)).collect();
        assert_eq!(short, [("policy0", "0-3", 5), ("policy4", "4-5", 7), ("policy6", "6-7", 7)]);
        let em = EnergyModelFacts::read(&sys);
        assert_eq!(em.status, "kernel");
        let d: Vec<(&str, &str, usize)> = em.domains.iter().map(|d| (d.name.as_str(), d.cpus.as_str(), d.states)).collect();
        assert_eq!(d, [("cpu0", "0-3", 5), ("cpu4", "4-5", 7), ("cpu6", "6-7", 7)]);
        assert_eq!(em.domains[0].top_power_mw, Some(370.386));
        let (pol, model) = (policies_row(&p), model_row(&em));
        assert_eq!(pol, "policy0 CPU 0-3 1008–1800 MHz (5 steps, schedutil); policy4 CPU 4-5 1200–2400 MHz (7 steps, schedutil); policy6 CPU 6-7 1200–2400 MHz (7 steps, schedutil)");
        assert!(model.starts_with("the kernel's, 3 domains: cpu0 (CPU 0-3, 5 states, 370 mW per busy CPU at the top); cpu4"), "{model}");
    }

    #[test]
    fn rpi5_one_policy_and_no_debugfs() {
        let sys = board("rpi5");
        let p = cpufreq_policies(&sys);
        assert_eq!((p.len(), p[0].cpus.as_str(), p[0].min_khz, p[0].max_khz, p[0].frequencies), (1, "0-3", Some(1_500_000), Some(2_400_000), 10));
        let em = EnergyModelFacts::read(&sys);
        assert_eq!((em.status, em.domains.len()), ("not mounted", 0));
        let (pol, model) = (policies_row(&p), model_row(&em));
        assert_eq!(pol, "policy0 CPU 0-3 1500–2400 MHz (10 steps, ondemand)");
        assert!(model.starts_with("not visible (debugfs is not mounted at ") && model.ends_with("telemetry.power_model instead"), "{model}");
    }

    #[test]
    fn debugfs_without_domains_or_without_energy_model_support_is_said_apart() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("kernel/debug/sched")).unwrap();
        assert_eq!(EnergyModelFacts::read(t.path()).status, "no support");
        std::fs::create_dir_all(t.path().join("kernel/debug/energy_model")).unwrap();
        let em = EnergyModelFacts::read(t.path());
        assert_eq!(em.status, "none registered");
        assert!(model_row(&em).starts_with("none registered"));
        assert!(policies_row(&[]).starts_with("none (no cpufreq"));
    }
}

#[cfg(test)]
mod report_tests {
    use crate::backends::{choose, Facts, Roots};
    use crate::doctor::render;
    use joule_core::config::Config;
    use std::path::Path;

    /// `joule doctor` on a board's sysfs (no procfs or cgroups: those rows say so).
    fn doctor(board: &str) -> (Facts, String, serde_json::Value) {
        let sys = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/boards").join(board).join("sys");
        let empty = tempfile::tempdir().unwrap();
        let f = Facts::read(&Roots {
            thermal: sys.clone(),
            btf: empty.path().join("btf"),
            boot: empty.path().join("boot"),
            sys,
            proc: empty.path().join("proc"),
            cgroup: empty.path().join("cgroup"),
        });
        let b = choose(&f, &Config::default());
        let json = serde_json::json!({ "facts": f, "backends": b });
        (f.clone(), render(&f, &b), json)
    }

    #[test]
    fn doctor_on_the_rk3588_names_its_zones_policies_and_energy_model() {
        let (f, text, json) = doctor("rk3588");
        assert_eq!(f.sensors.thermal_zones[1], "thermal_zone1 (bigcore0-thermal)");
        assert!(text.contains("thermal_zone3 (littlecore-thermal)") && text.contains("thermal_zone6 (npu-thermal)"), "{text}");
        assert!(text.contains("cpufreq policies           policy0 CPU 0-3 1008–1800 MHz (5 steps, schedutil); policy4 CPU 4-5"), "{text}");
        assert!(text.contains("energy model               the kernel's, 3 domains: cpu0 (CPU 0-3, 5 states, 370 mW per busy CPU at the top)"), "{text}");
        assert_eq!(json["facts"]["energy_model"]["status"], "kernel");
        assert_eq!(json["facts"]["energy_model"]["domains"][2]["cpus"], "6-7");
        assert_eq!(json["facts"]["cpufreq_policies"][1]["max_khz"], 2_400_000);
        assert_eq!(json["facts"]["sensors"]["rapl_zones"], 0);
    }

    #[test]
    fn doctor_on_the_pi5_names_its_zone_policy_and_says_it_sees_no_energy_model() {
        let (f, text, json) = doctor("rpi5");
        assert_eq!(f.sensors.thermal_zones, ["thermal_zone0 (cpu-thermal)"]);
        assert_eq!((f.sensors.hwmon_temp_inputs, f.sensors.cpufreq_driver.as_deref()), (1, Some("cpufreq-dt")));
        assert!(text.contains("cpufreq policies           policy0 CPU 0-3 1500–2400 MHz (10 steps, ondemand)"), "{text}");
        assert!(text.contains("energy model               not visible (debugfs is not mounted at "), "{text}");
        assert_eq!(json["facts"]["energy_model"]["status"], "not mounted");
        assert_eq!(json["facts"]["cpufreq_policies"][0]["cpus"], "0-3");
        // The firmware throttles at 80 °C, before the zone's 110 °C critical trip: the stages
        // finish under it, and doctor says where it came from.
        assert!(
            text.contains("the board's firmware limit at 80 °C (raspberrypi,5-model-b: the Raspberry Pi firmware throttles the Arm cores from 80 °C"),
            "{text}"
        );
        assert!(text.contains("the limit they keep under is 80 °C (firmware)"), "{text}");
        assert_eq!(json["facts"]["board_limit"]["soft_celsius"], 80.0);
    }
}

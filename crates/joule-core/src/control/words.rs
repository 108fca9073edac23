//! A want in an operator's words, for `joule status` and `joule monitor`'s panels: what joule
//! does to which class, CPUs or interface, with units (`cap class batch to 35% of the
//! machine`), not the plan's field names. The plan's JSON keeps the fields.

use super::plan::{FreqLimit, ThermalPath, Want};
use std::fmt;

/// CPUs as a short list: `0-3,6`.
fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if j > i { format!("{}-{}", cpus[i], cpus[j]) } else { cpus[i].to_string() });
        i = j + 1;
    }
    out.join(",")
}

impl fmt::Display for Want {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Want::HoldClasses { classes } => {
                write!(f, "hold the guarantees of {} {}", if classes.len() == 1 { "class" } else { "classes" }, classes.join(", "))
            }
            Want::ThermalStage { stage, path: ThermalPath::Scx, .. } => write!(f, "stage {stage} in joule's sched_ext scheduler"),
            Want::ThermalStage { stage, path: ThermalPath::Cgroup, .. } => write!(f, "stage {stage} through cgroup caps"),
            Want::CapClass { class, cpu_pct } if *cpu_pct >= 100.0 => write!(f, "no cap on class {class}"),
            Want::CapClass { class, cpu_pct } => write!(f, "cap class {class} to {cpu_pct:.0}% of the machine"),
            Want::FreqCap { cpus, limit } => {
                let on = cpus.as_deref().map_or("every CPU".to_string(), |c| format!("CPUs {}", cpu_list(c)));
                match limit {
                    FreqLimit::Pct(p) if *p >= 100.0 => write!(f, "no frequency cap on {on}"),
                    FreqLimit::Pct(p) => write!(f, "cap the frequency of {on} to {p:.0}% of their maximum"),
                    FreqLimit::Khz(k) => write!(f, "cap the frequency of {on} to {} MHz", k / 1000),
                }
            }
            Want::Affinity { class, cpus } => write!(f, "run class {class} on CPUs {}", cpu_list(cpus)),
            Want::Slice { class, slice_us } => write!(f, "give class {class} {slice_us} µs slices"),
            Want::Elevate { class, cpu, slice_us, pattern } => write!(f, "schedule class {class} on CPU {cpu} in {slice_us} µs slices ({pattern})"),
            Want::Nap { nap: true, idle_for_ms } => write!(f, "nap (idle for {:.1} s)", *idle_for_ms as f64 / 1e3),
            Want::Nap { nap: false, .. } => f.write_str("stay awake"),
            Want::LimitRate { interface, direction, class, flow, rate_mbit } => {
                let dir = match direction {
                    crate::config::Direction::Egress => "outgoing",
                    crate::config::Direction::Ingress => "incoming",
                };
                let what = match (class, flow) {
                    (Some(c), _) => format!("class {c}'s {dir} traffic"),
                    (None, Some(_)) => format!("one flow's {dir} traffic"),
                    (None, None) => format!("{dir} traffic"),
                };
                write!(f, "limit {what} on {interface} to {rate_mbit} Mbit/s")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wants_read_as_sentences_with_units() {
        let cap = Want::CapClass { class: "batch".into(), cpu_pct: 35.0 };
        assert_eq!(cap.to_string(), "cap class batch to 35% of the machine");
        assert_eq!(Want::CapClass { class: "batch".into(), cpu_pct: 100.0 }.to_string(), "no cap on class batch");
        let freq = Want::FreqCap { cpus: Some(vec![0, 1, 2, 3, 6]), limit: FreqLimit::Pct(60.0) };
        assert_eq!(freq.to_string(), "cap the frequency of CPUs 0-3,6 to 60% of their maximum");
        assert_eq!(Want::FreqCap { cpus: None, limit: FreqLimit::Khz(1_200_000) }.to_string(), "cap the frequency of every CPU to 1200 MHz");
        assert_eq!(Want::HoldClasses { classes: vec!["db".into(), "web".into()] }.to_string(), "hold the guarantees of classes db, web");
        assert_eq!(Want::Nap { nap: true, idle_for_ms: 12_500 }.to_string(), "nap (idle for 12.5 s)");
        let rate = Want::LimitRate { interface: "eth0".into(), direction: Default::default(), class: Some("bulk".into()), flow: None, rate_mbit: 20.0 };
        assert_eq!(rate.to_string(), "limit class bulk's outgoing traffic on eth0 to 20 Mbit/s");
        for w in [cap, freq, rate] {
            let s = w.to_string();
            assert!(!s.contains('_') && !s.contains('{'), "field names leak: {s}");
        }
    }
}

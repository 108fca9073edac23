//! `joule monitor`'s text view, rendered from the metric table (metrics.rs) — the same
//! description of each value that `/metrics` and the JSON follow — so the three never disagree
//! about what a value is, its unit, or where it came from. Label values and notes came from
//! the machine (a thread's name is its user's choice), so their control characters are shown
//! escaped: one name cannot write a terminal's title or clipboard, nor forge a line.

use crate::metrics::{Family, Labels, Unit, Value};
use joule_core::text::Escaped;
use joule_core::Snapshot;

/// Rows shown per family; the rest are counted ("… and 12 more").
const MAX_ROWS: usize = 8;

fn bar(frac: f64, width: usize) -> String {
    let n = (frac.clamp(0.0, 1.0) * width as f64).round() as usize;
    format!("[{}{}]", "#".repeat(n), " ".repeat(width - n))
}

/// A value in the unit a person reads: ratios as % (with a bar), latencies in µs/ms.
fn human(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Ratio => format!("{} {:5.1} %", bar(v, 20), v * 100.0),
        Unit::Seconds if v < 1e-3 => format!("{:8.1} µs", v * 1e6),
        Unit::Seconds if v < 1.0 => format!("{:8.2} ms", v * 1e3),
        Unit::Seconds => format!("{v:8.2} s"),
        Unit::Watts => format!("{v:8.2} W"),
        Unit::Joules => format!("{v:10.1} J"),
        Unit::Celsius => format!("{v:6.1} °C"),
        Unit::Hertz => format!("{:6.0} MHz", v / 1e6),
        Unit::BytesPerSecond => format!("{:8.2} Mbit/s", v * 8.0 / 1e6),
        Unit::Bytes => format!("{v:8.0} B"),
        Unit::Count => format!("{v:8}"),
    }
}

/// The labels that say which thing a row is (`source` is printed apart, at the end).
fn what(labels: &Labels) -> String {
    labels.iter().filter(|(k, v)| k != "source" && !v.is_empty()).map(|(k, v)| format!("{k}={}", Escaped(v))).collect::<Vec<_>>().join(" ")
}

fn source(labels: &Labels) -> String {
    labels.iter().find(|(k, _)| k == "source").map(|(_, v)| format!(" ({})", Escaped(v))).unwrap_or_default()
}

/// The human view of `families` (in table order, grouped by their `title`), then the
/// snapshot's notes.
pub fn render(families: &[Family], snap: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let mut section = None;
    for f in families {
        let Some(title) = f.def.title else { continue };
        let mut rows: Vec<(&Labels, f64)> = f.samples.iter().filter_map(|(l, v)| if let Value::Number(n) = v { Some((l, *n)) } else { None }).collect();
        if rows.is_empty() {
            continue;
        }
        if section != Some(title) {
            out.push(title.to_string());
            section = Some(title);
        }
        out.push(format!("  {}", f.def.help.split(['.', ';', '(']).next().unwrap_or_default().trim()));
        if rows.len() > MAX_ROWS {
            rows.sort_by(|a, b| b.1.total_cmp(&a.1)); // the largest first when not all fit
        }
        for (labels, v) in rows.iter().take(MAX_ROWS) {
            out.push(format!("    {:<40} {}{}", what(labels), human(f.def.unit(), *v), source(labels)));
        }
        if rows.len() > MAX_ROWS {
            out.push(format!("    … and {} more", rows.len() - MAX_ROWS));
        }
    }
    if !snap.bpf.enabled {
        out.insert(0, format!("eBPF OFF ({}): no run-queue latency, stage computed in user space", Escaped(&snap.bpf.off_reason)));
    }
    out.extend(snap.notes.iter().map(|n| format!("note: {}", Escaped(n))));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{families, AgentStats};
    use joule_core::snapshot::{Cpu, RunqLatency};
    use joule_core::Origin;

    #[test]
    fn every_shown_value_carries_its_unit_and_source_from_the_table() {
        let mut s = Snapshot {
            cpu: Cpu { utilization: vec![0.25, 1.0], total_utilization: 0.625, source: Origin::Kernel },
            runq_latency: vec![
                RunqLatency { cgroup: "/busy".into(), count: 5, p50_us: 12.0, p99_us: 2500.0, source: Origin::Ebpf, ..Default::default() },
                RunqLatency { cgroup: "/idle".into(), count: 0, source: Origin::Ebpf, ..Default::default() },
            ],
            ..Default::default()
        };
        s.bpf.enabled = true;
        let text = render(&families(&s, &AgentStats::default()), &s).join("\n");
        assert!(text.contains("cpu=1") && text.contains("100.0 %") && text.contains("(kernel)"), "{text}");
        assert!(text.contains("cgroup=/busy") && text.contains("2.50 ms (ebpf)"), "{text}");
        // An idle cgroup has a wake-up count (0) but no interval percentiles.
        assert_eq!(text.matches("cgroup=/idle").count(), 1, "{text}");
        assert!(!text.contains("eBPF OFF"), "{text}");
        assert!(!text.contains("joule_agent"), "the agent's bookkeeping is not in the view");
    }

    #[test]
    fn ebpf_off_leads_the_view_and_long_families_are_cut_to_the_largest() {
        let mut s = Snapshot {
            cpu: Cpu { utilization: (0..10).map(|i| i as f64 / 10.0).collect(), total_utilization: 0.45, source: Origin::Kernel },
            ..Default::default()
        };
        s.bpf.off_reason = "flag".into();
        let lines = render(&families(&s, &AgentStats::default()), &s);
        assert!(lines[0].starts_with("eBPF OFF (flag)"), "{lines:?}");
        let text = lines.join("\n");
        assert!(text.contains("cpu=9") && !text.contains("cpu=0 ") && text.contains("… and 2 more"), "{text}");
    }

    /// Thread names and notes as a user can set them: escape sequences for the terminal's
    /// title (OSC 2), its clipboard (OSC 52), a C1 CSI, and a newline forging a line.
    #[test]
    fn names_and_notes_from_the_machine_are_shown_escaped() {
        use joule_core::snapshot::TaskWait;
        let names = ["\x1b]2;owned\x07", "\x1b]52;c;SGk=\x07", "\u{9b}2J", "a\nnote: forged"];
        let mut s = Snapshot { interval_ms: 1000, ..Default::default() };
        s.task_wait =
            names.iter().enumerate().map(|(i, n)| TaskWait { pid: 70 + i as i32, comm: n.to_string().into(), wait_us: 1000, source: Origin::Ebpf }).collect();
        s.notes.push("cgroup /user.slice/\x1b]2;x\x07 gone".into());
        s.bpf.enabled = true;
        let lines = render(&families(&s, &AgentStats::default()), &s);
        let text = lines.join("\n");
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        for want in
            ["comm=\\x1b]2;owned\\x07", "comm=\\x1b]52;c;SGk=\\x07", "comm=\\u{9b}2J", "comm=a\\nnote: forged", "note: cgroup /user.slice/\\x1b]2;x\\x07 gone"]
        {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        assert_eq!(lines.iter().filter(|l| l.starts_with("note:")).count(), 1, "a name forged a note:\n{text}");
    }
}

//! What the scale mode of `joule-bench overhead` reports, computed from its windows without
//! touching the machine: the table (medians and ranges), the verdicts against issue 16's
//! targets, the JSON with every window, and the plot's groups. Pure, so unit-tested.

use crate::report::median;
use serde_json::{json, Value};
use std::fmt;

/// One load level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Level {
    /// Idle processes, all in one class.
    Procs(usize),
    /// Loopback UDP flows, 100 B/s each.
    Flows(usize),
    /// Process starts a second, each matching a class.
    Churn(u32),
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Level::Procs(n) => write!(f, "{n} idle processes"),
            Level::Flows(m) => write!(f, "{m} loopback flows"),
            Level::Churn(r) => write!(f, "churn {r} starts/s"),
        }
    }
}

impl Level {
    fn key(&self) -> Value {
        match self {
            Level::Procs(n) => json!({ "procs": n }),
            Level::Flows(m) => json!({ "flows": m }),
            Level::Churn(r) => json!({ "churn_per_s": r }),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    Off,
    On,
}

/// One measured window.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub mode: Mode,
    /// The agent's threads' CPU time over the window, % of one CPU (kernel: schedstat).
    pub agent_cpu_pct: Option<f64>,
    /// Its eBPF programs' run time, % of one CPU (kernel: bpf_stats), charged to other tasks.
    pub bpf_cpu_pct: Option<f64>,
    /// The agent's longest loop iteration since it started, ms (its own metric).
    pub loop_max_ms: Option<f64>,
    pub rss_mb: Option<f64>,
    /// From the agent's start to its first period (its one /proc walk included), s.
    pub startup_s: Option<f64>,
    /// The whole machine's busy time, % of one CPU (kernel: /proc/stat).
    pub machine_busy_pct: f64,
    /// Churn levels: the starts the load achieved.
    pub starts_per_s: Option<f64>,
    /// Flow levels: the datagrams the load sent.
    pub datagrams_per_s: Option<f64>,
}

impl Window {
    fn json(&self) -> Value {
        json!({
            "agent": self.mode == Mode::On,
            "agent_cpu_pct": self.agent_cpu_pct,
            "bpf_cpu_pct": self.bpf_cpu_pct,
            "loop_max_ms": self.loop_max_ms,
            "rss_mb": self.rss_mb,
            "startup_s": self.startup_s,
            "machine_busy_pct": self.machine_busy_pct,
            "starts_per_s": self.starts_per_s,
            "datagrams_per_s": self.datagrams_per_s,
        })
    }
}

/// Every run of one level: (agent off, agent on).
pub struct LevelRuns {
    pub level: Level,
    pub runs: Vec<(Window, Window)>,
}

impl LevelRuns {
    fn on(&self, f: impl Fn(&Window) -> Option<f64>) -> Vec<f64> {
        self.runs.iter().filter_map(|(_, on)| f(on)).collect()
    }
    fn off(&self, f: impl Fn(&Window) -> Option<f64>) -> Vec<f64> {
        self.runs.iter().filter_map(|(off, _)| f(off)).collect()
    }
    /// Agent CPU ms per 1,000 starts, per run (churn levels).
    fn ms_per_1000_starts(&self, f: impl Fn(&Window) -> Option<f64>) -> Vec<f64> {
        self.runs.iter().filter_map(|(_, on)| Some(f(on)? * 10.0 / on.starts_per_s.filter(|s| *s > 0.0)? * 1000.0)).collect()
    }
}

/// The limits issue 16 sets: at 10,000 processes and at 10,000 flows the agent ≤ 1 % of a CPU
/// and no iteration over the period; under churn no iteration over the period.
pub const TARGET_PCT: f64 = 1.0;
pub const TARGET_AT: usize = 10_000;

pub struct ScaleSummary {
    pub period_ms: u64,
    pub seconds: f64,
    /// None: eBPF on.
    pub bpf_off_reason: Option<String>,
    pub results: Vec<LevelRuns>,
    pub command: String,
}

fn med_range(v: &[f64], digits: usize) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| (l.min(*x), h.max(*x)));
    format!("{:.d$} [{:.d$}–{:.d$}]", median(v), lo, hi, d = digits)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

impl ScaleSummary {
    pub const COLUMNS: [&'static str; 8] = [
        "load",
        "agent CPU % (median [range])",
        "longest loop ms",
        "RSS MB",
        "eBPF CPU %",
        "machine busy % off → on",
        "agent start s",
        "agent ms / 1,000 starts",
    ];

    pub fn header(&self) -> String {
        let bpf = match &self.bpf_off_reason {
            None => "eBPF on".to_string(),
            Some(why) => format!("eBPF off ({why})"),
        };
        format!(
            "joule-bench overhead, scale: agent period {} ms, {} s windows, agent off and on interleaved under each load, {} runs; {bpf}.\n\
             CPU shares are % of one CPU (kernel: schedstat, /proc/stat; eBPF: bpf_stats run time); this machine has no power sensor, so no watts here.",
            self.period_ms,
            self.seconds,
            self.results.first().map_or(0, |r| r.runs.len()),
        )
    }

    pub fn rows(&self) -> Vec<Vec<String>> {
        self.results
            .iter()
            .map(|r| {
                let loops = r.on(|w| w.loop_max_ms);
                let per_1000 = match r.level {
                    Level::Churn(_) => {
                        let v = r.ms_per_1000_starts(|w| w.agent_cpu_pct);
                        let achieved = r.on(|w| w.starts_per_s);
                        format!("{} (at {:.0} starts/s)", med_range(&v, 1), median(&achieved))
                    }
                    _ => "-".into(),
                };
                vec![
                    r.level.to_string(),
                    med_range(&r.on(|w| w.agent_cpu_pct), 2),
                    if loops.is_empty() { "-".into() } else { format!("{:.1} (max {:.1})", median(&loops), max(&loops)) },
                    med_range(&r.on(|w| w.rss_mb), 1),
                    med_range(&r.on(|w| w.bpf_cpu_pct), 2),
                    format!("{:.1} → {:.1}", median(&r.off(|w| Some(w.machine_busy_pct))), median(&r.on(|w| Some(w.machine_busy_pct)))),
                    med_range(&r.on(|w| w.startup_s), 2),
                    per_1000,
                ]
            })
            .collect()
    }

    /// One line per target the levels measured: met or NOT met, with the numbers.
    pub fn verdicts(&self) -> Vec<String> {
        let period = self.period_ms as f64;
        let mut out = Vec::new();
        for r in &self.results {
            let loop_max = max(&r.on(|w| w.loop_max_ms));
            let cpu = median(&r.on(|w| w.agent_cpu_pct));
            let ok = |b: bool| if b { "met" } else { "NOT met" };
            match r.level {
                Level::Procs(n) | Level::Flows(n) if n >= TARGET_AT => out.push(format!(
                    "target at {}: agent ≤ {TARGET_PCT}% of a CPU (median {cpu:.2}%) and no iteration over {period} ms (longest {loop_max:.1} ms): {}",
                    r.level,
                    ok(cpu <= TARGET_PCT && loop_max <= period)
                )),
                Level::Churn(_) => {
                    out.push(format!("target at {}: no iteration over {period} ms (longest {loop_max:.1} ms): {}", r.level, ok(loop_max <= period)))
                }
                _ => {}
            }
        }
        out
    }

    pub fn json(&self) -> Value {
        let levels: Vec<Value> = self
            .results
            .iter()
            .map(|r| {
                json!({
                    "level": r.level.key(),
                    "name": r.level.to_string(),
                    "median": {
                        "agent_cpu_pct": median(&r.on(|w| w.agent_cpu_pct)),
                        "bpf_cpu_pct": median(&r.on(|w| w.bpf_cpu_pct)),
                        "loop_max_ms": median(&r.on(|w| w.loop_max_ms)),
                        "rss_mb": median(&r.on(|w| w.rss_mb)),
                        "machine_busy_pct_agent_off": median(&r.off(|w| Some(w.machine_busy_pct))),
                        "machine_busy_pct_agent_on": median(&r.on(|w| Some(w.machine_busy_pct))),
                        "agent_ms_per_1000_starts": matches!(r.level, Level::Churn(_)).then(|| median(&r.ms_per_1000_starts(|w| w.agent_cpu_pct))),
                        "bpf_ms_per_1000_starts": matches!(r.level, Level::Churn(_)).then(|| median(&r.ms_per_1000_starts(|w| w.bpf_cpu_pct))),
                    },
                    "longest_loop_ms_any_run": max(&r.on(|w| w.loop_max_ms)),
                    "runs": r.runs.iter().map(|(off, on)| json!({ "agent_off": off.json(), "agent_on": on.json() })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "bench": "overhead-scale",
            "command": self.command,
            "period_ms": self.period_ms,
            "seconds": self.seconds,
            "ebpf": self.bpf_off_reason.is_none(),
            "ebpf_off_reason": self.bpf_off_reason,
            "sources": { "agent_cpu": "kernel (schedstat)", "machine_busy": "kernel (/proc/stat)", "bpf_cpu": "kernel (bpf_stats run_time_ns)", "loop_max": "the agent's joule_agent_loop_duration_max_seconds", "power": "none: no sensor on this machine" },
            "targets": { "agent_cpu_pct": TARGET_PCT, "at": TARGET_AT, "loop_max_ms": self.period_ms },
            "verdicts": self.verdicts(),
            "levels": levels,
        })
    }

    pub fn plot_title(&self) -> String {
        format!("joule agent CPU vs load ({} ms period; points: runs)", self.period_ms)
    }

    pub fn plot_groups(&self) -> Vec<(String, Vec<f64>)> {
        self.results.iter().map(|r| (r.level.to_string(), r.on(|w| w.agent_cpu_pct))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(mode: Mode, cpu: f64, loop_ms: f64, starts: Option<f64>) -> Window {
        let on = mode == Mode::On;
        Window {
            mode,
            agent_cpu_pct: on.then_some(cpu),
            bpf_cpu_pct: on.then_some(0.1),
            loop_max_ms: on.then_some(loop_ms),
            rss_mb: on.then_some(20.0),
            startup_s: on.then_some(0.5),
            machine_busy_pct: if on { 5.0 + cpu } else { 5.0 },
            starts_per_s: starts,
            datagrams_per_s: None,
        }
    }

    fn summary(results: Vec<LevelRuns>) -> ScaleSummary {
        ScaleSummary { period_ms: 100, seconds: 30.0, bpf_off_reason: None, results, command: "joule-bench overhead --procs 10000".into() }
    }

    #[test]
    fn verdicts_judge_the_median_cpu_and_the_longest_loop_of_any_run_at_10000_only() {
        let runs = |cpus: [f64; 3], loops: [f64; 3]| (0..3).map(|i| (w(Mode::Off, 0.0, 0.0, None), w(Mode::On, cpus[i], loops[i], None))).collect();
        let s = summary(vec![
            LevelRuns { level: Level::Procs(100), runs: runs([5.0, 5.0, 5.0], [1.0, 1.0, 1.0]) },
            LevelRuns { level: Level::Procs(10_000), runs: runs([0.8, 1.5, 0.9], [10.0, 12.0, 11.0]) },
            LevelRuns { level: Level::Flows(10_000), runs: runs([0.5, 0.6, 0.7], [10.0, 140.0, 11.0]) },
        ]);
        let v = s.verdicts();
        assert_eq!(v.len(), 2, "no target at 100 processes: {v:?}");
        assert!(v[0].contains("10000 idle processes") && v[0].ends_with(": met") && v[0].contains("median 0.90%"), "{}", v[0]);
        assert!(v[1].ends_with("NOT met") && v[1].contains("longest 140.0 ms"), "one slow iteration in any run fails it: {}", v[1]);
    }

    #[test]
    fn churn_reports_agent_ms_per_1000_starts_from_the_rate_achieved() {
        let runs = vec![(w(Mode::Off, 0.0, 0.0, Some(500.0)), w(Mode::On, 5.0, 20.0, Some(500.0)))];
        let s = summary(vec![LevelRuns { level: Level::Churn(500), runs }]);
        // 5 % of a CPU = 50 ms/s, at 500 starts/s: 100 ms per 1,000 starts.
        assert_eq!(s.json()["levels"][0]["median"]["agent_ms_per_1000_starts"], 100.0);
        assert!(s.rows()[0][7].starts_with("100.0"), "{:?}", s.rows()[0]);
        assert!(s.verdicts()[0].ends_with(": met"));
    }

    #[test]
    fn the_json_keeps_every_window_of_every_run() {
        let runs = (0..3).map(|i| (w(Mode::Off, 0.0, 0.0, None), w(Mode::On, i as f64, 1.0, None))).collect();
        let j = summary(vec![LevelRuns { level: Level::Flows(2000), runs }]).json();
        let runs = j["levels"][0]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3);
        assert_eq!(runs[2]["agent_on"]["agent_cpu_pct"], 2.0);
        assert_eq!(runs[2]["agent_off"]["agent"], false);
        assert_eq!(j["levels"][0]["level"]["flows"], 2000);
        assert_eq!(j["levels"][0]["median"]["agent_cpu_pct"], 1.0);
    }
}

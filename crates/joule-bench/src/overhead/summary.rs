//! What `joule-bench overhead` reports, computed from its samples without touching the
//! machine: the scenario names (with the thread counts as given), the tables, the JSON and the
//! plot's groups. Kept pure so its shape — eBPF columns absent with `--no-bpf`, counts as
//! given — is unit-tested without root.

use super::OverheadArgs;
use crate::report::median;
use serde_json::{json, Value};

/// Whether the agents under test run eBPF; when not, why.
#[derive(Clone, Debug, PartialEq)]
pub enum BpfMode {
    On,
    Off(String),
}

/// One scenario: `key` for scripts, `name` for tables, `label` for the plot, and how many
/// threads its load adds.
pub struct Scenario {
    pub key: &'static str,
    pub name: String,
    pub label: String,
    pub load_threads: usize,
}

/// Baseline first: ratios are against it. With `--idle`, the baseline alone (the machine at
/// rest, nothing changing: issue 36's goal).
pub fn scenarios(a: &OverheadArgs) -> Vec<Scenario> {
    let idle = Scenario { key: "idle", name: "idle machine (baseline)".into(), label: "idle".into(), load_threads: 0 };
    if a.idle {
        return vec![idle];
    }
    vec![
        idle,
        Scenario { key: "sleeping", name: format!("+{} sleeping threads", a.threads), label: format!("+{} sleeping", a.threads), load_threads: a.threads },
        Scenario {
            key: "waking",
            name: format!("+{} threads waking every {} µs", a.wakers, a.wake_period_us),
            label: format!("+{} waking", a.wakers),
            load_threads: a.wakers,
        },
    ]
}

/// In-kernel cost of one program over one measurement.
#[derive(Clone, Debug)]
pub struct ProgRate {
    pub name: String,
    pub cpu_pct: f64,
    pub runs_per_s: f64,
    pub ns_per_run: Option<f64>,
}

/// One measurement of one scenario.
#[derive(Clone, Debug)]
pub struct Sample {
    pub agent_cpu_pct: f64,
    /// Context switches (voluntary + involuntary) of all the agent's threads per second: each
    /// is a wake-up of the agent or a CPU taken from it.
    pub agent_wakeups_per_s: f64,
    /// None when eBPF is off.
    pub bpf: Option<Vec<ProgRate>>,
    /// Voluntary context switches of the load's threads per second (each ends in a wake-up);
    /// None without a load.
    pub load_wakeups_per_s: Option<f64>,
    pub load_preemptions_per_s: Option<f64>,
    pub machine_ctxt_per_s: Option<f64>,
}

impl Sample {
    pub fn bpf_cpu_pct(&self) -> Option<f64> {
        self.bpf.as_ref().map(|p| p.iter().map(|r| r.cpu_pct).sum())
    }
}

/// Everything one invocation measured, and the conditions it ran in.
pub struct Summary<'a> {
    pub args: &'a OverheadArgs,
    pub bpf: BpfMode,
    pub scenarios: Vec<Scenario>,
    /// `results[scenario][run]`.
    pub results: Vec<Vec<Sample>>,
    pub command: String,
    pub loadavg_before: Option<String>,
    pub loadavg_after: Option<String>,
}

/// The eBPF columns' text when eBPF is off.
pub const OFF: &str = "off";
/// The limit the sleeping scenario is held to, % of one CPU (issue 2).
pub const TARGET_PCT: f64 = 1.0;
/// Issue 36's goal for the agent at rest (the idle scenario): wake-ups a second, and % of one
/// CPU.
pub const REST_WAKEUPS_PER_S: f64 = 1.0;
pub const REST_CPU_PCT: f64 = 0.1;

fn fmt(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "—".into(),
    }
}

fn some_finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

impl Summary<'_> {
    fn med(&self, i: usize, f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
        some_finite(median(&self.results[i].iter().filter_map(f).collect::<Vec<_>>()))
    }

    fn agent(&self, i: usize) -> Option<f64> {
        self.med(i, |s| Some(s.agent_cpu_pct))
    }

    fn wakeups(&self, i: usize) -> Option<f64> {
        self.med(i, |s| Some(s.agent_wakeups_per_s))
    }

    fn bpf_pct(&self, i: usize) -> Option<f64> {
        self.med(i, Sample::bpf_cpu_pct)
    }

    fn ratio(x: Option<f64>, base: Option<f64>) -> Option<f64> {
        x.zip(base).and_then(|(x, b)| some_finite(x / b))
    }

    fn bpf_on(&self) -> bool {
        self.bpf == BpfMode::On
    }

    /// Program names in the order they first appear.
    fn prog_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for p in self.results.iter().flatten().filter_map(|s| s.bpf.as_ref()).flatten() {
            if !names.contains(&p.name) {
                names.push(p.name.clone());
            }
        }
        names
    }

    fn prog_med(&self, i: usize, name: &str, f: impl Fn(&ProgRate) -> Option<f64>) -> Option<f64> {
        self.med(i, |s| s.bpf.as_ref()?.iter().find(|p| p.name == name).and_then(&f))
    }

    pub fn header(&self) -> String {
        let a = self.args;
        let bpf = match &self.bpf {
            BpfMode::On => "eBPF on (in-kernel cost from BPF run-time stats)".to_string(),
            BpfMode::Off(why) => format!("eBPF off ({why}): no in-kernel cost to report"),
        };
        format!(
            "joule-bench overhead: agent at {} ms period ({} at rest) with every mechanism on (classes, thermal stages, flow monitor, nap armed; elevate off), {} run(s) × {} s after {} s warm-up, {bpf}",
            a.period_ms,
            a.rest_period_ms.map(|ms| format!("{ms} ms")).unwrap_or_else(|| "its default rest period".into()),
            a.runs,
            a.seconds,
            a.warmup_s
        )
    }

    pub const COLUMNS: [&'static str; 9] = [
        "scenario",
        "load wake-ups/s",
        "machine ctxt/s",
        "agent CPU % (median)",
        "agent wake-ups/s (median)",
        "agent runs",
        "agent ratio",
        "eBPF in-kernel %",
        "eBPF ratio",
    ];

    pub fn rows(&self) -> Vec<Vec<String>> {
        let (agent0, bpf0) = (self.agent(0), self.bpf_pct(0));
        (0..self.scenarios.len())
            .map(|i| {
                let runs: Vec<String> = self.results[i].iter().map(|s| format!("{:.3}", s.agent_cpu_pct)).collect();
                let (bpf, bpf_ratio) =
                    if self.bpf_on() { (fmt(self.bpf_pct(i), 3), fmt(Self::ratio(self.bpf_pct(i), bpf0), 2)) } else { (OFF.to_string(), OFF.to_string()) };
                vec![
                    self.scenarios[i].name.clone(),
                    fmt(self.med(i, |s| s.load_wakeups_per_s), 0),
                    fmt(self.med(i, |s| s.machine_ctxt_per_s), 0),
                    fmt(self.agent(i), 3),
                    fmt(self.wakeups(i), 1),
                    runs.join(" "),
                    fmt(Self::ratio(self.agent(i), agent0), 2),
                    bpf,
                    bpf_ratio,
                ]
            })
            .collect()
    }

    pub const PROG_COLUMNS: [&'static str; 5] = ["eBPF program", "scenario", "runs/s", "ns/run", "% of one CPU"];

    /// Per program and scenario (medians); empty when eBPF is off.
    pub fn prog_rows(&self) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        for name in self.prog_names() {
            for (i, sc) in self.scenarios.iter().enumerate() {
                rows.push(vec![
                    name.clone(),
                    sc.label.clone(),
                    fmt(self.prog_med(i, &name, |p| Some(p.runs_per_s)), 0),
                    fmt(self.prog_med(i, &name, |p| p.ns_per_run), 0),
                    fmt(self.prog_med(i, &name, |p| Some(p.cpu_pct)), 4),
                ]);
            }
        }
        rows
    }

    /// The agent stays under [`TARGET_PCT`] with the sleeping threads (None: not measured,
    /// `--idle`).
    pub fn target_met(&self) -> Option<bool> {
        self.scenarios.iter().position(|s| s.key == "sleeping").map(|i| self.agent(i).is_some_and(|v| v < TARGET_PCT))
    }

    /// Issue 36's goals at rest, from the idle scenario's medians: (line, met).
    pub fn rest_goals(&self) -> Vec<(String, bool)> {
        let runs = |f: fn(&Sample) -> f64, d: usize| self.results[0].iter().map(|s| format!("{:.d$}", f(s))).collect::<Vec<_>>().join(" ");
        let (w, c) = (self.wakeups(0), self.agent(0));
        let w_met = w.is_some_and(|v| v <= REST_WAKEUPS_PER_S);
        let c_met = c.is_some_and(|v| v <= REST_CPU_PCT);
        let word = |m: bool| if m { "met" } else { "missed" };
        vec![
            (
                format!(
                    "goal (issue 36), at rest: agent wake-ups ≤ {REST_WAKEUPS_PER_S} per second: {} (median {}/s; runs {})",
                    word(w_met),
                    fmt(w, 2),
                    runs(|s| s.agent_wakeups_per_s, 2)
                ),
                w_met,
            ),
            (
                format!(
                    "goal (issue 36), at rest: agent CPU ≤ {REST_CPU_PCT} % of one CPU: {} (median {} %; runs {})",
                    word(c_met),
                    fmt(c, 3),
                    runs(|s| s.agent_cpu_pct, 3)
                ),
                c_met,
            ),
        ]
    }

    pub fn json(&self) -> Value {
        let a = self.args;
        let on = self.bpf_on();
        let (agent0, bpf0) = (self.agent(0), self.bpf_pct(0));
        let scenarios: Vec<Value> = self
            .scenarios
            .iter()
            .enumerate()
            .map(|(i, sc)| {
                let col = |f: &dyn Fn(&Sample) -> Option<f64>| self.results[i].iter().map(f).collect::<Vec<_>>();
                let progs: Option<Vec<Value>> = on.then(|| {
                    self.prog_names()
                        .iter()
                        .map(|n| {
                            json!({
                                "name": n,
                                "cpu_pct_median": self.prog_med(i, n, |p| Some(p.cpu_pct)),
                                "runs_per_s_median": self.prog_med(i, n, |p| Some(p.runs_per_s)),
                                "ns_per_run_median": self.prog_med(i, n, |p| p.ns_per_run),
                            })
                        })
                        .collect()
                });
                json!({
                    "key": sc.key,
                    "name": sc.name,
                    "load_threads": sc.load_threads,
                    "agent_cpu_pct_median": self.agent(i),
                    "agent_cpu_pct_runs": col(&|s| Some(s.agent_cpu_pct)),
                    "agent_ratio_vs_baseline": Self::ratio(self.agent(i), agent0),
                    "agent_wakeups_per_s_median": self.wakeups(i),
                    "agent_wakeups_per_s_runs": col(&|s| Some(s.agent_wakeups_per_s)),
                    "bpf_cpu_pct_median": self.bpf_pct(i),
                    "bpf_cpu_pct_runs": on.then(|| col(&Sample::bpf_cpu_pct)),
                    "bpf_ratio_vs_baseline": Self::ratio(self.bpf_pct(i), bpf0),
                    "bpf_programs": progs,
                    "load_wakeups_per_s_median": self.med(i, |s| s.load_wakeups_per_s),
                    "load_wakeups_per_s_runs": col(&|s| s.load_wakeups_per_s),
                    "load_preemptions_per_s_median": self.med(i, |s| s.load_preemptions_per_s),
                    "machine_ctxt_per_s_median": self.med(i, |s| s.machine_ctxt_per_s),
                    "machine_ctxt_per_s_runs": col(&|s| s.machine_ctxt_per_s),
                })
            })
            .collect();
        json!({
            "bench": "overhead",
            "command": self.command,
            "period_ms": a.period_ms, "seconds": a.seconds, "warmup_s": a.warmup_s, "runs": a.runs,
            "threads": a.threads, "wakers": a.wakers, "wake_period_us": a.wake_period_us,
            "bpf": on,
            "bpf_off_reason": match &self.bpf { BpfMode::On => None, BpfMode::Off(why) => Some(why.clone()) },
            "source": {
                "agent_cpu": "kernel: /proc/PID/task/*/schedstat (ns on CPU), per wall second",
                "agent_wakeups": "kernel: voluntary + nonvoluntary_ctxt_switches of every agent thread (/proc/PID/task/*/status), per wall second",
                "bpf_cpu": if on { "kernel: BPF_ENABLE_STATS run_time_ns / run_cnt per program the agent holds" } else { "absent: eBPF off" },
                "load_wakeups": "kernel: voluntary_ctxt_switches of the load's threads (/proc/self/task/TID/status)",
                "machine_ctxt": "kernel: ctxt in /proc/stat",
            },
            "loadavg_before": self.loadavg_before, "loadavg_after": self.loadavg_after,
            "scenarios": scenarios,
            "target": format!("agent CPU with {} sleeping threads < {TARGET_PCT}% of one CPU", a.threads),
            "target_pct": TARGET_PCT,
            "target_met": self.target_met(),
            "rest_period_ms": a.rest_period_ms,
            "idle_only": a.idle,
            "rest_goals": self.rest_goals().into_iter().map(|(line, met)| json!({ "goal": line, "met": met })).collect::<Vec<_>>(),
        })
    }

    /// Agent CPU per scenario, then (eBPF on) the in-kernel cost per scenario.
    pub fn plot_groups(&self) -> Vec<(String, Vec<f64>)> {
        let mut g: Vec<(String, Vec<f64>)> =
            self.scenarios.iter().zip(&self.results).map(|(sc, r)| (format!("agent {}", sc.label), r.iter().map(|s| s.agent_cpu_pct).collect())).collect();
        if self.bpf_on() {
            g.extend(
                self.scenarios.iter().zip(&self.results).map(|(sc, r)| (format!("eBPF {}", sc.label), r.iter().filter_map(Sample::bpf_cpu_pct).collect())),
            );
        }
        g
    }

    pub fn plot_title(&self) -> String {
        let bpf = if self.bpf_on() { "eBPF on" } else { "eBPF off" };
        format!("joule agent CPU at {} ms period ({bpf})", self.args.period_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_args as args;
    use super::*;

    fn sample(agent: f64, bpf: Option<f64>, wake: Option<f64>) -> Sample {
        Sample {
            agent_cpu_pct: agent,
            agent_wakeups_per_s: agent * 20.0,
            bpf: bpf.map(|c| vec![ProgRate { name: "joule_sched_switch".into(), cpu_pct: c, runs_per_s: 900.0, ns_per_run: Some(c * 1e7 / 900.0) }]),
            load_wakeups_per_s: wake,
            load_preemptions_per_s: wake.map(|_| 0.0),
            machine_ctxt_per_s: Some(500.0),
        }
    }

    fn summary(a: &OverheadArgs, bpf: BpfMode) -> Summary<'_> {
        let on = bpf == BpfMode::On;
        let b = |x: f64| on.then_some(x);
        Summary {
            args: a,
            bpf,
            scenarios: scenarios(a),
            results: vec![
                vec![sample(0.4, b(0.02), None), sample(0.5, b(0.03), None)],
                vec![sample(0.45, b(0.02), Some(0.0)), sample(0.47, b(0.02), Some(0.0))],
                vec![sample(0.6, b(0.2), Some(7000.0)), sample(0.8, b(0.4), Some(7200.0))],
            ],
            command: "joule-bench overhead".into(),
            loadavg_before: Some("0.10 0.20 0.30 1/80 100".into()),
            loadavg_after: None,
        }
    }

    #[test]
    fn the_thread_counts_appear_as_given() {
        let a = args(&["--threads", "37", "--wakers", "5", "--wake-period-us", "2000"]);
        let s = summary(&a, BpfMode::On);
        let rows = s.rows();
        assert_eq!(rows[1][0], "+37 sleeping threads");
        assert_eq!(rows[2][0], "+5 threads waking every 2000 µs");
        let j = s.json();
        assert_eq!(j["threads"], 37);
        assert_eq!(j["wakers"], 5);
        assert_eq!(j["scenarios"][1]["name"], "+37 sleeping threads");
        assert_eq!(j["scenarios"][1]["load_threads"], 37);
        assert_eq!(j["scenarios"][2]["load_threads"], 5);
        assert!(j["target"].as_str().unwrap().contains("37 sleeping"));
        let labels: Vec<String> = s.plot_groups().into_iter().map(|g| g.0).collect();
        assert!(labels.contains(&"agent +37 sleeping".to_string()), "{labels:?}");
        let all = format!("{rows:?}{j}{labels:?}");
        assert!(!all.contains("1000"), "a default thread count leaked into the report: {all}");
    }

    #[test]
    fn no_bpf_reports_the_ebpf_cost_as_absent() {
        let a = args(&["--no-bpf"]);
        let s = summary(&a, BpfMode::Off("--no-bpf".into()));
        assert!(s.header().contains("eBPF off (--no-bpf)"), "{}", s.header());
        for r in s.rows() {
            assert_eq!(r.len(), Summary::COLUMNS.len());
            assert_eq!((r[7].as_str(), r[8].as_str()), (OFF, OFF), "{r:?}");
        }
        assert!(s.prog_rows().is_empty());
        let j = s.json();
        assert_eq!(j["bpf"], false);
        assert_eq!(j["bpf_off_reason"], "--no-bpf");
        for sc in j["scenarios"].as_array().unwrap() {
            for k in ["bpf_cpu_pct_median", "bpf_cpu_pct_runs", "bpf_ratio_vs_baseline", "bpf_programs"] {
                assert!(sc[k].is_null(), "{k} = {} with eBPF off", sc[k]);
            }
        }
        assert!(s.plot_groups().iter().all(|(n, _)| !n.starts_with("eBPF")));
        assert!(s.plot_title().contains("eBPF off"));
    }

    #[test]
    fn with_bpf_the_costs_and_ratios_are_reported() {
        let a = args(&[]);
        let s = summary(&a, BpfMode::On);
        let rows = s.rows();
        assert_eq!(rows[0][6], "1.00");
        assert_eq!(rows[2][3], "0.700"); // median of 0.6 and 0.8
        assert_eq!(rows[2][4], "14.0"); // agent wake-ups/s, beside its CPU
        assert_eq!(rows[2][7], "0.300");
        assert_eq!(rows[2][8], "12.00"); // 0.3 / 0.025
        assert_eq!(rows[2][1], "7100");
        assert_eq!(rows[0][1], "—"); // no load threads in the baseline
        let j = s.json();
        assert_eq!(j["scenarios"][2]["bpf_programs"][0]["name"], "joule_sched_switch");
        assert!((j["scenarios"][2]["bpf_ratio_vs_baseline"].as_f64().unwrap() - 12.0).abs() < 1e-9);
        assert_eq!(s.prog_rows().len(), 3);
        assert_eq!(s.plot_groups().len(), 6);
        assert_eq!(s.target_met(), Some(true));
    }

    #[test]
    fn idle_measures_the_baseline_alone_and_says_whether_the_rest_goals_are_met() {
        let a = args(&["--idle"]);
        assert_eq!(scenarios(&a).len(), 1);
        let s = Summary {
            args: &a,
            bpf: BpfMode::On,
            scenarios: scenarios(&a),
            results: vec![vec![sample(0.04, Some(0.01), None), sample(0.08, Some(0.01), None), sample(0.05, Some(0.01), None)]],
            command: "joule-bench overhead --idle".into(),
            loadavg_before: None,
            loadavg_after: None,
        };
        assert_eq!(s.target_met(), None, "no sleeping scenario: nothing to say about issue 2's target");
        let goals = s.rest_goals();
        assert_eq!(goals.len(), 2);
        // 0.05 % median: CPU met; 1.0 wake-ups/s median (0.05 × 20): met, at the limit.
        assert!(goals.iter().all(|(_, met)| *met), "{goals:?}");
        assert!(goals[0].0.contains("median 1.00/s") && goals[1].0.contains("median 0.050 %"), "{goals:?}");
        assert_eq!(s.json()["rest_goals"][1]["met"], true);
        let busy = Summary { results: vec![vec![sample(0.6, Some(0.01), None)]], ..s };
        assert!(busy.rest_goals().iter().all(|(l, met)| !met && l.contains("missed")));
    }
}

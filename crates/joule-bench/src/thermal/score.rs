//! The scores of `joule-bench thermal`, per run and per mode (median and range over runs),
//! the goals the issue set, the table, the JSON and the plot. Every temperature here is the
//! plant's (`temp_source: "plant"`): this machine has no thermal sensor.

use super::plant::{Board, Reading};
use super::probe::percentile;
use super::{Mode, ModeRun};
use crate::report::{median, print_table};
use joule_core::control::ThermalPath;
use serde_json::{json, Value};
use std::path::Path;

pub struct Summary {
    pub path: ThermalPath,
    pub board: Board,
    pub limit_celsius: f64,
    pub thresholds_celsius: Vec<f64>,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub workers: usize,
    pub direct_io: bool,
    pub ncpu: usize,
    pub modes: Vec<Mode>,
    pub runs: Vec<ModeRun>,
    pub command: String,
    pub loadavg_before: String,
    pub loadavg_after: String,
    /// How the plant's temperature reached the agent (`Zone::kind`).
    pub zone: &'static str,
    /// The board's firmware throttle acted on the machine (`--firmware`).
    pub firmware: bool,
    /// Whose thresholds the joule mode ran with: `bench` or `built-in`.
    pub joule_stages: &'static str,
}

/// One mode's scores in one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunScore {
    pub mode: Mode,
    pub run: usize,
    pub plant_peak_celsius: f64,
    pub seconds_over_limit: f64,
    pub pct_time_over_limit: f64,
    pub labelled_p50_us: f64,
    pub labelled_p99_us: f64,
    pub labelled_wakeups: usize,
    pub fio_mib_s: f64,
    /// stress-ng's bogo ops.
    pub best_effort_work: f64,
    /// The CPU time stress-ng's workers got, s, and their bogo ops per CPU second.
    pub best_effort_cpu_s: f64,
    pub best_effort_work_per_cpu_s: f64,
    /// From the plant first reaching the mode's own first trigger to a cap first in force on
    /// stress-ng's cgroup (None: no cap, or no trigger reached).
    pub reaction_s: Option<f64>,
    pub mean_machine_busy_pct: f64,
    /// The hypervisor's steal over the run, % of the machine's time: a noisy host's, in no
    /// mode's favour; the plant leaves it out of the heat.
    pub steal_pct: f64,
    /// Time the board's firmware had the clock under full speed (0 without `--firmware`), and
    /// the lowest speed it set.
    pub seconds_firmware_throttled: f64,
    pub min_firmware_speed: f64,
    pub stress_cgroup: Option<String>,
    pub agent_errors: Vec<String>,
    /// The joule mode on the scx path: how often the agent loaded its scheduler and how often
    /// the kernel ejected it (its `scx_loaded` / `scx_ejected` events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scx_loaded: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scx_ejections: Option<u64>,
}

/// The temperature at which each mode's controller first acts.
fn trigger_celsius(mode: Mode, limit: f64, thresholds: &[f64]) -> Option<f64> {
    match mode {
        Mode::None => None,
        Mode::Uniform => Some(limit - 1.5),
        Mode::BatchCap => Some(limit - 3.0),
        Mode::Joule => thresholds.first().copied(),
    }
}

/// Seconds the plant spent over `limit` (each reading counts until the next) and the peak.
fn over_limit(trace: &[Reading], limit: f64) -> (f64, f64) {
    let over = trace.windows(2).filter(|w| w[0].die_celsius > limit).map(|w| w[1].t_s - w[0].t_s).sum::<f64>() + 0.0; // not -0.0
    let peak = trace.iter().map(|r| r.die_celsius).fold(f64::NEG_INFINITY, f64::max);
    (over, peak)
}

pub fn score(r: &ModeRun, limit: f64, thresholds: &[f64], duration_s: f64) -> RunScore {
    let (over, peak) = over_limit(&r.plant, limit);
    let late: Vec<f64> = r.wakeups.iter().map(|w| w.1).collect();
    let reaction_s = trigger_celsius(r.mode, limit, thresholds).and_then(|trig| {
        let crossed = r.plant.iter().find(|p| p.die_celsius >= trig)?.t_s;
        let capped = r.samples.iter().find(|s| s.cap_share.is_some_and(|c| c < 0.999))?.t_s;
        Some((capped - crossed).max(0.0))
    });
    RunScore {
        mode: r.mode,
        run: r.run,
        plant_peak_celsius: peak,
        seconds_over_limit: over,
        pct_time_over_limit: 100.0 * over / duration_s,
        labelled_p50_us: percentile(&late, 50.0),
        labelled_p99_us: percentile(&late, 99.0),
        labelled_wakeups: late.len(),
        fio_mib_s: r.fio.read_mib_s + r.fio.write_mib_s,
        best_effort_work: r.stress.bogo_ops as f64,
        best_effort_cpu_s: r.stress.cpu_s,
        best_effort_work_per_cpu_s: if r.stress.cpu_s > 0.0 { r.stress.bogo_ops as f64 / r.stress.cpu_s } else { 0.0 },
        reaction_s,
        mean_machine_busy_pct: 100.0 * r.plant.iter().map(|p| p.util).sum::<f64>() / r.plant.len().max(1) as f64,
        steal_pct: 100.0 * r.plant.iter().map(|p| p.steal).sum::<f64>() / r.plant.len().max(1) as f64,
        seconds_firmware_throttled: r.plant.windows(2).filter(|w| w[0].speed < 0.9999).map(|w| w[1].t_s - w[0].t_s).sum::<f64>() + 0.0,
        min_firmware_speed: r.plant.iter().map(|p| p.speed).fold(1.0, f64::min),
        stress_cgroup: r.stress_cgroup.clone(),
        agent_errors: r.agent_errors.clone(),
        scx_loaded: r.scx.map(|x| x.loaded),
        scx_ejections: r.scx.map(|x| x.ejected),
    }
}

/// The keys reported per mode as median and range.
const METRICS: [&str; 13] = [
    "plant_peak_celsius",
    "seconds_over_limit",
    "pct_time_over_limit",
    "labelled_p50_us",
    "labelled_p99_us",
    "fio_mib_s",
    "best_effort_work",
    "best_effort_cpu_s",
    "best_effort_work_per_cpu_s",
    "reaction_s",
    "seconds_firmware_throttled",
    "mean_machine_busy_pct",
    "steal_pct",
];

/// Median and range of `key` over `scores` (the runs that have it).
fn stat(scores: &[&RunScore], key: &str) -> Option<(f64, f64, f64)> {
    let v: Vec<f64> = scores.iter().filter_map(|s| serde_json::to_value(s).ok()?.get(key)?.as_f64()).filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((median(&v), lo, hi))
}

/// One goal of the issue, evaluated on medians.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Goal {
    pub what: String,
    pub value: Option<f64>,
    pub target: String,
    pub met: Option<bool>,
}

impl Summary {
    fn scores(&self) -> Vec<RunScore> {
        self.runs.iter().map(|r| score(r, self.limit_celsius, &self.thresholds_celsius, self.duration_s)).collect()
    }

    fn of(scores: &[RunScore], m: Mode) -> Vec<&RunScore> {
        scores.iter().filter(|s| s.mode == m).collect()
    }

    fn med(scores: &[RunScore], m: Mode, key: &str) -> Option<f64> {
        stat(&Self::of(scores, m), key).map(|s| s.0)
    }

    pub fn goals(&self, scores: &[RunScore]) -> Vec<Goal> {
        let l = self.limit_celsius;
        let mut g = Vec::new();
        for m in self.modes.iter().copied().filter(|m| *m != Mode::None) {
            let peak = Self::med(scores, m, "plant_peak_celsius");
            let pct = Self::med(scores, m, "pct_time_over_limit");
            g.push(Goal {
                what: format!("{} holds the limit: peak", m.name()),
                value: peak,
                target: format!("≤ {:.1} °C", l + 0.5),
                met: peak.map(|p| p <= l + 0.5),
            });
            g.push(Goal { what: format!("{} holds the limit: time over", m.name()), value: pct, target: "≤ 1 %".into(), met: pct.map(|p| p <= 1.0) });
        }
        let ratio = |a: Mode, b: Mode, key: &str| Some(Self::med(scores, a, key)? / Self::med(scores, b, key)?);
        let mut vs = |what: &str, r: Option<f64>, target: &str, ok: fn(f64) -> bool| {
            g.push(Goal { what: what.into(), value: r, target: target.into(), met: r.map(ok) });
        };
        vs("joule/none labelled p99", ratio(Mode::Joule, Mode::None, "labelled_p99_us"), "≤ 1.1×", |r| r <= 1.1);
        vs("joule/uniform labelled p99", ratio(Mode::Joule, Mode::Uniform, "labelled_p99_us"), "≤ 0.5×", |r| r <= 0.5);
        vs("joule/none fio", ratio(Mode::Joule, Mode::None, "fio_mib_s"), "≥ 0.97×", |r| r >= 0.97);
        vs("joule/uniform best-effort work", ratio(Mode::Joule, Mode::Uniform, "best_effort_work"), "≥ 0.95×", |r| r >= 0.95);
        if self.firmware {
            // With the firmware as the last line, joule must beat what the firmware degrades every mode to.
            vs("firmware: joule/none labelled p99", ratio(Mode::Joule, Mode::None, "labelled_p99_us"), "< 1×", |r| r < 1.0);
            vs("firmware: joule/uniform labelled p99", ratio(Mode::Joule, Mode::Uniform, "labelled_p99_us"), "< 1×", |r| r < 1.0);
            vs("firmware: joule/none fio", ratio(Mode::Joule, Mode::None, "fio_mib_s"), "> 1×", |r| r > 1.0);
            vs("firmware: joule/uniform fio", ratio(Mode::Joule, Mode::Uniform, "fio_mib_s"), "> 1×", |r| r > 1.0);
            vs("firmware: joule/batch-cap best-effort", ratio(Mode::Joule, Mode::BatchCap, "best_effort_work"), "≥ 1×", |r| r >= 1.0);
        }
        g
    }

    pub fn json(&self) -> Value {
        let scores = self.scores();
        let (tau_die, tau_sink) = self.board.time_constants_s();
        let mut modes = serde_json::Map::new();
        for m in &self.modes {
            let mine = Self::of(&scores, *m);
            let mut o = serde_json::Map::new();
            o.insert("temp_source".into(), json!("plant"));
            for k in METRICS {
                let s = stat(&mine, k);
                o.insert(k.into(), json!(s.map(|s| s.0)));
                o.insert(format!("{k}_range"), json!(s.map(|s| [s.1, s.2])));
            }
            o.insert("runs".into(), json!(mine));
            modes.insert(m.name().into(), Value::Object(o));
        }
        let traces: Vec<Value> = self
            .runs
            .iter()
            .map(|r| {
                // The labelled task's wake-ups later than 500 µs, to see when the tail happens.
                let late: Vec<[f64; 2]> = r.wakeups.iter().filter(|w| w.1 > 500.0).map(|w| [w.0, w.1]).collect();
                // Every 0.5 s of the plant, and the samples where the cap in force changed (the
                // scores above use every reading): a run's trace stays a few kB.
                let plant: Vec<[f64; 3]> = r.plant.iter().step_by(5).map(|p| [p.t_s, p.die_celsius, p.util]).collect();
                let changes: Vec<&super::Sample> = r
                    .samples
                    .iter()
                    .enumerate()
                    .filter(|(i, s)| *i == 0 || r.samples[i - 1].cap_share != s.cap_share || r.samples[i - 1].stage != s.stage)
                    .map(|(_, s)| s)
                    .collect();
                json!({ "mode": r.mode, "run": r.run, "plant_every_0_5_s": plant, "cap_or_stage_changes": changes, "labelled_late_over_500us": late })
            })
            .collect();
        json!({
            "bench": "thermal",
            "command": self.command,
            "temp_source": "plant",
            "plant_zone": self.zone,
            "note": "no thermal sensor on this machine: every temperature is the bench's plant (the machine's real CPU busy time through the board's model), never joule's own model; scores are the plant's own value",
            "board": self.board,
            "plant_time_constants_s": { "die": tau_die, "sink": tau_sink },
            "path": match self.path { ThermalPath::Scx => "scx", ThermalPath::Cgroup => "cgroup" },
            "limit_celsius": self.limit_celsius,
            "joule_stage_thresholds_celsius": self.thresholds_celsius,
            "joule_stages": self.joule_stages,
            "firmware_modelled": self.firmware,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "runs_per_mode": self.runs.len() / self.modes.len().max(1),
            "stress_workers": self.workers,
            "fio_direct_io": self.direct_io,
            "ncpu": self.ncpu,
            "modes": modes,
            "goals": self.goals(&scores),
            "traces": traces,
            "loadavg_before": self.loadavg_before,
            "loadavg_after": self.loadavg_after,
        })
    }

    pub fn print(&self) {
        let scores = self.scores();
        let (tau_die, tau_sink) = self.board.time_constants_s();
        println!(
            "joule-bench thermal: {} plant (τ die {tau_die:.1} s, heatsink {tau_sink:.1} s), limit {:.1} °C, {} run(s) × {:.0} s per mode, modes interleaved",
            self.board.name,
            self.limit_celsius,
            self.runs.len() / self.modes.len().max(1),
            self.duration_s
        );
        println!("temperatures are the bench's plant (temp_source: plant; joule reads it through {}): this machine has no thermal sensor; median [min–max] over runs", self.zone);
        println!(
            "joule's stages {:?} °C ({}); the board's firmware throttle {}",
            self.thresholds_celsius,
            self.joule_stages,
            match (self.firmware, self.board.firmware) {
                (true, Some(f)) =>
                    format!("modelled: every task slowed from {} °C, to {:.3} of full speed at {} °C", f.soft_celsius, f.min_speed, f.hard_celsius),
                _ => "not modelled".into(),
            }
        );
        let cell = |m: Mode, k: &str, prec: usize| match stat(&Self::of(&scores, m), k) {
            Some((med, lo, hi)) => format!("{med:.prec$} [{lo:.prec$}–{hi:.prec$}]"),
            None => "—".into(),
        };
        let header = [
            "mode",
            "plant peak °C",
            "s over limit",
            "labelled p50 µs",
            "labelled p99 µs",
            "fio MiB/s",
            "best-effort bogo ops",
            "best-effort CPU s",
            "reaction s",
            "s firmware-throttled",
            "busy %",
            "steal %",
        ];
        let rows: Vec<Vec<String>> = self
            .modes
            .iter()
            .map(|m| {
                vec![
                    m.name().to_string(),
                    cell(*m, "plant_peak_celsius", 1),
                    cell(*m, "seconds_over_limit", 1),
                    cell(*m, "labelled_p50_us", 0),
                    cell(*m, "labelled_p99_us", 0),
                    cell(*m, "fio_mib_s", 1),
                    cell(*m, "best_effort_work", 0),
                    cell(*m, "best_effort_cpu_s", 1),
                    cell(*m, "reaction_s", 2),
                    cell(*m, "seconds_firmware_throttled", 1),
                    cell(*m, "mean_machine_busy_pct", 1),
                    cell(*m, "steal_pct", 1),
                ]
            })
            .collect();
        print_table(&header, &rows);
        println!("goals (on medians):");
        for g in self.goals(&scores) {
            let verdict = match g.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "n/a (mode not run)",
            };
            println!("  {:<36} {:>10} (target {}): {verdict}", g.what, g.value.map_or("—".into(), |v| format!("{v:.3}")), g.target);
        }
        for s in scores.iter().filter(|s| !s.agent_errors.is_empty()) {
            println!("  run {} {}: agent errors: {:?}", s.run, s.mode.name(), s.agent_errors);
        }
        for s in scores.iter().filter(|s| s.scx_loaded.is_some()) {
            println!(
                "  run {} joule (scx path): scheduler loaded {} time(s), ejected {} time(s)",
                s.run,
                s.scx_loaded.unwrap_or(0),
                s.scx_ejections.unwrap_or(0)
            );
        }
    }

    /// The plant's temperature over time, the last run of each mode, with the limit.
    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        use plotters::prelude::*;
        let root = SVGBackend::new(path, (900, 450)).into_drawing_area();
        root.fill(&WHITE)?;
        let last = self.runs.iter().map(|r| r.run).max().unwrap_or(0);
        let shown: Vec<&ModeRun> = self.runs.iter().filter(|r| r.run == last).collect();
        let temps = shown.iter().flat_map(|r| r.plant.iter().map(|p| p.die_celsius));
        let (lo, hi) = temps.fold((self.limit_celsius, self.limit_celsius), |(a, b), t| (a.min(t), b.max(t)));
        let title = format!("joule-bench thermal: {} plant (temp_source: plant), run {}", self.board.name, last + 1);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(55)
            .build_cartesian_2d(0f64..self.duration_s.max(1.0), (lo - 1.0)..(hi + 1.0))?;
        chart.configure_mesh().x_desc("seconds since the loads started").y_desc("plant die °C").draw()?;
        let colours = [RED, BLUE, GREEN, MAGENTA];
        for (i, r) in shown.iter().enumerate() {
            let c = colours[i % colours.len()];
            chart
                .draw_series(LineSeries::new(r.plant.iter().map(|p| (p.t_s, p.die_celsius)), c.stroke_width(2)))?
                .label(r.mode.name())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c.stroke_width(2)));
        }
        let l = self.limit_celsius;
        chart
            .draw_series(LineSeries::new([(0.0, l), (self.duration_s, l)], BLACK.stroke_width(1)))?
            .label(format!("limit {l} °C"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
        chart.configure_series_labels().position(SeriesLabelPosition::LowerRight).background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
        root.present().map_err(|e| anyhow::anyhow!("while writing {}: {e}", path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thermal::{workload::FioResult, Sample};

    fn reading(t_s: f64, c: f64) -> Reading {
        // Over 80 °C the Pi's firmware throttles: the speed the plant would record.
        Reading { t_s, die_celsius: c, util: 0.5, steal: 0.0, power_w: 5.0, speed: crate::thermal::plant::PI5.firmware.unwrap().speed(c) }
    }

    fn mode_run(mode: Mode, run: usize, temps: &[f64], cap_from_s: Option<f64>, late_us: &[f64]) -> ModeRun {
        ModeRun {
            mode,
            run,
            plant: temps.iter().enumerate().map(|(i, c)| reading(i as f64, *c)).collect(),
            samples: (0..temps.len()).map(|i| Sample { t_s: i as f64, cap_share: cap_from_s.filter(|s| i as f64 >= *s).map(|_| 0.5), stage: None }).collect(),
            fio: FioResult { read_mib_s: 10.0, write_mib_s: 5.0 },
            stress: crate::thermal::workload::StressResult { bogo_ops: 1000, cpu_s: 10.0 },
            wakeups: late_us.iter().enumerate().map(|(i, l)| (i as f64, *l)).collect(),
            stress_cgroup: None,
            agent_errors: Vec::new(),
            scx: None,
        }
    }

    #[test]
    fn a_run_scores_peak_time_over_reaction_and_percentiles() {
        let r = mode_run(Mode::Joule, 0, &[70.0, 75.0, 79.0, 81.0, 82.0, 79.0], Some(3.0), &[10.0, 20.0, 30.0, 1000.0]);
        let s = score(&r, 80.0, &[74.0, 76.5, 78.5], 5.0);
        assert_eq!(s.plant_peak_celsius, 82.0);
        assert!((s.seconds_over_limit - 2.0).abs() < 1e-9, "81 and 82 each count until the next reading");
        assert!((s.pct_time_over_limit - 40.0).abs() < 1e-9);
        assert_eq!(s.reaction_s, Some(2.0), "crossed 74 at t=1, capped at t=3");
        assert_eq!((s.labelled_p50_us, s.labelled_p99_us), (20.0, 1000.0));
        assert_eq!(s.fio_mib_s, 15.0);
        assert!((s.seconds_firmware_throttled - 2.0).abs() < 1e-9 && s.min_firmware_speed < 1.0, "81 and 82 °C: {s:?}");
        let none = score(&mode_run(Mode::None, 0, &[70.0, 90.0], None, &[1.0]), 80.0, &[74.0], 2.0);
        assert_eq!(none.reaction_s, None, "nothing reacts in `none`");
    }

    #[test]
    fn goals_use_medians_over_runs_and_name_what_is_missed() {
        let mut runs = Vec::new();
        for run in 0..3 {
            runs.push(mode_run(Mode::None, run, &[70.0, 90.0, 90.0], None, &[100.0; 100]));
            runs.push(mode_run(Mode::Uniform, run, &[70.0, 79.0, 79.0], Some(1.0), &[400.0; 100]));
            // One bad run of three: the median ignores it.
            let peak = if run == 1 { 85.0 } else { 79.5 };
            runs.push(mode_run(Mode::Joule, run, &[70.0, peak, 79.0], Some(1.0), &[105.0; 100]));
        }
        let s = Summary {
            path: ThermalPath::Cgroup,
            board: crate::thermal::plant::PI5,
            limit_celsius: 80.0,
            thresholds_celsius: vec![74.0, 76.5, 78.5],
            duration_s: 2.0,
            warmup_s: 0.0,
            workers: 2,
            direct_io: true,
            ncpu: 2,
            modes: vec![Mode::None, Mode::Uniform, Mode::Joule],
            runs,
            command: "test".into(),
            loadavg_before: String::new(),
            loadavg_after: String::new(),
            zone: "test zone",
            firmware: false,
            joule_stages: "bench",
        };
        let scores = s.scores();
        let goals = s.goals(&scores);
        let get = |w: &str| goals.iter().find(|g| g.what == w).unwrap_or_else(|| panic!("{w}: {goals:?}"));
        assert_eq!(get("joule holds the limit: peak").met, Some(true));
        assert_eq!(get("joule/none labelled p99").value, Some(1.05));
        assert_eq!(get("joule/uniform labelled p99").met, Some(true));
        assert_eq!(get("joule/uniform best-effort work").met, Some(true));
        let v = s.json();
        assert_eq!(v["modes"]["joule"]["temp_source"], "plant");
        assert_eq!(v["plant_zone"], "test zone");
        assert_eq!(v["modes"]["joule"]["plant_peak_celsius"], 79.5);
        assert_eq!(v["modes"]["joule"]["plant_peak_celsius_range"], json!([79.5, 85.0]));
        assert_eq!(v["modes"]["joule"]["runs"].as_array().unwrap().len(), 3);
        for k in ["plant_peak_celsius", "seconds_over_limit", "labelled_p99_us", "labelled_p50_us", "fio_mib_s", "best_effort_work"] {
            assert!(v["modes"]["none"][k].is_number(), "{k}");
        }
        assert!(!goals.iter().any(|g| g.what.starts_with("firmware:")), "no firmware goals without --firmware");
        // With the firmware modelled, joule must beat none (p99 105 vs 100: missed) and match
        // batch-cap's best-effort work (not run: n/a).
        let fw = Summary { firmware: true, ..s };
        let goals = fw.goals(&fw.scores());
        let get = |w: &str| goals.iter().find(|g| g.what == w).unwrap_or_else(|| panic!("{w}: {goals:?}"));
        assert_eq!(get("firmware: joule/none labelled p99").met, Some(false));
        assert_eq!(get("firmware: joule/uniform labelled p99").met, Some(true));
        assert_eq!(get("firmware: joule/batch-cap best-effort").met, None);
    }
}

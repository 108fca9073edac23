//! What `joule bench thermal` reports from its two modes: the per-mode numbers, joule/default
//! ratios, the targets, the time series, the trade-off curve, the table and the plot.
//!
//! The trade-off curve is derived from the joule run itself, not from extra fixed-stage runs
//! (which would double the bench's time): each sample of the joule mode is in one stage, so
//! per stage the bench averages the stress-ng workers' CPU share (bogo ops follow CPU time for a
//! fixed stressor method), fio's MiB/s over the seconds of its log that fall in that stage, and
//! the temperature, each relative to the default run's whole-run mean. A stage held for under
//! 2 s is reported with `few_samples: true`.

use super::agent::ModelKnobs;
use super::probe::percentile;
use super::trace::{stage_seconds, Point};
use super::{Mode, ModeResult};
use crate::bench::report::print_table;
use joule_core::control::ThermalPath;
use serde_json::{json, Value};
use std::path::Path;

pub struct Summary {
    pub path: ThermalPath,
    pub knobs: ModelKnobs,
    pub thresholds_celsius: Vec<f64>,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub workers: usize,
    pub direct_io: bool,
    pub ncpu: usize,
    pub runs: Vec<ModeResult>,
    pub command: String,
    pub loadavg_before: String,
    pub loadavg_after: String,
}

/// The per-mode numbers the issue asks for.
#[derive(Debug, Clone)]
pub struct Figures {
    pub temp_peak_celsius: f64,
    pub temp_mean_celsius: f64,
    pub fio_read_mib_s: f64,
    pub fio_write_mib_s: f64,
    pub stress_bogo_ops: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub stage_seconds: Vec<f64>,
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        s / n as f64
    }
}

pub fn figures(r: &ModeResult, stages: usize) -> Figures {
    let late: Vec<f64> = r.wakeups.iter().map(|w| w.1).collect();
    Figures {
        temp_peak_celsius: r.points.iter().map(|p| p.temp_celsius).fold(f64::NAN, f64::max),
        temp_mean_celsius: mean(r.points.iter().map(|p| p.temp_celsius)),
        fio_read_mib_s: r.fio.read_mib_s,
        fio_write_mib_s: r.fio.write_mib_s,
        stress_bogo_ops: r.stress_bogo_ops,
        p50_us: percentile(&late, 50.0),
        p99_us: percentile(&late, 99.0),
        stage_seconds: stage_seconds(&r.points, stages),
    }
}

/// The stage each sample of `points` was in at time `t_s` (the last sample at or before it).
fn stage_at(points: &[Point], t_s: f64) -> Option<u32> {
    points.iter().take_while(|p| p.t_s <= t_s).last().map(|p| p.stage)
}

/// One point of the trade-off curve.
#[derive(Debug, Clone, PartialEq)]
pub struct StageCost {
    pub stage: u32,
    pub seconds: f64,
    pub temp_mean_celsius: f64,
    pub stress_cpu_pct: f64,
    pub stress_pct_of_default: f64,
    pub fio_mib_s: f64,
    pub fio_pct_of_default: f64,
}

/// Per stage of `joule`, its throughput against `default`'s whole-run mean (see the header).
pub fn trade_off(default: &ModeResult, joule: &ModeResult, stages: usize) -> Vec<StageCost> {
    let base_stress = mean(default.points.iter().map(|p| p.stress_cpu_pct));
    let base_fio = mean(default.fio_series.iter().map(|f| f.1));
    let secs = stage_seconds(&joule.points, stages);
    (0..stages as u32)
        .filter(|s| secs[*s as usize] > 0.0)
        .map(|s| {
            let in_s: Vec<&Point> = joule.points.iter().filter(|p| p.stage == s).collect();
            let stress = mean(in_s.iter().map(|p| p.stress_cpu_pct));
            // fio logs the mean of each second at its end: attribute it to the stage at its middle.
            let fio = mean(joule.fio_series.iter().filter(|(t, _)| stage_at(&joule.points, t - 0.5) == Some(s)).map(|f| f.1));
            StageCost {
                stage: s,
                seconds: secs[s as usize],
                temp_mean_celsius: mean(in_s.iter().map(|p| p.temp_celsius)),
                stress_cpu_pct: stress,
                stress_pct_of_default: stress / base_stress * 100.0,
                fio_mib_s: fio,
                fio_pct_of_default: fio / base_fio * 100.0,
            }
        })
        .collect()
}

/// Wake-up p99 per whole second of the run, µs.
fn p99_per_second(w: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut sec = 0.0;
    loop {
        let v: Vec<f64> = w.iter().filter(|x| x.0 >= sec && x.0 < sec + 1.0).map(|x| x.1).collect();
        if v.is_empty() {
            break;
        }
        out.push((sec + 1.0, percentile(&v, 99.0)));
        sec += 1.0;
    }
    out
}

fn ratio(j: f64, d: f64) -> f64 {
    j / d
}

impl Summary {
    fn stages(&self) -> usize {
        self.thresholds_celsius.len() + 1
    }

    fn run(&self, m: Mode) -> Option<&ModeResult> {
        self.runs.iter().find(|r| r.mode == m)
    }

    fn temp_source(&self) -> String {
        self.runs.iter().flat_map(|r| r.points.first()).map(|p| p.temp_source.as_str().to_string()).next().unwrap_or_else(|| "unknown".into())
    }

    fn path_name(&self) -> &'static str {
        match self.path {
            ThermalPath::Scx => "scx",
            ThermalPath::Cgroup => "cgroup",
        }
    }

    /// Whether the joule mode's caps were in effect: the agent planned a cap below 100 % at
    /// some point, and stress-ng sat in the best-effort class's cgroup.
    fn caps_seen(&self) -> (bool, Option<String>) {
        let j = self.run(Mode::Joule);
        let planned = j.is_some_and(|r| r.points.iter().any(|p| p.cap_pct.is_some_and(|c| c < 100.0)));
        (planned, j.and_then(|r| r.stress_cgroup.clone()))
    }

    pub fn json(&self) -> Value {
        let n = self.stages();
        let runs: Vec<Value> = self
            .runs
            .iter()
            .map(|r| {
                let f = figures(r, n);
                json!({
                    "mode": r.mode.name(),
                    "temp_peak_celsius": f.temp_peak_celsius, "temp_mean_celsius": f.temp_mean_celsius,
                    "fio_read_mib_s": f.fio_read_mib_s, "fio_write_mib_s": f.fio_write_mib_s,
                    "stress_bogo_ops": f.stress_bogo_ops,
                    "labelled_wakeup_p50_us": f.p50_us, "labelled_wakeup_p99_us": f.p99_us,
                    "labelled_wakeups": r.wakeups.len(),
                    "stage_seconds": f.stage_seconds,
                    "stage_from": r.points.first().map(|p| p.stage_from),
                    "stress_cgroup": r.stress_cgroup, "sched_ext_mid_run": r.sched_ext, "agent_actuator_errors": r.agent_errors,
                    "series": {
                        "samples": r.points,
                        "fio_mib_s": r.fio_series.iter().map(|(t, v)| json!({ "t_s": t, "mib_s": v })).collect::<Vec<_>>(),
                        "labelled_wakeup_p99_us_per_s": p99_per_second(&r.wakeups).iter().map(|(t, v)| json!({ "t_s": t, "p99_us": v })).collect::<Vec<_>>(),
                    },
                })
            })
            .collect();
        let (d, j) = (self.run(Mode::Default).map(|r| figures(r, n)), self.run(Mode::Joule).map(|r| figures(r, n)));
        let (ratios, targets) = match (&d, &j) {
            (Some(d), Some(j)) => (
                json!({
                    "temp_peak_delta_celsius": j.temp_peak_celsius - d.temp_peak_celsius,
                    "temp_mean_delta_celsius": j.temp_mean_celsius - d.temp_mean_celsius,
                    "fio_read": ratio(j.fio_read_mib_s, d.fio_read_mib_s), "fio_write": ratio(j.fio_write_mib_s, d.fio_write_mib_s),
                    "stress_bogo_ops": ratio(j.stress_bogo_ops as f64, d.stress_bogo_ops as f64),
                    "labelled_wakeup_p50": ratio(j.p50_us, d.p50_us), "labelled_wakeup_p99": ratio(j.p99_us, d.p99_us),
                }),
                json!({
                    "default_exceeds_limit": d.temp_peak_celsius > self.knobs.limit_celsius,
                    "joule_peak_at_or_under_limit": j.temp_peak_celsius <= self.knobs.limit_celsius,
                    "fio_within_3pct": (j.fio_read_mib_s + j.fio_write_mib_s) >= 0.97 * (d.fio_read_mib_s + d.fio_write_mib_s),
                    "labelled_p99_no_worse": j.p99_us <= d.p99_us,
                }),
            ),
            _ => (Value::Null, Value::Null),
        };
        let curve = match (self.run(Mode::Default), self.run(Mode::Joule)) {
            (Some(d), Some(j)) => trade_off(d, j, n)
                .iter()
                .map(|c| {
                    json!({ "stage": c.stage, "seconds": c.seconds, "few_samples": c.seconds < 2.0,
                        "best_effort_cpu_pct_cap": joule_core::config::StageActions::default_for(c.stage).best_effort_cpu_pct,
                        "temp_mean_celsius": c.temp_mean_celsius, "stress_cpu_pct_of_machine": c.stress_cpu_pct,
                        "stress_throughput_pct_of_default": c.stress_pct_of_default,
                        "fio_mib_s": c.fio_mib_s, "fio_throughput_pct_of_default": c.fio_pct_of_default })
                })
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        let (planned, cg) = self.caps_seen();
        let k = &self.knobs;
        json!({
            "bench": "thermal",
            "path": self.path_name(),
            "temp_source": self.temp_source(),
            "limit_celsius": k.limit_celsius,
            "stage_thresholds_celsius": self.thresholds_celsius,
            "model": { "ambient_celsius": k.ambient_celsius, "resistance_celsius_per_watt": k.resistance_celsius_per_watt,
                       "capacitance_joules_per_celsius": k.capacitance_joules_per_celsius,
                       "time_constant_s": k.resistance_celsius_per_watt * k.capacitance_joules_per_celsius,
                       "idle_watts": k.idle_watts, "cpu_dynamic_watts": k.cpu_dynamic_watts },
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "loads": { "stress_ng_workers": self.workers, "stress_ng_method": "matrixprod",
                       "fio": format!("randrw 50/50, 4 KiB, psync, iodepth 1, {} MiB file, direct={}", super::FIO_SIZE_MIB, self.direct_io),
                       "probe_period_us": super::PROBE_PERIOD_US },
            "joule_caps": { "planned_below_100_pct": planned, "stress_ng_cpu_cgroup": cg },
            "runs": runs,
            "ratios_joule_over_default": ratios,
            "targets": targets,
            "trade_off": curve,
            "trade_off_method": "derived from the joule run: per stage, stress-ng CPU share and fio MiB/s while in that stage over the default run's means",
            "machine": { "cpus": self.ncpu, "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
                         "loadavg_before": self.loadavg_before, "loadavg_after": self.loadavg_after },
            "command": self.command,
        })
    }

    pub fn print(&self) {
        let n = self.stages();
        let src = self.temp_source();
        println!(
            "thermal: path {}, temperature source {src}, limit {:.1} °C (stages at {:?} °C), {:.0} s per mode, {} stress-ng workers",
            self.path_name(),
            self.knobs.limit_celsius,
            self.thresholds_celsius,
            self.duration_s,
            self.workers
        );
        let f2 = |x: f64| format!("{x:.2}");
        let mut rows: Vec<Vec<String>> = self
            .runs
            .iter()
            .map(|r| {
                let f = figures(r, n);
                vec![
                    r.mode.name().into(),
                    format!("{:.1}", f.temp_peak_celsius),
                    format!("{:.1}", f.temp_mean_celsius),
                    f2(f.fio_read_mib_s),
                    f2(f.fio_write_mib_s),
                    f.stress_bogo_ops.to_string(),
                    format!("{:.0}", f.p50_us),
                    format!("{:.0}", f.p99_us),
                    f.stage_seconds.iter().map(|s| format!("{s:.1}")).collect::<Vec<_>>().join("/"),
                ]
            })
            .collect();
        if let (Some(d), Some(j)) = (self.run(Mode::Default).map(|r| figures(r, n)), self.run(Mode::Joule).map(|r| figures(r, n))) {
            rows.push(vec![
                "joule/default".into(),
                format!("{:+.1} °C", j.temp_peak_celsius - d.temp_peak_celsius),
                format!("{:+.1} °C", j.temp_mean_celsius - d.temp_mean_celsius),
                f2(ratio(j.fio_read_mib_s, d.fio_read_mib_s)),
                f2(ratio(j.fio_write_mib_s, d.fio_write_mib_s)),
                f2(ratio(j.stress_bogo_ops as f64, d.stress_bogo_ops as f64)),
                f2(ratio(j.p50_us, d.p50_us)),
                f2(ratio(j.p99_us, d.p99_us)),
                String::new(),
            ]);
        }
        let peak = format!("temp peak °C ({src})");
        let mean_h = format!("temp mean °C ({src})");
        print_table(
            &["mode", &peak, &mean_h, "fio read MiB/s", "fio write MiB/s", "stress bogo ops", "wake p50 µs", "wake p99 µs", "s in stage 0/1/2/3"],
            &rows,
        );
        if let (Some(d), Some(j)) = (self.run(Mode::Default), self.run(Mode::Joule)) {
            println!("\ntrade-off (joule run, per stage, vs the default run's mean):");
            let rows: Vec<Vec<String>> = trade_off(d, j, n)
                .iter()
                .map(|c| {
                    vec![
                        c.stage.to_string(),
                        format!("{:.1}{}", c.seconds, if c.seconds < 2.0 { " (few)" } else { "" }),
                        format!("{:.0}", joule_core::config::StageActions::default_for(c.stage).best_effort_cpu_pct),
                        format!("{:.1}", c.temp_mean_celsius),
                        format!("{:.1}", c.stress_pct_of_default),
                        format!("{:.1}", c.fio_pct_of_default),
                    ]
                })
                .collect();
            print_table(&["stage", "seconds", "BE cap % of machine", "temp mean °C", "stress-ng % of default", "fio % of default"], &rows);
        }
        let (planned, cg) = self.caps_seen();
        let sx = self.run(Mode::Joule).and_then(|r| r.sched_ext.clone());
        println!(
            "\njoule mode: agent planned a best-effort cap below 100 %: {planned}; stress-ng's cpu cgroup mid-run: {}; sched_ext mid-run: {}",
            cg.as_deref().unwrap_or("?"),
            sx.as_deref().unwrap_or("?")
        );
        for r in &self.runs {
            for e in &r.agent_errors {
                println!("agent actuator error ({}): {e}", r.mode.name());
            }
        }
    }

    /// Temperature, fio MiB/s and stress-ng CPU share over time, both modes.
    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        use plotters::prelude::*;
        let root = SVGBackend::new(path, (900, 900)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!("joule bench thermal: {} path, temperature from {}", self.path_name(), self.temp_source());
        let root = root.titled(&title, ("sans-serif", 20))?;
        let panels = root.split_evenly((3, 1));
        let tmax = self.duration_s.max(1.0);
        let colour = |m: Mode| if m == Mode::Default { RED } else { BLUE };
        type Series<'a> = Box<dyn Fn(&ModeResult) -> Vec<(f64, f64)> + 'a>;
        let temp_s = format!("temperature °C ({})", self.temp_source());
        let specs: [(&str, Series); 3] = [
            (&temp_s, Box::new(|r: &ModeResult| r.points.iter().map(|p| (p.t_s, p.temp_celsius)).collect())),
            ("fio MiB/s (read + write)", Box::new(|r: &ModeResult| r.fio_series.clone())),
            ("stress-ng CPU, % of machine", Box::new(|r: &ModeResult| r.points.iter().map(|p| (p.t_s, p.stress_cpu_pct)).collect())),
        ];
        for (i, (panel, (label, series))) in panels.iter().zip(specs.iter()).enumerate() {
            let data: Vec<(Mode, Vec<(f64, f64)>)> = self.runs.iter().map(|r| (r.mode, series(r))).collect();
            let vals = data.iter().flat_map(|d| d.1.iter().map(|p| p.1)).filter(|v| v.is_finite());
            let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
            let (lo, hi) = if i == 0 {
                (lo.min(self.knobs.limit_celsius) - 1.0, hi.max(self.knobs.limit_celsius) + 1.0)
            } else {
                (0.0, if hi.is_finite() { hi * 1.1 + 1e-9 } else { 1.0 })
            };
            let mut chart = ChartBuilder::on(panel).margin(10).x_label_area_size(30).y_label_area_size(55).build_cartesian_2d(0f64..tmax, lo..hi)?;
            chart.configure_mesh().x_desc("seconds since the loads started").y_desc(*label).draw()?;
            for (m, pts) in &data {
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), colour(*m).stroke_width(2)))?
                    .label(m.name())
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour(*m).stroke_width(2)));
            }
            if i == 0 {
                let l = self.knobs.limit_celsius;
                chart
                    .draw_series(LineSeries::new([(0.0, l), (tmax, l)], BLACK.stroke_width(1)))?
                    .label(format!("limit {l} °C"))
                    .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
            }
            chart.configure_series_labels().position(SeriesLabelPosition::LowerRight).background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
        }
        root.present().map_err(|e| anyhow::anyhow!("while writing {}: {e}", path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::Origin;

    fn pt(t_s: f64, stage: u32, stress: f64, temp: f64) -> Point {
        Point {
            t_s,
            temp_celsius: temp,
            temp_source: Origin::Model,
            stage,
            stage_from: "agent",
            agent_temp_celsius: None,
            cap_pct: None,
            power_watts: 0.0,
            machine_busy_pct: 0.0,
            stress_cpu_pct: stress,
        }
    }

    fn result(mode: Mode, points: Vec<Point>, fio: Vec<(f64, f64)>) -> ModeResult {
        ModeResult {
            mode,
            points,
            fio: super::super::workload::FioResult { read_mib_s: 1.0, write_mib_s: 1.0 },
            fio_series: fio,
            stress_bogo_ops: 10,
            wakeups: vec![(0.1, 50.0), (0.2, 60.0), (1.1, 500.0)],
            stress_cgroup: None,
            sched_ext: None,
            agent_errors: vec![],
        }
    }

    #[test]
    fn trade_off_compares_each_stage_with_the_default_mean() {
        let d = result(Mode::Default, vec![pt(0.0, 0, 90.0, 50.0), pt(1.0, 0, 90.0, 52.0), pt(2.0, 0, 90.0, 53.0)], vec![(1.0, 10.0), (2.0, 10.0)]);
        let j = result(Mode::Joule, vec![pt(0.0, 0, 90.0, 45.0), pt(1.0, 2, 45.0, 47.0), pt(2.0, 2, 45.0, 47.0)], vec![(1.0, 10.0), (2.0, 9.0)]);
        let c = trade_off(&d, &j, 4);
        assert_eq!(c.iter().map(|c| c.stage).collect::<Vec<_>>(), vec![0, 2]);
        assert!((c[0].seconds - 1.0).abs() < 1e-9 && (c[1].seconds - 1.0).abs() < 1e-9, "{c:?}");
        assert!((c[1].stress_pct_of_default - 50.0).abs() < 1e-9, "{c:?}");
        // fio's second ending at 2.0 s was spent in stage 2 (sampled at 1.0 s): 9 of 10 MiB/s.
        assert!((c[1].fio_pct_of_default - 90.0).abs() < 1e-9, "{c:?}");
        assert!((c[0].fio_pct_of_default - 100.0).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn figures_take_peak_mean_and_percentiles_of_the_mode() {
        let r = result(Mode::Joule, vec![pt(0.0, 0, 0.0, 40.0), pt(1.0, 1, 0.0, 50.0), pt(2.0, 0, 0.0, 45.0)], vec![]);
        let f = figures(&r, 4);
        assert_eq!((f.temp_peak_celsius, f.temp_mean_celsius), (50.0, 45.0));
        assert_eq!((f.p50_us, f.p99_us), (60.0, 500.0));
        assert_eq!(f.stage_seconds, vec![1.0, 1.0, 0.0, 0.0]);
        assert_eq!(p99_per_second(&r.wakeups), vec![(1.0, 60.0), (2.0, 500.0)]);
    }
}

//! `joule monitor`'s live dashboard (issue 38): a header with the budget at a glance (stage,
//! temperature and power against their limits with their source), sparklines of the last
//! minutes (temperature, power, stage, the best-effort share left, the labelled classes' p99
//! run-queue latency), one panel per mechanism that acts (the plan's decisions with their
//! reasons), and keys to the class table (`c`) and the full metric list (`m`). It reads the
//! running agent over its socket when one answers, else samples the machine itself, and says
//! which at the top. The screen is built from the same summary as `joule status`, with the
//! machine's strings (reasons, errors, sensor and class names) escaped as its text is: ratatui
//! drops a control character silently, which would show a hostile name as a different one.

use crate::cmd::status::{summarize, Summary};
use joule_core::text::{escape, escape_lines, Escaped};
use joule_core::view::View;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::widgets::{Block, Paragraph, Sparkline, Wrap};
use ratatui::Frame;
use std::collections::VecDeque;

/// Samples kept for the sparklines (at the default 1 s interval: five minutes; a narrow
/// sparkline shows the latest that fit).
pub const HISTORY: usize = 300;

/// Which screen is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    Dashboard,
    Classes,
    Metrics,
}

impl Screen {
    /// The screen a key asks for, if any.
    pub fn for_key(c: char) -> Option<Screen> {
        match c {
            'd' => Some(Screen::Dashboard),
            'c' => Some(Screen::Classes),
            'm' => Some(Screen::Metrics),
            _ => None,
        }
    }
}

/// One series of the header's sparklines.
struct Series {
    title: &'static str,
    values: VecDeque<u64>,
    last: String,
}

impl Series {
    fn new(title: &'static str) -> Series {
        Series { title, values: VecDeque::with_capacity(HISTORY), last: "—".into() }
    }
    fn push(&mut self, v: Option<f64>, scale: f64, shown: String) {
        if self.values.len() == HISTORY {
            self.values.pop_front();
        }
        self.values.push_back(v.map_or(0, |x| (x * scale).max(0.0).round() as u64));
        self.last = shown;
    }
}

/// The dashboard's state across refreshes.
pub struct Dashboard {
    pub screen: Screen,
    /// Where the readings come from, in words (`agent pid 123 (/run/joule/agent.sock)` or
    /// `this monitor's own sampling: no agent answers in /run/joule`).
    pub source: String,
    series: [Series; 5],
    summary: Summary,
    metric_lines: Vec<String>,
}

impl Dashboard {
    pub fn new(source: String) -> Dashboard {
        Dashboard {
            screen: Screen::Dashboard,
            source,
            series: [Series::new("temp"), Series::new("power"), Series::new("stage"), Series::new("best-effort"), Series::new("labelled p99")],
            summary: Summary::default(),
            metric_lines: Vec::new(),
        }
    }

    /// Takes one view (the agent's, or one made from this monitor's own snapshot) and the
    /// full metric list's lines.
    pub fn update(&mut self, view: &View, metric_lines: Vec<String>, now_ms: u64) {
        let s = summarize(view, now_ms);
        let b = &s.budget;
        self.series[0].push(b.temp_celsius, 10.0, b.temp_celsius.map_or("—".into(), |t| format!("{t:.1} °C")));
        self.series[1].push(Some(b.power_watts), 10.0, format!("{:.1} W", b.power_watts));
        self.series[2].push(Some(s.stage.value as f64), 1.0, s.stage.value.to_string());
        let best_effort = s.classes.iter().filter(|c| c.promised.contains("best effort")).filter_map(|c| c.cap_ratio).reduce(f64::min);
        self.series[3].push(best_effort.or(Some(1.0)), 100.0, best_effort.map_or("uncapped".into(), |r| format!("{:.0}%", r * 100.0)));
        let labelled = s.classes.iter().filter(|c| c.promised.contains("labelled")).filter_map(|c| c.runq_p99_us).reduce(f64::max);
        self.series[4].push(labelled, 1.0, labelled.map_or("—".into(), |p| format!("{p:.0} µs")));
        self.summary = s;
        self.metric_lines = metric_lines;
    }

    /// The header's lines: the source, the budget, the stage.
    pub fn header(&self) -> Vec<String> {
        let s = &self.summary;
        let b = &s.budget;
        let temp = match b.temp_celsius {
            Some(t) => format!(
                "temperature {t:.1} °C ({}{}) · acts from {} · headroom {} · limit {}",
                Escaped(&b.temp_source),
                if b.sensors.is_empty() { String::new() } else { format!(", {}", Escaped(&b.sensors.join(", "))) },
                b.first_threshold_celsius.map_or("—".into(), |x| format!("{x:.1} °C")),
                b.headroom_celsius.map_or("—".into(), |x| format!("{x:.1} °C")),
                b.limit_celsius.map_or("—".into(), |x| format!("{x:.1} °C ({})", Escaped(&b.limit_from)))
            ),
            None => "temperature: none acted on (no CPU temperature sensor)".into(),
        };
        let power = format!(
            "power {:.1} W ({}) · {}",
            b.power_watts,
            Escaped(&b.power_source),
            b.power_budget_watts.map_or("no power budget".into(), |w| format!("budget {w:.1} W"))
        );
        let stage = format!(
            "stage {} (by {}, driven by {}){}",
            s.stage.value,
            Escaped(&s.stage.computed_by),
            Escaped(&s.stage.driven_by),
            s.stage.since_s.map(|x| format!(" for {x:.0} s")).unwrap_or_default()
        );
        vec![format!("source: {}", Escaped(&self.source)), stage, temp, power]
    }

    /// One panel per mechanism: its name and what it does now, with the reason.
    pub fn panels(&self) -> Vec<(String, String)> {
        if self.summary.mechanisms.is_empty() {
            return vec![("decisions".into(), "none shown: decisions come from a running agent (joule agent); this view samples the machine only".into())];
        }
        self.summary
            .mechanisms
            .iter()
            .map(|m| (escape(&m.name).into_owned(), m.doing.iter().chain(&m.errors).map(|l| escape(l).into_owned()).collect::<Vec<_>>().join("\n")))
            .collect()
    }

    pub fn draw(&self, f: &mut Frame) {
        let keys = " d dashboard · c classes · m all metrics · q quit ";
        let outer = Block::bordered().title(" joule monitor ").title_bottom(keys);
        let area = outer.inner(f.area());
        f.render_widget(outer, f.area());
        match self.screen {
            Screen::Dashboard => self.draw_dashboard(f, area),
            Screen::Classes => f.render_widget(Paragraph::new(self.class_lines().join("\n")).block(Block::bordered().title(" classes ")), area),
            Screen::Metrics => {
                f.render_widget(Paragraph::new(escape_lines(&self.metric_lines.join("\n")).into_owned()).block(Block::bordered().title(" all metrics ")), area)
            }
        }
    }

    fn draw_dashboard(&self, f: &mut Frame, area: Rect) {
        let rows = Layout::default().direction(Direction::Vertical).constraints([Constraint::Length(6), Constraint::Length(4), Constraint::Min(3)]).split(area);
        f.render_widget(Paragraph::new(self.header().join("\n")).block(Block::bordered().title(" budget ")), rows[0]);
        let cols = Layout::default().direction(Direction::Horizontal).constraints([Constraint::Ratio(1, 5); 5]).split(rows[1]);
        for (s, c) in self.series.iter().zip(cols.iter()) {
            let data: Vec<u64> = s.values.iter().copied().collect();
            let w = c.width.saturating_sub(2) as usize;
            let tail = &data[data.len().saturating_sub(w)..];
            f.render_widget(Sparkline::default().data(tail).block(Block::bordered().title(format!(" {} {} ", s.title, s.last))), *c);
        }
        let panels = self.panels();
        let n = panels.len().max(1) as u32;
        let cols = Layout::default().direction(Direction::Horizontal).constraints(vec![Constraint::Ratio(1, n); n as usize]).split(rows[2]);
        for ((name, text), c) in panels.iter().zip(cols.iter()) {
            f.render_widget(Paragraph::new(text.as_str()).wrap(Wrap { trim: true }).block(Block::bordered().title(format!(" {name} "))), *c);
        }
    }

    /// The class table's lines.
    pub fn class_lines(&self) -> Vec<String> {
        let mut out = vec![format!("{:<16} {:>6}  {:<34} {:>9} {:>6} {:>9}", "class", "procs", "promised", "used CPU", "cap", "p99 runq")];
        if self.summary.classes.is_empty() {
            out.push("no [[class]] in the config".into());
        }
        for c in &self.summary.classes {
            out.push(format!(
                "{:<16} {:>6}  {:<34} {:>9} {:>6} {:>9}",
                escape(&c.class),
                c.processes,
                escape(&c.promised),
                c.used_cpus.map_or("—".into(), |x| format!("{x:.2}")),
                c.cap_ratio.map_or("—".into(), |r| if r >= 1.0 { "none".into() } else { format!("{:.0}%", r * 100.0) }),
                c.runq_p99_us.map_or("—".into(), |p| format!("{p:.0} µs"))
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use serde_json::Value;

    /// The fixture's JSON as the socket's type reads it (laid over a default view).
    fn typed(v: &Value) -> View {
        joule_core::view::over_default(v).expect("the fixture is a view")
    }

    fn view(stage: u64, temp: f64, cap: f64) -> Value {
        serde_json::json!({
            "budget": { "thresholds_celsius": [70.0], "thresholds_from": "config", "sensors": ["thermal_zone0"], "started_unix_ms": 0, "pid": 7,
                        "classes": [ { "name": "batch", "thermal": "best_effort" } ] },
            "snapshot": { "stage": { "value": stage, "temp_celsius": temp, "computed_by": "ebpf", "temp_source": "sensor", "driven_by": "temperature" },
                          "power": { "watts": 5.0, "source": "sensor" }, "classes": [ { "class": "batch", "processes": 2, "source": "ebpf" } ] },
            "plan": { "decisions": [ { "policy": "thermal", "want": { "kind": "cap_class", "class": "batch", "cpu_pct": cap * 100.0 }, "reason": "stage hot" } ] },
            "actuators": [ { "name": "cgroup_cpu", "ok": true, "errors_total": 0, "state": { "caps": { "batch": { "ratio": cap } } } } ],
            "agent": { "pace": { "period_ms": 100, "why": "stage" }, "limits": { "limit_celsius": 85.0, "limit_from": "passive_trip", "stage_thresholds_celsius": [70.0], "thresholds_kind": "trip points", "power_thresholds_watts": [] } }
        })
    }

    /// The dashboard on a 120×30 screen: the budget header, the sparklines' latest values,
    /// a panel per mechanism; `m` shows the full list.
    #[test]
    fn the_screen_has_the_budget_sparklines_and_a_panel_per_mechanism() {
        let mut d = Dashboard::new("agent pid 7".into());
        d.update(&typed(&view(0, 60.0, 1.0)), vec!["CPU".into()], 1_000);
        d.update(&typed(&view(2, 75.5, 0.35)), vec!["joule_cpu_utilization_ratio 12 %".into()], 2_000);
        let mut term = ratatui::Terminal::new(TestBackend::new(120, 30)).unwrap();
        term.draw(|f| d.draw(f)).unwrap();
        let screen: String = term.backend().buffer().content().iter().map(|c| c.symbol()).collect::<Vec<_>>().chunks(120).map(|r| r.concat() + "\n").collect();
        for want in [
            "source: agent pid 7",
            "stage 2 (by ebpf",
            "temperature 75.5 °C (sensor, thermal_zone0) · acts from 70.0 °C · headroom -5.5 °C · limit 85.0 °C (passive trip)",
            "power 5.0 W",
            "best-effort 35%",
            " thermal ",
            "stage hot",
        ] {
            assert!(screen.contains(want), "{want:?} not on screen:\n{screen}");
        }
        d.screen = Screen::for_key('m').unwrap();
        term.draw(|f| d.draw(f)).unwrap();
        let screen: String = term.backend().buffer().content().iter().map(|c| c.symbol()).collect();
        assert!(screen.contains("joule_cpu_utilization_ratio"), "the full list is not shown");
    }

    /// A reason and an error quoting a user's names show their escape sequences escaped,
    /// where ratatui alone would drop the control characters and show another name.
    #[test]
    fn reasons_and_errors_from_the_machine_are_shown_escaped() {
        let mut v = view(2, 75.5, 0.35);
        v["plan"]["decisions"][0]["reason"] = serde_json::json!("pods \u{1b}]2;owned\u{7}");
        v["actuators"][0]["ok"] = serde_json::json!(false);
        v["actuators"][0]["last_error"] = serde_json::json!("moving \u{9b}2J");
        let mut d = Dashboard::new("agent pid 7".into());
        d.update(&typed(&v), vec!["comm=\u{1b}]52;c;SGk=\u{7}".into()], 1_000);
        let mut term = ratatui::Terminal::new(TestBackend::new(120, 30)).unwrap();
        term.draw(|f| d.draw(f)).unwrap();
        let screen: String = term.backend().buffer().content().iter().map(|c| c.symbol()).collect();
        for want in ["\\x1b]2;owned\\x07", "\\u{9b}2J"] {
            assert!(screen.contains(want), "{want:?} not on screen:\n{screen}");
        }
        d.screen = Screen::Metrics;
        term.draw(|f| d.draw(f)).unwrap();
        let screen: String = term.backend().buffer().content().iter().map(|c| c.symbol()).collect();
        assert!(screen.contains("comm=\\x1b]52;c;SGk=\\x07"), "{screen}");
    }
}

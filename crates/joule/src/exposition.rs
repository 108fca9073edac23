//! The two text formats of `/metrics`, both rendered from the one table in metrics.rs, and the
//! choice between them. Prometheus text 0.0.4 is the default, as in the official clients: it is
//! what promtool and every Prometheus-compatible scraper read. OpenMetrics 1.0.0 (rendered by
//! prometheus-client) is served only to a scraper whose `Accept` header asks for it.
//!
//! The formats name counters differently: OpenMetrics names the family `x` and its sample
//! `x_total`; the classic format names both `x_total` (promtool reports "no help text" for a
//! sample whose family is named without `_total`).

use crate::metrics::{Family, Histogram, Kind, Value};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text exposition format 0.0.4.
    Text,
    /// OpenMetrics text 1.0.0 (ends with `# EOF`).
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The format for an `Accept` header, the way client_golang's `NegotiateIncludingOpenMetrics`
/// chooses: media ranges by descending q (ties keep their order), the first that names a format
/// joule serves wins, anything else (none, `*/*`, protobuf) means the classic text. A media
/// range matches when its `version` is absent or one joule writes: `0.0.4` for `text/plain`,
/// `1.0.0` for OpenMetrics (a request for OpenMetrics 0.0.1 only gets the classic text, which
/// every scraper accepts). Unlike client_golang, `q=0` ("not acceptable") is honoured.
pub fn negotiate(accept: Option<&str>) -> Format {
    let mut ranges: Vec<(f64, Option<Format>)> = accept
        .unwrap_or("")
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().filter(|m| !m.is_empty())?.to_ascii_lowercase();
            let (mut q, mut version) = (1.0, None);
            for p in parts {
                match p.split_once('=').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"'))) {
                    Some((k, v)) if k == "q" => q = v.parse().unwrap_or(0.0),
                    Some((k, v)) if k == "version" => version = Some(v.to_string()),
                    _ => {}
                }
            }
            let format = match (media.as_str(), version.as_deref()) {
                ("text/plain", None | Some("0.0.4")) => Some(Format::Text),
                ("application/openmetrics-text", None | Some("1.0.0")) => Some(Format::OpenMetrics),
                _ => None,
            };
            (q > 0.0).then_some((q, format))
        })
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0)); // stable: equal q keep the client's order
    ranges.into_iter().find_map(|(_, f)| f).unwrap_or(Format::Text)
}

/// Renders the families (those without samples are left out, as the official clients do).
pub fn render(format: Format, families: Vec<Family>) -> String {
    let families: Vec<Family> = families.into_iter().filter(|f| !f.samples.is_empty()).collect();
    match format {
        Format::Text => text(&families),
        Format::OpenMetrics => {
            let mut reg = Registry::default();
            reg.register_collector(Box::new(Families(families)));
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &reg).expect("writing to a String cannot fail");
            out
        }
    }
}

/// OpenMetrics, through prometheus-client.
#[derive(Debug)]
struct Families(Vec<Family>);

impl prometheus_client::collector::Collector for Families {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for fam in &self.0 {
            let kind = match fam.def.kind {
                Kind::Gauge => MetricType::Gauge,
                Kind::Counter => MetricType::Counter,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut m = enc.encode_descriptor(fam.def.name, fam.def.help, None, kind)?;
            for (labels, v) in &fam.samples {
                let mut fm = m.encode_family(labels)?;
                match (fam.def.kind, v) {
                    (Kind::Gauge, Value::Number(v)) => ConstGauge::new(*v).encode(fm)?,
                    (Kind::Counter, Value::Number(v)) => ConstCounter::new(v.max(0.0)).encode(fm)?,
                    (Kind::Histogram, Value::Histogram(h)) => fm.encode_histogram::<NoLabelSet>(h.sum, h.count, &per_bucket(h), None)?,
                    _ => return Err(std::fmt::Error), // a table bug: metrics.rs tests pin kinds
                }
            }
        }
        Ok(())
    }
}

/// prometheus-client takes each bucket's own count (it accumulates them itself), `+Inf` last.
fn per_bucket(h: &Histogram) -> Vec<(f64, u64)> {
    let mut prev = 0;
    let mut out: Vec<(f64, u64)> = h.buckets.iter().map(|&(le, n)| (le, n.saturating_sub(std::mem::replace(&mut prev, n)))).collect();
    out.push((f64::INFINITY, h.count.saturating_sub(prev)));
    out
}

/// The classic text format 0.0.4, written here: prometheus-client writes only OpenMetrics.
fn text(families: &[Family]) -> String {
    let mut out = String::new();
    for fam in families {
        let (name, kind) = match fam.def.kind {
            Kind::Gauge => (fam.def.name.to_string(), "gauge"),
            Kind::Counter => (format!("{}_total", fam.def.name), "counter"),
            Kind::Histogram => (fam.def.name.to_string(), "histogram"),
        };
        let help = fam.def.help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in &fam.samples {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            match v {
                Value::Number(v) if fam.def.kind == Kind::Counter => sample(&mut out, &name, &labels, &float(v.max(0.0))),
                Value::Number(v) => sample(&mut out, &name, &labels, &float(*v)),
                Value::Histogram(h) => {
                    let bucket = format!("{name}_bucket");
                    for (le, n) in &h.buckets {
                        sample(&mut out, &bucket, &[&labels[..], &[("le", &float(*le))]].concat(), &n.to_string());
                    }
                    sample(&mut out, &bucket, &[&labels[..], &[("le", "+Inf")]].concat(), &h.count.to_string());
                    sample(&mut out, &format!("{name}_sum"), &labels, &float(h.sum));
                    sample(&mut out, &format!("{name}_count"), &labels, &h.count.to_string());
                }
            }
        }
    }
    out
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: &str) {
    out.push_str(name);
    if !labels.is_empty() {
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))).collect();
        let _ = write!(out, "{{{}}}", pairs.join(","));
    }
    let _ = writeln!(out, " {value}");
}

/// A float as the text format spells it: Go's ParseFloat reads Rust's shortest round-trip
/// decimal; only the non-finite values have their own spelling.
fn float(v: f64) -> String {
    match v {
        v if v.is_nan() => "NaN".into(),
        v if v == f64::INFINITY => "+Inf".into(),
        v if v == f64::NEG_INFINITY => "-Inf".into(),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Labels, MetricDef};

    #[test]
    fn no_accept_header_gets_the_classic_text() {
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("")), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        assert_eq!(Format::Text.content_type(), "text/plain; version=0.0.4; charset=utf-8");
    }

    #[test]
    fn openmetrics_only_when_asked_for() {
        assert_eq!(negotiate(Some("application/openmetrics-text;version=1.0.0")), Format::OpenMetrics);
        assert_eq!(negotiate(Some("application/openmetrics-text")), Format::OpenMetrics);
        assert_eq!(negotiate(Some("Application/OpenMetrics-Text; Version=\"1.0.0\"")), Format::OpenMetrics);
        assert_eq!(negotiate(Some("application/openmetrics-text;version=0.0.1")), Format::Text, "a version joule does not write");
        assert_eq!(negotiate(Some("text/plain;version=0.0.4")), Format::Text);
        assert_eq!(negotiate(Some("application/json")), Format::Text);
        assert_eq!(Format::OpenMetrics.content_type(), "application/openmetrics-text; version=1.0.0; charset=utf-8");
    }

    #[test]
    fn q_values_decide_a_mix() {
        // What Prometheus 2.x sends by default: OpenMetrics first.
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(negotiate(Some("application/openmetrics-text;version=1.0.0;q=0.4, text/plain;version=0.0.4;q=0.9")), Format::Text);
        assert_eq!(negotiate(Some("text/plain;q=0.2, application/openmetrics-text;q=0.3")), Format::OpenMetrics);
        // Equal q: the client's order; q=0 is "never".
        assert_eq!(negotiate(Some("text/plain;q=0.5, application/openmetrics-text;q=0.5")), Format::Text);
        assert_eq!(negotiate(Some("application/openmetrics-text;q=0, text/plain;q=0.1")), Format::Text);
        // A wildcard or a type joule does not serve is skipped, not taken as the text format.
        assert_eq!(negotiate(Some("application/vnd.google.protobuf;q=0.9, */*;q=0.8, application/openmetrics-text;q=0.7")), Format::OpenMetrics);
        assert_eq!(negotiate(Some("application/openmetrics-text;q=abc")), Format::Text, "an unreadable q is 0");
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn table() -> Vec<Family> {
        let def = |name, kind| MetricDef { name, help: "Help with \\ and\nnewline.", kind, title: None, json: "" };
        let h = Histogram { buckets: vec![(1.024e-6, 2), (2.048e-6, 5), (1.073741824, 7)], count: 9, sum: 0.5 };
        vec![
            Family { def: def("t_gauge_ratio", Kind::Gauge), samples: vec![(labels(&[("a", "x\"y\\z\n"), ("source", "kernel")]), Value::Number(0.25))] },
            Family { def: def("t_energy_joules", Kind::Counter), samples: vec![(labels(&[("source", "model")]), Value::Number(3.5))] },
            Family { def: def("t_empty_ratio", Kind::Gauge), samples: vec![] },
            Family { def: def("t_latency_seconds", Kind::Histogram), samples: vec![(labels(&[("cgroup", "/"), ("source", "ebpf")]), Value::Histogram(h))] },
        ]
    }

    #[test]
    fn classic_text_names_counters_with_total_everywhere() {
        let t = render(Format::Text, table());
        assert!(t.contains("# HELP t_energy_joules_total Help with \\\\ and\\nnewline.\n# TYPE t_energy_joules_total counter\nt_energy_joules_total{source=\"model\"} 3.5\n"), "{t}");
        assert!(t.contains("t_gauge_ratio{a=\"x\\\"y\\\\z\\n\",source=\"kernel\"} 0.25\n"), "{t}");
        assert!(!t.contains("t_empty_ratio"), "an empty family is left out: {t}");
        assert!(!t.contains("# EOF"));
    }

    #[test]
    fn classic_histogram_has_cumulative_buckets_inf_sum_and_count() {
        let t = render(Format::Text, table());
        let want = "# TYPE t_latency_seconds histogram\n\
            t_latency_seconds_bucket{cgroup=\"/\",source=\"ebpf\",le=\"0.000001024\"} 2\n\
            t_latency_seconds_bucket{cgroup=\"/\",source=\"ebpf\",le=\"0.000002048\"} 5\n\
            t_latency_seconds_bucket{cgroup=\"/\",source=\"ebpf\",le=\"1.073741824\"} 7\n\
            t_latency_seconds_bucket{cgroup=\"/\",source=\"ebpf\",le=\"+Inf\"} 9\n\
            t_latency_seconds_sum{cgroup=\"/\",source=\"ebpf\"} 0.5\n\
            t_latency_seconds_count{cgroup=\"/\",source=\"ebpf\"} 9\n";
        assert!(t.contains(want), "{t}");
    }

    #[test]
    fn openmetrics_has_the_same_samples_le_values_and_an_eof() {
        let om = render(Format::OpenMetrics, table());
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE t_energy_joules counter\n"), "{om}");
        assert!(om.contains("t_energy_joules_total{source=\"model\"} 3.5\n"), "{om}");
        // Same buckets (cumulative again after per_bucket) and the same `le` spelling, so a
        // fleet scraped in either format sums into one series per bucket. Label order differs
        // (prometheus-client writes `le` first) and does not matter: compare label sets.
        let sample_lines = |s: &str| -> Vec<String> {
            let mut v: Vec<String> = s
                .lines()
                .filter(|l| l.starts_with("t_latency_seconds"))
                .map(|l| {
                    let (name, rest) = l.split_once('{').unwrap();
                    let (labels, value) = rest.split_once("} ").unwrap();
                    let mut labels: Vec<&str> = labels.split(',').collect();
                    labels.sort();
                    format!("{name}{{{}}} {value}", labels.join(","))
                })
                .collect();
            v.sort();
            v
        };
        let text = render(Format::Text, table());
        assert_eq!(sample_lines(&om), sample_lines(&text), "OpenMetrics:\n{om}\ntext:\n{text}");
    }

    #[test]
    fn non_finite_values_use_the_formats_spelling() {
        assert_eq!((float(f64::NAN), float(f64::INFINITY), float(f64::NEG_INFINITY)), ("NaN".into(), "+Inf".into(), "-Inf".into()));
        assert_eq!(float(1e-7), "0.0000001");
    }
}

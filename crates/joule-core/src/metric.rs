//! The metric table's vocabulary: what a metric family is (name with its unit, help, type,
//! where `joule monitor` shows it, where it is in the JSON) and its samples. The binary's
//! metrics.rs fills it from the Snapshot and the Plan; every actuator fills its own families
//! from its typed status (`control::ActuatorState`); both text formats of `/metrics`, the
//! monitor's view and `--list-metrics` render the same families.

use crate::snapshot::LatencyBuckets;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
    Histogram,
}

/// The one description of a value joule publishes: its metric name (with the unit), what it
/// means, its type, where `joule monitor`'s text view shows it, and where it is in the JSON.
/// `/metrics` (both formats), the monitor's text view and the JSON all follow this table.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    /// Family name without the `_total` a counter's samples get on the wire.
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// Section of the monitor's text view; None: not shown there (cumulative counters, the
    /// agent's own bookkeeping).
    pub title: Option<&'static str>,
    /// JSON pointer of the value in the snapshot (`joule monitor --json`, `/snapshot.json`);
    /// empty for what is not in the snapshot (the agent's counters, the plan).
    pub json: &'static str,
}

/// The unit of a family, read from its name's suffix (every name ends with its unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ratio,
    Seconds,
    Watts,
    Joules,
    Celsius,
    Hertz,
    BytesPerSecond,
    Bytes,
    Count,
}

impl MetricDef {
    pub fn unit(&self) -> Unit {
        let n = self.name;
        [
            ("_ratio", Unit::Ratio),
            ("_seconds", Unit::Seconds),
            ("_watts", Unit::Watts),
            ("_joules", Unit::Joules),
            ("_celsius", Unit::Celsius),
            ("_hertz", Unit::Hertz),
            ("_bytes_per_second", Unit::BytesPerSecond),
            ("_bytes", Unit::Bytes),
        ]
        .into_iter()
        .find_map(|(suffix, u)| n.ends_with(suffix).then_some(u))
        .unwrap_or(Unit::Count)
    }
}

pub type Labels = Vec<(String, String)>;

/// A histogram in the metric's unit: cumulative buckets with finite, ascending bounds (`+Inf`
/// is implicit and equals `count`).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// (upper bound `le`, cumulative count up to it), ascending.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    /// From nanosecond buckets to seconds, the unit of `_seconds` histograms.
    pub fn from_ns(b: &LatencyBuckets) -> Histogram {
        let buckets = b.le_ns.iter().zip(&b.counts).map(|(le, n)| (*le as f64 / 1e9, *n)).collect();
        Histogram { buckets, count: b.count, sum: b.estimated_sum_ns / 1e9 }
    }
}

/// One sample's value: a number for gauges and counters, a histogram for histograms.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Number(f64),
    Histogram(Histogram),
}

/// One metric family filled from a snapshot.
#[derive(Debug)]
pub struct Family {
    pub def: MetricDef,
    pub samples: Vec<(Labels, Value)>,
}

impl MetricDef {
    /// A gauge shown nowhere but `/metrics` (an actuator's state).
    pub const fn gauge(name: &'static str, help: &'static str) -> MetricDef {
        MetricDef { name, help, kind: Kind::Gauge, title: None, json: "" }
    }
    /// A counter shown nowhere but `/metrics`.
    pub const fn counter(name: &'static str, help: &'static str) -> MetricDef {
        MetricDef { name, help, kind: Kind::Counter, title: None, json: "" }
    }
    /// This family with `samples`.
    pub fn with(self, samples: Vec<(Labels, f64)>) -> Family {
        Family { def: self, samples: samples.into_iter().map(|(l, v)| (l, Value::Number(v))).collect() }
    }
}

/// Labels from `(name, value)` pairs.
pub fn l(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

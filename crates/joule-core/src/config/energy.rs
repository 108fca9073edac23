//! `[energy]`: energy-aware placement (mechanism 2, the energy half). Off by default. Says
//! where the energy model comes from (the kernel, `[[energy.domain]]` tables, or a model file),
//! which policy places (`joule`, or the EAS baseline `eas`), and per `[[class]]` the QoS
//! target placement must meet (`[[energy.target]]`: a network app's bandwidth, a CPU app's
//! performance fraction, or an RT app's deadline).

use crate::energy::{DomainSpec, NetCost};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelSource {
    /// cpufreq, cpu_capacity and the debugfs EM of the running kernel (see `energy::kernel`).
    #[default]
    Kernel,
    /// The `[[energy.domain]]` tables of this config.
    Inline,
    /// `model_file` (e.g. deploy/energy/odroid-xu4.toml).
    File,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementPolicyKind {
    /// Least modelled energy that meets every target, with flow-aware network demand and
    /// advisory bandwidth limits.
    #[default]
    Joule,
    /// The baseline: Linux EAS's wake-up rule (per domain the CPU with the most spare capacity
    /// where the thread's own utilisation fits, the one whose domain's modelled energy grows
    /// least), schedutil frequency, blind to softirq work, no bandwidth limit.
    Eas,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnergyConfig {
    pub enabled: bool,
    pub model: ModelSource,
    pub model_file: Option<PathBuf>,
    pub policy: PlacementPolicyKind,
    /// Re-decide only when a class's demand moved by more than this, % of the demand at the
    /// last decision (the flow monitor's rates jitter; a placement that flaps costs
    /// migrations).
    pub hysteresis_pct: f64,
    /// Utilisation the policy leaves free on a CPU, % (absorbs bursts and model error).
    pub headroom_pct: f64,
    /// The per-packet and per-byte CPU cost of network traffic (model).
    pub net_cost: NetCost,
    #[serde(rename = "domain")]
    pub domains: Vec<DomainSpec>,
    #[serde(rename = "target")]
    pub targets: Vec<EnergyTarget>,
}

impl Default for EnergyConfig {
    fn default() -> Self {
        EnergyConfig {
            enabled: false,
            model: ModelSource::Kernel,
            model_file: None,
            policy: PlacementPolicyKind::Joule,
            hysteresis_pct: 10.0,
            headroom_pct: 10.0,
            net_cost: NetCost::default(),
            domains: Vec::new(),
            targets: Vec::new(),
        }
    }
}

/// One class's QoS target. Exactly one of `bandwidth_mbit`, `perf_fraction`, `deadline_us`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnergyTarget {
    /// A `[[class]]` name.
    pub class: String,
    /// Network app: the bandwidth it must get, Mbit/s.
    #[serde(default)]
    pub bandwidth_mbit: Option<f64>,
    /// Network app: mean packet size until the flow monitor measures it, bytes.
    #[serde(default)]
    pub mean_packet_bytes: Option<f64>,
    /// Network app: the interface its traffic leaves by (in the `[net]` namespace). With it the
    /// bandwidth placement decides is held there, by the traffic-control actuator (an HTB class
    /// for the class's sockets); without it no limit is held, and placement plans for what the
    /// class sends (the flow monitor's rate when past the target, else the target).
    #[serde(default)]
    pub interface: Option<String>,
    /// CPU app: the fraction (0–1] of the performance it has alone on the biggest CPU at the
    /// highest OPP.
    #[serde(default)]
    pub perf_fraction: Option<f64>,
    /// RT app: each job's deadline, µs; with `runtime_us` (a job's run time on the biggest CPU
    /// at the highest OPP) and `period_us`.
    #[serde(default)]
    pub deadline_us: Option<u64>,
    #[serde(default)]
    pub runtime_us: Option<u64>,
    #[serde(default)]
    pub period_us: Option<u64>,
    /// Threads of the app that run at once (CPU apps; default 1).
    #[serde(default)]
    pub threads: Option<u32>,
}

impl EnergyConfig {
    /// The model this section asks for: the kernel's (roots under `telemetry.sysfs_root`,
    /// power fallback `telemetry.power_model.cpu_dynamic_watts`), the config's
    /// `[[energy.domain]]`, or `model_file`. (The config reads the energy model, never the
    /// other way round.)
    pub fn load_model(
        &self,
        telemetry: &super::TelemetryConfig,
        fx: &dyn crate::effects::Effects,
    ) -> Result<crate::energy::EnergyModel, crate::energy::EnergyError> {
        use crate::energy::{build, read_kernel, KernelRoots, ModelFile};
        match self.model {
            ModelSource::Kernel => read_kernel(fx, &KernelRoots::under(&telemetry.sysfs_root), telemetry.power_model.cpu_dynamic_watts * 1000.0),
            ModelSource::Inline => build(&self.domains, "config [[energy.domain]]", vec![]),
            ModelSource::File => ModelFile::load(self.model_file.as_deref().unwrap_or(std::path::Path::new(""))),
        }
    }
}

/// (key, message, hint) for each problem, as `validate` collects them.
pub(super) fn problems(e: &EnergyConfig, classes: &[String]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut bad = |k: String, m: String, h: &str| out.push((k, m, h.to_string()));
    if e.model == ModelSource::File && e.model_file.is_none() {
        bad("energy.model_file".into(), "model = \"file\" needs model_file".into(), "e.g. \"/etc/joule/energy/odroid-xu4.toml\"");
    }
    if e.model == ModelSource::Inline && e.domains.is_empty() {
        bad("energy.model".into(), "model = \"inline\" needs [[energy.domain]] tables".into(), "see docs/energy.md");
    }
    if !e.domains.is_empty() {
        if let Err(err) = crate::energy::build(&e.domains, "config", vec![]) {
            bad("energy.domain".into(), err.to_string(), "see deploy/energy/odroid-xu4.toml for the shape");
        }
    }
    for (k, v) in [("hysteresis_pct", e.hysteresis_pct), ("headroom_pct", e.headroom_pct)] {
        if !(v.is_finite() && (0.0..90.0).contains(&v)) {
            bad(format!("energy.{k}"), format!("{k} = {v} must be in 0..90"), "10 is the default");
        }
    }
    if !e.net_cost.is_valid() {
        bad("energy.net_cost".into(), "net_cost coefficients must be finite and ≥ 0".into(), "cycles per packet / per byte");
    }
    for (i, t) in e.targets.iter().enumerate() {
        let key = format!("energy.target[{i}]");
        if !classes.contains(&t.class) {
            bad(format!("{key}.class"), format!("class {:?} is not a [[class]]", t.class), "targets refer to tasks by [[class]] name");
        }
        let kinds = [t.bandwidth_mbit.is_some(), t.perf_fraction.is_some(), t.deadline_us.is_some()].iter().filter(|x| **x).count();
        if kinds != 1 {
            bad(key.clone(), format!("target for {:?} sets {kinds} of bandwidth_mbit, perf_fraction, deadline_us", t.class), "exactly one");
        }
        if t.bandwidth_mbit.is_some_and(|b| !(b.is_finite() && b > 0.0)) || t.mean_packet_bytes.is_some_and(|b| !(64.0..=65536.0).contains(&b)) {
            bad(key.clone(), "bandwidth_mbit must be > 0 and mean_packet_bytes in 64..=65536".into(), "Mbit/s, bytes");
        }
        if let Some(ifname) = &t.interface {
            if t.bandwidth_mbit.is_none() {
                bad(format!("{key}.interface"), format!("interface {ifname:?} is for network targets (bandwidth_mbit)"), "remove it, or set bandwidth_mbit");
            }
            if ifname.is_empty() || ifname.len() > 15 || ifname.contains('/') {
                bad(format!("{key}.interface"), format!("interface {ifname:?} is not an interface name (1 to 15 bytes)"), "e.g. \"eth0\"");
            }
        }
        if e.targets[..i].iter().any(|o| o.class == t.class) {
            bad(format!("{key}.class"), format!("class {:?} has two targets", t.class), "one [[energy.target]] per class");
        }
        if t.threads == Some(0) {
            bad(format!("{key}.threads"), "threads must be ≥ 1".into(), "the threads of the app that run at once");
        }
        if t.perf_fraction.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
            bad(format!("{key}.perf_fraction"), "perf_fraction must be in (0, 1]".into(), "0.5 = half the top performance");
        }
        if t.deadline_us.is_some()
            && !(t.runtime_us.is_some_and(|r| r > 0 && Some(r) <= t.deadline_us) && t.period_us.is_some_and(|p| Some(p) >= t.deadline_us))
        {
            bad(key.clone(), "an RT target needs 0 < runtime_us ≤ deadline_us ≤ period_us".into(), "µs, at the top OPP of the biggest CPU");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn off_by_default_and_a_full_section_parses() {
        assert!(!Config::default().energy.enabled);
        let c = Config::parse(
            r#"
            [[class]]
            name = "ftp"
            match = { comm = ["vsftpd"], uid = [0] }
            [[class]]
            name = "parsec"
            match = { comm = ["blackscholes"], uid = [1000] }
            [energy]
            enabled = true
            model = "file"
            model_file = "deploy/energy/odroid-xu4.toml"
            policy = "eas"
            [[energy.target]]
            class = "ftp"
            bandwidth_mbit = 100.0
            [[energy.target]]
            class = "parsec"
            perf_fraction = 0.5
            threads = 4
            "#,
        )
        .unwrap();
        assert_eq!(c.energy.targets.len(), 2);
        assert_eq!(c.energy.policy, super::PlacementPolicyKind::Eas);
    }

    /// Issue 33: a placement target is a grant (the CPUs, frequency and bandwidth a class's
    /// target needs), so a class placed by one must be matched by something no user chooses.
    #[test]
    fn a_class_an_energy_target_places_must_not_be_matched_by_comm_alone() {
        let text = |m: &str| {
            format!(
                "[[class]]\nname = \"ftp\"\nmatch = {{ {m} }}\n[energy]\nenabled = true\nmodel = \"file\"\nmodel_file = \"deploy/energy/odroid-xu4.toml\"\n[[energy.target]]\nclass = \"ftp\"\nbandwidth_mbit = 100.0\n"
            )
        };
        let e =
            Config::parse(&text("comm = [\"vsftpd\"]")).err().map(|e| e.iter().map(|p| p.message.clone()).collect::<Vec<_>>().join("\n")).unwrap_or_default();
        assert!(e.contains("grants an energy placement target") && e.contains("any user can meet"), "{e}");
        assert!(Config::parse(&text("comm = [\"vsftpd\"], uid = [0]")).is_ok());
    }

    #[test]
    fn bad_targets_are_each_reported_at_their_key() {
        let e = Config::parse(
            r#"
            [[class]]
            name = "a"
            match = { comm = ["a"] }
            [energy]
            enabled = true
            model = "file"
            [[energy.target]]
            class = "nope"
            bandwidth_mbit = 10.0
            perf_fraction = 0.5
            [[energy.target]]
            class = "a"
            perf_fraction = 1.5
            threads = 0
            [[energy.target]]
            class = "a"
            deadline_us = 100
            "#,
        )
        .unwrap_err();
        let text: Vec<String> = e.iter().map(|p| p.message.clone()).collect();
        let all = text.join("\n");
        for want in ["model_file", "not a [[class]]", "sets 2 of", "(0, 1]", "threads must be", "two targets", "runtime_us ≤ deadline_us"] {
            assert!(all.contains(want), "{want} missing in {all}");
        }
    }
}

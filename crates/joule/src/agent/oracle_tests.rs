//! The doctor's prediction is what the agent does, on every fixture machine: the rows
//! `joule doctor` prints are the ones the agent reports at start, and each row the agent
//! decides at start agrees with the decision its runtime wiring takes (the eBPF load, the
//! class placement through units or cgroups, the sensors the stage follows).

use super::{start, Start};
use crate::backends::fixtures::MACHINES;
use crate::backends::{systemd_host, Choice, Ebpf, Roots};
use crate::sense::{Bpf, BpfOff, Snapshotter};
use joule_core::config::{BpfMode, ClassConfig, Config, MatchRules, ThermalScheduler};
use std::path::Path;

fn row<'a>(rows: &'a [Choice], mechanism: &str) -> &'a Choice {
    rows.iter().find(|c| c.mechanism.starts_with(mechanism)).unwrap_or_else(|| panic!("no {mechanism} in {rows:?}"))
}

/// The configs each machine is judged with: the default (eBPF where the kernel allows it), eBPF
/// off, eBPF required, the sched_ext path on the
/// model, and a class joule places (through units where systemd owns the tree).
fn configs(t: &Path) -> Vec<(&'static str, Config)> {
    let mut off = Config::default();
    off.telemetry.bpf = BpfMode::Off;
    let mut required = Config::default();
    required.telemetry.bpf = BpfMode::Required;
    let mut scx = Config::default();
    scx.thermal.scheduler = ThermalScheduler::Scx;
    scx.thermal.act_on_model = true;
    let mut classes = Config::default();
    classes.classes.push(ClassConfig {
        name: "web".into(),
        matches: MatchRules { comm: vec!["nginx".into()], ..Default::default() },
        quota_us: Some(30_000),
        ..Default::default()
    });
    let mut all = vec![("default", Config::default()), ("bpf = false", off), ("bpf = true", required), ("scx on the model", scx), ("a class", classes)];
    for (_, cfg) in &mut all {
        let tel = &mut cfg.telemetry;
        tel.sysfs_root = t.join("sys");
        tel.procfs_root = t.join("proc");
        tel.cgroup_root = t.join("sys/fs/cgroup");
    }
    all
}

#[test]
fn the_doctors_prediction_is_what_the_agent_does_on_every_fixture_machine() {
    for (machine, build) in MACHINES {
        let t = tempfile::tempdir().unwrap();
        build(t.path());
        let roots = Roots::under(t.path());
        for (config, cfg) in configs(t.path()) {
            let at = format!("{machine}, {config}");
            let (_, doctor) = crate::doctor::predict(&cfg, &roots);
            let Start { ebpf, chosen } = start(&cfg, false, true, &roots);
            assert_eq!(doctor, chosen, "{at}: the doctor's rows are the backends the agent reports at start");

            // eBPF: what the agent's start does with its decision, and the doctor's row.
            let stage = row(&doctor, "thermal stage");
            match &ebpf {
                Ebpf::On => assert_eq!((stage.backend.as_str(), &stage.warning), ("ebpf", &None), "{at}"),
                Ebpf::Off(off) => {
                    assert_eq!((stage.backend.as_str(), &stage.warning), ("user space", &None), "{at}");
                    assert!(stage.why.contains(off.explain()), "{at}: {stage:?}");
                }
                Ebpf::Refused(why) => {
                    assert_eq!(stage.backend, "user space", "{at}");
                    assert!(stage.warning.as_deref().is_some_and(|w| w.contains("refuses to start") && w.contains(why.as_str())), "{at}: {stage:?}");
                    let refused = super::bpf_choice(ebpf.clone(), &journal(t.path())).err().map(|e| e.to_string());
                    assert_eq!(refused.as_deref(), Some(why.as_str()), "{at}: the agent stops with the reason the doctor names");
                }
            }
            let btf = t.path().join("sys/kernel/btf/vmlinux").exists();
            let want = match (cfg.telemetry.bpf, btf) {
                (BpfMode::Off, _) | (BpfMode::Auto, false) => "off",
                (_, true) => "on",
                (BpfMode::Required, false) => "refused",
            };
            let got = match &ebpf {
                Ebpf::On => "on",
                Ebpf::Off(_) => "off",
                Ebpf::Refused(_) => "refused",
            };
            assert_eq!(got, want, "{at}: {ebpf:?}");

            // Classes: through units exactly where the agent's placement takes units.
            let cpu = row(&doctor, "class CPU");
            assert_eq!(cpu.backend == "systemd D-Bus", systemd_host(&cfg), "{at}: {cpu:?}");
            let nap = row(&doctor, "nap");
            if systemd_host(&cfg) {
                assert_eq!(nap.backend, "systemd FreezeUnit", "{at}");
            }

            // The sensors and thresholds the agent's stage follows.
            let sense = Snapshotter::new(&cfg, Bpf::Off(BpfOff::Config)).unwrap();
            let choice = sense.sensor_choice();
            let sensor = row(&doctor, "thermal sensor");
            let acts = if choice.used().next().is_some() {
                "sensor"
            } else if cfg.thermal.act_on_model {
                "model"
            } else {
                "none"
            };
            assert_eq!(sensor.backend, acts, "{at}: {sensor:?}");
            let th = row(&doctor, "thermal thresholds");
            assert!(th.why.contains(&format!("{:?}", choice.thresholds_celsius)) && th.backend == choice.thresholds_kind, "{at}: {th:?} vs {choice:?}");
        }
    }
}

/// A journal in the fixture tree, for the agent's eBPF choice (which pins through it when on).
fn journal(t: &Path) -> joule_core::journal::Journal {
    joule_core::journal::Journal::open(&t.join("journal")).unwrap()
}

/// Doctor and agent look for the kernel's BTF where libbpf relocates against it, whatever tree
/// the sensors are read from: a fixture sysfs (a plant, a test) has no say in whether eBPF loads.
#[test]
fn doctor_and_agent_look_for_btf_at_the_running_kernels_file_whatever_the_sysfs_root() {
    let mut cfg = Config::default();
    cfg.telemetry.sysfs_root = "/nonexistent/sys".into();
    cfg.telemetry.thermal_root = "/nonexistent/plant".into();
    let roots = Roots::of(&cfg.telemetry);
    assert_eq!(roots.btf, Path::new(joule_bpf::BTF_VMLINUX));
    assert_eq!((roots.sys.as_path(), roots.thermal.as_path()), (Path::new("/nonexistent/sys"), Path::new("/nonexistent/plant")));
}

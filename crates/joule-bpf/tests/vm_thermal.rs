//! Tier 3: the in-kernel thermal stage driven by a *real* thermal zone. The host has no zone,
//! so the `vm_` test boots the sched_ext VM with the ACPI zone of scripts/vm/thermal.asl and
//! re-runs this very test binary inside it, filtered to `guest_stage_follows_the_acpi_zone`.
//! That guest test never feeds a temperature from user space: every stage it sees was computed
//! by `tp_btf/thermal_temperature` when the kernel polled the zone (every 1 s).

use joule_bpf::{TempSource, ThermalStage, ThermalStageOpts};
use joule_testkit::vm::{self, Vm};
use std::process::Command;
use std::time::{Duration, Instant};

const GUEST_TEST: &str = "guest_stage_follows_the_acpi_zone";

#[test]
#[ignore = "tier 3: vm"]
fn vm_thermal_tracepoint_computes_the_stage_from_a_real_acpi_zone() {
    let Some(vm) = Vm::new().with_thermal_zone().ready() else { return };
    let exe = std::env::current_exe().unwrap();
    let cmd = format!("JOULE_IN_GUEST=1 {} --ignored --exact {GUEST_TEST} --nocapture", exe.display());
    let out = vm.run(&cmd, 240);
    eprintln!("{}", out.describe());
    assert_eq!(out.status, 0, "guest test failed:\n{}", out.describe());
    assert!(out.stdout.contains("1 passed"), "guest test did not run:\n{}", out.describe());
}

/// Waits for the kernel to publish `want` (stage, m°C) from zone 0 through the tracepoint.
fn wait_for(ts: &ThermalStage, want_stage: u32, want_temp_mc: i64) -> joule_bpf::StageReading {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = ts.read();
        if r.stage == want_stage && r.temp_mc == want_temp_mc {
            return r;
        }
        assert!(Instant::now() < deadline, "stage never became {want_stage} at {want_temp_mc} m°C; last {r:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn set_temp(arg: &str) {
    let script = vm::repo_root().join("scripts/vm/set-temp.sh");
    let ok = Command::new("bash").arg(script).arg(arg).status().unwrap().success();
    assert!(ok, "set-temp.sh {arg} failed");
}

#[test]
#[ignore = "runs only inside the VM tier's guest"]
fn guest_stage_follows_the_acpi_zone() {
    if std::env::var("JOULE_IN_GUEST").as_deref() != Ok("1") {
        eprintln!("{GUEST_TEST} runs inside the VM (started by the vm_ test); nothing to do here");
        return;
    }
    assert!(std::path::Path::new("/sys/class/thermal/thermal_zone0/temp").exists(), "no thermal zone in the guest");
    let opts = ThermalStageOpts { pin_dir: None, thresholds_mc: vec![70_000, 80_000, 90_000], hysteresis_mc: 3_000, tracepoint_zones: None };
    let mut ts = ThermalStage::load(opts, None).expect("load the thermal stage program");
    assert!(ts.attached_to_tracepoint(), "tracepoint not attached: {:?}", ts.tracepoint_error());
    // Rising: immediate. Falling: only 3 °C below the threshold (80 → 77).
    for (temp, stage) in [("85", 2), ("78", 2), ("76", 1), ("95", 3), ("50", 0)] {
        set_temp(temp);
        let r = wait_for(&ts, stage, temp.parse::<i64>().unwrap() * 1000);
        assert_eq!(r.source, TempSource::Sensor);
        assert_eq!(r.zone, 0);
        println!("guest: zone at {temp} °C -> stage {} (source {:?}, transitions {})", r.stage, r.source, r.transitions);
    }
    // A zone the agent did not choose (a drive's, a NIC's) never moves the stage: with zone 0
    // left out of the tracepoint's set, 95 °C polled three times changes nothing; put back in,
    // the next poll makes it stage 3.
    ts.set_tracepoint_zones(Some(&[])).unwrap();
    set_temp("95");
    std::thread::sleep(Duration::from_millis(3_500));
    let r = ts.read();
    assert_eq!((r.stage, r.temp_mc), (0, 50_000), "a zone left out of the tracepoint's set moved the stage: {r:?}");
    ts.set_tracepoint_zones(Some(&[0])).unwrap();
    let r = wait_for(&ts, 3, 95_000);
    println!("guest: zone 0 left out at 95 °C -> stage 0 kept over 3.5 s; put back -> stage {} ", r.stage);
    set_temp("off");
}

//! Unit classes against a fake systemd ([`FakeEffects::with_unit`]): what reaches which unit,
//! the journal that undoes it, refusals, thermal caps and drift.

use super::*;
use joule_core::config::Config;
use joule_core::effects::{FakeEffects, Sched, SchedAttr, Units};

fn classes(text: &str) -> Vec<ClassConfig> {
    Config::parse(text).unwrap_or_else(|e| panic!("{e:?}")).classes
}

fn journal() -> (tempfile::TempDir, Journal) {
    let d = tempfile::tempdir().unwrap();
    let j = Journal::open(d.path()).unwrap();
    (d, j)
}

const WEB: &str = "[[class]]\nname = \"web\"\nmatch = { unit = [\"nginx.service\"] }\nquota_us = 30000\nperiod_us = 100000\ncpus = \"1\"\nweight = 200\n\n\
                   [[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch = { slice = [\"batch.slice\"] }\n\n\
                   [[class]]\nname = \"other\"\nmatch = { comm = [\"x\"], uid = [0] }\n";

#[test]
fn a_unit_class_sets_its_units_properties_through_systemd_and_restore_puts_them_back() {
    let fx = FakeEffects::default().with_unit("nginx.service").with_unit("batch.slice");
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), &AdmissionEnv::new(2)).unwrap();
    assert_eq!(u.class_names(), vec!["web", "batch"], "the comm class is the cgroupfs controller's");
    let r = u.apply(&j, &fx).unwrap();
    assert_eq!(r.writes, 4);
    assert_eq!(
        fx.calls(),
        vec![
            "set-property nginx.service CPUQuotaPerSecUSec=300000",
            "set-property nginx.service CPUQuotaPeriodUSec=100000",
            "set-property nginx.service CPUWeight=200",
            "set-property nginx.service AllowedCPUs=02",
        ]
    );
    // Applying again writes nothing; the journal holds each old value once.
    assert_eq!(u.apply(&j, &fx).unwrap().writes, 0);
    assert_eq!(j.entries().unwrap().len(), 4);
    let rep = j.restore_all(&fx).unwrap();
    assert_eq!(rep.failed.len(), 0, "{rep:?}");
    for p in joule_core::effects::UNIT_PROPERTIES {
        let want = if *p == "AllowedCPUs" { UnitValue::Bytes(vec![]) } else { UnitValue::U64(u64::MAX) };
        assert_eq!(fx.unit_property("nginx.service", p).unwrap(), want, "{p} as found");
    }
}

#[test]
fn a_failure_half_way_undoes_what_was_set_and_names_the_unit() {
    let fx = FakeEffects::default().with_unit("nginx.service");
    fx.fail_calls("set-property nginx.service CPUWeight=200", libc::EPERM);
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), &AdmissionEnv::new(2)).unwrap();
    let e = u.apply(&j, &fx).unwrap_err().to_string();
    assert!(e.contains("CPUWeight of nginx.service") && e.contains("200"), "{e}");
    assert_eq!(fx.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX), "rolled back");
    assert!(j.entries().unwrap().is_empty());
    // A unit that does not exist is an error naming it, and nothing is left set.
    let fx = FakeEffects::default();
    let e = UnitClasses::new(&classes(WEB), &AdmissionEnv::new(2)).unwrap().apply(&j, &fx).unwrap_err().to_string();
    assert!(e.contains("nginx.service"), "{e}");
}

#[test]
fn an_rt_class_of_units_gets_deadline_reservations_and_what_does_not_fit_is_refused_with_the_reason() {
    let rt = |extra: &str| {
        classes(&format!("[[class]]\nname = \"rt\"\nmatch = {{ unit = [\"a.service\"] }}\nrt_runtime_us = 30000\nrt_period_us = 100000\n{extra}"))
    };
    let refusal = |extra: &str| UnitClasses::new(&rt(extra), &AdmissionEnv::new(2)).err().unwrap().to_string();
    assert!(refusal("cpus = \"1\"\n").contains("must be free to run on every CPU of its root domain"));
    assert!(refusal("rt_threads = 7\n").contains("exceed the kernel's deadline bandwidth"));
    // Two threads of a.service's process: each gets a reservation, its old policy journalled
    // first; release gives it back.
    let procfs = tempfile::tempdir().unwrap();
    let mut fx = FakeEffects::default().with_unit("a.service");
    for t in [10, 11] {
        std::fs::create_dir_all(procfs.path().join(format!("10/task/{t}"))).unwrap();
        fx = fx.with_file(format!("/proc/{t}/stat"), &format!("{t} (a) S 1 {t} {t} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 {}\n", 1000 + t));
        fx.sched.lock().unwrap().insert(t, SchedAttr::OTHER);
    }
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&rt(""), &AdmissionEnv::new(2)).unwrap();
    u.apply(&j, &fx).unwrap();
    let mut m = members(&[(10, "rt", "/system.slice/a.service")]);
    m.procfs = procfs.path().into();
    u.resolve(&j, &fx, &m).unwrap();
    let dl = SchedAttr { policy: joule_core::effects::SCHED_DEADLINE, priority: 0 };
    assert_eq!((fx.get_sched(10).unwrap(), fx.get_sched(11).unwrap()), (dl, dl));
    assert_eq!(u.reserved("rt"), Some(Reserved { threads: 2, unreserved: 0 }));
    assert_eq!(j.entries().unwrap().len(), 2, "one record per thread");
    u.release(&j, &fx).unwrap();
    assert_eq!((fx.get_sched(10).unwrap(), fx.get_sched(11).unwrap()), (SchedAttr::OTHER, SchedAttr::OTHER));
    assert!(j.entries().unwrap().is_empty());
}

#[test]
fn a_thermal_cap_lowers_the_quota_and_lifting_it_goes_back_to_the_configured_one() {
    let fx = FakeEffects::default().with_unit("nginx.service").with_unit("batch.slice");
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), &AdmissionEnv::new(2)).unwrap();
    u.apply(&j, &fx).unwrap();
    assert!(u.set_cap(&j, &fx, "batch", 15.0).unwrap());
    assert_eq!(fx.unit_property("batch.slice", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(300_000), "15 % of 2 CPUs");
    assert!((u.caps()["batch"].ratio - 0.15).abs() < 1e-9);
    assert!(u.set_cap(&j, &fx, "batch", 100.0).unwrap());
    assert_eq!(fx.unit_property("batch.slice", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX), "no quota configured: none");
    u.set_cap(&j, &fx, "web", 50.0).unwrap();
    assert_eq!(fx.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(300_000), "the configured 30 % is lower than the cap");
    // Held at what it asks: no D-Bus call at all (the agent asks every period).
    let calls = fx.calls().len();
    assert!(!u.set_cap(&j, &fx, "batch", 100.0).unwrap());
    assert_eq!(fx.calls().len(), calls);
    // Changed by an administrator before drift() looked: a new cap does not overwrite it.
    fx.set_unit_property("batch.slice", "CPUQuotaPerSecUSec", &UnitValue::U64(700_000)).unwrap();
    assert!(!u.set_cap(&j, &fx, "batch", 15.0).unwrap());
    assert_eq!(fx.unit_property("batch.slice", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(700_000));
    assert_eq!(u.drift(&fx).len(), 1, "and drift() reports it");
    assert!(matches!(u.set_cap(&j, &fx, "nope", 50.0), Err(QosError::UnknownClass(_))));
}

#[test]
fn a_change_by_someone_else_is_reported_once_and_then_left_alone() {
    let fx = FakeEffects::default().with_unit("nginx.service").with_unit("batch.slice");
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), &AdmissionEnv::new(2)).unwrap();
    u.apply(&j, &fx).unwrap();
    assert!(u.drift(&fx).is_empty());
    // `systemctl set-property nginx.service CPUWeight=50` by hand.
    fx.set_unit_property("nginx.service", "CPUWeight", &UnitValue::U64(50)).unwrap();
    let d = u.drift(&fx);
    assert_eq!(d, vec![Drift { unit: "nginx.service".into(), property: "CPUWeight".into(), set: "200".into(), found: "50".into() }]);
    assert!(u.drift(&fx).is_empty(), "reported once");
    u.apply(&j, &fx).unwrap();
    assert_eq!(fx.unit_property("nginx.service", "CPUWeight").unwrap(), UnitValue::U64(50), "the administrator wins");
    // And keeps winning at restore: joule puts back only what still reads as joule set it.
    j.restore_all(&fx).unwrap();
    assert_eq!(fx.unit_property("nginx.service", "CPUWeight").unwrap(), UnitValue::U64(50));
    assert_eq!(fx.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX));
}

#[test]
fn a_cap_changed_twice_is_walked_back_to_the_value_found() {
    let fx = FakeEffects::default().with_unit("batch.slice").with_unit("nginx.service");
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), &AdmissionEnv::new(2)).unwrap();
    u.set_cap(&j, &fx, "batch", 60.0).unwrap();
    u.set_cap(&j, &fx, "batch", 15.0).unwrap();
    j.restore_all(&fx).unwrap();
    assert_eq!(fx.unit_property("batch.slice", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX));
}

#[test]
fn cpu_masks_put_cpu_n_in_bit_n() {
    assert_eq!(cpu_mask(&[0]), vec![1]);
    assert_eq!(cpu_mask(&[1, 3]), vec![0b1010]);
    assert_eq!(cpu_mask(&[9]), vec![0, 2]);
}

/// A membership of `(pid, class, v2 cgroup)` members.
fn members(list: &[(i32, &str, &str)]) -> Membership {
    let mut m = Membership::default();
    for (pid, class, cg) in list {
        let member = joule_core::membership::Member {
            pid: *pid,
            class: class.to_string(),
            started: Some(1),
            cgroups: joule_core::procfs::TaskCgroups::parse(&format!("0::{cg}\n")),
            uid: Some(0),
        };
        m.members.insert(*pid, member);
    }
    m.full = true;
    m
}

const NGINX: &str = "/system.slice/nginx.service";
const SESSION: &str = "/user.slice/user-1000.slice/session-3.scope";

#[test]
fn a_class_matched_by_processes_acts_through_the_units_it_fills_and_refuses_shared_ones() {
    let cfg = "[[class]]\nname = \"by-name\"\nmatch = { comm = [\"nginx\"], uid = [0, 33] }\nquota_us = 30000\nperiod_us = 100000\n";
    let fx = FakeEffects::default()
        .with_unit("nginx.service")
        .with_unit("session-3.scope")
        .with_dir("/cg/system.slice/nginx.service")
        .with_file("/cg/system.slice/nginx.service/cgroup.procs", "10\n11\n")
        .with_dir(format!("/cg{SESSION}"))
        .with_file(format!("/cg{SESSION}/cgroup.procs"), "20\n21\n");
    let (_d, j) = journal();
    let mut u = UnitClasses::for_systemd(&classes(cfg), &AdmissionEnv::new(2), Path::new("/cg")).unwrap();
    assert_eq!(u.apply(&j, &fx).unwrap().writes, 0, "no unit is known before the processes are");
    // nginx's master and worker are the class's; the session also runs 21 (a shell).
    let m = members(&[(10, "by-name", NGINX), (11, "by-name", NGINX), (20, "by-name", SESSION)]);
    let r = u.resolve(&j, &fx, &m).unwrap();
    assert_eq!(u.units_of("by-name"), ["nginx.service"]);
    assert_eq!(fx.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(300_000));
    assert_eq!(fx.unit_property("session-3.scope", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX), "a shared unit is not capped");
    assert!(r.notes.iter().any(|n| n.contains("session-3.scope is shared") && n.contains("pid 21")), "{:?}", r.notes);
    assert!(fx.calls().iter().all(|c| c.starts_with("set-property nginx.service")), "{:?}", fx.calls());
    // The same reading again: no D-Bus call, no repeated note.
    let calls = fx.calls().len();
    assert!(u.resolve(&j, &fx, &m).unwrap().notes.is_empty());
    assert_eq!(fx.calls().len(), calls);
    // Someone else's process appears in nginx.service: it is shared now, and its quota goes back.
    let fx2 = fx.with_file("/cg/system.slice/nginx.service/cgroup.procs", "10\n11\n12\n");
    let r = u.resolve(&j, &fx2, &m).unwrap();
    assert!(u.units_of("by-name").is_empty());
    assert_eq!(fx2.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX));
    assert!(r.notes.iter().any(|n| n.contains("nginx.service no longer holds only")), "{:?}", r.notes);
    assert!(j.entries().unwrap().is_empty(), "{:?}", j.entries());
}

#[test]
fn a_unit_another_class_names_is_not_taken_by_a_process_class() {
    let cfg = "[[class]]\nname = \"web\"\nmatch = { unit = [\"nginx.service\"] }\nweight = 50\n\n\
               [[class]]\nname = \"by-name\"\nmatch = { comm = [\"nginx\"], uid = [0] }\nquota_us = 30000\n";
    let fx = FakeEffects::default().with_unit("nginx.service").with_file("/cg/system.slice/nginx.service/cgroup.procs", "10\n");
    let (_d, j) = journal();
    let mut u = UnitClasses::for_systemd(&classes(cfg), &AdmissionEnv::new(2), Path::new("/cg")).unwrap();
    u.apply(&j, &fx).unwrap();
    let r = u.resolve(&j, &fx, &members(&[(10, "by-name", NGINX)])).unwrap();
    assert!(r.notes.iter().any(|n| n.contains("it is class web's")), "{:?}", r.notes);
    assert_eq!(fx.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX));
}

#[test]
fn the_unit_of_a_process_is_its_first_service_or_scope() {
    assert_eq!(unit_of(NGINX), Some(("nginx.service".into(), NGINX.into())));
    assert_eq!(
        unit_of("/user.slice/user-1000.slice/user@1000.service/app.slice/x.service"),
        Some(("user@1000.service".into(), "/user.slice/user-1000.slice/user@1000.service".into()))
    );
    assert_eq!(unit_of("/system.slice/docker-ab12.scope/inner"), Some(("docker-ab12.scope".into(), "/system.slice/docker-ab12.scope".into())));
    assert_eq!(unit_of("/"), None);
    assert_eq!(unit_of("/joule/web"), None);
    // Issue 33: a `*.service` directory someone made below a directory they were handed is no
    // unit of systemd's (acting on the real unit of that name would change someone else's).
    assert_eq!(unit_of("/jx-deleg/nginx.service"), None);
    assert_eq!(unit_of("/system.slice/x.slice/nginx.service"), None, "x.slice is not a child slice of system.slice");
}

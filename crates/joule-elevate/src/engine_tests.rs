//! Unit tests of the engine on the fake system: the switch order, table order, exited targets
//! and the restore.

use super::*;
use joule_core::effects::FakeEffects;

fn fx_with(tids: &[i32]) -> FakeEffects {
    let fx = FakeEffects::default();
    for &t in tids.iter().chain([gettid()].iter()) {
        fx.sched.lock().unwrap().insert(t, SchedAttr::OTHER);
        fx.affinity.lock().unwrap().insert(t, vec![0, 1]);
    }
    fx
}

fn slots(tids: &[i32]) -> Vec<Vec<Target>> {
    tids.iter().map(|&t| vec![Target { tid: t, label: t.to_string() }]).collect()
}

fn opts(schedule: Schedule) -> ElevateOpts {
    ElevateOpts {
        cpu: 0,
        sched_cpu: Some(1),
        slice_us: 100,
        pattern: Pattern::Dedicated,
        wait: None,
        schedule,
        journal: None,
        guardian: false,
        confirm_landing: false,
    }
}

/// The priority changes of the targets only, as `tid:prio`.
fn prio_changes(fx: &FakeEffects, tids: &[i32]) -> Vec<String> {
    fx.calls()
        .iter()
        .filter_map(|c| {
            let f: Vec<&str> = c.split(' ').collect();
            (f[0] == "sched" && tids.iter().any(|t| t.to_string() == f[1])).then(|| format!("{}:{}", f[1], f[3]))
        })
        .collect()
}

#[test]
fn setup_binds_and_lowers_every_target_then_the_table_raises_before_it_lowers_and_teardown_restores() {
    let fx = fx_with(&[10, 11, 12]);
    let mut el = Elevator::setup(&fx, slots(&[10, 11, 12]), opts(Schedule::Table(vec![0, 0, 1, 2]))).unwrap();
    assert_eq!(fx.affinity.lock().unwrap()[&10], vec![0]);
    let r = el.run(&AtomicBool::new(false), Some(Duration::from_micros(800))).unwrap();
    assert_eq!(r.ended_by, "duration");
    assert_eq!(r.slices, 8);
    // A A B C A A B C: a repeated slot is not switched.
    assert_eq!(r.switches, 6);
    let seq = prio_changes(&fx, &[10, 11, 12]);
    assert_eq!(&seq[..3], ["10:1", "11:1", "12:1"]);
    assert_eq!(&seq[3..9], ["10:2", "11:2", "10:1", "12:2", "11:1", "10:2"]);
    // The scheduler thread is SCHED_FIFO HIGH (reset on fork) until teardown.
    assert_eq!(fx.sched.lock().unwrap()[&gettid()].priority, Prio::HIGH);
    let rep = el.teardown();
    assert_eq!(fx.sched.lock().unwrap()[&gettid()], SchedAttr::OTHER);
    assert!(rep.failed.is_empty());
    for t in [10, 11, 12] {
        assert_eq!(fx.sched.lock().unwrap()[&t], SchedAttr::OTHER);
        assert_eq!(fx.affinity.lock().unwrap()[&t], vec![0, 1]);
    }
}

#[test]
fn a_target_that_exits_is_dropped_without_error_and_the_run_ends_when_all_are_gone() {
    let fx = fx_with(&[10, 11]);
    let mut el = Elevator::setup(&fx, slots(&[10, 11]), opts(Schedule::RoundRobin)).unwrap();
    fx.sched.lock().unwrap().remove(&11);
    let r = el.run(&AtomicBool::new(false), Some(Duration::from_micros(500))).unwrap();
    assert_eq!(r.exited, vec![11]);
    assert_eq!(r.ended_by, "duration");
    fx.sched.lock().unwrap().remove(&10);
    let r = el.run(&AtomicBool::new(false), Some(Duration::from_millis(50))).unwrap();
    assert_eq!(r.ended_by, "targets_exited");
    assert!(el.teardown().failed.is_empty());
}

#[test]
fn options_are_checked_with_the_value_in_the_message() {
    let s = slots(&[10, 11]);
    let online = [0, 1];
    let e = check_opts(&s, &ElevateOpts { slice_us: 0, ..opts(Schedule::RoundRobin) }, &online).unwrap_err();
    assert!(e.to_string().contains("slice 0"), "{e}");
    let e = check_opts(&s, &ElevateOpts { cpu: 7, ..opts(Schedule::RoundRobin) }, &online).unwrap_err();
    assert!(e.to_string().contains("CPU 7"), "{e}");
    let e = check_opts(&s, &opts(Schedule::Table(vec![0, 2])), &online).unwrap_err();
    assert!(e.to_string().contains("entry 2"), "{e}");
    let e = check_opts(&s, &ElevateOpts { sched_cpu: None, ..opts(Schedule::RoundRobin) }, &[0]).unwrap_err();
    assert!(e.to_string().contains("second online CPU"), "{e}");
    assert_eq!(check_opts(&s, &ElevateOpts { sched_cpu: None, ..opts(Schedule::RoundRobin) }, &online).unwrap(), 1);
    let shared = ElevateOpts { pattern: Pattern::Shared, sched_cpu: None, ..opts(Schedule::RoundRobin) };
    assert_eq!(check_opts(&s, &shared, &online).unwrap(), 0);
    assert!(check_opts(&s, &ElevateOpts { wait: Some(WaitMethod::Spin), ..shared }, &online).is_err());
}

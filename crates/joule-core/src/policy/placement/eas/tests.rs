//! The EAS baseline's rule on the hand-priced little/big fixture (energies worked out in the
//! comments) and on the shipped XU4 model.

use super::super::{decide_eas, App, AppKind};
use super::{place, Thread};
use crate::energy::fixtures::little_big;
use crate::energy::{EnergyModel, NetCost};

fn task(util: f64) -> Thread {
    Thread { task_util: util, softirq_util: 0.0, rt: false }
}

#[test]
fn a_small_task_goes_little_when_that_costs_less() {
    // Little at 200: 50 mW × 80/200 = 20 mW; big at 300: 150 mW × 80/300 = 40 mW.
    let (cpus, opp) = place(&little_big(), &[task(80.0)]);
    assert_eq!(cpus, [0]);
    assert_eq!(opp, [0, 0]);
}

#[test]
fn a_task_goes_big_when_the_little_domain_would_need_its_expensive_opp() {
    // 240 × 1.25 = 300 fits the little CPU, but only at its top OPP: 600 × 240/400 = 360 mW,
    // against 150 × 240/300 = 120 mW on a big CPU at its lowest OPP.
    let (cpus, _) = place(&little_big(), &[task(240.0)]);
    assert_eq!(cpus, [1]);
    // The delta counts the whole domain: a second small task on the little CPU (180 × 1.25 >
    // 200) raises it to the top OPP for the first one too: 600 × 180/400 - 20 = 250 mW > 50 mW.
    let (cpus, opp) = place(&little_big(), &[task(80.0), task(100.0)]);
    assert_eq!(cpus, [0, 1]);
    assert_eq!(opp, [0, 0]);
    // Two that fit the little lowest OPP together stay there: 40 - 20 = 20 mW < 40 mW.
    assert_eq!(place(&little_big(), &[task(80.0), task(80.0)]).0, [0, 0]);
}

#[test]
fn the_choice_follows_the_models_power_figures() {
    let mut m = little_big();
    m.domains[0].opps[0].power_mw = 500.0; // 500 × 80/200 = 200 mW > 40 mW on the big
    assert_eq!(place(&m, &[task(80.0)]).0, [1]);
    // The same end to end on the XU4 model: a 1000 Mbit/s bulk sender's thread goes to an A7,
    // and to an A15 once the A7 powers are ten times what the device tree gives.
    let apps = [App { class: "ftp".into(), kind: AppKind::Net { target_mbit: 100.0, mean_packet_bytes: 1448.0, offered_mbit: 1000.0, limit_held: true } }];
    let mut xu4 = EnergyModel::odroid_xu4();
    assert_eq!(decide_eas(&xu4, &apps, &NetCost::default(), &[]).0.domains, [[0]]);
    xu4.domains[0].opps.iter_mut().for_each(|o| o.power_mw *= 10.0);
    assert_eq!(decide_eas(&xu4, &apps, &NetCost::default(), &[]).0.domains, [[1]]);
}

#[test]
fn over_utilised_threads_spread_over_the_biggest_domain() {
    // 900 × 1.25 fits no CPU: load balancing's least loaded big CPU, one each.
    let (cpus, opp) = place(&little_big(), &[task(900.0), task(900.0)]);
    assert_eq!(cpus, [1, 2]);
    assert_eq!(opp, [0, 1], "schedutil: the big domain at its top");
}

#[test]
fn softirq_is_not_the_tasks_but_schedutil_and_capacity_see_it() {
    let net = Thread { task_util: 80.0, softirq_util: 300.0, rt: false };
    // EAS fits and prices the thread's 80 only: little. Its softirq follows it there, so the
    // little CPU runs 380 and schedutil takes it to the top OPP.
    let (cpus, opp) = place(&little_big(), &[net]);
    assert_eq!((cpus, opp), (vec![0], vec![1, 0]));
    // A later task sees the little CPU's capacity less that softirq work (400 - 300 = 100 <
    // 160 × 1.25): it does not fit there any more.
    assert_eq!(place(&little_big(), &[net, task(80.0)]).0, [0, 1]);
}

#[test]
fn rt_threads_go_to_the_least_loaded_cpu_and_run_their_domain_at_the_top() {
    let rt = Thread { task_util: 100.0, softirq_util: 0.0, rt: true };
    let (cpus, opp) = place(&little_big(), &[task(80.0), rt]);
    assert_eq!(cpus, [0, 1]);
    assert_eq!(opp, [0, 1]);
}

#[test]
fn lent_limits_hold_the_baselines_senders() {
    let m = EnergyModel::odroid_xu4();
    let apps = [App { class: "ftp".into(), kind: AppKind::Net { target_mbit: 100.0, mean_packet_bytes: 1448.0, offered_mbit: 1000.0, limit_held: true } }];
    let (p, o) = decide_eas(&m, &apps, &NetCost::default(), &[Some(100.0)]);
    assert_eq!(p.limit_mbit, [Some(100.0)]);
    assert!((o.apps[0].achieved_mbit.unwrap() - 100.0).abs() < 1e-9, "{o:?}");
    assert_eq!(m.domains[0].opps[p.opp[0]].frequency_khz, 600_000, "100 Mbit/s with its softirq fits the lowest A7 OPP");
    let (free, _) = decide_eas(&m, &apps, &NetCost::default(), &[]);
    assert!(free.opp[0] > p.opp[0], "unlimited, the softirq of 1000 Mbit/s raises the A7s");
}

#[test]
fn over_utilised_threads_spread_over_every_biggest_cpu_when_they_are_two_domains() {
    // The RK3588: its four A76s are two clusters of equal capacity. Four CPU-bound threads take
    // one each, as load balancing spreads them; not two on each CPU of one cluster.
    let m = crate::energy::fixtures::rk3588();
    let (cpus, opp) = place(&m, &[task(1024.0), task(1024.0), task(1024.0), task(1024.0)]);
    let mut sorted = cpus.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [4, 5, 6, 7], "{cpus:?}");
    assert_eq!(opp, [0, 6, 6], "schedutil: both A76 clusters at 2.4 GHz, the idle A55s at their lowest");
}

//! How long the control loop sleeps before its next period, and why (issue 36). A power
//! manager must not keep the CPU awake: while something is in motion the loop runs at its full
//! period (`agent.period_ms`); when nothing is it rests (`agent.rest_period_ms`), and whatever
//! must be reacted to fast (the in-kernel stage changing, a process event for the classes, a
//! signal) ends the rest early instead of being polled. The kernel's thermal framework does
//! the same: a slow polling delay, and a fast one only while a trip is near.
//!
//! Pure: the loop gathers [`Motion`] from its snapshot and plan, and [`next_sleep`] and
//! [`wake_after`] decide; the loop only sleeps.

use serde::Serialize;
use std::time::Duration;

/// A temperature this close to the first stage threshold keeps the full period: temperatures
/// that user space reads and feeds (hwmon, the model) reach the stage only when sampled, and
/// a CPU does not heat by this much within a rest period.
pub const NEAR_THRESHOLD_CELSIUS: f64 = 5.0;

/// A machine at least this busy (share of all CPUs) keeps the full period while the stage
/// follows a temperature: heat follows load faster than a rest period on a small die, and
/// the CPUs are awake anyway, so the loop's wake-ups cost no idle state.
pub const BUSY_UTILIZATION: f64 = 0.5;

/// What is in motion this period. Everything false/zero: the loop may rest.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Motion {
    /// The thermal stage (above 0: acting on heat).
    pub stage: u32,
    /// The temperature the stage follows, when there is one.
    pub temp_celsius: Option<f64>,
    /// The lowest stage threshold, when any.
    pub first_threshold_celsius: Option<f64>,
    /// The stage follows a temperature and the CPUs are [`BUSY_UTILIZATION`] busy or more.
    pub busy: bool,
    /// A power budget is configured: power is read, not signalled, so it is sampled every
    /// full period.
    pub power_budget: bool,
    /// Processes joined, left or moved between classes since the last period.
    pub class_change: bool,
    /// The process monitor lost events and the walk of /proc that recovers them is still to
    /// come (it waits for a minimum gap after the last walk): resting would put it off further.
    pub resync_pending: bool,
    /// The plan's knobs or wants differ from the last period's (a cap, limit or nap moving).
    pub plan_change: bool,
    /// A nap is armed and the machine is awake: how long until it has been idle for `[nap]
    /// idle_ms`. Idleness is sampled (the monitors other than the watched ports' eBPF counters
    /// are read, not signalled), so a rest ends then and the nap starts on time, not up to a rest
    /// period late. Napping has its own period.
    pub nap_due_in: Option<Duration>,
    /// Placement or the user-space scheduler follow a class's threads (their decisions hold).
    pub following_threads: bool,
}

/// Why the loop sleeps what it sleeps (`/plan.json` → `pace.why`, the `why` label of
/// `joule_agent_period_seconds`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Nothing in motion: the rest period, events end it.
    #[default]
    Rest,
    Stage,
    NearThreshold,
    Busy,
    PowerBudget,
    ClassChange,
    ResyncPending,
    PlanChange,
    FollowingThreads,
    /// A rest cut short to sample when an armed nap falls due.
    NapDue,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Rest => "rest",
            Why::Stage => "stage",
            Why::NearThreshold => "near_threshold",
            Why::Busy => "busy",
            Why::PowerBudget => "power_budget",
            Why::ClassChange => "class_change",
            Why::ResyncPending => "resync_pending",
            Why::PlanChange => "plan_change",
            Why::NapDue => "nap_due",
            Why::FollowingThreads => "following_threads",
        }
    }
}

/// The loop's pace after a period: how long until the next one unless an event comes first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Pace {
    pub period_ms: u64,
    pub why: Why,
}

/// The sleep after this period: the full period while anything is in motion (the first
/// reason found, in the order of [`Why`]), else the rest period, or less when an armed nap
/// falls due sooner (never less than the full period).
pub fn next_sleep(m: &Motion, full: Duration, rest: Duration) -> (Duration, Why) {
    let near = match (m.temp_celsius, m.first_threshold_celsius) {
        (Some(t), Some(first)) => t >= first - NEAR_THRESHOLD_CELSIUS,
        _ => false,
    };
    let why = if m.stage > 0 {
        Why::Stage
    } else if near {
        Why::NearThreshold
    } else if m.busy {
        Why::Busy
    } else if m.power_budget {
        Why::PowerBudget
    } else if m.class_change {
        Why::ClassChange
    } else if m.resync_pending {
        Why::ResyncPending
    } else if m.plan_change {
        Why::PlanChange
    } else if m.following_threads {
        Why::FollowingThreads
    } else {
        let rest = rest.max(full);
        return match m.nap_due_in {
            Some(due) if due < rest => (due.max(full), Why::NapDue),
            _ => (rest, Why::Rest),
        };
    };
    (full, why)
}

/// When the next period starts, counted from the start of the last one: after `sleep`, or,
/// when an event came `event_after` into the sleep, at the event but never sooner than one
/// full period after the last start (a storm of events costs at most the full period's rate).
/// Either way an event is acted on within one full period of its arrival.
pub fn wake_after(sleep: Duration, event_after: Option<Duration>, full: Duration) -> Duration {
    match event_after {
        Some(e) if e < sleep => e.max(full.min(sleep)),
        _ => sleep,
    }
}

/// Whether the plan moved since the last period: a knob holds another setting, or a policy
/// wants something else (a nap's running idle time does not count as a change).
pub fn plan_moved(prev: &super::Plan, now: &super::Plan) -> bool {
    use super::Want;
    let settings = |p: &super::Plan| p.knobs.iter().map(|h| (h.knob.clone(), h.setting.clone())).collect::<Vec<_>>();
    let wants = |p: &super::Plan| {
        p.decisions
            .iter()
            .map(|d| match &d.want {
                Want::Nap { nap, .. } => Want::Nap { nap: *nap, idle_for_ms: 0 },
                w => w.clone(),
            })
            .collect::<Vec<_>>()
    };
    settings(prev) != settings(now) || wants(prev) != wants(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Decision, Plan, Want};

    const FULL: Duration = Duration::from_millis(100);
    const REST: Duration = Duration::from_millis(1000);

    #[test]
    fn nothing_in_motion_rests_and_each_motion_keeps_the_full_period() {
        assert_eq!(next_sleep(&Motion::default(), FULL, REST), (REST, Why::Rest));
        let far = Motion { temp_celsius: Some(40.0), first_threshold_celsius: Some(70.0), ..Default::default() };
        assert_eq!(next_sleep(&far, FULL, REST), (REST, Why::Rest), "30 °C below the first threshold");
        let cases = [
            (Motion { stage: 1, ..far }, Why::Stage),
            (Motion { temp_celsius: Some(65.0), ..far }, Why::NearThreshold),
            (Motion { busy: true, ..far }, Why::Busy),
            (Motion { power_budget: true, ..far }, Why::PowerBudget),
            (Motion { class_change: true, ..far }, Why::ClassChange),
            (Motion { resync_pending: true, ..far }, Why::ResyncPending),
            (Motion { plan_change: true, ..far }, Why::PlanChange),
            (Motion { following_threads: true, ..far }, Why::FollowingThreads),
        ];
        for (m, why) in cases {
            assert_eq!(next_sleep(&m, FULL, REST), (FULL, why), "{m:?}");
        }
        // An armed nap cuts a rest short to sample when it falls due, never below the full period.
        let nap = |ms| Motion { nap_due_in: Some(Duration::from_millis(ms)), ..far };
        assert_eq!(next_sleep(&nap(300), FULL, REST), (Duration::from_millis(300), Why::NapDue));
        assert_eq!(next_sleep(&nap(10), FULL, REST), (FULL, Why::NapDue));
        assert_eq!(next_sleep(&nap(3_600_000), FULL, REST), (REST, Why::Rest), "an hour away: rest");
        assert_eq!(next_sleep(&Motion { stage: 1, ..nap(300) }, FULL, REST), (FULL, Why::Stage));
        // A temperature with no threshold (no stages) is never near.
        assert_eq!(next_sleep(&Motion { temp_celsius: Some(99.0), ..Default::default() }, FULL, REST).1, Why::Rest);
        // A rest period shorter than the full one never makes the loop faster.
        assert_eq!(next_sleep(&Motion::default(), FULL, Duration::from_millis(50)).0, FULL);
    }

    /// Issue 36's "no reaction is lost": a stage change (or any event) at any moment of a rest
    /// is acted on within one full period of its arrival, and never sooner than one full
    /// period after the last start.
    #[test]
    fn a_stage_change_during_a_rest_is_reacted_to_within_one_full_period() {
        let (sleep, why) = next_sleep(&Motion::default(), FULL, REST);
        assert_eq!(why, Why::Rest);
        for ms in (0..=1000).step_by(5) {
            let e = Duration::from_millis(ms);
            let at = wake_after(sleep, Some(e), FULL);
            assert!(at >= e, "{ms} ms: woke before the event");
            assert!(at - e <= FULL, "{ms} ms: reacted {:?} after the event, over one full period", at - e);
            assert!(at >= FULL, "{ms} ms: two periods closer than the full period");
            assert!(at <= sleep);
        }
        assert_eq!(wake_after(sleep, None, FULL), REST, "no event: the whole rest");
        // At the full period an event changes nothing: the next period is already that close.
        assert_eq!(wake_after(FULL, Some(Duration::from_millis(10)), FULL), FULL);
    }

    #[test]
    fn a_nap_counting_its_idle_time_is_not_a_moving_plan_but_a_nap_starting_is() {
        let nap = |nap: bool, idle_for_ms: u64| Plan {
            decisions: vec![Decision {
                policy: "nap".into(),
                actuator: Some("nap".into()),
                want: Want::Nap { nap, idle_for_ms },
                reason: format!("{idle_for_ms}"),
            }],
            ..Default::default()
        };
        assert!(!plan_moved(&nap(false, 1000), &nap(false, 2000)));
        assert!(plan_moved(&nap(false, 2000), &nap(true, 3000)));
        assert!(plan_moved(&Plan::default(), &nap(false, 0)));
    }
}

//! The `scx` actuator, mechanism 1's sched_ext path (present with `[thermal] scheduler =
//! "scx"`): it loads joule's scheduler (joule-bpf's `scx`), which reads the stage the agent
//! pins in the kernel and acts on it there, and watches for the kernel throwing it out. The
//! thermal policy picks the scx path only while the snapshot says joule's scheduler runs, so
//! whenever it does not (no sched_ext on this kernel, another scheduler loaded, an ejection,
//! a back-off) the cgroup path acts the very next period.
//!
//! No undo record: a struct_ops link lives as long as the process holding it, so the kernel
//! goes back to its default scheduler when the agent detaches it, exits or is SIGKILLed (the
//! VM tier checks the last), and there is nothing for `joule restore` to do.
//!
//! Ejection (any exit the agent did not ask for: an error kind, a stall the watchdog caught,
//! sysrq-S): reported (log, `scx_ejected` event, `joule_scx_ejections_total{kind}`), the
//! scheduler dropped, and loading retried after [`Backoff`]: 30 s, doubling up to 10 min,
//! given up after 3 ejections within an hour.
//!
//! The sched_ext slot held by another scheduler (sysfs names its ops, not "joule") is not
//! fought for: joule does not try to load, says so once (log, a `conflict` event with `knob`
//! and `holder`, `joule_knob_held_by_other{knob="sched_ext",holder}`), lets the cgroup path act,
//! and reads sysfs again each period; once the slot is free it loads its own, as at start.

use joule_bpf::scx::{ExitInfo, KernelState, Scx, ScxOpts, ScxStats, SYSFS_SCHED_EXT};
use joule_bpf::BpfError;
use joule_core::config::{Config, ThermalRole};
use joule_core::control::{owner, ActCx, ActError, Actuator, ActuatorState, Plan, ThermalPath, Want};
use joule_core::membership::Membership;
use joule_core::metric::{l, Family, MetricDef};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The metric families this actuator reports.
pub const METRICS: &[MetricDef] = &[
    MetricDef::gauge(
        "joule_scx_running",
        "1 while joule's sched_ext scheduler is loaded and running (thermal.scheduler = \"scx\"); 0 while the cgroup path stands in for it.",
    ),
    MetricDef::counter(
        "joule_scx_ejections",
        "Times the kernel ended joule's sched_ext scheduler without being asked, per exit kind (ERROR_STALL, SYSRQ, ...); the event log has each reason.",
    ),
    MetricDef::gauge(
        "joule_knob_held_by_other",
        "1 while another manager holds a knob joule would use, which joule then leaves alone: knob=\"sched_ext\" with the other scheduler's name as holder (the cgroup path acts meanwhile).",
    ),
];

/// The actuator's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ScxState {
    pub running: bool,
    pub available: bool,
    pub down_reason: Option<String>,
    /// The other sched_ext scheduler holding the slot, while one does.
    pub held_by: Option<String>,
    pub stage: Option<u32>,
    pub path: Option<ThermalPath>,
    pub loads_total: u64,
    pub ejections_total: BTreeMap<String, u64>,
    pub last_exit: Option<ExitInfo>,
    pub retry_in_s: Option<f64>,
    pub gave_up: bool,
    pub stats: Option<ScxStats>,
}

impl ActuatorState for ScxState {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
    fn families(&self) -> Vec<Family> {
        vec![
            METRICS[0].with(vec![(vec![], f64::from(u8::from(self.running)))]),
            METRICS[1].with(self.ejections_total.iter().map(|(kind, n)| (l(&[("kind", kind)]), *n as f64)).collect()),
            METRICS[2].with(self.held_by.iter().map(|h| (l(&[("knob", "sched_ext"), ("holder", h)]), 1.0)).collect()),
        ]
    }
}

/// First wait before loading again after an ejection; doubles with each one.
pub const FIRST_RETRY: Duration = Duration::from_secs(30);
/// Longest wait between attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(600);
/// This many ejections within [`GIVE_UP_WINDOW`] and the agent stops loading the scheduler
/// (until it is restarted): something in this kernel or workload keeps tripping it.
pub const GIVE_UP_AFTER: usize = 3;
pub const GIVE_UP_WINDOW: Duration = Duration::from_secs(3600);

/// When to load the scheduler again after the kernel ejected it. Pure, so its arithmetic is
/// tested without a kernel.
#[derive(Debug, Default)]
pub struct Backoff {
    /// When each ejection happened (the last hour's).
    ejections: Vec<Instant>,
    /// Ejections since the scheduler last ran a whole GIVE_UP_WINDOW: the doubling's exponent.
    streak: u32,
    next_try: Option<Instant>,
    gave_up: bool,
}

impl Backoff {
    /// Records an ejection at `now`; the wait before the next attempt, or None: given up.
    pub fn ejected(&mut self, now: Instant, ran_for: Duration) -> Option<Duration> {
        if ran_for >= GIVE_UP_WINDOW {
            self.streak = 0;
        }
        self.ejections.retain(|t| now.duration_since(*t) < GIVE_UP_WINDOW);
        self.ejections.push(now);
        if self.ejections.len() >= GIVE_UP_AFTER {
            self.gave_up = true;
            self.next_try = None;
            return None;
        }
        let wait = FIRST_RETRY.saturating_mul(1 << self.streak.min(10)).min(MAX_RETRY);
        self.streak += 1;
        self.next_try = Some(now + wait);
        Some(wait)
    }

    /// Waits `wait` before the next attempt (a failed load: not an ejection, no count).
    pub fn delay(&mut self, now: Instant, wait: Duration) {
        self.next_try = Some(now + wait);
    }

    pub fn may_try(&self, now: Instant) -> bool {
        !self.gave_up && self.next_try.is_none_or(|t| now >= t)
    }

    pub fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// Seconds until the next attempt (0: now; None: given up).
    pub fn retry_in_s(&self, now: Instant) -> Option<f64> {
        (!self.gave_up).then(|| self.next_try.map_or(0.0, |t| t.saturating_duration_since(now).as_secs_f64()))
    }
}

/// Why the scheduler is not running, when it is not.
#[derive(Debug, Clone, PartialEq)]
enum Down {
    /// The kernel has no sched_ext: never retried.
    NoSchedExt(String),
    /// A load failed or it was ejected: retried per Backoff.
    Waiting(String),
    /// Another scheduler (its ops name) holds the slot: looked at again each period, no load.
    Held(String),
}

impl Down {
    fn why(&self) -> String {
        match self {
            Down::NoSchedExt(w) | Down::Waiting(w) => w.clone(),
            Down::Held(ops) => format!("held by {ops}"),
        }
    }
}

/// The other scheduler holding the sched_ext slot, if one does: sysfs says one is loaded (any
/// state but "disabled") and names it, and it is not joule's.
fn other_holder(k: &KernelState) -> Option<String> {
    let loaded = k.state.as_deref().is_some_and(|s| s != "disabled");
    k.ops.clone().filter(|ops| loaded && ops != "joule")
}

pub struct ScxActuator {
    /// The table and stage map; cgroup ids are filled from `classes` at each load.
    opts: ScxOpts,
    /// The classes with a thermal role; their cgroup v2 ids come from the membership reading.
    classes: Vec<(String, ThermalRole)>,
    /// The stage and path of the last plan.
    stage: Option<(u32, ThermalPath)>,
    scx: Option<Scx>,
    loaded_at: Option<Instant>,
    /// cgroup ids already in the scheduler's maps.
    marked: Vec<u64>,
    down: Option<Down>,
    backoff: Backoff,
    ejections: BTreeMap<String, u64>,
    loads_total: u64,
    last_exit: Option<ExitInfo>,
    /// Since when sysfs has said the loaded scheduler is not running, without exit info yet.
    not_ours_since: Option<Instant>,
    /// `Scx::load`; tests put a stand-in here.
    load: fn(ScxOpts) -> Result<Scx, BpfError>,
}

/// How long sysfs may say joule's scheduler is gone before ops.exit's report arrives; past it
/// the exit is reported as kind UNKNOWN.
const UNKNOWN_EXIT_AFTER: Duration = Duration::from_secs(2);

impl ScxActuator {
    pub fn new(cfg: &Config, stage_map: Option<PathBuf>) -> ScxActuator {
        let rows: Vec<_> = cfg
            .thermal
            .table()
            .iter()
            .map(|a| joule_bpf::scx::StageRow { queues: a.queues, slice_us: a.slice_us, best_effort_permille: permille(a.best_effort_cpu_pct) })
            .collect();
        let opts = ScxOpts { stage_map, table: joule_bpf::scx::table_from_rows(&rows), sysfs_root: cfg.telemetry.sysfs_root.clone(), ..ScxOpts::default() };
        let classes = cfg.classes.iter().filter(|c| c.thermal != ThermalRole::None).map(|c| (c.name.clone(), c.thermal)).collect();
        ScxActuator {
            opts,
            classes,
            stage: None,
            scx: None,
            loaded_at: None,
            marked: Vec::new(),
            down: None,
            backoff: Backoff::default(),
            ejections: BTreeMap::new(),
            loads_total: 0,
            last_exit: None,
            not_ours_since: None,
            load: Scx::load,
        }
    }

    fn sched_ext_dir(&self) -> PathBuf {
        self.opts.sysfs_root.join(SYSFS_SCHED_EXT)
    }

    /// The cgroup ids of the classes that have a v2 directory now: (labelled, best-effort).
    fn class_ids(&self, members: &Membership) -> (Vec<u64>, Vec<u64>) {
        let (mut lab, mut be) = (Vec::new(), Vec::new());
        for (class, role) in &self.classes {
            let Some(id) = members.cgroup2_id(class) else { continue };
            match role {
                ThermalRole::Labelled => lab.push(id),
                ThermalRole::BestEffort => be.push(id),
                ThermalRole::None => {}
            }
        }
        (lab, be)
    }

    /// Says once why it is down (log, event); the state says it every period.
    fn go_down(&mut self, down: Down, cx: &mut ActCx<'_>) {
        if self.down.as_ref() != Some(&down) {
            let why = down.why();
            if let Down::Held(holder) = &down {
                tracing::warn!(
                    "the sched_ext slot is held by another scheduler ({holder}): joule leaves it alone, the thermal stage acts through the cgroup path, and joule loads its own once the slot is free"
                );
                (cx.events)("conflict", serde_json::json!({ "knob": "sched_ext", "holder": holder, "action": "yield" }));
            } else {
                tracing::warn!("sched_ext scheduler not running: {why}; the thermal stage acts through the cgroup path");
            }
            let retry_in_s = self.backoff.retry_in_s(Instant::now());
            (cx.events)("scx_unavailable", serde_json::json!({ "reason": why, "retry_in_s": retry_in_s, "gave_up": self.backoff.gave_up() }));
        }
        self.down = Some(down);
    }

    /// Loads the scheduler when nothing stands in the way and the back-off allows.
    fn try_load(&mut self, cx: &mut ActCx<'_>, members: &Membership) {
        let now = Instant::now();
        if matches!(self.down, Some(Down::NoSchedExt(_))) || !self.backoff.may_try(now) {
            return;
        }
        let dir = self.sched_ext_dir();
        if !dir.exists() {
            let why = format!("this kernel has no sched_ext ({} absent; it needs CONFIG_SCHED_CLASS_EXT)", dir.display());
            return self.go_down(Down::NoSchedExt(why), cx);
        }
        if let Some(holder) = other_holder(&KernelState::read(&dir)) {
            return self.go_down(Down::Held(holder), cx);
        }
        if let Some(Down::Held(holder)) = &self.down {
            tracing::info!("the sched_ext slot {holder} held is free: loading joule's scheduler");
        }
        let (labelled, best_effort) = self.class_ids(members);
        let opts = ScxOpts { labelled_cgroups: labelled.clone(), best_effort_cgroups: best_effort.clone(), ..self.opts.clone() };
        match (self.load)(opts) {
            Ok(scx) => {
                self.loads_total += 1;
                self.marked = labelled.iter().chain(&best_effort).copied().collect();
                self.scx = Some(scx);
                self.loaded_at = Some(now);
                self.down = None;
                tracing::info!("joule's sched_ext scheduler loaded ({} labelled, {} best-effort cgroup(s))", labelled.len(), best_effort.len());
                (cx.events)(
                    "scx_loaded",
                    serde_json::json!({ "labelled_cgroups": labelled, "best_effort_cgroups": best_effort, "loads_total": self.loads_total }),
                );
            }
            Err(e) => {
                // A verifier refusal, a scheduler loaded since sysfs was read: try again later.
                self.backoff.delay(now, FIRST_RETRY);
                self.go_down(Down::Waiting(format!("loading failed: {e}")), cx);
            }
        }
    }

    /// Whether the kernel ended the running scheduler; if so, reports it and backs off.
    fn check_ejected(&mut self, cx: &mut ActCx<'_>) {
        let Some(scx) = &self.scx else { return };
        let now = Instant::now();
        let exit = scx.exit_info().or_else(|| {
            // ops.exit always runs, a little after sysfs says "disabling"; the kernel's own word
            // stands in only if it has not within UNKNOWN_EXIT_AFTER.
            let k = KernelState::read(&self.sched_ext_dir());
            let ours = matches!(k.state.as_deref(), Some("enabled" | "enabling")) && k.ops.as_deref() == Some("joule");
            if ours {
                self.not_ours_since = None;
                return None;
            }
            let since = *self.not_ours_since.get_or_insert(now);
            (now.duration_since(since) >= UNKNOWN_EXIT_AFTER).then(|| ExitInfo {
                kind: 0,
                kind_name: "UNKNOWN",
                exit_code: 0,
                reason: format!("no exit info; sched_ext state {}, ops {}", k.state.as_deref().unwrap_or("?"), k.ops.as_deref().unwrap_or("none")),
                msg: String::new(),
                ejected: true,
            })
        });
        let Some(e) = exit else { return };
        self.not_ours_since = None;
        let ran_for = self.loaded_at.map_or(Duration::ZERO, |t| now.duration_since(t));
        if let Some(mut scx) = self.scx.take() {
            scx.detach();
        }
        *self.ejections.entry(e.kind_name.to_string()).or_default() += 1;
        let retry = self.backoff.ejected(now, ran_for);
        let what = match retry {
            Some(w) => format!("loading again in {} s", w.as_secs()),
            None => format!("{GIVE_UP_AFTER} ejections within an hour: not loading it again until the agent restarts"),
        };
        tracing::error!("the kernel ended joule's sched_ext scheduler: {} ({}): {} {}; cgroup path takes over, {what}", e.kind_name, e.kind, e.reason, e.msg);
        (cx.events)(
            "scx_ejected",
            serde_json::json!({ "kind": e.kind, "kind_name": e.kind_name, "reason": e.reason, "msg": e.msg, "exit_code": e.exit_code,
                "ran_for_s": ran_for.as_secs_f64(), "retry_in_s": retry.map(|w| w.as_secs_f64()), "gave_up": retry.is_none() }),
        );
        self.down = Some(Down::Waiting(format!("ejected: {} ({}): {}", e.kind_name, e.kind, e.reason)));
        self.last_exit = Some(e);
    }

    /// Class cgroups created after the load (the qos actuator recreates a deleted one).
    fn mark_new_classes(&mut self, members: &Membership) -> Result<(), ActError> {
        let Some(scx) = &self.scx else { return Ok(()) };
        let (lab, be) = self.class_ids(members);
        let new_lab: Vec<u64> = lab.into_iter().filter(|i| !self.marked.contains(i)).collect();
        let new_be: Vec<u64> = be.into_iter().filter(|i| !self.marked.contains(i)).collect();
        if new_lab.is_empty() && new_be.is_empty() {
            return Ok(());
        }
        scx.mark_cgroups(&new_lab, &new_be).map_err(|e| ActError::from(format!("marking class cgroups: {e}")))?;
        self.marked.extend(new_lab.iter().chain(&new_be));
        Ok(())
    }

    fn scx_state(&self) -> ScxState {
        ScxState {
            running: self.scx.is_some(),
            available: !matches!(self.down, Some(Down::NoSchedExt(_))),
            down_reason: self.down.as_ref().map(Down::why),
            held_by: match &self.down {
                Some(Down::Held(holder)) => Some(holder.clone()),
                _ => None,
            },
            stage: self.stage.map(|s| s.0),
            path: self.stage.map(|s| s.1),
            loads_total: self.loads_total,
            ejections_total: self.ejections.clone(),
            last_exit: self.last_exit.clone(),
            retry_in_s: if self.scx.is_some() { None } else { self.backoff.retry_in_s(Instant::now()) },
            gave_up: self.backoff.gave_up(),
            stats: self.scx.as_ref().and_then(|s| s.stats().ok()),
        }
    }
}

/// `best_effort_cpu_pct` as the scheduler's per-mille (1..=1000).
fn permille(pct: f64) -> u32 {
    (pct * 10.0).round().clamp(1.0, 1_000.0) as u32
}

impl Actuator for ScxActuator {
    fn name(&self) -> &'static str {
        owner::SCX
    }

    /// Never fails the agent: without sched_ext, or when the load fails, the cgroup path acts.
    fn init(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        // No membership reading yet: the classes' cgroups are marked at the first period.
        self.try_load(cx, &Membership::default());
        Ok(())
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        self.stage = plan.for_actuator(owner::SCX).find_map(|d| match d.want {
            Want::ThermalStage { stage, path, .. } => Some((stage, path)),
            _ => None,
        });
        self.check_ejected(cx);
        if self.scx.is_none() {
            self.try_load(cx, &plan.members);
        }
        self.mark_new_classes(&plan.members)
    }

    fn state(&self) -> Arc<dyn ActuatorState> {
        Arc::new(self.scx_state())
    }

    fn shutdown(&mut self, _cx: &mut ActCx<'_>) -> Result<(), ActError> {
        if let Some(mut scx) = self.scx.take() {
            scx.detach();
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "scx_held_tests.rs"]
mod held_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_30_s_and_gives_up_after_three_ejections_in_an_hour() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        assert!(b.may_try(t0));
        assert_eq!(b.ejected(t0, Duration::from_secs(5)), Some(Duration::from_secs(30)));
        assert!(!b.may_try(t0 + Duration::from_secs(29)) && b.may_try(t0 + Duration::from_secs(30)));
        let t1 = t0 + Duration::from_secs(40);
        assert_eq!(b.ejected(t1, Duration::from_secs(10)), Some(Duration::from_secs(60)));
        assert_eq!(b.retry_in_s(t1), Some(60.0));
        assert_eq!(b.ejected(t1 + Duration::from_secs(100), Duration::from_secs(30)), None, "third within the hour");
        assert!(b.gave_up() && !b.may_try(t1 + Duration::from_secs(99_999)));
        assert_eq!(b.retry_in_s(t1), None);
    }

    #[test]
    fn ejections_an_hour_apart_keep_doubling_up_to_ten_minutes_without_giving_up() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        let waits: Vec<_> = (0..7).map(|i| b.ejected(t0 + GIVE_UP_WINDOW * i, Duration::from_secs(60)).map(|w| w.as_secs())).collect();
        assert_eq!(waits, [Some(30), Some(60), Some(120), Some(240), Some(480), Some(600), Some(600)]);
        assert!(!b.gave_up());
        assert_eq!(b.ejected(t0 + GIVE_UP_WINDOW * 9, GIVE_UP_WINDOW), Some(FIRST_RETRY), "a run of an hour resets the doubling");
    }

    #[test]
    fn a_failed_load_waits_without_counting_as_an_ejection() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        b.delay(t0, FIRST_RETRY);
        assert!(!b.may_try(t0) && b.may_try(t0 + FIRST_RETRY));
        assert_eq!(b.ejected(t0, Duration::ZERO), Some(FIRST_RETRY));
    }

    #[test]
    fn config_table_becomes_the_schedulers_with_per_mille_shares_and_only_classes_with_a_role() {
        let cfg: Config = Config::parse(
            "[thermal]\nscheduler = \"scx\"\n[[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch = { comm = [\"x\"] }\n[[class]]\nname = \"ui\"\nthermal = \"labelled\"\nmatch = { comm = [\"y\"], uid = [0] }\n[[class]]\nname = \"plain\"\nmatch = { comm = [\"z\"] }\n",
        )
        .unwrap();
        let a = ScxActuator::new(&cfg, Some("/pin/thermal_stage".into()));
        assert_eq!(a.classes, vec![("batch".to_string(), ThermalRole::BestEffort), ("ui".to_string(), ThermalRole::Labelled)]);
        let t = &a.opts.table;
        assert_eq!(t.len(), joule_bpf::intf::JOULE_SCX_STAGE_ROWS as usize);
        assert_eq!((t[0].best_effort_permille, t[2].best_effort_permille, t[3].best_effort_permille, t[8].best_effort_permille), (1_000, 350, 150, 150));
        assert_eq!((t[1].queues, t[1].slice_us), (3, 4_000));
        joule_bpf::scx::opts_check(&a.opts).expect("the config's default table passes the scheduler's checks");
        assert_eq!((permille(0.04), permille(12.34), permille(250.0)), (1, 123, 1_000));
    }
}

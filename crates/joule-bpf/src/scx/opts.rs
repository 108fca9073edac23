//! What `Scx::load` is told before load: the per-stage table (queues served, slice, the
//! best-effort share), aging, where the thermal stage comes from and which cgroups are
//! labelled or best-effort — checked here, before
//! anything reaches the kernel, and turned into scx.bpf.c's `const volatile` values.

use crate::error::BpfError;
use crate::intf::{joule_scx_stage_cfg, JOULE_SCX_SCORE_DSQS, JOULE_SCX_STAGE_ROWS};
use std::path::PathBuf;

/// One row of the per-stage table: at this stage the `queues` best score queues are served
/// round-robin (the rest once nothing better waits, or through aging), each dispatch runs for
/// `slice_us`, and the CPU hogs of best-effort cgroups are dispatched at most
/// `best_effort_permille` ‰ of the machine's CPU time per 100 ms window (1000: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StageRow {
    pub queues: u32,
    pub slice_us: u32,
    pub best_effort_permille: u32,
}

/// Stage 0 serves all four queues with 5 ms slices (scx_simple's default slice) and leaves
/// best-effort tasks unlimited; each stage up drops one queue and a millisecond of slice, down
/// to one queue and 1 ms, and cuts the best-effort share as `[[thermal.stage]]`'s default does
/// (60, 35, then 15 %).
pub fn default_table() -> Vec<StageRow> {
    const BE_PERMILLE: [u32; 4] = [1_000, 600, 350, 150];
    let rows = JOULE_SCX_STAGE_ROWS as usize;
    (0..rows as u32)
        .map(|stage| StageRow {
            queues: JOULE_SCX_SCORE_DSQS.saturating_sub(stage).max(1),
            slice_us: 5_000u32.saturating_sub(1_000 * stage).max(1_000),
            best_effort_permille: BE_PERMILLE[(stage as usize).min(3)],
        })
        .collect()
}

/// `rows` (stage 0 first, as many as the config has stages) stretched to the scheduler's
/// JOULE_SCX_STAGE_ROWS rows: a stage past the config's hottest acts as the hottest.
pub fn table_from_rows(rows: &[StageRow]) -> Vec<StageRow> {
    let last = rows.last().copied().unwrap_or(default_table()[0]);
    (0..JOULE_SCX_STAGE_ROWS as usize).map(|i| rows.get(i).copied().unwrap_or(last)).collect()
}

/// A queue that waited this long is served whatever the stage: far below the kernel's
/// watchdog (30 s by default), which ejects a scheduler that leaves a task unrun.
pub const DEFAULT_AGE_MS: u64 = 100;
/// The best-effort queue ages this many times slower than the others: a spent budget holds it
/// back by design, and aging it every `age_ms` would hand each of its tasks a run per `age_ms`
/// past the budget.
pub const BEST_EFFORT_AGE_FACTOR: u64 = 10;

/// The best-effort queue's aging bound for an `age_ms`: [`BEST_EFFORT_AGE_FACTOR`] times it,
/// never past [`MAX_AGE_MS`] (the watchdog's margin) nor under `age_ms`.
pub fn best_effort_age_ms(age_ms: u64) -> u64 {
    age_ms.saturating_mul(BEST_EFFORT_AGE_FACTOR).min(MAX_AGE_MS).max(age_ms)
}

/// A task that waits this long for a CPU on average gains a point of score.
pub const DEFAULT_WAIT_BOOST_MS: u64 = 10;
/// Longest aging bound accepted: well inside the kernel's default 30 s watchdog.
pub const MAX_AGE_MS: u64 = 5_000;

#[derive(Debug, Clone)]
pub struct ScxOpts {
    /// The pinned `thermal_stage` map the thermal program writes (`<pin dir>/thermal_stage`);
    /// `None`: a private map of the scheduler's own, whose stage stays 0.
    pub stage_map: Option<PathBuf>,
    /// One row per stage, 0 ..= JOULE_MAX_STAGES ([`default_table`]).
    pub table: Vec<StageRow>,
    pub age_ms: u64,
    pub wait_boost_ms: u64,
    /// cgroup ids (cgroup2 directory inode numbers) whose tasks go to the always-served queue.
    pub labelled_cgroups: Vec<u64>,
    /// cgroup ids whose tasks rank one queue lower and whose CPU hogs get the stage's
    /// best-effort share only.
    pub best_effort_cgroups: Vec<u64>,
    /// Where sysfs is (`/sys`); the loader checks `<sysfs_root>/kernel/sched_ext` first.
    pub sysfs_root: PathBuf,
}

impl Default for ScxOpts {
    fn default() -> Self {
        ScxOpts {
            stage_map: None,
            table: default_table(),
            age_ms: DEFAULT_AGE_MS,
            wait_boost_ms: DEFAULT_WAIT_BOOST_MS,
            labelled_cgroups: Vec::new(),
            best_effort_cgroups: Vec::new(),
            sysfs_root: "/sys".into(),
        }
    }
}

/// The checked table as scx.bpf.c's `stage_cfg`, or what is wrong with the options. A hotter
/// stage may never serve more queues or give a longer slice than a cooler one.
pub(crate) fn validate(opts: &ScxOpts) -> Result<[joule_scx_stage_cfg; JOULE_SCX_STAGE_ROWS as usize], BpfError> {
    let bad = |m: String| Err(BpfError::ScxConfig(m));
    if opts.table.len() != JOULE_SCX_STAGE_ROWS as usize {
        return bad(format!("the stage table needs {JOULE_SCX_STAGE_ROWS} rows (stages 0..={}), got {}", JOULE_SCX_STAGE_ROWS - 1, opts.table.len()));
    }
    for (stage, r) in opts.table.iter().enumerate() {
        if !(1..=JOULE_SCX_SCORE_DSQS).contains(&r.queues) {
            return bad(format!("stage {stage}: queues {} is not in 1..={JOULE_SCX_SCORE_DSQS}", r.queues));
        }
        if !(100..=100_000).contains(&r.slice_us) {
            return bad(format!("stage {stage}: slice {} us is not in 100..=100000", r.slice_us));
        }
        if !(1..=1_000).contains(&r.best_effort_permille) {
            return bad(format!("stage {stage}: best-effort share {} ‰ is not in 1..=1000", r.best_effort_permille));
        }
    }
    let more = |a: &StageRow, b: &StageRow| b.queues > a.queues || b.slice_us > a.slice_us || b.best_effort_permille > a.best_effort_permille;
    if let Some((i, w)) = opts.table.windows(2).enumerate().find(|(_, w)| more(&w[0], &w[1])) {
        return bad(format!("stage {} serves more queues, a longer slice or a larger best-effort share than stage {i} ({:?} after {:?})", i + 1, w[1], w[0]));
    }
    if let Some(id) = opts.labelled_cgroups.iter().find(|id| opts.best_effort_cgroups.contains(id)) {
        return bad(format!("cgroup id {id} is both labelled and best-effort"));
    }
    if !(1..=MAX_AGE_MS).contains(&opts.age_ms) {
        return bad(format!("age {} ms is not in 1..={MAX_AGE_MS} (the kernel ejects a scheduler that starves a task for 30 s)", opts.age_ms));
    }
    let mut out = [joule_scx_stage_cfg::default(); JOULE_SCX_STAGE_ROWS as usize];
    for (o, r) in out.iter_mut().zip(&opts.table) {
        *o = joule_scx_stage_cfg { queues: r.queues, slice_us: r.slice_us, best_effort_permille: r.best_effort_permille, _pad: 0 };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_effort_queue_ages_slower_within_the_watchdogs_margin() {
        assert_eq!(best_effort_age_ms(DEFAULT_AGE_MS), 1_000);
        assert_eq!(best_effort_age_ms(MAX_AGE_MS), MAX_AGE_MS, "never past the watchdog's margin");
        assert_eq!(best_effort_age_ms(1_000), MAX_AGE_MS);
        assert_eq!(best_effort_age_ms(1), 10);
    }

    #[test]
    fn default_table_degrades_step_by_step() {
        let t = default_table();
        assert_eq!(t.len(), 9);
        assert_eq!(t[0], StageRow { queues: 4, slice_us: 5_000, best_effort_permille: 1_000 });
        assert_eq!(t[1], StageRow { queues: 3, slice_us: 4_000, best_effort_permille: 600 });
        assert_eq!(t[3], StageRow { queues: 1, slice_us: 2_000, best_effort_permille: 150 });
        assert_eq!(t[8], StageRow { queues: 1, slice_us: 1_000, best_effort_permille: 150 });
        let cfg = validate(&ScxOpts::default()).unwrap();
        assert_eq!((cfg[2].queues, cfg[2].slice_us, cfg[2].best_effort_permille), (2, 3_000, 350));
    }

    #[test]
    fn a_short_config_table_is_stretched_with_its_hottest_row() {
        let rows = [StageRow { queues: 4, slice_us: 4_000, best_effort_permille: 1_000 }, StageRow { queues: 2, slice_us: 2_000, best_effort_permille: 200 }];
        let t = table_from_rows(&rows);
        assert_eq!(t.len(), JOULE_SCX_STAGE_ROWS as usize);
        assert_eq!((t[0], t[1], t[8]), (rows[0], rows[1], rows[1]));
        assert!(validate(&ScxOpts { table: t, ..ScxOpts::default() }).is_ok());
    }

    #[test]
    fn options_are_refused_before_load() {
        let with = |f: &dyn Fn(&mut ScxOpts)| {
            let mut o = ScxOpts::default();
            f(&mut o);
            validate(&o)
        };
        assert!(with(&|o| o.table.pop().map(drop).unwrap_or(())).is_err(), "a missing row");
        assert!(with(&|o| o.table[0].queues = 0).is_err());
        assert!(with(&|o| o.table[0].queues = 5).is_err());
        assert!(with(&|o| o.table[4].slice_us = 50).is_err());
        assert!(with(&|o| o.table[2].queues = 4).is_err(), "a hotter stage serving more queues");
        assert!(with(&|o| o.table[5].slice_us = 4_500).is_err(), "a hotter stage with a longer slice");
        assert!(with(&|o| o.table[3].best_effort_permille = 0).is_err());
        assert!(with(&|o| o.table[3].best_effort_permille = 400).is_err(), "a hotter stage with a larger best-effort share");
        assert!(with(&|o| {
            o.labelled_cgroups = vec![7];
            o.best_effort_cgroups = vec![7];
        })
        .is_err());
        assert!(with(&|o| o.age_ms = 0).is_err());
        assert!(with(&|o| o.age_ms = MAX_AGE_MS + 1).is_err());
        assert!(with(&|o| o.age_ms = MAX_AGE_MS).is_ok());
    }
}

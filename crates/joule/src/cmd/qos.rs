//! `joule qos`: the `[[class]]` guarantees by hand — see the arithmetic (`plan`), put it in
//! place (`apply`), watch it (`status`), take it away (`release`). The agent does the same at
//! start and undoes it on exit; this is for trying a config, and for scripts (`--json`).

use anyhow::Context;
use joule_core::config::Config;
use joule_core::effects::RealEffects;
use joule_core::journal::Journal;
use joule_core::text::escape;
use joule_qos::{QosController, QosOpts};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct QosArgs {
    #[command(subcommand)]
    cmd: QosCmd,
}

/// Options every qos subcommand shares.
#[derive(clap::Args, Debug, Clone)]
pub struct QosCommon {
    /// Smallest RT/CFS period admitted, µs. Below 100 ms, scheduling overhead was measured to
    /// eat into the shares; lower it only after measuring that your machine does not.
    #[arg(long, default_value_t = joule_qos::DEFAULT_MIN_PERIOD_US)]
    min_period_us: u64,
    /// Where RT group bandwidth does not exist (cgroup v2, no RT_GROUP_SCHED), apply the CFS
    /// equivalent (same CPU time as a quota) instead of refusing. A quota caps the class; it
    /// does not guarantee it a floor the way RT runtime does.
    #[arg(long)]
    rt_fallback_to_cfs: bool,
    /// The mechanism behind RT classes: `group` (cpu.rt_runtime_us on the class's v1 cgroup),
    /// `deadline` (a SCHED_DEADLINE reservation of runtime/period for each of the class's
    /// threads) or `cfs` (the CFS quota of the same time: a ceiling, no floor). Unset: group
    /// where the kernel has RT group scheduling, else deadline; the plan says which and why.
    #[arg(long, value_parser = ["group", "deadline", "cfs"])]
    rt_backend: Option<String>,
    /// Use this backend instead of detecting it (v1 wins when the cpu controller is bound to
    /// a v1 hierarchy).
    #[arg(long, value_parser = ["v1", "v2"])]
    backend: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
enum QosCmd {
    /// Show what would be written and why; changes nothing.
    ///
    /// Each class's expected share per CPU (runtime/period of each CPU it may use), the
    /// per-core sums, the kernel's limits, and the verdict. Exit 2 when admission refuses.
    Plan {
        #[command(flatten)]
        common: QosCommon,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put the classes in place: their cgroups, knobs and matching tasks.
    ///
    /// Creates the class cgroups, writes their knobs and moves matching tasks in. Nothing is
    /// half-applied: a failure undoes this apply. Stays applied until `joule qos release` or
    /// `joule restore` (the journal is in agent.journal_dir). Unlike the agent, it does not
    /// keep moving new tasks in afterwards; use `--follow SECONDS` for that.
    Apply {
        #[command(flatten)]
        common: QosCommon,
        /// Keep reconciling (moving newly matching tasks in) for this long, then exit with the
        /// classes still applied.
        #[arg(long, value_name = "SECONDS")]
        follow: Option<u64>,
        /// Apply even while an agent is running on this journal. The agent owns the classes
        /// while it runs and undoes everything in the journal on exit, this apply included.
        #[arg(long)]
        force: bool,
    },
    /// Per class: configured, expected and achieved share, throttled time, tasks.
    ///
    /// The achieved share is measured over `--interval-ms`.
    Status {
        #[command(flatten)]
        common: QosCommon,
        /// Measurement interval in milliseconds; longer is steadier for 1 s RT periods.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Undo what `joule qos apply` (or a crashed agent's classes) did.
    ///
    /// Only the classes' records in the journal; other mechanisms' changes stay (`joule
    /// restore` undoes everything).
    Release {
        /// Release even while an agent is running on this journal. The agent owns the classes
        /// while it runs (and undoes everything on exit): it will find them gone.
        #[arg(long)]
        force: bool,
    },
}

fn controller(cfg: &Config, c: &QosCommon, enforce: bool) -> anyhow::Result<QosController> {
    let opts = QosOpts {
        cgroup_root: cfg.telemetry.cgroup_root.clone(),
        procfs_root: cfg.telemetry.procfs_root.clone(),
        min_period_us: c.min_period_us,
        rt_fallback_to_cfs: c.rt_fallback_to_cfs,
        rt_backend: c.rt_backend.as_deref().and_then(joule_qos::RtBackend::parse),
        backend: c.backend.as_deref().map(|b| if b == "v2" { joule_qos::BackendKind::V2 } else { joule_qos::BackendKind::V1 }),
        enforce_admission: enforce,
        ..Default::default()
    };
    match QosController::new(&cfg.classes, opts) {
        // A refusal is the user's to fix: exit code 2 like an invalid config.
        Err(e @ joule_qos::QosError::Refused(_)) => Err(crate::UsageError::from_display(e).into()),
        r => Ok(r?),
    }
}

pub fn run(args: &QosArgs, cfg: &Config) -> anyhow::Result<()> {
    // Classes that are systemd units are the agent's to set through systemd (docs/systemd.md):
    // this command would make cgroups for them and move their units' processes, so it leaves
    // them out and says so.
    // Pod classes act in their pods' own cgroups, through the agent only: this command would
    // move pods' processes into joule's cgroups.
    let units: Vec<&str> = cfg.classes.iter().filter(|c| c.matches.only_units() || !c.matches.pod.is_empty()).map(|c| c.name.as_str()).collect();
    if !units.is_empty() {
        eprintln!(
            "joule qos: class(es) {} name systemd units or pods; the agent acts on them in place (through systemd, or in the pods' own cgroups), `joule qos` leaves them out (docs/systemd.md, docs/deploy.md)",
            units.join(", ")
        );
        let mut rest = cfg.clone();
        rest.classes.retain(|c| !c.matches.only_units() && c.matches.pod.is_empty());
        if rest.classes.is_empty() && matches!(args.cmd, QosCmd::Plan { .. } | QosCmd::Apply { .. } | QosCmd::Status { .. }) {
            return Err(crate::UsageError(
                "every [[class]] names systemd units or pods: run the agent, which acts on them in place (docs/systemd.md, docs/deploy.md)".into(),
            )
            .into());
        }
        return run(args, &rest);
    }
    let fx = RealEffects;
    let journal_dir: PathBuf = cfg.agent.journal_dir.clone();
    if cfg.classes.is_empty() && matches!(args.cmd, QosCmd::Plan { .. } | QosCmd::Apply { .. } | QosCmd::Status { .. }) {
        // An empty plan would still create the empty `joule` groups: say so instead.
        return Err(crate::UsageError("the config has no [[class]] sections; pass --config FILE with at least one (see docs/qos.md)".into()).into());
    }
    if matches!(args.cmd, QosCmd::Plan { .. } | QosCmd::Apply { .. } | QosCmd::Status { .. }) {
        if let Some(why) = crate::backends::systemd_refusal(cfg) {
            return Err(crate::UsageError(why).into());
        }
    }
    match &args.cmd {
        QosCmd::Plan { common, json } => {
            let c = controller(cfg, common, false)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&c.report())?);
            } else {
                println!(
                    "backend: cgroup {:?} ({})",
                    c.layout().kind,
                    c.layout().hiers.iter().map(|(_, p)| p.display().to_string()).collect::<Vec<_>>().join(", ")
                );
                print!("{}", joule_core::text::escape_lines(&c.report().render()));
            }
            if !c.plan().admitted() {
                return Err(crate::UsageError("admission refused the classes (nothing was written)".into()).into());
            }
        }
        QosCmd::Apply { common, follow, force } => {
            if !force {
                super::refuse_under_live_agent(&journal_dir, "qos apply")?;
            }
            let mut c = controller(cfg, common, true)?;
            let j = Journal::open(&journal_dir).context("while opening the undo journal")?;
            let r = c.apply(&j, &fx).context("while applying classes (everything this apply did was undone)")?;
            println!("applied: {} cgroup(s) created, {} knob write(s), {} task(s) moved", r.created.len(), r.writes, r.moved.len());
            for n in &r.notes {
                println!("note: {}", escape(n));
            }
            if let Some(secs) = follow {
                let end = std::time::Instant::now() + Duration::from_secs(*secs);
                while std::time::Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(200));
                    let r = c.reconcile(&j, &fx)?;
                    for (pid, class) in &r.moved {
                        println!("moved pid {pid} into {}", escape(class));
                    }
                }
            }
            println!("release with `joule qos release` or `joule restore` (journal: {})", j.path().display());
        }
        QosCmd::Status { common, interval_ms, json } => {
            let c = controller(cfg, common, false)?;
            c.status(&fx);
            std::thread::sleep(Duration::from_millis(*interval_ms));
            let s = c.status(&fx);
            if *json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                println!("{:<16} {:<44} {:>9} {:>9} {:>11} {:>6}", "class", "configured", "expect%", "achieved%", "throttled", "tasks");
                for x in &s {
                    let a = x.achieved_pct.map(|v| format!("{v:.1}")).unwrap_or("-".into());
                    let t = x.throttled_ms.map(|v| format!("{v:.0} ms")).unwrap_or("-".into());
                    let present = if x.present { "" } else { "  (not applied)" };
                    println!("{:<16} {:<44} {:>9.1} {:>9} {:>11} {:>6}{present}", x.name, x.configured, x.expected_pct, a, t, x.tasks);
                }
            }
        }
        QosCmd::Release { force } => {
            if !force {
                super::refuse_under_live_agent(&journal_dir, "qos release")?;
            }
            let j = Journal::open(&journal_dir).context("while opening the undo journal")?;
            let r = j.restore_owner(joule_qos::OWNER, &fx)?;
            println!("released: {} change(s) undone, {} already gone, {} failed", r.undone, r.already_gone, r.failed.len());
            for f in &r.failed {
                eprintln!("  failed (kept in the journal for a retry): {}", escape(f));
            }
            anyhow::ensure!(r.failed.is_empty(), "some changes could not be undone");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common() -> QosCommon {
        QosCommon { min_period_us: joule_qos::DEFAULT_MIN_PERIOD_US, rt_fallback_to_cfs: false, rt_backend: None, backend: None }
    }

    #[test]
    fn apply_and_release_refuse_under_a_live_agent_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        cfg.agent.journal_dir = dir.path().into();
        cfg.classes = vec![joule_core::config::ClassConfig { name: "c".into(), quota_us: Some(30_000), ..Default::default() }];
        let _agent = joule_core::agent_lock::lock_agent(dir.path()).unwrap().expect("agent lock");
        for (cmd, what) in
            [(QosCmd::Apply { common: common(), follow: None, force: false }, "`qos apply`"), (QosCmd::Release { force: false }, "`qos release`")]
        {
            let e = run(&QosArgs { cmd }, &cfg).unwrap_err();
            assert!(e.downcast_ref::<crate::UsageError>().is_some(), "{e:#}");
            let msg = e.to_string();
            assert!(msg.contains("a joule agent") && msg.contains(what) && msg.contains("--force"), "{msg}");
        }
        // Forced: the release runs (nothing of joule-qos's in this journal to undo).
        run(&QosArgs { cmd: QosCmd::Release { force: true } }, &cfg).unwrap();
    }
}

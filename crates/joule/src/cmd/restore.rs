//! `joule restore`: replays the undo journal, newest change first. Safe to run any time, any
//! number of times: what is already undone is simply gone from the journal. On a host whose
//! cgroup tree systemd owns it also empties a `joule/` tree an earlier version left there
//! (`joule_core::upgrade`).

use anyhow::Context;
use joule_core::effects::RealEffects;
use joule_core::journal;
use joule_core::text::escape;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct RestoreArgs {
    /// Journal directory (the agent's `agent.journal_dir`).
    #[arg(long, default_value = "/run/joule", value_name = "DIR")]
    pub journal_dir: PathBuf,
    /// Only list what would be undone.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Restore even while an agent is running on this journal (it will find its changes gone).
    #[arg(long)]
    pub force: bool,
    /// Internal: be the agent's guardian (stdin is the agent's pipe; restore when it dies).
    #[arg(long, hide = true, requires = "guardian_of")]
    pub guardian: bool,
    /// Internal: the pid of the agent this guardian watches.
    #[arg(long, hide = true, value_name = "PID")]
    pub guardian_of: Option<u32>,
}

pub fn run(a: RestoreArgs) -> anyhow::Result<()> {
    if let (true, Some(pid)) = (a.guardian, a.guardian_of) {
        let what = crate::guardian::watch(&a.journal_dir, pid)?;
        tracing::info!("guardian: {what}");
        return Ok(());
    }
    if a.dry_run {
        let entries = journal::entries(&a.journal_dir)?;
        if a.json {
            println!("{}", serde_json::to_string(&entries)?);
        } else {
            println!("{} record(s) in {} (newest first):", entries.len(), a.journal_dir.display());
            for e in entries.iter().rev() {
                println!("  [{}] {}", escape(&e.owner), escape(&format!("{:?}", e.undo)));
            }
        }
        return Ok(());
    }
    let guardian = if a.force { None } else { super::refuse_under_live_agent(&a.journal_dir, "restore")? };
    if let (Some(g), false) = (&guardian, a.json) {
        println!("restore: waited for the guardian's replay ({g})");
    }
    let journal = journal::Journal::open(&a.journal_dir).with_context(|| format!("while opening the undo journal in {}", a.journal_dir.display()))?;
    let report = journal.restore_all(&RealEffects).with_context(|| format!("while restoring from {}", a.journal_dir.display()))?;
    // A `joule/` tree an earlier version left where systemd owns the tree (docs/systemd.md).
    let (proc, cgroup) = (Path::new("/proc"), Path::new("/sys/fs/cgroup"));
    let leftover = if joule_core::cgroupfs::systemd_owns_tree(proc, cgroup, &RealEffects) {
        joule_core::upgrade::undo_leftover_tree(cgroup, proc, &RealEffects)
    } else {
        Default::default()
    };
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        if let (false, Some(o)) = (leftover.is_empty(), v.as_object_mut()) {
            o.insert("leftover_tree".into(), serde_json::to_value(&leftover)?);
        }
        if let (Some(g), Some(o)) = (&guardian, v.as_object_mut()) {
            o.insert("guardian".into(), serde_json::Value::String(g.clone()));
        }
        println!("{v}");
    } else {
        println!(
            "restore: {} change(s) undone, {} already gone, {} failed, {} skipped",
            report.undone,
            report.already_gone,
            report.failed.len(),
            report.skipped.len()
        );
        for f in &report.failed {
            println!("  failed: {}", escape(f));
        }
        for s in &report.skipped {
            println!("  skipped: {}", escape(s));
        }
        if !leftover.is_empty() {
            println!(
                "restore: an earlier version's {} emptied: {} process(es) back to the units they were forked from or the root, {} cgroup(s) removed",
                cgroup.join("joule").display(),
                leftover.moved.len(),
                leftover.removed.len()
            );
            for (pid, to) in &leftover.moved {
                println!("  pid {pid} -> {}", escape(to));
            }
            for f in &leftover.failed {
                println!("  failed: {}", escape(f));
            }
        }
    }
    anyhow::ensure!(leftover.failed.is_empty(), "the leftover {} could not be emptied: {:?}", cgroup.join("joule").display(), leftover.failed);
    anyhow::ensure!(report.failed.is_empty(), "{} record(s) could not be undone; they stay in the journal", report.failed.len());
    Ok(())
}

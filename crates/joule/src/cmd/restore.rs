//! `joule restore`: replays the undo journal, newest change first. Safe to run any time, any
//! number of times: what is already undone is simply gone from the journal.

use anyhow::Context;
use joule_core::effects::RealEffects;
use joule_core::journal;
use std::path::PathBuf;

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
        let what = crate::agent::guardian::watch(&a.journal_dir, pid)?;
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
                println!("  [{}] {:?}", e.owner, e.undo);
            }
        }
        return Ok(());
    }
    if !a.force {
        super::refuse_under_live_agent(&a.journal_dir, "restore")?;
    }
    let journal = journal::Journal::open(&a.journal_dir).with_context(|| format!("while opening the undo journal in {}", a.journal_dir.display()))?;
    let report = journal.restore_all(&RealEffects).with_context(|| format!("while restoring from {}", a.journal_dir.display()))?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "restore: {} change(s) undone, {} already gone, {} failed, {} skipped",
            report.undone,
            report.already_gone,
            report.failed.len(),
            report.skipped.len()
        );
        for f in &report.failed {
            println!("  failed: {f}");
        }
        for s in &report.skipped {
            println!("  skipped: {s}");
        }
    }
    anyhow::ensure!(report.failed.is_empty(), "{} record(s) could not be undone; they stay in the journal", report.failed.len());
    Ok(())
}

//! Small subcommands (check-config, restore, scx, elevate, generate) and the glue to `joule qos`.

pub mod check_config;
pub mod elevate;
pub mod generate;
pub mod nap;
pub mod qos;
pub mod restore;
pub mod scx;
pub mod status;

/// `joule qos ...`: loads the agent config (for its `[[class]]` sections), then hands over.
#[derive(clap::Args)]
pub struct QosCmdArgs {
    #[command(flatten)]
    pub config: crate::ConfigArg,
    #[command(flatten)]
    pub qos: qos::QosArgs,
}

pub fn qos_entry(a: QosCmdArgs) -> anyhow::Result<()> {
    // As root, `joule qos apply` writes what the file says, as the agent does: only root's file.
    let cfg = a.config.load_trusted()?;
    qos::run(&a.qos, &cfg)
}

/// Commands that change or undo what a journal records must not run under a live agent on
/// the same journal: the agent owns those changes and undoes everything on exit. The guardian
/// of an agent that died is waited for (at most [`GUARDIAN_WAIT`]): it is replaying the
/// journal, and what it undid is then said (issue 33: `joule restore` right after a SIGKILL
/// refused, mistaking the guardian for a live agent). Returns the guardian's report, if one
/// was waited for.
pub fn refuse_under_live_agent(journal_dir: &std::path::Path, what: &str) -> anyhow::Result<Option<String>> {
    use joule_core::agent_lock::{holder, Holder};
    let deadline = std::time::Instant::now() + GUARDIAN_WAIT;
    let mut waited = false;
    loop {
        match holder(journal_dir) {
            None if waited => return Ok(Some(crate::guardian::last_replay(journal_dir).unwrap_or_else(|| "the agent's guardian replayed the journal".into()))),
            None => return Ok(None),
            Some(Holder::Guardian(_)) if std::time::Instant::now() < deadline => {
                waited = true;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Some(Holder::Guardian(pid)) => anyhow::bail!(
                "the guardian (pid {}) of an agent that died is still replaying {} after {} s; wait for it, or pass --force",
                pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                journal_dir.display(),
                GUARDIAN_WAIT.as_secs()
            ),
            // A holder that has not written its pid yet: look again in a moment.
            Some(Holder::Agent(None)) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(20)),
            Some(Holder::Agent(pid)) => anyhow::bail!(crate::UsageError(format!(
                "a joule agent (pid {}) is running on {}; stop it (it restores on exit) before `{what}`, or pass --force",
                pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                journal_dir.display()
            ))),
        }
    }
}

/// How long a command waits for a dead agent's guardian to finish its replay.
pub const GUARDIAN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

//! Small subcommands (check-config, restore, scx, elevate) and the glue to `joule qos`.

pub mod check_config;
pub mod elevate;
pub mod nap;
pub mod qos;
pub mod restore;
pub mod scx;

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
/// the same journal: the agent owns those changes and undoes everything on exit.
pub fn refuse_under_live_agent(journal_dir: &std::path::Path, what: &str) -> anyhow::Result<()> {
    if let Some(pid) = joule_core::agent_lock::running_agent(journal_dir) {
        anyhow::bail!(crate::UsageError(format!(
            "a joule agent (pid {}) is running on {}; stop it (it restores on exit) before `{what}`, or pass --force",
            pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
            journal_dir.display()
        )));
    }
    Ok(())
}

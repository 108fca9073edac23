//! Small one-shot subcommands (check-config, restore) and the glue to `joule qos`.

pub mod check_config;
pub mod qos;
pub mod restore;


/// `joule qos ...`: loads the agent config (for its `[[class]]` sections), then hands over.
#[derive(clap::Args)]
pub struct QosCmdArgs {
    #[command(flatten)]
    pub config: crate::ConfigArg,
    #[command(flatten)]
    pub qos: qos::QosArgs,
}

pub fn qos_entry(a: QosCmdArgs) -> anyhow::Result<()> {
    let cfg = a.config.load()?;
    qos::run(&a.qos, &cfg)
}

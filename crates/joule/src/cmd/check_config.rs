//! `joule check-config FILE`: validates a config and explains every problem with its line.

use joule_core::config::{Config, ConfigError};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct CheckConfigArgs {
    /// The config file to check.
    pub file: PathBuf,
    /// Print the result as JSON: {"valid": bool, "problems": [{line, key, message, hint}]}.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: CheckConfigArgs) -> anyhow::Result<()> {
    let problems = match Config::load(&a.file) {
        Ok(cfg) => {
            if a.json {
                println!("{}", serde_json::json!({ "valid": true, "problems": [], "classes": cfg.classes.len() }));
            } else {
                println!(
                    "{}: valid ({} class(es), period {} ms, metrics on {})",
                    a.file.display(),
                    cfg.classes.len(),
                    cfg.agent.period_ms,
                    cfg.agent.metrics_addr
                );
            }
            return Ok(());
        }
        Err(ConfigError::Invalid { problems, .. }) => problems,
        Err(e @ ConfigError::Read { .. }) => return Err(crate::UsageError::from_display(e).into()),
    };
    if a.json {
        println!("{}", serde_json::json!({ "valid": false, "problems": problems }));
    } else {
        for p in &problems {
            println!("{}", p.display_with(&a.file));
        }
    }
    Err(crate::UsageError(format!("{} has {} problem(s)", a.file.display(), problems.len())).into())
}

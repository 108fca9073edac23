//! `joule check-config FILE`: validates a config and explains every problem with its line —
//! the parser's, validation's, and the class admission the agent runs on this machine, so a
//! file it calls valid is one the agent starts with (issue 17).

use joule_core::config::{Config, ConfigError, Problem};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct CheckConfigArgs {
    /// The config file to check.
    pub file: PathBuf,
    /// Print the result as JSON: {"valid": bool, "problems": [{line, key, message, hint}]}.
    #[arg(long)]
    pub json: bool,
}

/// What the agent refuses on this machine once the config parsed (`agent::acting::refusals`:
/// the class admission, the energy model, the web config; the agent stops on the same), each
/// located at the key it names.
fn admission_problems(cfg: &Config, text: &str) -> Vec<Problem> {
    crate::agent::acting::refusals(cfg)
        .into_iter()
        .map(|(key, message)| {
            let hint =
                if key.starts_with("class") { "the agent refuses this too; `joule qos plan` shows the arithmetic" } else { "the agent refuses this too" };
            Config::problem_at(text, &key, message, hint.into())
        })
        .collect()
}

pub fn run(a: CheckConfigArgs) -> anyhow::Result<()> {
    let loaded = joule_core::fsread::read_file_capped(&a.file, joule_core::config::MAX_CONFIG_BYTES)
        .map_err(|source| ConfigError::Read { path: a.file.clone(), source })
        .and_then(|text| Config::parse(&text).map(|cfg| (cfg, text)).map_err(|problems| ConfigError::Invalid { path: a.file.clone(), problems }))
        .and_then(|(cfg, text)| {
            let problems = admission_problems(&cfg, &text);
            if problems.is_empty() {
                Ok(cfg)
            } else {
                Err(ConfigError::Invalid { path: a.file.clone(), problems })
            }
        });
    let problems = match loaded {
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

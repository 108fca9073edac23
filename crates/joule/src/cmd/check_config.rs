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

/// The admission refusals on this machine (`agent::acting::admission_refusals`, which the
/// agent stops on too), each located at the class it names.
fn admission_problems(cfg: &Config, text: &str) -> Vec<Problem> {
    crate::agent::acting::admission_refusals(cfg)
        .into_iter()
        .map(|(key, message)| Config::problem_at(text, &key, message, "the agent refuses this too; `joule qos plan` shows the arithmetic".into()))
        .collect()
}

/// The web config the agent would load (`agent.metrics_web_config`), and every file it names.
fn web_problems(cfg: &Config, text: &str) -> Vec<Problem> {
    let path = &cfg.agent.metrics_web_config;
    if path.as_os_str().is_empty() {
        return Vec::new();
    }
    match crate::webconfig::WebConfig::load(path) {
        Ok(_) => Vec::new(),
        Err(e) => vec![Config::problem_at(
            text,
            "agent.metrics_web_config",
            format!("{e:#}"),
            "exporter-toolkit's format: tls_server_config, basic_auth_users (docs/security.md)".into(),
        )],
    }
}

pub fn run(a: CheckConfigArgs) -> anyhow::Result<()> {
    let loaded = joule_core::fsread::read_file_capped(&a.file, joule_core::config::MAX_CONFIG_BYTES)
        .map_err(|source| ConfigError::Read { path: a.file.clone(), source })
        .and_then(|text| Config::parse(&text).map(|cfg| (cfg, text)).map_err(|problems| ConfigError::Invalid { path: a.file.clone(), problems }))
        .and_then(|(cfg, text)| {
            let mut problems = admission_problems(&cfg, &text);
            problems.extend(web_problems(&cfg, &text));
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

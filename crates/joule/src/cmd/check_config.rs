//! `joule check-config [FILE]`: validates a config and explains every problem with its line —
//! the parser's, validation's, and the class admission the agent runs on this machine, so a
//! file it calls valid is one the agent starts with (issue 17). Its messages quote the file and
//! the machine (paths, names, errors), so they are printed with control characters escaped.

use joule_core::config::{Config, ConfigError, Problem};
use joule_core::text::{escape_lines, to_json, Escaped};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct CheckConfigArgs {
    /// The config file to check. Default: /etc/joule/joule.toml when it exists, else joule's
    /// built-in defaults.
    pub file: Option<PathBuf>,
    /// Print the result as JSON: {"valid": bool, "problems": [{line, key, message, hint}]}.
    #[arg(long)]
    pub json: bool,
}

/// What the agent refuses on this machine once the config parsed (`backends::refusals`:
/// the class admission, the energy model, the web config; the agent stops on the same), each
/// located at the key it names.
fn admission_problems(cfg: &Config, text: &str) -> Vec<Problem> {
    crate::backends::refusals(cfg)
        .into_iter()
        .map(|(key, message)| {
            let hint =
                if key.starts_with("class") { "the agent refuses this too; `joule qos plan` shows the arithmetic" } else { "the agent refuses this too" };
            Config::problem_at(text, &key, message, hint.into())
        })
        .collect()
}

pub fn run(a: CheckConfigArgs) -> anyhow::Result<()> {
    let file = crate::ConfigArg { config: a.file.clone() }.path();
    let Some(file) = file else { return check_defaults(a.json) };
    let loaded = joule_core::fsread::read_file_capped(&file, joule_core::config::MAX_CONFIG_BYTES)
        .map_err(|source| ConfigError::Read { path: file.clone(), source })
        .and_then(|text| Config::parse(&text).map(|cfg| (cfg, text)).map_err(|problems| ConfigError::Invalid { path: file.clone(), problems }))
        .and_then(|(cfg, text)| {
            let problems = admission_problems(&cfg, &text);
            if problems.is_empty() {
                Ok(cfg)
            } else {
                Err(ConfigError::Invalid { path: file.clone(), problems })
            }
        });
    let problems = match loaded {
        Ok(cfg) => {
            if a.json {
                println!("{}", to_json(&serde_json::json!({ "valid": true, "problems": [], "classes": cfg.classes.len() }), false)?);
            } else {
                println!(
                    "{}: valid ({} class(es), period {} ms, metrics on {})",
                    Escaped(&file.display().to_string()),
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
        println!("{}", to_json(&serde_json::json!({ "valid": false, "problems": problems }), false)?);
    } else {
        for p in &problems {
            println!("{}", escape_lines(&p.display_with(&file)));
        }
    }
    Err(crate::UsageError(format!("{} has {} problem(s)", file.display(), problems.len())).into())
}

/// No file given and no /etc/joule/joule.toml: what the agent would run with, the built-in
/// defaults, checked against this machine as a file would be.
fn check_defaults(json: bool) -> anyhow::Result<()> {
    let cfg = Config::default();
    let refusals = crate::backends::refusals(&cfg);
    let what = crate::ConfigArg { config: None }.describe();
    if json {
        let problems: Vec<_> = refusals.iter().map(|(key, message)| serde_json::json!({ "key": key, "message": message })).collect();
        println!("{}", to_json(&serde_json::json!({ "valid": refusals.is_empty(), "problems": problems, "classes": 0, "file": null }), false)?);
    } else if refusals.is_empty() {
        println!("{what}: valid (period {} ms, metrics on {})", cfg.agent.period_ms, cfg.agent.metrics_addr);
    } else {
        for (key, message) in &refusals {
            println!("{what}: {}: {}", Escaped(key), escape_lines(message));
        }
    }
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(crate::UsageError(format!("{what} have {} problem(s)", refusals.len())).into())
    }
}

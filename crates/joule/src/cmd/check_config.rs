//! `joule check-config FILE`: validates a config and explains every problem with its line —
//! the parser's, validation's, and the class admission the agent runs on this machine, so a
//! file it calls valid is one the agent starts with (issue 17).

use joule_core::config::{Config, ConfigError, Problem};
use joule_core::effects::RealEffects;
use joule_qos::{QosController, QosOpts};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct CheckConfigArgs {
    /// The config file to check.
    pub file: PathBuf,
    /// Print the result as JSON: {"valid": bool, "problems": [{line, key, message, hint}]}.
    #[arg(long)]
    pub json: bool,
}

/// The problems the agent's admission finds on this machine (the class cgroups' controller
/// with the agent's options, `agent::acting::qos_opts`): the same refusals the agent would
/// stop on, each located at the first class it names.
fn admission_problems(cfg: &Config, text: &str) -> Vec<Problem> {
    if cfg.classes.is_empty() || !cfg.agent.apply_classes {
        return Vec::new();
    }
    let opts = QosOpts { enforce_admission: false, ..crate::agent::acting::qos_opts(cfg) };
    let key_of = |class: &str| cfg.classes.iter().position(|c| c.name == class).map_or("class".to_string(), |i| format!("class[{i}]"));
    match QosController::new_with(&cfg.classes, opts, &RealEffects) {
        Ok(ctl) => ctl
            .plan()
            .refusals
            .iter()
            .map(|r| {
                let key = r.classes.first().map_or("class".to_string(), |c| key_of(c));
                Config::problem_at(
                    text,
                    &key,
                    format!("admission on this machine: {}", r.message),
                    "the agent refuses this too; `joule qos plan` shows the arithmetic".into(),
                )
            })
            .collect(),
        Err(e) => {
            vec![Config::problem_at(text, "class", format!("the class cgroups cannot be made on this machine: {e}"), "the agent stops on this too".into())]
        }
    }
}

pub fn run(a: CheckConfigArgs) -> anyhow::Result<()> {
    let loaded = Config::load(&a.file).and_then(|cfg| {
        let text = joule_core::fsread::read_file_capped(&a.file, joule_core::config::MAX_CONFIG_BYTES)
            .map_err(|source| ConfigError::Read { path: a.file.clone(), source })?;
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

//! TEMPORARY test driver for `cmd/qos.rs` and `bench/rt_share.rs` until main.rs wires
//! `joule qos` and `joule bench rt-share`; delete it then.

#[path = "../bench/report.rs"]
#[allow(dead_code)]
mod report;
#[path = "../bench/rt_share.rs"]
mod rt_share;
#[path = "../cmd/qos.rs"]
mod qos;

use clap::Parser;

/// Stand-in for main.rs's `UsageError` (exit code 2), which the qos module uses.
#[derive(Debug)]
pub struct UsageError(pub String);

impl UsageError {
    pub fn from_display(e: impl std::fmt::Display) -> Self {
        UsageError(e.to_string())
    }
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

#[derive(Parser)]
enum Dev {
    Qos {
        #[arg(long, short = 'c')]
        config: Option<std::path::PathBuf>,
        #[command(flatten)]
        args: qos::QosArgs,
    },
    RtShare(rt_share::RtShareArgs),
}

fn main() -> anyhow::Result<()> {
    match Dev::parse() {
        Dev::Qos { config, args } => {
            let cfg = match config {
                Some(p) => joule_core::config::Config::load(&p)?,
                None => Default::default(),
            };
            qos::run(&args, &cfg)
        }
        Dev::RtShare(a) => rt_share::run(&a),
    }
}

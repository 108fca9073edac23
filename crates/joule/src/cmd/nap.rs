//! `joule nap status`: what the agent's nap actuator holds — awake or napping and since when,
//! the time spent napping, wakes by reason and the last one — read from the status file the
//! actuator rewrites every period next to its journal.

use anyhow::Context;
use joule_act::nap::STATUS_FILE;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum NapCmd {
    /// State, residency, last wake reason (the agent must run with `[nap] enabled = true`).
    Status(StatusArgs),
}

#[derive(clap::Args)]
pub struct StatusArgs {
    /// The agent's journal directory (`agent.journal_dir`), where it keeps `nap.json`.
    #[arg(long, default_value = "/run/joule", value_name = "DIR")]
    pub journal_dir: PathBuf,
    /// Print the status as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: NapCmd) -> anyhow::Result<()> {
    let NapCmd::Status(a) = cmd;
    let path = a.journal_dir.join(STATUS_FILE);
    let running = joule_core::agent_lock::running_agent(&a.journal_dir).is_some();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) if running => t,
        Ok(_) | Err(_) => {
            let why = if running { "the agent runs without [nap] enabled" } else { "no joule agent runs on this journal" };
            anyhow::bail!(crate::UsageError(format!("no nap status in {}: {why}", a.journal_dir.display())));
        }
    };
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("while reading {}", path.display()))?;
    if a.json {
        println!("{v}");
        return Ok(());
    }
    let state = if v["napping"] == true { "napping" } else { "awake" };
    let since_s = (now_ms().saturating_sub(v["since_ms"].as_u64().unwrap_or(0))) as f64 / 1e3;
    println!("nap: {state} for {since_s:.1} s (class {}, fast wake {})", v["class"], if v["fast_wake"] == true { "ebpf" } else { "off: next period" });
    println!(
        "residency: {:.1} s napping in {} nap(s); {} entry(ies) aborted by the last check",
        v["residency_seconds"].as_f64().unwrap_or(0.0),
        v["naps_total"],
        v["aborted_total"]
    );
    println!("last entry took {} µs", v["last_enter_us"]);
    if let Some(w) = v["wakes_total"].as_object() {
        let per: Vec<String> = w.iter().map(|(r, n)| format!("{r} {n}")).collect();
        println!("wakes: {}", if per.is_empty() { "none".into() } else { per.join(", ") });
    }
    match v["last_wake"].as_object() {
        Some(w) => println!("last wake: {} ({} µs from the cause to thawed)", w["reason"].as_str().unwrap_or("?"), w["leave_us"]),
        None => println!("last wake: none yet"),
    }
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

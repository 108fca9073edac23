//! `joule nap status`: what the agent's nap actuator holds — awake or napping and since when,
//! the time spent napping, wakes by reason and the last one — read from the status file the
//! actuator rewrites every period next to its journal, read as a client of the agent reads what
//! it leaves there (`agent_client`: root's directory and file, a size cap). `joule nap gate`: the command of the
//! gate units the agent starts for a napped slice's services (docs/systemd.md).

use anyhow::Context;
use joule_act::nap::STATUS_FILE;
use joule_core::effects::{valid_unit_name, Units};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Subcommand)]
pub enum NapCmd {
    /// State, residency and the last wake of the agent's nap.
    ///
    /// The agent must run with `[nap] enabled = true`; this reads the status it keeps in its
    /// journal directory.
    Status(StatusArgs),
    /// Internal: run by systemd, not by hand.
    ///
    /// The command of the gate units (`joule-gate-*`) the agent starts for each service of a
    /// napped slice. systemd runs it before a reload, restart or stop of SERVICE; it thaws
    /// SLICE and waits (at most 10 s) until SERVICE is thawed, so that job runs (systemd
    /// refuses any job on a frozen unit).
    #[command(hide = true)]
    Gate(GateArgs),
}

#[derive(clap::Args)]
pub struct GateArgs {
    /// The napped slice, e.g. `web.slice`.
    pub slice: String,
    /// The service in it a job was queued on, e.g. `nginx.service`.
    pub service: String,
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
    let a = match cmd {
        NapCmd::Status(a) => a,
        NapCmd::Gate(g) => {
            let took = gate(&joule_core::effects::RealEffects, &g.slice, &g.service, GATE_WAIT)?;
            println!("joule nap gate: thawed {}; {} runs ({} ms)", g.slice, g.service, took.as_millis());
            return Ok(());
        }
    };
    let path = a.journal_dir.join(STATUS_FILE);
    let running = joule_core::agent_lock::running_agent(&a.journal_dir).is_some();
    let text = match crate::agent_client::read_file(&a.journal_dir, STATUS_FILE, MAX_STATUS_BYTES) {
        Ok(t) if running => t,
        Err(e @ (crate::agent_client::ClientError::Refused(_) | crate::agent_client::ClientError::Failed(_))) => return Err(e.into()),
        Ok(_) | Err(_) => {
            let why = if running { "the agent runs without [nap] enabled" } else { "no joule agent runs on this journal" };
            anyhow::bail!(crate::UsageError(format!("no nap status in {}: {why}", a.journal_dir.display())));
        }
    };
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("while reading {}", path.display()))?;
    if a.json {
        println!("{}", joule_core::text::to_json(&v, false)?);
        return Ok(());
    }
    let state = if v["napping"] == true { "napping" } else { "awake" };
    let since_s = (now_ms().saturating_sub(v["since_ms"].as_u64().unwrap_or(0))) as f64 / 1e3;
    println!(
        "nap: {state} for {since_s:.1} s (class {}, fast wake {})",
        joule_core::text::Escaped(&v["class"].to_string()),
        if v["fast_wake"] == true { "ebpf" } else { "off: next period" }
    );
    println!(
        "residency: {:.1} s napping in {} nap(s); {} entry(ies) aborted by the last check",
        v["residency_seconds"].as_f64().unwrap_or(0.0),
        v["naps_total"],
        v["aborted_total"]
    );
    println!("last entry took {} µs", v["last_enter_us"]);
    if let Some(w) = v["wakes_total"].as_object() {
        let per: Vec<String> = w.iter().map(|(r, n)| format!("{} {n}", joule_core::text::Escaped(r))).collect();
        println!("wakes: {}", if per.is_empty() { "none".into() } else { per.join(", ") });
    }
    match v["last_wake"].as_object() {
        Some(w) => println!("last wake: {} ({} µs from the cause to thawed)", joule_core::text::Escaped(w["reason"].as_str().unwrap_or("?")), w["leave_us"]),
        None => println!("last wake: none yet"),
    }
    Ok(())
}

/// The largest status file read (it is a few hundred bytes).
const MAX_STATUS_BYTES: u64 = 1 << 20;

/// How long a gate waits for its service to thaw.
const GATE_WAIT: Duration = Duration::from_secs(10);

/// Thaws `slice` and waits until `service` is no longer frozen by it (`FreezerState` neither
/// `*-by-parent` nor `thawing`); returns how long that took. A service someone froze by
/// itself (`frozen`) is theirs: the gate does not wait for it.
fn gate(fx: &dyn Units, slice: &str, service: &str, wait: Duration) -> anyhow::Result<Duration> {
    for (name, kind) in [(slice, ".slice"), (service, ".service")] {
        if !valid_unit_name(name) || !name.ends_with(kind) {
            anyhow::bail!(crate::UsageError(format!("{name:?} is not a {} name", &kind[1..])));
        }
    }
    let t0 = Instant::now();
    match fx.thaw_unit(slice) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(anyhow::Error::new(e).context(format!("thawing {slice}"))),
        _ => {}
    }
    loop {
        let state = match fx.unit_freezer_state(service) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(t0.elapsed()),
            Err(e) => return Err(anyhow::Error::new(e).context(format!("{service}'s FreezerState"))),
        };
        if !(state.ends_with("-by-parent") || state == "thawing") {
            return Ok(t0.elapsed());
        }
        anyhow::ensure!(t0.elapsed() < wait, "{service} is still {state} {} ms after thawing {slice}", t0.elapsed().as_millis());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::effects::FakeEffects;

    #[test]
    fn a_gate_thaws_its_slice_and_refuses_names_that_are_not_units() {
        let fx = FakeEffects::default().with_unit("web.slice").with_unit("nginx.service");
        fx.freeze_unit("web.slice").unwrap();
        gate(&fx, "web.slice", "nginx.service", Duration::from_secs(1)).unwrap();
        assert_eq!(fx.unit_freezer_state("web.slice").unwrap(), "running");
        assert!(fx.calls().contains(&"thaw-unit web.slice".to_string()), "{:?}", fx.calls());
        for (slice, service) in [("web.service", "nginx.service"), ("web.slice", "../x.service"), ("web.slice", "web.slice")] {
            let e = gate(&fx, slice, service, Duration::from_secs(1)).unwrap_err();
            assert!(e.downcast_ref::<crate::UsageError>().is_some(), "{slice} {service}: {e}");
        }
        // A slice that went away has nothing to thaw.
        gate(&fx, "gone.slice", "nginx.service", Duration::from_secs(1)).unwrap();
    }
}

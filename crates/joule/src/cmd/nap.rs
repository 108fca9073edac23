//! `joule nap status`: what the agent's nap actuator holds — awake or napping and since when,
//! the time spent napping, wakes by reason and the last one — read from the agent's view over
//! its socket (`joule_core::view::client`: root's directory, socket and process, a size cap), where the
//! actuator publishes its state every period. `joule nap gate`: the command of the gate units
//! the agent starts for a napped slice's services (docs/systemd.md).

use joule_core::effects::{valid_unit_name, Units};
use joule_core::view::NapView;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Subcommand)]
pub enum NapCmd {
    /// State, residency and the last wake of the agent's nap.
    ///
    /// The agent must run with `[nap] enabled = true`; this reads the status from the agent's
    /// socket in its journal directory (as root, like `joule status`).
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
    /// The agent's journal directory (`agent.journal_dir`), where its socket is.
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
    let view = match joule_core::view::client::read(&a.journal_dir) {
        Ok(v) => v,
        Err(joule_core::view::client::ClientError::NoAgent(why)) => {
            // The lock tells a dead agent from a live one whose socket is gone (a probe: it
            // takes the lock shared and writes nothing, so a guardian replaying is not fooled).
            let who = match joule_core::agent_lock::running_agent(&a.journal_dir) {
                Some(_) => format!("the agent holding its lock does not answer on its socket ({})", joule_core::text::Escaped(&why)),
                None => "no joule agent runs on this journal".into(),
            };
            anyhow::bail!(crate::UsageError(format!("no nap status in {}: {who}", a.journal_dir.display())))
        }
        Err(e) => return Err(e.into()),
    };
    let Some(nap) = view.nap() else {
        let why = match view.version {
            // An agent from before the view had a version kept the nap's status in a file.
            None => "missing (agent too old: it keeps the nap's status where this joule no longer reads it; restart the agent)".to_string(),
            Some(_) => "the agent runs without [nap] enabled".to_string(),
        };
        anyhow::bail!(crate::UsageError(format!("no nap status in {}: {why}", a.journal_dir.display())));
    };
    if a.json {
        println!("{}", joule_core::text::to_json(&NapJson { nap: &nap, pid: view.budget.pid }, false)?);
        return Ok(());
    }
    print!("{}", render(&nap, now_ms()));
    Ok(())
}

/// `joule nap status --json`: the nap actuator's state and the agent's pid.
#[derive(serde::Serialize)]
struct NapJson<'a> {
    #[serde(flatten)]
    nap: &'a NapView,
    pid: u32,
}

/// The text of `joule nap status` at `now_ms`.
fn render(nap: &NapView, now_ms: u64) -> String {
    use joule_core::text::Escaped;
    let s = &nap.status;
    let mut o = String::new();
    let state = if s.napping { "napping" } else { "awake" };
    let since_s = now_ms.saturating_sub(s.since_ms) as f64 / 1e3;
    // The class as JSON says it (`"web"`, or `null` without one), as this line always showed it.
    let class = serde_json::to_string(&nap.class).unwrap_or_default();
    o += &format!("nap: {state} for {since_s:.1} s (class {}, fast wake {})\n", Escaped(&class), if nap.fast_wake { "ebpf" } else { "off: next period" });
    o += &format!("residency: {:.1} s napping in {} nap(s); {} entry(ies) aborted by the last check\n", s.residency_seconds, s.naps_total, s.aborted_total);
    o += &format!("last entry took {} µs\n", s.last_enter_us);
    let per: Vec<String> = s.wakes_total.iter().map(|(r, n)| format!("{} {n}", Escaped(r))).collect();
    o += &format!("wakes: {}\n", if per.is_empty() { "none".into() } else { per.join(", ") });
    match &s.last_wake {
        Some(w) => o += &format!("last wake: {} ({} µs from the cause to thawed)\n", Escaped(&w.reason), w.leave_us),
        None => o += "last wake: none yet\n",
    }
    o
}

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

    /// The status as the nap actuator publishes it in the agent's view, in the lines
    /// `joule nap status` has always printed (the class as JSON spells it).
    #[test]
    fn the_status_from_the_view_prints_state_residency_and_the_last_wake() {
        let nap = NapView {
            status: joule_core::view::NapStatus {
                napping: true,
                since_ms: 10_000,
                residency_seconds: 42.5,
                naps_total: 7,
                aborted_total: 1,
                wakes_total: [("tcp:8080".to_string(), 5), ("operator".to_string(), 1)].into_iter().collect(),
                last_wake: Some(joule_core::view::WakeInfo { reason: "tcp:8080".into(), at_ms: 9_000, leave_us: 850 }),
                last_enter_us: 1200,
                last_abort: None,
            },
            class: Some("web".into()),
            fast_wake: true,
            notes: Vec::new(),
        };
        assert_eq!(
            render(&nap, 12_500),
            "nap: napping for 2.5 s (class \"web\", fast wake ebpf)\n\
             residency: 42.5 s napping in 7 nap(s); 1 entry(ies) aborted by the last check\n\
             last entry took 1200 µs\n\
             wakes: operator 1, tcp:8080 5\n\
             last wake: tcp:8080 (850 µs from the cause to thawed)\n"
        );
        let awake = NapView { class: None, fast_wake: false, ..NapView::default() };
        assert!(render(&awake, 0).starts_with("nap: awake for 0.0 s (class null, fast wake off: next period)\n"), "{}", render(&awake, 0));
        assert!(render(&awake, 0).contains("wakes: none\nlast wake: none yet\n"));
    }

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
